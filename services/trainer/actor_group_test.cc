// Data parallelism: W = 1, 2 and 4 ranks (threads of this process over a loopback Gloo group)
// train copies of one small real model on the same global batches, and must agree with W = 1
// on the metrics, the log-probs and the updated parameters for three steps, to 1e-5 relative
// in float32. Each rank holds the whole policy; what differs is only who computes which rows
// and the order of the floating-point sums.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/dist/local_group.h"
#include "common/model/causal_lm.h"
#include "common/model/safetensors.h"
#include "common/model/tiny_models.h"
#include "common/process/tensor_memory.h"
#include "services/trainer/actor.h"

namespace rlmesh::trainer {
namespace {

constexpr int kSteps = 3;

model::ModelConfig TinyQwen3() {
  auto config = model::ModelConfig::FromJson(model::kTinyQwen3ConfigJson, "test");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

// The same initial weights every time.
std::shared_ptr<model::CausalLmImpl> NewModel(torch::Dtype dtype, bool checkpointing = false,
                                              torch::Device device = torch::kCPU) {
  torch::manual_seed(7);
  model::CausalLmOptions options;
  options.dtype = dtype;
  options.gradient_checkpointing = checkpointing;
  auto m = model::CausalLmImpl::Create(TinyQwen3(), options);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  if (!device.is_cpu()) {
    // On a GPU the same initial weights as on the CPU (a device's generator draws others).
    options.device = device;
    auto on_device = model::CausalLmImpl::CreateUninitialized(TinyQwen3(), options);
    EXPECT_TRUE(on_device.ok()) << on_device.status();
    if (!on_device.ok()) return nullptr;
    torch::NoGradGuard no_grad;
    const auto from = (*m)->parameters();
    const auto to = (*on_device)->parameters();
    for (size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i]);
    return *on_device;
  }
  return *m;
}

// Step s's batch: 16 sequences of 4 prompt and 2 to 9 response tokens, left-aligned and
// padded to 13, advantages +-1 and reference log-probs near -3.
ActorBatch StepBatch(int step) {
  constexpr int64_t kRows = 16, kCols = 13;
  ActorBatch b;
  b.input_ids = torch::zeros({kRows, kCols}, torch::kInt64);
  b.attention_mask = torch::zeros({kRows, kCols}, torch::kInt64);
  b.response_mask = torch::zeros({kRows, kCols}, torch::kInt64);
  b.advantages = torch::zeros({kRows, kCols}, torch::kFloat32);
  b.ref_log_probs = torch::zeros({kRows, kCols}, torch::kFloat32);
  for (int64_t r = 0; r < kRows; ++r) {
    const int64_t length = 4 + 2 + (r * 5 + step) % 8;
    for (int64_t t = 0; t < length; ++t) {
      b.input_ids[r][t] = 1 + (r * 7 + t * 3 + step * 11) % 19;
      b.attention_mask[r][t] = 1;
      if (t >= 4) {
        b.response_mask[r][t] = 1;
        b.advantages[r][t] = (r + step) % 2 == 0 ? 1.0 : -1.0;
        b.ref_log_probs[r][t] = -3.0 + 0.05 * static_cast<double>((r + t) % 5);
      }
    }
  }
  b.position_ids = torch::arange(kCols, torch::kInt64).unsqueeze(0).repeat({kRows, 1});
  return b;
}

struct Variant {
  torch::Dtype dtype = torch::kFloat32;
  int64_t token_budget = 0;  // use_dynamic_bsz when > 0; else micro-batches of 2 per rank
  bool sharded = false;      // fsdp.h: each rank holds 1/W of the parameters and state
  FsdpOptions fsdp;
  bool checkpointing = false;   // recompute each layer in backward
  bool remove_padding = false;  // every forward on the micro-batch packed into one row
  bool balance_batch = true;    // rows to ranks balanced by tokens; false: in order
  int shard_size = 0;           // hybrid sharding: shard groups of this many ranks (FormMesh)
  // On a GPU: every rank on cuda:0 (backend gloo, through host memory) or rank r on cuda:r
  // (backend nccl, on the devices).
  bool cuda = false;
  std::string backend = "gloo";
};

Variant Fixed() { return {}; }
Variant TokenBudget(int64_t budget) {
  Variant v;
  v.token_budget = budget;
  return v;
}
Variant Bfloat16() {
  Variant v;
  v.dtype = torch::kBFloat16;
  return v;
}
Variant Sharded(Variant v) {
  v.sharded = true;
  return v;
}
Variant Hybrid(Variant v, int shard_size) {
  v.sharded = true;
  v.shard_size = shard_size;
  return v;
}
Variant Checkpointed(Variant v) {
  v.checkpointing = true;
  return v;
}
Variant Packed(Variant v) {
  v.remove_padding = true;
  return v;
}
Variant OnCuda(Variant v, const std::string& backend) {
  v.cuda = true;
  v.backend = backend;
  return v;
}
Variant Offloaded(Variant v) {
  v.fsdp.param_offload = true;
  v.fsdp.optimizer_offload = true;
  return v;
}

struct RunResult {
  std::vector<std::map<std::string, double>> metrics;  // per step
  std::vector<torch::Tensor> old_log_probs;            // per step
  std::vector<torch::Tensor> initial, final;           // rank 0's parameters
  bool ranks_agree = true;  // every rank ended with rank 0's parameters, bit for bit
  int64_t state_bytes = 0;  // rank 0's peak_state_bytes()
  bool released = true;     // sharded: no layer held its parameters' memory after the steps
};

// The policy's sharding units (fsdp.h).
std::vector<std::vector<torch::Tensor>> Units(const model::CausalLmImpl& model) {
  std::vector<std::vector<torch::Tensor>> units;
  for (int u = 0; u < model.NumUnits(); ++u) units.push_back(model.UnitParameters(u));
  return units;
}

ActorOptions Options(const Variant& v) {
  ActorOptions o;
  o.ppo_mini_batch_size = 8;  // two optimizer steps per update: the second is off-policy
  o.ppo_micro_batch_size = 2;
  o.log_prob_micro_batch_size = 3;
  o.ppo_max_token_len = v.token_budget;
  o.remove_padding = v.remove_padding;
  o.balance_batch = v.balance_batch;
  o.log_prob_max_token_len = v.token_budget;
  o.shuffle = true;
  o.seed = 5;
  o.use_kl_loss = true;
  o.kl_loss_coef = 0.1;
  o.entropy_coeff = 0.01;
  o.lr = 1e-3;
  o.weight_decay = 0.01;
  return o;
}

// A run that stopped early, its EXPECT saying why: kSteps empty steps and no agreement, so that
// the tests' checks fail on it instead of reading past the end of its vectors.
RunResult Stopped(RunResult result) {
  result.metrics.resize(kSteps);
  result.old_log_probs.resize(kSteps, torch::zeros({0}));
  result.initial.clear();
  result.final.clear();
  result.ranks_agree = false;
  return result;
}

RunResult Train(int world_size, const Variant& v) {
  RunResult result;
  auto groups = dist::JoinLocalGroup(world_size, 60, v.backend);
  EXPECT_TRUE(groups.ok()) << groups.status();
  if (!groups.ok()) return Stopped(std::move(result));
  if (v.shard_size > 0) {
    dist::OnEveryRank(world_size,
                      [&](int r) { EXPECT_TRUE((*groups)[r]->FormMesh(v.shard_size).ok()) << r; });
  }
  std::vector<std::shared_ptr<model::CausalLmImpl>> models;
  std::vector<std::shared_ptr<ShardedParameters>> shards(world_size);
  std::vector<std::unique_ptr<Actor>> actors;
  for (int r = 0; r < world_size; ++r) {
    const torch::Device device = !v.cuda               ? torch::Device(torch::kCPU)
                                 : v.backend == "nccl" ? torch::Device(torch::kCUDA, r)
                                                       : torch::Device(torch::kCUDA, 0);
    models.push_back(NewModel(v.dtype, v.checkpointing, device));
    auto model = models.back();
    if (model == nullptr) return Stopped(std::move(result));
    if (r == 0) {
      for (const auto& p : model->parameters()) {
        result.initial.push_back(p.detach().to(torch::kCPU, torch::kFloat32).clone());
      }
    }
    auto forward = [model, device](const torch::Tensor& ids, const torch::Tensor& mask,
                                   const torch::Tensor& positions) {
      return model->Forward(ids.to(device), mask.to(device), positions.to(device));
    };
    auto packed = [model, device](const torch::Tensor& ids, const torch::Tensor& positions,
                                  const torch::Tensor& cu_seqlens) {
      return model->ForwardPacked(ids.to(device), positions.to(device), cu_seqlens);
    };
    std::shared_ptr<MasterWeights> masters;
    if (v.sharded) {
      auto sharded = ShardedParameters::Create(Units(*model), (*groups)[r].get(), v.fsdp);
      EXPECT_TRUE(sharded.ok()) << sharded.status();
      if (!sharded.ok()) return Stopped(std::move(result));
      shards[r] = *sharded;
      model->SetSharding(shards[r].get());
    } else {
      masters = MasterWeights::Create(*model, torch::kFloat32);
    }
    auto actor =
        Actor::Create(Options(v), model, forward, masters, (*groups)[r].get(), shards[r], packed);
    EXPECT_TRUE(actor.ok()) << actor.status();
    if (!actor.ok()) return Stopped(std::move(result));
    actors.push_back(std::move(actor).value());
  }
  std::vector<std::vector<std::map<std::string, double>>> metrics(world_size);
  std::vector<std::vector<torch::Tensor>> old(world_size);
  dist::OnEveryRank(world_size, [&](int r) {
    for (int step = 0; step < kSteps; ++step) {
      ActorBatch batch = StepBatch(step);
      auto logp = actors[r]->ComputeLogProbs(batch);
      ASSERT_TRUE(logp.ok()) << logp.status();
      batch.old_log_probs = logp->log_probs.to(torch::kCPU, torch::kFloat32);
      old[r].push_back(batch.old_log_probs);
      auto m = actors[r]->UpdatePolicy(batch);
      ASSERT_TRUE(m.ok()) << m.status();
      metrics[r].push_back(*m);
    }
  });
  for (int r = 0; r < world_size; ++r) {
    if (metrics[r].size() != static_cast<size_t>(kSteps)) return Stopped(std::move(result));
  }
  result.metrics = metrics[0];
  result.old_log_probs = old[0];
  result.state_bytes = actors[0]->peak_state_bytes();
  std::vector<std::vector<torch::Tensor>> final(world_size);
  dist::OnEveryRank(world_size, [&](int r) {
    if (v.sharded) {
      for (const auto& p : models[r]->parameters()) {
        result.released = result.released && p.storage().nbytes() == 0;
      }
      shards[r]->GatherAll();  // a collective: every rank at once
    }
    for (const auto& p : models[r]->parameters()) {
      final[r].push_back(p.detach().to(torch::kCPU, torch::kFloat32).clone());
    }
  });
  result.final = final[0];
  for (int r = 1; r < world_size; ++r) {
    for (size_t i = 0; i < final[r].size(); ++i) {
      result.ranks_agree = result.ranks_agree && torch::equal(final[r][i], result.final[i]);
    }
    result.ranks_agree = result.ranks_agree && metrics[r] == metrics[0];
  }
  return result;
}

double Relative(double got, double want) {
  return std::abs(got - want) / std::max(std::abs(want), 1e-12);
}

// ||(final_w - initial) - (final_1 - initial)|| / ||final_1 - initial|| over all parameters:
// the difference of the updates, relative to the update.
double UpdateDifference(const RunResult& w, const RunResult& one) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < one.final.size(); ++i) {
    diff += (w.final[i] - one.final[i]).pow(2).sum().item<double>();
    norm += (one.final[i] - one.initial[i]).pow(2).sum().item<double>();
  }
  return std::sqrt(diff / norm);
}

