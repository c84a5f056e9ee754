// Transport security of ServiceServer and CreateChannel against certificates made at test
// time by the openssl command line tool (a CA, a server and a client certificate it signs,
// and a second CA with its own client): a mutual-TLS client gets answers; a plaintext
// client, a TLS client without a certificate, one whose certificate another CA signed and
// one that does not trust the server's CA are refused; rlmesh.tls.server_name replaces the
// dialed host in the hostname check; and bad settings stop start-up naming the config key.
#include "common/rpc/tls.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/config/config.h"
#include "common/rpc/client.h"
#include "common/rpc/service_server.h"
#include "common/rpc/tls_config.h"
#include "rlmesh/v1/reward.grpc.pb.h"

namespace rlmesh::rpc {
namespace {

namespace fs = std::filesystem;
using ::rlmesh::v1::RewardService;
using ::rlmesh::v1::ScoreRequest;
using ::rlmesh::v1::ScoreResponse;

constexpr char kServiceName[] = "rlmesh.v1.RewardService";

// Scores each item with the length of its response.
class LengthReward final : public RewardService::Service {
  grpc::Status Score(grpc::ServerContext*, const ScoreRequest* req, ScoreResponse* resp) override {
    for (const auto& item : req->items()) {
      auto* r = resp->add_results();
      r->set_id(item.id());
      r->set_score(static_cast<double>(item.response().size()));
    }
    return grpc::Status::OK;
  }
};

// Runs a shell command; fails the test with its output when it exits non-zero.
void Shell(const std::string& command) {
  const std::string full = absl::StrCat("(", command, ") > openssl.log 2>&1");
  const int rc = std::system(full.c_str());
  if (rc != 0) {
    std::ifstream log("openssl.log");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    FAIL() << command << "\nexited " << rc << ":\n" << text;
  }
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/rlmesh-tls-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    previous_cwd_ = fs::current_path();
    fs::current_path(dir_);
    // P-256 keys: fast to make. Server certificates carry the SANs clients check.
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    auto ca = [&](const std::string& name) {
      Shell(absl::StrCat("openssl req -x509 ", key, " -keyout ", name, ".key -out ", name,
                         ".crt -days 2 -subj /CN=", name));
    };
    auto leaf = [&](const std::string& name, const std::string& ca_name, const std::string& san) {
      std::ofstream(name + ".ext") << "subjectAltName=" << san
                                   << "\nextendedKeyUsage=serverAuth,clientAuth\n";
      Shell(absl::StrCat("openssl req ", key, " -keyout ", name, ".key -out ", name,
                         ".csr -subj /CN=", name, " && openssl x509 -req -in ", name,
                         ".csr -CA ", ca_name, ".crt -CAkey ", ca_name, ".key -CAcreateserial -out ",
                         name, ".crt -days 2 -extfile ", name, ".ext"));
    };
    ca("ca");
    ca("other-ca");
    leaf("server", "ca", "IP:127.0.0.1,DNS:localhost");
    leaf("named-server", "ca", "DNS:rlmesh.internal");
    leaf("client", "ca", "DNS:client");
    leaf("other-client", "other-ca", "DNS:other-client");
  }

