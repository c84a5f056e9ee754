// ParseServiceArgs: flags in both spellings, overrides kept in order, and errors that name
// the offending flag or argument.
#include "common/rpc/service_args.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace rlmesh::rpc {
namespace {

absl::StatusOr<ServiceArgs> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "rlmesh-test");
  return ParseServiceArgs(static_cast<int>(args.size()), args.data());
}

TEST(ServiceArgsTest, DefaultsWithNoArguments) {
  auto args = Parse({});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->config_path, "");
  // Unset flags leave the config's rlmesh.host and rlmesh.<service>.port to decide.
  EXPECT_FALSE(args->host.has_value());
  EXPECT_FALSE(args->port.has_value());
  EXPECT_FALSE(args->metrics_port.has_value());
  EXPECT_FALSE(args->help);
  EXPECT_TRUE(args->overrides.empty());
}

TEST(ServiceArgsTest, FlagsInBothFormsAndOverridesInOrder) {
  auto args = Parse({"--config", "deploy/configs/quickstart.yaml", "data.seed=3", "--port=50051",
                     "--metrics_port", "9100", "--host=0.0.0.0", "actor_rollout_ref.rollout.n=8",
                     "data.seed=4"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->config_path, "deploy/configs/quickstart.yaml");
  EXPECT_EQ(args->port, 50051);
  EXPECT_EQ(args->metrics_port, 9100);
  EXPECT_EQ(args->host, "0.0.0.0");
  EXPECT_EQ(args->overrides, (std::vector<std::string>{
                                 "data.seed=3", "actor_rollout_ref.rollout.n=8", "data.seed=4"}));
}

TEST(ServiceArgsTest, OverrideValuesMayContainEqualsSigns) {
  auto args = Parse({"rlmesh.reward.custom.args=a=b"});
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->overrides, (std::vector<std::string>{"rlmesh.reward.custom.args=a=b"}));
}

TEST(ServiceArgsTest, Help) {
  auto args = Parse({"--help"});
  ASSERT_TRUE(args.ok());
  EXPECT_TRUE(args->help);
  EXPECT_TRUE(Parse({"-h"})->help);
  const std::string usage = ServiceUsage("rlmesh-rollout");
  EXPECT_NE(usage.find("rlmesh-rollout --config FILE"), std::string::npos);
  EXPECT_NE(usage.find("--metrics_port"), std::string::npos);
}

void ExpectError(std::vector<const char*> argv, const std::string& names) {
  auto args = Parse(argv);
  ASSERT_FALSE(args.ok());
  EXPECT_EQ(args.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(args.status().message().find(names), std::string::npos) << args.status().message();
}

TEST(ServiceArgsTest, ErrorsNameTheFlag) {
  ExpectError({"--port", "70000"}, "--port");
  ExpectError({"--port=-1"}, "--port");
  ExpectError({"--metrics_port", "abc"},
              "--metrics_port: expected a port number 0..65535, got \"abc\"");
  ExpectError({"--config"}, "--config: missing value");
  ExpectError({"--config="}, "--config");
  ExpectError({"--prot", "1"}, "--prot: unknown flag");
  ExpectError({"quickstart.yaml"}, "argument \"quickstart.yaml\"");
  ExpectError({"=3"}, "argument \"=3\"");
  ExpectError({"--host="}, "--host");
}

}  // namespace
}  // namespace rlmesh::rpc
