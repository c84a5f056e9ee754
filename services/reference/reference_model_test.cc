#include "services/reference/reference_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/model/pretrained.h"
#include "common/model/tiny_models.h"

namespace rlmesh::reference {
namespace {

namespace fs = std::filesystem;

std::string MakeModel(const std::string& name) {
  const std::string dir = testing::TempDir() + "/rlmesh_reference_model_test_" + name;
  fs::remove_all(dir);
  auto config = model::ModelConfig::FromJson(model::kTinyQwen3ConfigJson, "test");
  EXPECT_TRUE(config.ok()) << config.status();
  torch::manual_seed(3);
  auto m = model::CausalLmImpl::Create(*config, {});
  EXPECT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(model::SavePretrained(**m, dir, "").ok());
  std::ofstream(dir + "/tokenizer.json") << "{}";
  return dir;
}

v1::ComputeLogProbsRequest Request() {
  v1::ComputeLogProbsRequest request;
  for (int b = 0; b < 5; ++b) {
    auto* seq = request.add_sequences();
    seq->set_id("s" + std::to_string(b));
    for (int t = 0; t < 4 + 2 + b; ++t) seq->add_token_ids(1 + (b * 7 + t * 3) % 19);
    seq->set_prompt_length(4);
  }
  return request;
}

// ref.fsdp_config.param_offload keeps the weights as flat host vectors and gathers a unit
// for each forward: the log-probs are the whole model's, bit for bit.
TEST(ReferenceModelTest, ParamOffloadGivesTheWholeModelsLogProbs) {
  const std::string dir = MakeModel("offload");
  ReferenceOptions options;
  options.model_path = dir;
  options.micro_batch_size = 2;
  auto whole = ReferenceModel::Create(options);
  ASSERT_TRUE(whole.ok()) << whole.status();
  options.param_offload = true;
  auto offloaded = ReferenceModel::Create(options);
  ASSERT_TRUE(offloaded.ok()) << offloaded.status();
  auto a = (*whole)->ComputeLogProbs(Request());
  auto b = (*offloaded)->ComputeLogProbs(Request());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->results_size(), b->results_size());
  int values = 0;
  for (int i = 0; i < a->results_size(); ++i) {
    ASSERT_EQ(a->results(i).logprobs_size(), b->results(i).logprobs_size());
    for (int t = 0; t < a->results(i).logprobs_size(); ++t) {
      EXPECT_EQ(a->results(i).logprobs(t), b->results(i).logprobs(t)) << i << " " << t;
      ++values;
    }
  }
  EXPECT_GT(values, 0);
  // A new policy loaded into the offloaded reference is offloaded too, and used.
  auto loaded = (*offloaded)->LoadWeights(dir, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto c = (*offloaded)->ComputeLogProbs(Request());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->results(0).logprobs(0), a->results(0).logprobs(0));
}

// model.use_remove_padding: each micro-batch packed into one row gives the padded
// forward's log-probs and entropies to float32 rounding.
TEST(ReferenceModelTest, PackedMicroBatchesGiveThePaddedLogProbs) {
  const std::string dir = MakeModel("packed");
  ReferenceOptions options;
  options.model_path = dir;
  options.micro_batch_size = 3;  // micro-batches of unequal lengths, padded to the longest
  auto padded = ReferenceModel::Create(options);
  ASSERT_TRUE(padded.ok()) << padded.status();
  options.remove_padding = true;
  auto packed = ReferenceModel::Create(options);
  ASSERT_TRUE(packed.ok()) << packed.status();
  v1::ComputeLogProbsRequest request = Request();
  request.set_calculate_entropy(true);
  auto a = (*padded)->ComputeLogProbs(request);
  auto b = (*packed)->ComputeLogProbs(request);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->results_size(), b->results_size());
  double most = 0;
  int values = 0;
  for (int i = 0; i < a->results_size(); ++i) {
    ASSERT_EQ(a->results(i).logprobs_size(), b->results(i).logprobs_size());
    ASSERT_EQ(a->results(i).entropies_size(), b->results(i).entropies_size());
    for (int t = 0; t < a->results(i).logprobs_size(); ++t) {
      most =
          std::max<double>(most, std::abs(a->results(i).logprobs(t) - b->results(i).logprobs(t)));
      most =
          std::max<double>(most, std::abs(a->results(i).entropies(t) - b->results(i).entropies(t)));
      ++values;
    }
  }
  EXPECT_GT(values, 0);
  EXPECT_LT(most, 1e-5);
}

}  // namespace
}  // namespace rlmesh::reference