void ExpectSameAsOneRank(const RunResult& w, const RunResult& one, double tolerance) {
  ASSERT_EQ(w.metrics.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(one.metrics.size(), static_cast<size_t>(kSteps));
  EXPECT_TRUE(w.ranks_agree) << "the ranks' parameters or metrics differ";
  for (int step = 0; step < kSteps; ++step) {
    for (const char* key : {"actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm",
                            "actor/ppo_kl", "actor/pg_clipfrac"}) {
      const double want = one.metrics[step].at(key);
      const double got = w.metrics[step].at(key);
      if (want == 0) {
        EXPECT_NEAR(got, 0, 1e-9) << key << " step " << step;
      } else {
        EXPECT_LT(Relative(got, want), tolerance)
            << key << " step " << step << ": " << got << " vs " << want;
      }
    }
    // At the response tokens, the only ones read (a padded forward also scores padding).
    const auto response = StepBatch(step).response_mask;
    const double logp_diff =
        ((w.old_log_probs[step] - one.old_log_probs[step]) * response).abs().max().item<double>();
    EXPECT_LT(logp_diff, tolerance) << "old log-probs, step " << step;
  }
  const double update = UpdateDifference(w, one);
  EXPECT_LT(update, tolerance) << "updated parameters";
  std::printf("  relative difference of the 3-step update from W = 1's: %.3g\n", update);
}

TEST(ActorGroupTest, TwoAndFourRanksTrainAsOneInFloat32) {
  const Variant v = Fixed();
  const RunResult one = Train(1, v);
  ASSERT_EQ(one.metrics.size(), static_cast<size_t>(kSteps));
  double moved = 0;  // the update is not nothing
  for (size_t i = 0; i < one.final.size(); ++i) {
    moved += (one.final[i] - one.initial[i]).abs().sum().item<double>();
  }
  EXPECT_GT(moved, 0);
  for (int w : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << "W = " << w);
    std::printf("W = %d\n", w);
    ExpectSameAsOneRank(Train(w, v), one, 1e-5);
  }
}

