#include "services/reference/reference_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/dist/local_group.h"
#include "common/model/pretrained.h"
#include "common/model/tiny_models.h"
#include "services/rollout/tensor_codec.h"

namespace rlmesh::reference {
namespace {

namespace fs = std::filesystem;

std::string MakeModel(const std::string& name, int seed = 3) {
  const std::string dir = testing::TempDir() + "/rlmesh_reference_model_test_" + name;
  fs::remove_all(dir);
  auto config = model::ModelConfig::FromJson(model::kTinyQwen3ConfigJson, "test");
  EXPECT_TRUE(config.ok()) << config.status();
  torch::manual_seed(seed);
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
  // A new policy loaded into the offloaded reference is offloaded too, and used; the folder
  // it came from is the one GetModelInfo describes from then on.
  const std::string copy = dir + "_copy";
  std::filesystem::remove_all(copy);
  std::filesystem::copy(dir, copy, std::filesystem::copy_options::recursive);
  EXPECT_EQ((*offloaded)->folder(), dir);
  auto loaded = (*offloaded)->LoadWeights(copy, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*offloaded)->folder(), copy);
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

// The largest difference between two answers' log-probs (and entropies), checking that they
// answer the same sequences with the same number of values.
double MostDifference(const v1::ComputeLogProbsResponse& a, const v1::ComputeLogProbsResponse& b) {
  EXPECT_EQ(a.results_size(), b.results_size());
  double most = 0;
  for (int i = 0; i < std::min(a.results_size(), b.results_size()); ++i) {
    EXPECT_EQ(a.results(i).id(), b.results(i).id());
    EXPECT_EQ(a.results(i).logprobs_size(), b.results(i).logprobs_size()) << i;
    EXPECT_EQ(a.results(i).entropies_size(), b.results(i).entropies_size()) << i;
    for (int t = 0; t < std::min(a.results(i).logprobs_size(), b.results(i).logprobs_size()); ++t) {
      most = std::max<double>(most, std::abs(a.results(i).logprobs(t) - b.results(i).logprobs(t)));
    }
    for (int t = 0; t < std::min(a.results(i).entropies_size(), b.results(i).entropies_size());
         ++t) {
      most =
          std::max<double>(most, std::abs(a.results(i).entropies(t) - b.results(i).entropies(t)));
    }
  }
  return most;
}

// A reference group of `world` ranks in this process: rank 0's model goes to `drive` on this
// thread while the other ranks serve it; they stop when `drive` returns.
void WithGroup(
    int world, const ReferenceOptions& options,
    const std::function<void(ReferenceModel&, const std::vector<ReferenceModel*>&)>& drive) {
  auto groups = dist::JoinLocalGroup(world);
  ASSERT_TRUE(groups.ok()) << groups.status();
  std::vector<std::unique_ptr<ReferenceModel>> models(world);
  std::vector<absl::Status> created(world);
  dist::OnEveryRank(world, [&](int r) {
    auto m = ReferenceModel::Create(options, (*groups)[r].get());
    created[r] = m.status();
    if (m.ok()) models[r] = *std::move(m);
  });
  for (int r = 0; r < world; ++r) ASSERT_TRUE(created[r].ok()) << r << ": " << created[r];
  std::vector<absl::Status> served(world);
  std::vector<std::thread> serving;
  for (int r = 1; r < world; ++r) {
    serving.emplace_back([&, r] { served[r] = models[r]->ServeRank(); });
  }
  std::vector<ReferenceModel*> all;
  for (auto& m : models) all.push_back(m.get());
  drive(*models[0], all);
  models[0]->StopRanks();
  for (auto& t : serving) t.join();
  for (int r = 1; r < world; ++r) EXPECT_TRUE(served[r].ok()) << r << ": " << served[r];
}

v1::ComputeLogProbsRequest LongerRequest() {
  v1::ComputeLogProbsRequest request;
  for (int b = 0; b < 7; ++b) {
    auto* seq = request.add_sequences();
    seq->set_id("s" + std::to_string(b));
    for (int t = 0; t < 3 + (b * 5) % 9; ++t) seq->add_token_ids(1 + (b * 11 + t * 5) % 19);
    seq->set_prompt_length(2);
  }
  request.set_calculate_entropy(true);
  return request;
}

// rlmesh.reference.world_size = R: each rank holds 1/R of the weights and scores its share
// of the batch; the answer is the whole model's, with fixed micro-batches, with a token
// budget and packed, and at a world size that does not divide the batch.
TEST(ReferenceGroupTest, RanksHoldingShardsGiveTheWholeModelsLogProbs) {
  const std::string dir = MakeModel("group");
  struct Case {
    const char* name;
    int64_t micro_batch_size;
    int64_t max_token_len;
    bool remove_padding;
  };
  for (const Case& c : {Case{"fixed micro-batches", 2, 0, false},
                        Case{"token budget", 1, 24, false}, Case{"packed", 3, 0, true}}) {
    SCOPED_TRACE(c.name);
    ReferenceOptions options;
    options.model_path = dir;
    options.micro_batch_size = c.micro_batch_size;
    options.max_token_len = c.max_token_len;
    options.remove_padding = c.remove_padding;
    auto whole = ReferenceModel::Create(options);
    ASSERT_TRUE(whole.ok()) << whole.status();
    auto expected = (*whole)->ComputeLogProbs(LongerRequest());
    ASSERT_TRUE(expected.ok()) << expected.status();
    const int64_t whole_bytes = (*whole)->held_weight_bytes();
    for (int world : {2, 3}) {
      SCOPED_TRACE(world);
      WithGroup(world, options,
                [&](ReferenceModel& rank0, const std::vector<ReferenceModel*>& all) {
                  auto got = rank0.ComputeLogProbs(LongerRequest());
                  ASSERT_TRUE(got.ok()) << got.status();
                  EXPECT_LT(MostDifference(*expected, *got), 1e-5);
                  EXPECT_GE(got->micro_batches(), expected->micro_batches());
                  // Each rank holds its shard: 1/R of the weights, plus at most R - 1 padding
                  // elements per unit.
                  for (ReferenceModel* m : all) {
                    EXPECT_LE(m->held_weight_bytes(), whole_bytes / world + 4 * 64 * world);
                    EXPECT_GE(m->held_weight_bytes(), whole_bytes / world);
                  }
                  // A request every rank refuses fails on rank 0 with its field, and the group goes
                  // on.
                  v1::ComputeLogProbsRequest bad = LongerRequest();
                  bad.set_temperature(-1);
                  auto refused = rank0.ComputeLogProbs(bad);
                  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
                  EXPECT_NE(refused.status().message().find("temperature"), std::string::npos);
                  auto again = rank0.ComputeLogProbs(LongerRequest());
                  ASSERT_TRUE(again.ok()) << again.status();
                  EXPECT_EQ(MostDifference(*got, *again), 0);
                });
    }
  }
}

// A group takes a new version inline, each rank keeping its slice of every tensor, and then
// scores as a whole model loaded from that version; a checkpoint folder loads into the shards
// the same way. Broken updates leave the old weights in place on every rank.
TEST(ReferenceGroupTest, InlineUpdatesAndLoadedFoldersReachEveryRanksShards) {
  const std::string first = MakeModel("group_first", 3);
  const std::string second = MakeModel("group_second", 11);
  ReferenceOptions options;
  options.model_path = first;
  options.micro_batch_size = 2;
  auto whole_first = ReferenceModel::Create(options);
  ASSERT_TRUE(whole_first.ok()) << whole_first.status();
  auto expect_first = (*whole_first)->ComputeLogProbs(LongerRequest());
  ASSERT_TRUE(expect_first.ok());
  options.model_path = second;
  auto whole_second = ReferenceModel::Create(options);
  ASSERT_TRUE(whole_second.ok()) << whole_second.status();
  auto expect_second = (*whole_second)->ComputeLogProbs(LongerRequest());
  ASSERT_TRUE(expect_second.ok());
  ASSERT_GT(MostDifference(*expect_first, *expect_second), 1e-3);  // the two models differ

  auto loaded = model::LoadPretrained(second, {});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::vector<v1::Tensor> tensors;
  for (const auto& item : (*loaded)->named_parameters()) {
    v1::Tensor t;
    ASSERT_TRUE(rollout::EncodeTensor(item.key(), item.value(), &t).ok());
    tensors.push_back(t);
  }
  ASSERT_GT(tensors.size(), 3u);

  options.model_path = first;
  WithGroup(2, options, [&](ReferenceModel& rank0, const std::vector<ReferenceModel*>&) {
    auto now = rank0.ComputeLogProbs(LongerRequest());
    ASSERT_TRUE(now.ok()) << now.status();
    EXPECT_LT(MostDifference(*expect_first, *now), 1e-5);

    v1::WeightVersion version;
    version.set_version(5);
    auto phase = [&](v1::WeightUpdatePhase p, size_t from, size_t to) {
      v1::UpdateWeightsRequest request;
      request.set_phase(p);
      *request.mutable_version() = version;
      for (size_t i = from; i < to; ++i) *request.add_tensors() = tensors[i];
      return rank0.UpdateWeights(request);
    };
    // A data plane is refused by a group (the trainer then sends inline).
    {
      v1::UpdateWeightsRequest pulled;
      pulled.set_phase(v1::WEIGHT_UPDATE_PHASE_BEGIN);
      *pulled.mutable_version() = version;
      pulled.set_transport("shm");
      pulled.set_endpoint("127.0.0.1:1");
      auto refused = rank0.UpdateWeights(pulled);
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_NE(refused.status().message().find("inline"), std::string::npos);
    }
    // A COMMIT with tensors missing is refused on every rank; the old weights stay.
    ASSERT_TRUE(phase(v1::WEIGHT_UPDATE_PHASE_BEGIN, 0, 1).ok());
    auto early = phase(v1::WEIGHT_UPDATE_PHASE_COMMIT, 0, 0);
    EXPECT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(early.status().message().find("missing"), std::string::npos);
    // A tensor of the wrong shape is refused naming it.
    {
      v1::UpdateWeightsRequest bad;
      bad.set_phase(v1::WEIGHT_UPDATE_PHASE_BEGIN);
      *bad.mutable_version() = version;
      ASSERT_TRUE(
          rollout::EncodeTensor(tensors[0].name(), torch::zeros({3}), bad.add_tensors()).ok());
      auto refused = rank0.UpdateWeights(bad);
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(refused.status().message().find(tensors[0].name()), std::string::npos);
    }
    auto still = rank0.ComputeLogProbs(LongerRequest());
    ASSERT_TRUE(still.ok()) << still.status();
    EXPECT_EQ(MostDifference(*now, *still), 0);

    // The whole version in three calls.
    const size_t third = tensors.size() / 3;
    ASSERT_TRUE(phase(v1::WEIGHT_UPDATE_PHASE_BEGIN, 0, third).ok());
    ASSERT_TRUE(phase(v1::WEIGHT_UPDATE_PHASE_DATA, third, tensors.size()).ok());
    auto committed = phase(v1::WEIGHT_UPDATE_PHASE_COMMIT, 0, 0);
    ASSERT_TRUE(committed.ok()) << committed.status();
    EXPECT_EQ(committed->current_version().version(), 5u);
    auto updated = rank0.ComputeLogProbs(LongerRequest());
    ASSERT_TRUE(updated.ok()) << updated.status();
    EXPECT_LT(MostDifference(*expect_second, *updated), 1e-5);
    EXPECT_EQ(updated->weight_version().version(), 5u);

    // Back to the first model from its folder, one unit at a time on every rank.
    v1::WeightVersion back;
    back.set_version(6);
    auto reloaded = rank0.LoadWeights(first, back);
    ASSERT_TRUE(reloaded.ok()) << reloaded.status();
    auto again = rank0.ComputeLogProbs(LongerRequest());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_LT(MostDifference(*expect_first, *again), 1e-5);
    // A folder that is not a model fails on every rank and changes nothing.
    auto missing = rank0.LoadWeights(testing::TempDir() + "/rlmesh_no_such_model", back);
    EXPECT_FALSE(missing.ok());
    auto after = rank0.ComputeLogProbs(LongerRequest());
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_EQ(MostDifference(*again, *after), 0);
  });
}

}  // namespace
}  // namespace rlmesh::reference
