// Starts the real rlmesh-rollout, rlmesh-reference and rlmesh-trainer binaries on a tiny model
// and sends each of them broken requests: an empty prompt, n = 0, token ids outside the
// vocabulary, mismatched lengths, NaN advantages, a batch over the configured size. Every one
// must be INVALID_ARGUMENT naming the field, change nothing, and leave the server serving: a
// good request afterwards succeeds. Each binary's /metrics must pass `promtool check metrics`.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/metrics/http_get.h"
#include "common/metrics/promtool.h"
#include "common/model/model_info.h"
#include "common/process/subprocess.h"
#include "common/rpc/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rlmesh/v1/reference.grpc.pb.h"
#include "rlmesh/v1/rollout.grpc.pb.h"
#include "rlmesh/v1/trainer.grpc.pb.h"

namespace rlmesh {
namespace {

using ::testing::HasSubstr;

// vocab_size of the model the suite made (read from its config.json).
int kVocab = 0;

std::string Bin(const std::string& name) { return std::string(RLMESH_TEST_BUILD_DIR) + "/bin/" + name; }

std::string TempDir(const std::string& name) {
  std::string path = testing::TempDir() + "/rlmesh_" + name + "_XXXXXX";
  EXPECT_NE(mkdtemp(path.data()), nullptr);
  return path;
}

// Waits for `p` to end and returns its wait status (-1 after a timeout).
int WaitFor(process::Subprocess& p, absl::Duration timeout) {
  auto status = p.Wait(timeout);
  return status.has_value() ? *status : -1;
}

// One service binary on free ports, configured by the quickstart file with a small batch:
// train_batch_size 2 x n 2 = 4 sequences per request at most, max_queue 6 samples per call.
class ServiceProcess {
 public:
  ServiceProcess(const std::string& binary, const std::string& dir, const std::string& model) {
    process::SubprocessOptions options;
    options.argv = {Bin(binary),
                    "--config",
                    std::string(RLMESH_TEST_SOURCE_DIR) + "/deploy/configs/quickstart.yaml",
                    "--port",
                    "0",
                    "--metrics_port",
                    "0",
                    "actor_rollout_ref.model.path=" + model,
                    "data.train_batch_size=2",
                    "actor_rollout_ref.rollout.n=2",
                    "actor_rollout_ref.actor.ppo_mini_batch_size=1",
                    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
                    "rlmesh.rollout.max_queue=6",
                    "trainer.default_local_dir=" + dir + "/checkpoints"};
    options.log_path = dir + "/" + binary + ".log";
    options.echo = true;
    options.echo_prefix = "[" + binary + "] ";
    auto p = process::Subprocess::Start(options);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return;
    process_ = *std::move(p);
    auto line = process_->WaitForLine(
        [](const std::string& l) { return l.find("listening on") != std::string::npos; },
        absl::Minutes(3));
    EXPECT_TRUE(line.ok()) << line.status();
    if (!line.ok()) return;
    std::smatch m;
    EXPECT_TRUE(std::regex_search(*line, m, std::regex(R"(listening on (\S+) \(metrics :(\d+)\))")))
        << *line;
    address_ = m[1];
    metrics_port_ = std::stoi(m[2]);
    auto channel = rpc::ConnectWhenServing(address_, "", 180);
    EXPECT_TRUE(channel.ok()) << channel.status();
    if (channel.ok()) channel_ = *channel;
  }
  ~ServiceProcess() {
    if (process_ != nullptr) process_->Stop(SIGTERM, absl::Seconds(20));
  }

  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  bool ok() const { return channel_ != nullptr; }

  // The binary's /metrics page must satisfy promtool.
  void ExpectMetricsPassPromtool(const std::string& must_contain) {
    auto page = metrics::HttpGet("127.0.0.1", metrics_port_, "/metrics");
    ASSERT_TRUE(page.ok()) << page.status();
    ASSERT_EQ(page->status_code, 200);
    EXPECT_THAT(page->body, HasSubstr(must_contain));
    auto checked = metrics::PromtoolCheckMetrics(page->body);
    if (checked.status().code() == absl::StatusCode::kNotFound) {
      GTEST_SKIP() << "promtool not installed (run scripts/setup.sh)";
    }
    EXPECT_TRUE(checked.ok()) << checked.status() << "\n" << page->body;
  }