// use_dynamic_bsz: micro-batches by a token budget of 13 (the longest row) on each rank,
// against W = 1 with fixed micro-batches of 2.
TEST(ActorGroupTest, TokenBudgetMicroBatchesOnTwoAndFourRanksTrainAsFixedOnOne) {
  const RunResult one = Train(1, Fixed());
  for (int w : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << "W = " << w);
    std::printf("W = %d, token budget 13\n", w);
    const RunResult dynamic = Train(w, TokenBudget(13));
    ExpectSameAsOneRank(dynamic, one, 1e-5);
    // Other micro-batches than W = 1's 8 (2 mini-batches x 4), and more than the W ranks x 2
    // mini-batches that fixed micro-batches would give here.
    const double passes = dynamic.metrics[0].at("rlmesh/micro_batches/update_actor");
    std::printf("  forward/backward passes of step 1: %g (W = 1: %g)\n", passes,
                one.metrics[0].at("rlmesh/micro_batches/update_actor"));
    EXPECT_GT(passes, 2.0 * w);
    EXPECT_NE(passes, one.metrics[0].at("rlmesh/micro_batches/update_actor"));
  }
}

// use_remove_padding: every micro-batch packed into one row (no padding computed, attention
// within each sequence), alone, on 2 and 4 ranks, sharded, and with token budgets, against
// W = 1's padded micro-batches.
TEST(ActorGroupTest, PackedMicroBatchesTrainAsPaddedOnesOnOneTwoAndFourRanks) {
  const RunResult one = Train(1, Fixed());
  std::printf("W = 1, packed\n");
  ExpectSameAsOneRank(Train(1, Packed(Fixed())), one, 1e-5);
  for (int w : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << "W = " << w);
    std::printf("W = %d, packed\n", w);
    ExpectSameAsOneRank(Train(w, Packed(Fixed())), one, 1e-5);
    std::printf("W = %d, packed and sharded, token budget 13\n", w);
    ExpectSameAsOneRank(Train(w, Packed(Sharded(TokenBudget(13)))), one, 1e-5);
  }
}