  void TearDown() override {
    fs::current_path(previous_cwd_);
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  std::string Path(const std::string& file) const { return (fs::path(dir_) / file).string(); }

  // mTLS settings of a process whose certificate is <name>.crt, trusting ca.crt.
  TlsOptions Mtls(const std::string& name, const std::string& ca = "ca") const {
    TlsOptions tls;
    tls.enabled = true;
    tls.cert_file = Path(name + ".crt");
    tls.key_file = Path(name + ".key");
    tls.ca_file = Path(ca + ".crt");
    return tls;
  }

  // A server on 127.0.0.1, port 0, with `tls`.
  std::unique_ptr<ServiceServer> Serve(const TlsOptions& tls) {
    auto server = ServiceServer::Create(
        {.component = "tlssvc", .handle_signals = false, .announce = false, .tls = tls},
        {{kServiceName, &service_}});
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return nullptr;
    (*server)->SetServing(true);
    return *std::move(server);
  }

  // One Score call over a channel with `client` settings and no retries.
  grpc::Status Call(const std::string& address, const TlsOptions* client) {
    ChannelOptions options{.retry = {.max_attempts = 1}};
    if (client != nullptr) {
      absl::Status applied = ApplyTls(*client, &options);
      EXPECT_TRUE(applied.ok()) << applied;
    }
    auto stub = RewardService::NewStub(CreateChannel(address, options));
    ScoreRequest request;
    auto* item = request.add_items();
    item->set_id("a");
    item->set_response("four");
    ScoreResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    grpc::Status status = stub->Score(&context, request, &response);
    if (status.ok()) {
      EXPECT_EQ(response.results(0).score(), 4.0);
    }
    return status;
  }

  LengthReward service_;
  std::string dir_;
  fs::path previous_cwd_;
};

TEST_F(TlsTest, MutualTlsClientWithValidCertificateGetsAnswers) {
  auto server = Serve(Mtls("server"));
  ASSERT_NE(server, nullptr);
  const TlsOptions client = Mtls("client");
  grpc::Status status = Call(server->address(), &client);
  EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
  // The health wait of the binaries works over the same channel settings.
  ChannelOptions options;
  ASSERT_TRUE(ApplyTls(client, &options).ok());
  EXPECT_TRUE(ConnectWhenServing(server->address(), kServiceName, 20, options).ok());
}

TEST_F(TlsTest, PlaintextClientIsRefused) {
  auto server = Serve(Mtls("server"));
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Call(server->address(), nullptr).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, ClientWithoutCertificateIsRefused) {
  auto server = Serve(Mtls("server"));
  ASSERT_NE(server, nullptr);
  TlsOptions client;
  client.enabled = true;
  client.ca_file = Path("ca.crt");  // trusts the server, presents nothing
  EXPECT_EQ(Call(server->address(), &client).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, ClientCertificateFromAnotherCaIsRefused) {
  auto server = Serve(Mtls("server"));
  ASSERT_NE(server, nullptr);
  const TlsOptions client = Mtls("other-client");  // trusts ca.crt, signed by other-ca
  EXPECT_EQ(Call(server->address(), &client).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, ClientRefusesServerItDoesNotTrust) {
  auto server = Serve(Mtls("server"));
  ASSERT_NE(server, nullptr);
  const TlsOptions client = Mtls("client", "other-ca");
  EXPECT_EQ(Call(server->address(), &client).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, ServerNameReplacesTheDialedHostInTheCertificateCheck) {
  // named-server.crt names only rlmesh.internal, not 127.0.0.1.
  auto server = Serve(Mtls("named-server"));
  ASSERT_NE(server, nullptr);
  TlsOptions client = Mtls("client");
  EXPECT_EQ(Call(server->address(), &client).error_code(), grpc::StatusCode::UNAVAILABLE);
  client.server_name = "rlmesh.internal";
  grpc::Status status = Call(server->address(), &client);
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(TlsTest, TlsWithoutCaBundleServesClientsWithoutCertificates) {
  TlsOptions server_tls = Mtls("server");
  server_tls.ca_file.clear();
  auto server = Serve(server_tls);
  ASSERT_NE(server, nullptr);
  TlsOptions client;
  client.enabled = true;
  client.ca_file = Path("ca.crt");
  EXPECT_TRUE(Call(server->address(), &client).ok());
  EXPECT_EQ(Call(server->address(), nullptr).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsTest, ConfigWithMissingKeyFileFailsNamingTheKey) {
  const std::string missing = Path("no-such.key");
  auto config = config::LoadConfigFromString(
      "{}", {"rlmesh.tls.enabled=true", "rlmesh.tls.cert_file=" + Path("server.crt"),
             "rlmesh.tls.key_file=" + missing, "rlmesh.tls.ca_file=" + Path("ca.crt")});
  ASSERT_TRUE(config.ok()) << config.status();
  auto server = ServiceServer::Create(
      {.component = "tlssvc", .handle_signals = false, .announce = false,
       .tls = TlsOptionsFromConfig(*config)},
      {{kServiceName, &service_}});
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(server.status().message().find("rlmesh.tls.key_file"), std::string::npos)
      << server.status();
  EXPECT_NE(server.status().message().find(missing), std::string::npos) << server.status();

  // The same file on the client side.
  ChannelOptions options;
  absl::Status applied = ApplyTls(TlsOptionsFromConfig(*config), &options);
  EXPECT_NE(applied.message().find("rlmesh.tls.key_file"), std::string::npos) << applied;
  EXPECT_EQ(options.credentials, nullptr);
}

TEST_F(TlsTest, BadTlsSettingsNameTheKey) {
  TlsOptions tls = Mtls("server");
  tls.cert_file.clear();
  auto server = ServiceServer::Create(
      {.component = "tlssvc", .handle_signals = false, .announce = false, .tls = tls},
      {{kServiceName, &service_}});
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(server.status().message().find("rlmesh.tls.cert_file"), std::string::npos)
      << server.status();

  // A key where the CA bundle belongs.
  tls = Mtls("server");
  tls.ca_file = Path("ca.key");
  EXPECT_NE(MakeServerCredentials(tls, "127.0.0.1").status().message().find("rlmesh.tls.ca_file"),
            std::string::npos);

  // Half a client certificate.
  TlsOptions client;
  client.enabled = true;
  client.cert_file = Path("client.crt");
  EXPECT_NE(MakeChannelCredentials(client).status().message().find("rlmesh.tls.key_file"),
            std::string::npos);
}

TEST_F(TlsTest, PlaintextOffLoopbackNeedsExplicitConsent) {
  TlsOptions plaintext;
  auto server = ServiceServer::Create({.component = "tlssvc",
                                       .host = "0.0.0.0",
                                       .handle_signals = false,
                                       .announce = false,
                                       .tls = plaintext},
                                      {{kServiceName, &service_}});
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(server.status().message().find("rlmesh.tls.enabled"), std::string::npos);
  EXPECT_NE(server.status().message().find("rlmesh.tls.insecure_plaintext"), std::string::npos);

  plaintext.insecure_plaintext = true;
  server = ServiceServer::Create({.component = "tlssvc",
                                  .host = "0.0.0.0",
                                  .handle_signals = false,
                                  .announce = false,
                                  .tls = plaintext},
                                 {{kServiceName, &service_}});
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->SetServing(true);
  EXPECT_TRUE(Call((*server)->address(), nullptr).ok());

  EXPECT_TRUE(CheckPlaintextAllowed({}, "127.0.0.1").ok());
  EXPECT_TRUE(CheckPlaintextAllowed({}, "localhost").ok());
  EXPECT_TRUE(CheckPlaintextAllowed({}, HostOfAddress("[::1]:50051")).ok());
  EXPECT_FALSE(CheckPlaintextAllowed({}, HostOfAddress("trainer-0.rlmesh:50051")).ok());
  EXPECT_EQ(HostOfAddress("10.0.0.7:9000"), "10.0.0.7");
}

}  // namespace
}  // namespace rlmesh::rpc