 private:
  std::unique_ptr<process::Subprocess> process_;
  std::string address_;
  int metrics_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
};

class MalformedRequestsTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TempDir("malformed"));
    process::SubprocessOptions options;
    options.argv = {Bin("rlmesh"), "make-tiny-model", "--arch", "llama", "--out", *dir_ + "/model",
                    "--hidden", "32", "--layers", "1", "--heads", "2", "--kv-heads", "2",
                    "--intermediate", "64", "--max-position", "64", "--seed", "1"};
    options.log_path = *dir_ + "/make-tiny-model.log";
    auto p = process::Subprocess::Start(options);
    ASSERT_TRUE(p.ok()) << p.status();
    const int status = WaitFor(**p, absl::Minutes(3));
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << options.log_path;
    std::ifstream config(Model() + "/config.json");
    kVocab = nlohmann::json::parse(config)["vocab_size"].get<int>();
    ASSERT_GT(kVocab, 20);
  }
  static std::string Dir() { return *dir_; }
  static std::string Model() { return *dir_ + "/model"; }

  static std::string* dir_;
};
std::string* MalformedRequestsTest::dir_ = nullptr;

// One broken variant of a good request and the field its error must name.
template <typename Request>
struct Case {
  std::string name;
  std::function<void(Request&)> mutate;
  std::string field;
};

// Sends every case's broken request through `call`; each must be INVALID_ARGUMENT naming the
// field.
template <typename Request>
void ExpectEachRefused(const std::vector<Case<Request>>& cases, const std::function<Request()>& good,
                       const std::function<grpc::Status(const Request&)>& call) {
  for (const Case<Request>& c : cases) {
    Request request = good();
    c.mutate(request);
    grpc::Status status = call(request);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.name;
    EXPECT_THAT(status.error_message(), HasSubstr(c.field)) << c.name << ": " << status.error_message();
  }
}

// A prompt of `prompt` tokens followed by `response` tokens, all valid digits.
v1::TokenSequence Sequence(const std::string& id, int prompt, int response) {
  v1::TokenSequence seq;
  seq.set_id(id);
  seq.add_token_ids(1);  // BOS
  for (int i = 1; i < prompt + response; ++i) seq.add_token_ids(3 + i % 10);
  seq.set_prompt_length(prompt);
  return seq;
}

// Runs a Generate call to its end; returns the final status and the samples streamed.
grpc::Status Generate(v1::RolloutService::Stub& stub, const v1::GenerateRequest& request,
                      std::vector<v1::GenerateResponse>* samples) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) samples->push_back(response);
  return reader->Finish();
}

v1::GenerateRequest GoodGenerate(const std::string& id) {
  v1::GenerateRequest request;
  request.set_request_id(id);
  for (int p = 0; p < 2; ++p) {
    auto* prompt = request.add_prompts();
    prompt->set_prompt_id(absl::StrCat("p", p));
    for (int t : {1, 4, 5, 6, 14}) prompt->add_token_ids(t);  // BOS 1 2 3 =
  }
  request.mutable_sampling_params()->set_n(2);
  request.mutable_sampling_params()->set_temperature(1.0);
  request.mutable_sampling_params()->set_max_new_tokens(4);
  request.mutable_sampling_params()->set_seed(7);
  return request;
}