// trainer.balance_batch: with balancing each rank gets nearly the same tokens of every
// mini-batch; in order the loads spread; the update is W = 1's either way. verl's
// global_seqlen/* describe the batch's split in order and balanced.
TEST(ActorGroupTest, BalancingTheBatchEvensTheRanksLoadsAndChangesNothingElse) {
  const RunResult one = Train(1, Fixed());
  EXPECT_EQ(one.metrics[0].count("global_seqlen/min"), 0u);  // alone there is nothing to split
  Variant in_order = Fixed();
  in_order.balance_batch = false;
  const RunResult balanced = Train(2, Fixed()), unbalanced = Train(2, in_order);
  ExpectSameAsOneRank(balanced, one, 1e-5);
  ExpectSameAsOneRank(unbalanced, one, 1e-5);
  for (int step = 0; step < kSteps; ++step) {
    const auto& b = balanced.metrics[step];
    const auto& u = unbalanced.metrics[step];
    const double spread_balanced = b.at("rlmesh/rank_tokens/max") - b.at("rlmesh/rank_tokens/min");
    const double spread_in_order = u.at("rlmesh/rank_tokens/max") - u.at("rlmesh/rank_tokens/min");
    std::printf("step %d: rank token spread %g balanced, %g in order\n", step + 1, spread_balanced,
                spread_in_order);
    EXPECT_LT(spread_balanced, spread_in_order) << step;
    EXPECT_LE(b.at("global_seqlen/balanced_max") - b.at("global_seqlen/balanced_min"),
              b.at("global_seqlen/minmax_diff"));
    EXPECT_EQ(b.at("global_seqlen/mean") * 2,
              b.at("global_seqlen/balanced_max") + b.at("global_seqlen/balanced_min"));
    EXPECT_EQ(b.at("global_seqlen/minmax_diff"), u.at("global_seqlen/minmax_diff"));
  }
}

// bfloat16 compute with fp32 masters, the ranks' gradients summed in fp32. A bf16 forward's
// rounding depends on the shape of the micro-batch a row is computed in (the GEMM blocking),
// and the ranks batch rows differently from one rank, so the agreement is bf16's (percent),
// not float32's 1e-5; a lost or doubled rank's gradient would be off by tens of percent.
TEST(ActorGroupTest, TwoRanksWithMasterWeightsTrainAsOneToBfloat16Rounding) {
  const Variant v = Bfloat16();
  const RunResult one = Train(1, v);
  std::printf("W = 2, bfloat16 with fp32 masters\n");
  ExpectSameAsOneRank(Train(2, v), one, 5e-2);
}

// The warm-up's supervised step and the entropies of a log-prob pass, split across 2 ranks.
TEST(ActorGroupTest, SupervisedStepsAndEntropiesOnTwoRanksAsOnOne) {
  struct Out {
    std::vector<double> loss, norm;
    torch::Tensor entropy, param;
  };
  auto run = [](int world_size) {
    auto groups = dist::JoinLocalGroup(world_size);
    EXPECT_TRUE(groups.ok()) << groups.status();
    std::vector<Out> outs(world_size);
    std::vector<std::shared_ptr<model::CausalLmImpl>> models;
    std::vector<std::unique_ptr<Actor>> actors;
    for (int r = 0; r < world_size; ++r) {
      models.push_back(NewModel(torch::kFloat32));
      auto model = models.back();
      auto forward = [model](const torch::Tensor& ids, const torch::Tensor& mask,
                             const torch::Tensor& positions) {
        return model->Forward(ids, mask, positions);
      };
      ActorOptions o = Options(Fixed());
      o.ppo_mini_batch_size = 16;
      o.ppo_micro_batch_size = 16 / world_size;  // the warm-up: one micro-batch per rank
      auto actor = Actor::Create(o, model, forward, nullptr, (*groups)[r].get());
      EXPECT_TRUE(actor.ok()) << actor.status();
      actors.push_back(std::move(actor).value());
    }
    dist::OnEveryRank(world_size, [&](int r) {
      for (int step = 0; step < kSteps; ++step) {
        auto sft = actors[r]->SftStep(StepBatch(step));
        ASSERT_TRUE(sft.ok()) << sft.status();
        outs[r].loss.push_back(sft->loss);
        outs[r].norm.push_back(sft->grad_norm);
      }
      auto logp = actors[r]->ComputeLogProbs(StepBatch(0), /*with_entropy=*/true);
      ASSERT_TRUE(logp.ok()) << logp.status();
      outs[r].entropy = logp->entropy.to(torch::kFloat32);
      outs[r].param = models[r]->parameters()[0].detach().clone();
    });
    return outs[0];
  };
  const Out one = run(1), two = run(2);
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_LT(Relative(two.loss[step], one.loss[step]), 1e-5) << step;
    EXPECT_LT(Relative(two.norm[step], one.norm[step]), 1e-5) << step;
  }
  EXPECT_LT((two.entropy - one.entropy).abs().max().item<double>(), 1e-5);
  EXPECT_GT(one.entropy.abs().sum().item<double>(), 0);
  EXPECT_LT(((two.param - one.param).norm() / one.param.norm()).item<double>(), 1e-6);
}

// Full sharding: each rank holds 1/W of the parameters, gradients and AdamW state and gathers
// a unit for each use; the update is W = 1's (whole, unsharded) to float32 rounding.
TEST(ActorGroupTest, ShardedOnOneTwoAndFourRanksTrainsAsWholeOnOne) {
  const RunResult one = Train(1, Fixed());
  for (int w : {1, 2, 4}) {
    SCOPED_TRACE(::testing::Message() << "sharded, W = " << w);
    std::printf("sharded, W = %d\n", w);
    const RunResult sharded = Train(w, Sharded(Fixed()));
    ExpectSameAsOneRank(sharded, one, 1e-5);
    EXPECT_TRUE(sharded.released) << "a parameter kept its memory between uses";
  }
  std::printf("sharded, W = 2, layers recomputed in backward\n");
  ExpectSameAsOneRank(Train(2, Checkpointed(Sharded(Fixed()))), one, 1e-5);
}

TEST(ActorGroupTest, ShardedWithOffloadAndWithTokenBudgetsTrainsAsWholeOnOne) {
  const RunResult one = Train(1, Fixed());
  std::printf("sharded, W = 2, param and optimizer offload\n");
  ExpectSameAsOneRank(Train(2, Offloaded(Sharded(Fixed()))), one, 1e-5);
  // A budget of 13 tokens cuts the ranks' rows into different numbers of micro-batches; the
  // ranks run as many passes as the busiest needs.
  for (int w : {2, 4}) {
    SCOPED_TRACE(::testing::Message() << "sharded, W = " << w << ", token budget 13");
    std::printf("sharded, W = %d, token budget 13\n", w);
    ExpectSameAsOneRank(Train(w, Sharded(TokenBudget(13))), one, 1e-5);
  }
}

TEST(ActorGroupTest, ShardedBfloat16TrainsAsWholeToBfloat16Rounding) {
  const RunResult one = Train(1, Bfloat16());
  std::printf("sharded, W = 2, bfloat16 with fp32 master shards\n");
  ExpectSameAsOneRank(Train(2, Sharded(Bfloat16())), one, 5e-2);
}