TEST_F(MalformedRequestsTest, Rollout) {
  ServiceProcess rollout("rlmesh-rollout", Dir(), Model());
  ASSERT_TRUE(rollout.ok());
  auto stub = v1::RolloutService::NewStub(rollout.channel());
  const std::vector<Case<v1::GenerateRequest>> cases = {
      {"no prompts", [](auto& r) { r.clear_prompts(); }, "prompts"},
      {"empty prompt", [](auto& r) { r.mutable_prompts(1)->clear_token_ids(); },
       "prompts[1].token_ids"},
      {"n = 0", [](auto& r) { r.mutable_sampling_params()->set_n(0); }, "sampling_params.n"},
      {"id over the vocabulary", [](auto& r) { r.mutable_prompts(0)->set_token_ids(2, kVocab); },
       "prompts[0].token_ids[2]"},
      {"negative id", [](auto& r) { r.mutable_prompts(1)->set_token_ids(0, -1); },
       "prompts[1].token_ids[0]"},
      {"NaN temperature",
       [](auto& r) {
         r.mutable_sampling_params()->set_temperature(std::numeric_limits<double>::quiet_NaN());
       },
       "sampling_params.temperature"},
      {"stop id over the vocabulary",
       [](auto& r) { r.mutable_sampling_params()->add_stop_token_ids(kVocab); },
       "sampling_params.stop_token_ids[0]"},
      {"over max_queue (4 prompts x 2 = 8 > 6)",
       [](auto& r) {
         for (int p = 2; p < 4; ++p) {
           *r.add_prompts() = r.prompts(0);
           r.mutable_prompts(p)->set_prompt_id(absl::StrCat("p", p));
         }
       },
       "rlmesh.rollout.max_queue"},
      {"no request id", [](auto& r) { r.clear_request_id(); }, "request_id"},
      {"max_new_tokens over data.max_response_length 8",
       [](auto& r) { r.mutable_sampling_params()->set_max_new_tokens(9); },
       "sampling_params.max_new_tokens: 9 is over this replica's maximum of 8"},
      {"a prompt that fills max_model_len (16 + 8 = 24 positions)",
       [](auto& r) {
         r.mutable_prompts(0)->clear_token_ids();
         for (int t = 0; t < 24; ++t) r.mutable_prompts(0)->add_token_ids(4);
       },
       "prompts[0].token_ids: 24 tokens leave no room"},
      {"one prompt id twice with the same sample indices",
       [](auto& r) { r.mutable_prompts(1)->set_prompt_id("p0"); },
       "prompts[1].prompt_id: \"p0\" repeats prompts[0]"},
      {"sample indices past the largest int32",
       [](auto& r) {
         r.mutable_prompts(0)->set_first_sample_index(std::numeric_limits<int32_t>::max());
       },
       "prompts[0].first_sample_index: 2147483647 + n 2 goes past the largest sample index"},
  };
  ExpectEachRefused<v1::GenerateRequest>(
      cases, [] { return GoodGenerate("bad"); },
      [&](const v1::GenerateRequest& request) {
        std::vector<v1::GenerateResponse> samples;
        grpc::Status status = Generate(*stub, request, &samples);
        EXPECT_TRUE(samples.empty());
        return status;
      });
  // Nothing of the refused calls is queued, and the replica still serves.
  grpc::ClientContext context;
  v1::GetRolloutStatusResponse state;
  ASSERT_TRUE(stub->GetStatus(&context, {}, &state).ok());
  EXPECT_EQ(state.queue_depth(), 0);
  EXPECT_EQ(state.running_sequences(), 0);
  EXPECT_EQ(state.active_requests(), 0);
  std::vector<v1::GenerateResponse> samples;
  grpc::Status status = Generate(*stub, GoodGenerate("good"), &samples);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(samples.size(), 4u);
  // One prompt id twice is fine when the sample indices are apart: 0-1 and 2-3.
  v1::GenerateRequest split = GoodGenerate("split");
  split.mutable_prompts(1)->set_prompt_id("p0");
  split.mutable_prompts(1)->set_first_sample_index(2);
  samples.clear();
  status = Generate(*stub, split, &samples);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<int> indices;
  for (const auto& s : samples) indices.push_back(s.sample_index());
  EXPECT_THAT(indices, ::testing::UnorderedElementsAre(0, 1, 2, 3));
  // A prompt of 23 tokens (the most) with max_new_tokens 0 (the maximum, 8) stops at
  // max_model_len 24 (data.max_prompt_length + max_response_length): one response token.
  v1::GenerateRequest longest = GoodGenerate("longest");
  longest.mutable_prompts()->DeleteSubrange(1, 1);
  longest.mutable_prompts(0)->clear_token_ids();
  for (int t = 0; t < 23; ++t) longest.mutable_prompts(0)->add_token_ids(4);
  longest.mutable_sampling_params()->set_max_new_tokens(0);
  longest.mutable_sampling_params()->set_ignore_eos(true);
  samples.clear();
  status = Generate(*stub, longest, &samples);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(samples.size(), 2u);
  for (const auto& s : samples) {
    EXPECT_EQ(s.sample().token_ids_size(), 1);
    EXPECT_EQ(s.sample().finish_reason(), v1::FINISH_REASON_LENGTH);
  }
  // Weights of another dtype or shape than the parameter's are refused naming the tensor,
  // before anything is allocated (a shape of 2^80 elements once reached LibTorch, INTERNAL).
  const std::vector<Case<v1::UpdateWeightsRequest>> updates = {
      {"int64 for a float32 parameter",
       [](auto& r) { r.mutable_tensors(0)->set_dtype(v1::DTYPE_INT64); },
       "tensors[model.norm.weight].dtype: expected Float, got Long (DTYPE_INT64)"},
      {"bfloat16 for a float32 parameter",
       [](auto& r) { r.mutable_tensors(0)->set_dtype(v1::DTYPE_BFLOAT16); },
       "tensors[model.norm.weight].dtype: expected Float, got BFloat16"},
      {"a shape of 2^80 elements",
       [](auto& r) {
         r.mutable_tensors(0)->clear_shape();
         r.mutable_tensors(0)->add_shape(int64_t{1} << 40);
         r.mutable_tensors(0)->add_shape(int64_t{1} << 40);
       },
       "tensors[model.norm.weight].shape: expected [32], got [1099511627776, 1099511627776]"},
      {"a NaN deadline",
       [](auto& r) { r.set_timeout_seconds(std::numeric_limits<double>::quiet_NaN()); },
       "timeout_seconds: expected a finite number >= 0 (0 = 300 s), got nan"},
  };
  ExpectEachRefused<v1::UpdateWeightsRequest>(
      updates,
      [] {
        v1::UpdateWeightsRequest r;
        r.set_phase(v1::WEIGHT_UPDATE_PHASE_BEGIN);
        r.mutable_version()->set_version(1);
        r.set_transport("inline");
        r.set_expected_tensors(1);
        v1::Tensor* t = r.add_tensors();
        t->set_name("model.norm.weight");
        t->set_dtype(v1::DTYPE_FLOAT32);
        t->add_shape(32);  // --hidden 32
        t->set_data(std::string(32 * 4, '\0'));
        return r;
      },
      [&](const v1::UpdateWeightsRequest& request) {
        grpc::ClientContext context;
        v1::UpdateWeightsResponse response;
        return stub->UpdateWeights(&context, request, &response);
      });
  rollout.ExpectMetricsPassPromtool("rlmesh_rollout_requests_total{code=\"INVALID_ARGUMENT\"} 13");
}

// The tokenizer.json of the suite's model, as GetModelInfo must report it.
void ExpectModelInfo(const v1::GetModelInfoResponse& info, const std::string& model) {
  EXPECT_EQ(info.model_path(), model);
  EXPECT_EQ(info.architecture(), "LlamaForCausalLM");
  EXPECT_EQ(info.vocab_size(), kVocab);
  EXPECT_EQ(info.limits().max_position_embeddings(), 64);
  EXPECT_EQ(info.tokenizer_sha256(), model::FileSha256(model + "/tokenizer.json").value());
  std::vector<std::string> special;
  for (const auto& t : info.special_tokens()) special.push_back(t.content());
  EXPECT_THAT(special, ::testing::IsSupersetOf({"<|endoftext|>", "<|im_start|>", "<|im_end|>"}));
  EXPECT_FALSE(info.eos_token_ids().empty());
  EXPECT_THAT(info.chat_template(), HasSubstr("<|im_start|>"));
  EXPECT_EQ(info.limits().max_message_bytes(), 1 << 30);
}

// Rollout and reference stubs alike.
template <typename Stub>
void GetModelInfo(Stub& stub, v1::GetModelInfoResponse* info) {
  grpc::ClientContext context;
  grpc::Status status = stub.GetModelInfo(&context, {}, info);
  ASSERT_TRUE(status.ok()) << status.error_message();
}

TEST_F(MalformedRequestsTest, RolloutAndReferenceDescribeTheirModelAndLimits) {
  ServiceProcess rollout("rlmesh-rollout", Dir(), Model());
  ServiceProcess reference("rlmesh-reference", Dir(), Model());
  ASSERT_TRUE(rollout.ok() && reference.ok());
  {
    v1::GetModelInfoResponse info;
    ASSERT_NO_FATAL_FAILURE(GetModelInfo(*v1::RolloutService::NewStub(rollout.channel()), &info));
    ExpectModelInfo(info, Model());
    EXPECT_EQ(info.limits().max_model_len(), 24);  // max_prompt_length 16 + response 8
    EXPECT_EQ(info.limits().max_prompt_length(), 23);
    EXPECT_EQ(info.limits().max_new_tokens(), 8);           // data.max_response_length
    EXPECT_EQ(info.limits().max_samples_per_request(), 6);  // rlmesh.rollout.max_queue
    EXPECT_EQ(info.limits().max_queued_samples(), 8192);
    EXPECT_EQ(info.weight_version().version(), 0u);
  }
  {
    v1::GetModelInfoResponse info;
    ASSERT_NO_FATAL_FAILURE(
        GetModelInfo(*v1::ReferenceService::NewStub(reference.channel()), &info));
    ExpectModelInfo(info, Model());
    EXPECT_EQ(info.limits().max_model_len(), 64);
    EXPECT_EQ(info.limits().max_new_tokens(), 0);
  }
}