// Parameters + gradients + AdamW state per rank, from the storages the actor holds.
TEST(ActorGroupTest, ShardingFourWaysHoldsAQuarterOfTheStatePerRank) {
  const RunResult one = Train(1, Fixed());
  const RunResult four = Train(4, Sharded(Fixed()));
  ASSERT_GT(one.state_bytes, 0);
  const double ratio = static_cast<double>(four.state_bytes) / one.state_bytes;
  std::printf("state bytes per rank: W = 1 %lld, sharded W = 4 %lld (%.3f)\n",
              static_cast<long long>(one.state_bytes), static_cast<long long>(four.state_bytes),
              ratio);
  EXPECT_LE(ratio, 0.3);
  EXPECT_GE(ratio, 0.2);  // a quarter, and the padding of each unit to 4 equal shards
}

// Hybrid sharding, shard groups of 2 among 4 ranks: each rank holds half the state (its
// group's share), and the update is W = 1's, with and without offload.
TEST(ActorGroupTest, HybridShardGroupsHoldHalfTheStatePerRankAndTrainAsOne) {
  const RunResult one = Train(1, Fixed());
  const RunResult hybrid = Train(4, Hybrid(Fixed(), 2));
  ExpectSameAsOneRank(hybrid, one, 1e-5);
  EXPECT_TRUE(hybrid.released);
  const double ratio = static_cast<double>(hybrid.state_bytes) / one.state_bytes;
  std::printf("state bytes per rank: W = 1 %lld, W = 4 in shard groups of 2 %lld (%.3f)\n",
              static_cast<long long>(one.state_bytes), static_cast<long long>(hybrid.state_bytes),
              ratio);
  EXPECT_LE(ratio, 0.55);
  EXPECT_GE(ratio, 0.45);
  ExpectSameAsOneRank(Train(4, Hybrid(Offloaded(Fixed()), 2)), one, 1e-5);
}