// A replica whose folder has a broken tokenizer.json still generates, and GetModelInfo says
// which file is broken: FAILED_PRECONDITION (the server's folder, not the request, is wrong).
TEST_F(MalformedRequestsTest, ABrokenTokenizerFileIsNamedByGetModelInfo) {
  const std::string model = Dir() + "/broken_tokenizer_model";
  std::filesystem::remove_all(model);
  std::filesystem::copy(Model(), model, std::filesystem::copy_options::recursive);
  std::ofstream(model + "/tokenizer.json", std::ios::trunc) << "{\"model\": ";
  ServiceProcess rollout("rlmesh-rollout", Dir(), model);
  ASSERT_TRUE(rollout.ok());
  auto stub = v1::RolloutService::NewStub(rollout.channel());
  grpc::ClientContext context;
  v1::GetModelInfoResponse info;
  grpc::Status status = stub->GetModelInfo(&context, {}, &info);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr(model + "/tokenizer.json"));
  std::vector<v1::GenerateResponse> samples;
  ASSERT_TRUE(Generate(*stub, GoodGenerate("still"), &samples).ok());
  EXPECT_EQ(samples.size(), 4u);
}

TEST_F(MalformedRequestsTest, Reference) {
  ServiceProcess reference("rlmesh-reference", Dir(), Model());
  ASSERT_TRUE(reference.ok());
  auto stub = v1::ReferenceService::NewStub(reference.channel());
  auto good = [] {
    v1::ComputeLogProbsRequest request;
    *request.add_sequences() = Sequence("a", 4, 3);
    *request.add_sequences() = Sequence("b", 5, 2);
    return request;
  };
  const std::vector<Case<v1::ComputeLogProbsRequest>> cases = {
      {"no sequences", [](auto& r) { r.clear_sequences(); }, "sequences"},
      {"id over the vocabulary", [](auto& r) { r.mutable_sequences(1)->set_token_ids(3, kVocab); },
       "sequences[1].token_ids[3]"},
      {"prompt as long as the sequence", [](auto& r) { r.mutable_sequences(0)->set_prompt_length(7); },
       "sequences[0].prompt_length"},
      {"mask of the wrong length",
       [](auto& r) {
         for (int i = 0; i < 5; ++i) r.mutable_sequences(0)->add_response_mask(1);
       },
       "sequences[0].response_mask"},
      {"only a prompt", [](auto& r) { *r.mutable_sequences(0) = Sequence("a", 1, 0); },
       "sequences[0].token_ids"},
      {"NaN temperature",
       [](auto& r) { r.set_temperature(std::numeric_limits<double>::quiet_NaN()); }, "temperature"},
      {"a temperature that overflows the logits", [](auto& r) { r.set_temperature(1e-300); },
       "temperature: expected 0 (= 1) or a finite number >= 1e-30, got 1e-300"},
      {"infinite temperature",
       [](auto& r) { r.set_temperature(std::numeric_limits<double>::infinity()); },
       "temperature: expected 0 (= 1) or a finite number >= 1e-30, got inf"},
      {"over the batch size (5 > 2 x 2)",
       [](auto& r) {
         for (int i = 0; i < 3; ++i) *r.add_sequences() = Sequence(absl::StrCat("x", i), 3, 2);
       },
       "sequences"},
  };
  ExpectEachRefused<v1::ComputeLogProbsRequest>(
      cases, good, [&](const v1::ComputeLogProbsRequest& request) {
        grpc::ClientContext context;
        v1::ComputeLogProbsResponse response;
        return stub->ComputeLogProbs(&context, request, &response);
      });
  grpc::ClientContext context;
  v1::ComputeLogProbsResponse response;
  grpc::Status status = stub->ComputeLogProbs(&context, good(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.results_size(), 2);
  EXPECT_EQ(response.results(0).logprobs_size(), 3);
  EXPECT_EQ(response.results(1).logprobs_size(), 2);
  for (float l : response.results(0).logprobs()) EXPECT_TRUE(std::isfinite(l) && l <= 0);
  reference.ExpectMetricsPassPromtool("rlmesh_reference_sequences_total 2");
}

// A GRPO batch of train_batch_size 2 x n 2 samples with valid per-token fields.
v1::TrainStepRequest GoodTrainStep() {
  v1::TrainStepRequest request;
  request.set_global_step(1);
  request.set_temperature(1.0);
  for (int i = 0; i < 4; ++i) {
    auto* sample = request.add_samples();
    *sample->mutable_sequence() = Sequence(absl::StrCat("s", i), 4, 3);
    sample->set_group_id(absl::StrCat("g", i / 2));
    for (int t = 0; t < 3; ++t) {
      sample->add_advantages(i % 2 == 0 ? 0.7f : -0.7f);
      sample->add_old_logprobs(-2.5f);
      sample->add_ref_logprobs(-2.5f);
    }
  }
  return request;
}

TEST_F(MalformedRequestsTest, Trainer) {
  ServiceProcess trainer("rlmesh-trainer", Dir(), Model());
  ASSERT_TRUE(trainer.ok());
  auto stub = v1::TrainerService::NewStub(trainer.channel());
  auto version = [&] {
    grpc::ClientContext context;
    v1::GetTrainerStatusResponse status;
    EXPECT_TRUE(stub->GetStatus(&context, {}, &status).ok());
    return status.weight_version().version();
  };
  const uint64_t before = version();

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Case<v1::TrainStepRequest>> cases = {
      {"no samples", [](auto& r) { r.clear_samples(); }, "samples"},
      {"NaN advantage", [&](auto& r) { r.mutable_samples(2)->set_advantages(1, nan); },
       "samples[2].advantages[1]"},
      {"advantages of the wrong length", [](auto& r) { r.mutable_samples(1)->add_advantages(0.1f); },
       "samples[1].advantages"},
      {"old log-probs of the wrong length",
       [](auto& r) { r.mutable_samples(3)->mutable_old_logprobs()->RemoveLast(); },
       "samples[3].old_logprobs"},
      {"id over the vocabulary",
       [](auto& r) { r.mutable_samples(0)->mutable_sequence()->set_token_ids(5, kVocab + 3); },
       "samples[0].sequence.token_ids[5]"},
      {"over the batch size (5 > 2 x 2)",
       [](auto& r) {
         *r.add_samples() = r.samples(0);
         r.mutable_samples(4)->mutable_sequence()->set_id("s4");
       },
       "samples"},
      {"NaN temperature", [&](auto& r) { r.set_temperature(nan); },
       "temperature: expected actor_rollout_ref.rollout.temperature"},
      {"one sample id twice",
       [](auto& r) {
         r.mutable_samples(1)->mutable_sequence()->set_id(r.samples(0).sequence().id());
       },
       "samples[1].sequence.id: "},
      {"negative global_step", [](auto& r) { r.set_global_step(-5); },
       "global_step: expected >= 0 (0 = unset), got -5"},
      {"negative total_training_steps", [](auto& r) { r.set_total_training_steps(-10); },
       "total_training_steps: expected >= 0 (0 = unset), got -10"},
  };
  ExpectEachRefused<v1::TrainStepRequest>(cases, GoodTrainStep,
                                          [&](const v1::TrainStepRequest& request) {
                                            grpc::ClientContext context;
                                            v1::TrainStepResponse response;
                                            return stub->TrainStep(&context, request, &response);
                                          });
  {
    v1::ComputeOldLogProbsRequest request;
    *request.add_sequences() = Sequence("a", 3, 2);
    request.mutable_sequences(0)->set_token_ids(1, -4);
    grpc::ClientContext context;
    v1::ComputeOldLogProbsResponse response;
    grpc::Status status = stub->ComputeOldLogProbs(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("sequences[0].token_ids[1]"));
  }
  {
    grpc::ClientContext context;
    v1::SftStepResponse response;
    grpc::Status status = stub->SftStep(&context, v1::SftStepRequest(), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("sequences"));
  }
  // None of them moved the weights; a good step does.
  EXPECT_EQ(version(), before);
  grpc::ClientContext context;
  v1::TrainStepResponse response;
  grpc::Status status = stub->TrainStep(&context, GoodTrainStep(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.weight_version().version(), before + 1);
  EXPECT_TRUE(std::isfinite(response.metrics().at("actor/pg_loss")));
  trainer.ExpectMetricsPassPromtool("rlmesh_trainer_");
}

}  // namespace
}  // namespace rlmesh