// The merged Hugging Face folder of a sharded policy, written unit by unit: no rank ever holds
// more than the root and one decoder layer gathered, and the folder is the whole policy, bit
// for bit. At W = 3 (plain) and W = 4 in shard groups of 2 (one group gathers, rank 0
// writes). A write that fails on rank 0 fails there and leaves no rank waiting.
TEST(ActorGroupTest, TheMergedFolderIsWrittenOneLayerAtATime) {
  for (const auto& [world_size, shard_size] : std::vector<std::pair<int, int>>{{3, 3}, {4, 2}}) {
    SCOPED_TRACE(::testing::Message()
                 << "W = " << world_size << ", shard groups of " << shard_size);
    auto groups = dist::JoinLocalGroup(world_size);
    ASSERT_TRUE(groups.ok()) << groups.status();
    std::vector<std::shared_ptr<model::CausalLmImpl>> models;
    std::vector<std::shared_ptr<ShardedParameters>> shards(world_size);
    std::map<std::string, torch::Tensor> whole;
    dist::OnEveryRank(world_size, [&](int r) {
      if (shard_size < world_size) {
        ASSERT_TRUE((*groups)[r]->FormMesh(shard_size).ok());
      }
    });
    for (int r = 0; r < world_size; ++r) {
      models.push_back(NewModel(torch::kFloat32));
      if (r == 0) {
        for (const auto& item : models[0]->named_parameters())
          whole[item.key()] = item.value().detach().clone();
      }
      auto sharded = ShardedParameters::Create(Units(*models[r]), (*groups)[r].get(), {});
      ASSERT_TRUE(sharded.ok()) << sharded.status();
      shards[r] = *sharded;
      models[r]->SetSharding(shards[r].get());
    }
    ASSERT_GT(models[0]->NumUnits(), 2);
    const std::string dir = ::testing::TempDir() + "/rlmesh_unit_by_unit_" +
                            std::to_string(world_size) + "_" + std::to_string(shard_size);
    std::vector<absl::Status> saved(world_size);
    dist::OnEveryRank(world_size, [&](int r) {
      shards[r]->ResetPeakGathered();
      if ((*groups)[r]->replica() == 0) {
        saved[r] = SaveGatheredUnitByUnit(*shards[r], *models[r], dir, "", r == 0);
      }
    });
    for (int r = 0; r < world_size; ++r) {
      EXPECT_TRUE(saved[r].ok()) << r << ": " << saved[r];
      EXPECT_LE(shards[r]->peak_gathered_units(), 2) << r;  // the root and one layer
      const bool gathers = (*groups)[r]->replica() == 0;
      EXPECT_EQ(shards[r]->peak_gathered_units(), gathers ? 2 : 0) << r;
      for (const auto& p : models[r]->parameters()) EXPECT_EQ(p.storage().nbytes(), 0u) << r;
    }
    auto reader = model::SafetensorsReader::Open(dir);
    ASSERT_TRUE(reader.ok()) << reader.status();
    for (const auto& [name, want] : whole) {
      auto got = model::ReadTensor(**reader, name, torch::kFloat32);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(torch::equal(*got, want)) << name;
    }
    // Loading it back, one unit at a time and without a collective, into shards that were
    // zeroed: each rank holds at most one unit whole, and gathered the policy is the saved one.
    std::vector<absl::Status> loaded(world_size);
    dist::OnEveryRank(world_size, [&](int r) {
      torch::NoGradGuard no_grad;
      for (const auto& m : shards[r]->masters()) m.zero_();
      shards[r]->CopyToParameters();
      shards[r]->ResetPeakGathered();
      std::map<const c10::TensorImpl*, std::string> names;
      for (const auto& item : models[r]->named_parameters())
        names[item.value().unsafeGetTensorImpl()] = item.key();
      loaded[r] = shards[r]->LoadUnitByUnit([&](int u) -> absl::Status {
        for (const torch::Tensor& p : shards[r]->layout(u).params) {
          auto saved =
              model::ReadTensor(**reader, names.at(p.unsafeGetTensorImpl()), torch::kFloat32);
          if (!saved.ok()) return saved.status();
          const_cast<torch::Tensor&>(p).copy_(*saved);
        }
        return absl::OkStatus();
      });
      EXPECT_EQ(shards[r]->peak_gathered_units(), 1) << r;
      shards[r]->GatherAll();
    });
    for (int r = 0; r < world_size; ++r) {
      ASSERT_TRUE(loaded[r].ok()) << r << ": " << loaded[r];
      for (const auto& item : models[r]->named_parameters())
        EXPECT_TRUE(torch::equal(item.value(), whole.at(item.key()))) << r << " " << item.key();
    }
    dist::OnEveryRank(world_size, [&](int r) { shards[r]->ReleaseAll(); });
    // Rank 0 cannot write (the parent is a file); the gathers still complete everywhere.
    const std::string blocked = dir + "/model.safetensors/cannot";
    dist::OnEveryRank(world_size, [&](int r) {
      if ((*groups)[r]->replica() == 0) {
        saved[r] = SaveGatheredUnitByUnit(*shards[r], *models[r], blocked, "", r == 0);
      }
    });
    EXPECT_FALSE(saved[0].ok());
    for (int r = 1; r < shard_size; ++r) EXPECT_TRUE(saved[r].ok()) << r << ": " << saved[r];
  }
}

// A gathered unit lives in a buffer that is kept for the next gather of its size, as a
// caching allocator keeps its blocks: the decoder layers (all of one size) take turns in one
// buffer, and gathering and releasing allocates nothing more once each size has its buffer.
TEST(ActorGroupTest, GatheredUnitsReuseTheirBuffers) {
  process::CountCpuTensorMemory();
  auto groups = dist::JoinLocalGroup(2);
  ASSERT_TRUE(groups.ok()) << groups.status();
  std::vector<std::shared_ptr<model::CausalLmImpl>> models = {NewModel(torch::kFloat32),
                                                              NewModel(torch::kFloat32)};
  std::vector<torch::Tensor> whole;
  for (const auto& p : models[0]->parameters()) whole.push_back(p.detach().clone());
  std::vector<std::shared_ptr<ShardedParameters>> shards(2);
  for (int r = 0; r < 2; ++r) {
    auto sharded = ShardedParameters::Create(Units(*models[r]), (*groups)[r].get(), {});
    ASSERT_TRUE(sharded.ok()) << sharded.status();
    shards[r] = *sharded;
  }
  ASSERT_GE(shards[0]->num_units(), 3);  // the root and at least two layers
  const int64_t layer_bytes = shards[0]->shard_numel(1) * 2 * 4;  // two shards of float32
  ASSERT_EQ(shards[0]->shard_numel(2), shards[0]->shard_numel(1));
  auto each_rank = [&](const std::function<void(int)>& f) {
    dist::OnEveryRank(2, [&](int r) {
      torch::NoGradGuard no_grad;
      f(r);
    });
  };
  auto held = [] { return process::CpuTensorMemory().allocated_bytes; };

  std::vector<const void*> first_layer(2), second_layer(2);
  const int64_t before = held();
  each_rank([&](int r) {
    shards[r]->Gather(1);
    first_layer[r] = shards[r]->layout(1).params[0].storage().data();
    shards[r]->Release(1);
    EXPECT_EQ(shards[r]->layout(1).params[0].storage().nbytes(), 0u);
  });
  EXPECT_EQ(held() - before, 2 * layer_bytes);  // each rank keeps its layer buffer
  each_rank([&](int r) {
    shards[r]->Gather(2);
    second_layer[r] = shards[r]->layout(2).params[0].storage().data();
    shards[r]->Release(2);
  });
  EXPECT_EQ(held() - before, 2 * layer_bytes);  // and the next layer took it
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(first_layer[r], nullptr);
    EXPECT_EQ(first_layer[r], second_layer[r]) << "rank " << r;
  }
  auto every_unit = [&] {
    each_rank([&](int r) {
      for (int u = 0; u < shards[r]->num_units(); ++u) {
        shards[r]->Gather(u);
        shards[r]->Release(u);
      }
    });
  };
  every_unit();  // the root's buffer joins the layers'
  const int64_t after_one_round = held();
  for (int round = 0; round < 3; ++round) every_unit();
  EXPECT_EQ(held(), after_one_round);
  // Gathered again, every unit is the policy it was.
  each_rank([&](int r) { shards[r]->GatherAll(); });
  for (int r = 0; r < 2; ++r) {
    const auto gathered = models[r]->parameters();
    ASSERT_EQ(gathered.size(), whole.size());
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_TRUE(torch::equal(gathered[i], whole[i])) << "rank " << r << ", parameter " << i;
    }
  }
}

// On a GPU (tests/gpu/run.sh's trainer_group_cuda row): the group's collectives on CUDA
// tensors. One rank with backend nccl against the CPU (float32 on CUDA and on the CPU differ in
// rounding only); two ranks sharing one GPU over Gloo (through host memory) and two ranks on
// two GPUs over NCCL against one rank on CUDA, whole and sharded.
TEST(ActorGroupTest, OnCudaOneRankOverNcclTrainsAsOnTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const RunResult cpu = Train(1, Fixed());
  std::printf("cuda, W = 1, nccl\n");
  ExpectSameAsOneRank(Train(1, OnCuda(Fixed(), "nccl")), cpu, 1e-3);
  std::printf("cuda, W = 1, nccl, sharded\n");
  ExpectSameAsOneRank(Train(1, OnCuda(Sharded(Fixed()), "nccl")), cpu, 1e-3);
}

// W = 2 on CUDA over `backend`, whole and sharded, against W = 1 on CUDA.
void TwoRanksOnCudaTrainAsOne(const std::string& backend) {
  const RunResult one = Train(1, OnCuda(Fixed(), backend));
  for (const bool sharded : {false, true}) {
    std::printf("cuda, W = 2, %s%s\n", backend.c_str(), sharded ? ", sharded" : "");
    ExpectSameAsOneRank(Train(2, OnCuda(sharded ? Sharded(Fixed()) : Fixed(), backend)), one, 1e-5);
  }
}

TEST(ActorGroupTest, OnCudaTwoRanksSharingAGpuOverGlooTrainAsOne) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  TwoRanksOnCudaTrainAsOne("gloo");
}

TEST(ActorGroupTest, OnCudaTwoRanksOnTwoGpusOverNcclTrainAsOne) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices";
  TwoRanksOnCudaTrainAsOne("nccl");
}

TEST(ActorGroupTest, AMiniBatchThatDoesNotSplitEvenlyIsRefused) {
  auto groups = dist::JoinLocalGroup(2);
  ASSERT_TRUE(groups.ok()) << groups.status();
  auto model = NewModel(torch::kFloat32);
  auto forward = [model](const torch::Tensor& ids, const torch::Tensor& mask,
                         const torch::Tensor& positions) {
    return model->Forward(ids, mask, positions);
  };
  ActorOptions o = Options(Fixed());
  o.ppo_mini_batch_size = 7;
  o.ppo_micro_batch_size = 1;
  auto odd = Actor::Create(o, model, forward, nullptr, (*groups)[0].get());
  ASSERT_FALSE(odd.ok());
  EXPECT_THAT(odd.status().message(),
              ::testing::HasSubstr("expected a multiple of the 2 trainer ranks"));
  o.ppo_mini_batch_size = 6;
  o.ppo_micro_batch_size = 2;  // divides 6, but not a rank's share of 3
  auto uneven = Actor::Create(o, model, forward, nullptr, (*groups)[0].get());
  ASSERT_FALSE(uneven.ok());
  EXPECT_THAT(uneven.status().message(),
              ::testing::HasSubstr("mini-batch share of each of the 2 ranks, 3, got 2"));
}

}  // namespace
}  // namespace rlmesh::trainer
