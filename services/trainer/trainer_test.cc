// The trainer on a small real model (written to a temporary Hugging Face folder): the
// learning-rate schedule as verl computes it, step by step and across a checkpoint, bfloat16
// training with fp32 master weights against a float32 run, and trainer groups of W ranks
// (threads of this process over loopback Gloo) resuming each other's checkpoints.
#include "services/trainer/trainer.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/dist/local_group.h"
#include "common/model/pretrained.h"
#include "common/model/safetensors.h"
#include "common/process/tensor_memory.h"
#include "gtest/gtest.h"
#include "services/trainer/actor_state_io.h"
#include "services/trainer/checkpoint_manifest.h"
#include "services/trainer/trainer_group_testing.h"

namespace rlmesh::trainer {
namespace {

namespace fs = std::filesystem;

// A two-layer Llama of hidden 32 whose random weights are representable in bfloat16, so that
// a float32 and a bfloat16 trainer start from exactly the same values.
std::string MakeModel(const std::string& name) {
  const std::string dir = testing::TempDir() + "/rlmesh_trainer_test_" + name;
  fs::remove_all(dir);
  auto config = model::ModelConfig::FromJson(
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
          "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
          "vocab_size": 20, "max_position_embeddings": 32})",
      "test");
  EXPECT_TRUE(config.ok()) << config.status();
  torch::manual_seed(7);
  auto m = model::CausalLmImpl::Create(*config, {});
  EXPECT_TRUE(m.ok()) << m.status();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : (*m)->parameters()) p.copy_(p.to(torch::kBFloat16).to(torch::kFloat32));
  }
  EXPECT_TRUE(model::SavePretrained(**m, dir, "").ok());
  // Checkpoints copy the tokenizer files; the trainer never reads them.
  std::ofstream(dir + "/tokenizer.json") << "{}";
  std::ofstream(dir + "/tokenizer_config.json") << "{}";
  return dir;
}

// Each test names its own checkpoint folder: ctest runs tests in parallel processes, and one
// test clearing a shared folder would remove another's checkpoint under it.
config::TrainerSettings Settings(const std::string& model, const std::string& dtype,
                                 const std::string& checkpoints) {
  config::TrainerSettings t;
  t.model_path = model;
  t.dtype = dtype;
  t.reduce_dtype = "float32";
  t.device = "cpu";
  t.max_batch_sequences = 8;
  t.actor.ppo_mini_batch_size = 4;
  t.actor.ppo_micro_batch_size = 2;
  t.actor.log_prob_micro_batch_size = 8;
  t.actor.loss_agg_mode = "token-mean";
  t.actor.kl_loss_type = "low_var_kl";
  t.actor.lr = 1e-3;
  t.actor.lr_scheduler_type = "constant";
  t.actor.weight_decay = 0.01;
  t.warmup_lr = 1e-3;
  t.warmup_batch_size = 8;
  t.checkpoint_dir = testing::TempDir() + "/rlmesh_trainer_test_ckpt_" + checkpoints;
  fs::remove_all(t.checkpoint_dir);
  t.weight_transport = "grpc";
  return t;
}

// Eight sequences of four prompt and three to five response tokens, as ComputeOldLogProbs
// takes them.
v1::ComputeOldLogProbsRequest OldRequest(bool keep) {
  v1::ComputeOldLogProbsRequest request;
  for (int b = 0; b < 8; ++b) {
    auto* seq = request.add_sequences();
    seq->set_id(absl::StrCat("s", b));
    for (int t = 0; t < 4 + 3 + b % 3; ++t) seq->add_token_ids(1 + (b * 5 + t * 3) % 19);
    seq->set_prompt_length(4);
  }
  request.set_keep(keep);
  return request;
}

// A step on OldRequest's sequences with advantages +-1 and old log-probs off the policy's by
// +-0.1 (so the update has something to do).
v1::TrainStepRequest Batch(Trainer& trainer, int64_t step, int64_t total) {
  const v1::ComputeOldLogProbsRequest old_request = OldRequest(/*keep=*/false);
  auto old = trainer.ComputeOldLogProbs(old_request);
  EXPECT_TRUE(old.ok()) << old.status();
  v1::TrainStepRequest train;
  train.set_global_step(step);
  train.set_total_training_steps(total);
  for (int b = 0; b < 8; ++b) {
    auto* sample = train.add_samples();
    *sample->mutable_sequence() = old_request.sequences(b);
    for (int j = 0; j < old->results(b).logprobs_size(); ++j) {
      sample->add_advantages(b % 2 == 0 ? 1.0f : -1.0f);
      sample->add_old_logprobs(old->results(b).logprobs(j) + (j % 2 == 0 ? 0.1f : -0.1f));
    }
  }
  return train;
}

double LrOf(const v1::TrainStepResponse& r) { return r.metrics().at("actor/lr"); }

// A step on OldRequest's sequences with advantages +-1, in the full form (sequences, per-token
// advantages and the old log-probs sent back) or the compact one (ids and one advantage).
absl::StatusOr<v1::TrainStepResponse> OldThenTrain(Trainer& trainer, bool compact) {
  const v1::ComputeOldLogProbsRequest old_request = OldRequest(/*keep=*/compact);
  auto old = trainer.ComputeOldLogProbs(old_request);
  if (!old.ok()) return old.status();
  v1::TrainStepRequest train;
  train.set_global_step(1);
  train.set_total_training_steps(1);
  for (int b = 0; b < 8; ++b) {
    auto* sample = train.add_samples();
    const float advantage = b % 2 == 0 ? 1.0f : -1.0f;
    if (compact) {
      sample->mutable_sequence()->set_id(old_request.sequences(b).id());
      sample->set_advantage(advantage);
      continue;
    }
    *sample->mutable_sequence() = old_request.sequences(b);
    *sample->mutable_old_logprobs() = old->results(b).logprobs();
    for (int j = 0; j < old->results(b).logprobs_size(); ++j) sample->add_advantages(advantage);
  }
  return trainer.TrainStep(train);
}

// verl's cosine schedule with 2 warm-up steps over 6: the k-th update uses lambda(k - 1),
// lambda(s) = s / 2 in the warm-up, then (1 + cos(pi (s - 2) / 4)) / 2, worked by hand:
// 0, 0.5, 1, 0.853553, 0.5, 0.146447.
TEST(TrainerTest, LrScheduleFollowsTheStepAcrossAResume) {
  const std::string model = MakeModel("lr");
  config::TrainerSettings settings = Settings(model, "float32", "lr");
  settings.actor.lr_scheduler_type = "cosine";
  settings.actor.lr_warmup_steps = 2;
  const double expected[] = {0, 0.5e-3, 1e-3, 0.853553390593e-3, 0.5e-3, 0.146446609407e-3};
  auto trainer = Trainer::Create(settings);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  for (int step = 1; step <= 3; ++step) {
    auto r = (*trainer)->TrainStep(Batch(**trainer, step, 6));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NEAR(LrOf(*r), expected[step - 1], 1e-12) << step;
  }
  v1::SaveCheckpointRequest save;
  save.set_global_step(3);
  const auto saved = (*trainer)->SaveCheckpoint(save);
  ASSERT_TRUE(saved.ok()) << saved.status();
  // A new trainer resumes at step 4 with the schedule where it was.
  auto resumed = Trainer::Create(settings);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ASSERT_TRUE((*resumed)->LoadCheckpoint({}).ok());
  for (int step = 4; step <= 6; ++step) {
    auto r = (*resumed)->TrainStep(Batch(**resumed, step, 6));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_NEAR(LrOf(*r), expected[step - 1], 1e-12) << step;
  }
  // A cosine schedule needs the run's length.
  auto no_length = (*resumed)->TrainStep(Batch(**resumed, 7, 0));
  EXPECT_EQ(no_length.status().code(), absl::StatusCode::kInvalidArgument);
}

// model.use_remove_padding through the trainer: its forwards compute the 63 real tokens of
// the batch instead of 8 rows x 9 columns, and the step's metrics are the padded trainer's.
TEST(TrainerTest, RemovePaddingComputesOnlyTheRealTokensAndTrainsAsPadded) {
  const std::string model = MakeModel("packed");
  std::map<std::string, double> metrics[2];
  for (bool packed : {false, true}) {
    config::TrainerSettings settings = Settings(model, "float32", packed ? "packed" : "not_packed");
    settings.remove_padding = packed;
    auto trainer = Trainer::Create(settings);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    auto r = (*trainer)->TrainStep(Batch(**trainer, 1, 1));
    ASSERT_TRUE(r.ok()) << r.status();
    metrics[packed] = {r->metrics().begin(), r->metrics().end()};
  }
  EXPECT_EQ(metrics[0].at("rlmesh/forward_tokens/update_actor"), 8 * 9);
  EXPECT_EQ(metrics[1].at("rlmesh/forward_tokens/update_actor"), 7 + 8 + 9 + 7 + 8 + 9 + 7 + 8);
  for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/ppo_kl"}) {
    const double want = metrics[0].at(key), got = metrics[1].at(key);
    EXPECT_LE(std::abs(got - want), 1e-5 * std::max(std::abs(want), 1e-3)) << key;
  }
}

// Issue #13, item 8: the trainer keeps the sequences and old log-probs it computed, so the
// update names each sequence by id with one advantage, and trains exactly as the full form.
TEST(TrainerTest, ACompactStepTrainsAsTheFullForm) {
  const std::string model = MakeModel("compact");
  std::map<std::string, double> metrics[2];
  int64_t tokens[2] = {0, 0};
  for (bool compact : {false, true}) {
    auto trainer = Trainer::Create(Settings(model, "float32", compact ? "compact" : "full"));
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    auto r = OldThenTrain(**trainer, compact);
    ASSERT_TRUE(r.ok()) << r.status();
    metrics[compact] = {r->metrics().begin(), r->metrics().end()};
    tokens[compact] = r->tokens();
  }
  EXPECT_EQ(tokens[0], 7 + 8 + 9 + 7 + 8 + 9 + 7 + 8);
  EXPECT_EQ(tokens[1], tokens[0]);
  for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/ppo_kl"}) {
    EXPECT_EQ(metrics[1].at(key), metrics[0].at(key)) << key;
  }
}

// What a compact sample needs is checked, naming the sample: kept sequences, of the current
// weights, the same sequence under an id, unique ids, a finite advantage.
TEST(TrainerTest, ACompactStepNeedsTheKeptSequencesOfTheCurrentWeights) {
  const std::string model = MakeModel("compact_errors");
  auto trainer = Trainer::Create(Settings(model, "float32", "compact_errors"));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  Trainer& t = **trainer;
  auto compact = [](std::vector<std::string> ids) {
    v1::TrainStepRequest train;
    for (const auto& id : ids) {
      auto* sample = train.add_samples();
      sample->mutable_sequence()->set_id(id);
      sample->set_advantage(0.5f);
    }
    return train;
  };
  auto expect = [](const absl::StatusOr<v1::TrainStepResponse>& r, absl::StatusCode code,
                   const std::string& text) {
    EXPECT_EQ(r.status().code(), code) << r.status();
    EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status();
  };
  // Nothing kept yet: the old log-probs without keep are not kept either.
  ASSERT_TRUE(t.ComputeOldLogProbs(OldRequest(/*keep=*/false)).ok());
  expect(t.TrainStep(compact({"s0"})), absl::StatusCode::kFailedPrecondition,
         "samples[0].sequence.token_ids: empty, and no sequences were kept");
  ASSERT_TRUE(t.ComputeOldLogProbs(OldRequest(/*keep=*/true)).ok());
  expect(t.TrainStep(compact({"s0", "nope"})), absl::StatusCode::kFailedPrecondition,
         "samples[1].sequence.token_ids: empty, and no sequence \"nope\" was kept");
  {
    // Its own tokens under a kept id, with the kept old log-probs: refused.
    auto train = compact({"s1"});
    *train.mutable_samples(0)->mutable_sequence() = OldRequest(false).sequences(2);
    train.mutable_samples(0)->mutable_sequence()->set_id("s1");
    expect(t.TrainStep(train), absl::StatusCode::kInvalidArgument,
           "samples[0].sequence: differs from the sequence kept under id \"s1\"");
  }
  {
    auto train = compact({"s0"});
    train.mutable_samples(0)->set_advantage(std::nanf(""));
    expect(t.TrainStep(train), absl::StatusCode::kInvalidArgument, "samples[0].advantage: nan");
  }
  {
    auto request = OldRequest(true);
    request.mutable_sequences(3)->set_id("s1");
    auto r = t.ComputeOldLogProbs(request);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(r.status().message().find("sequences[3].id: \"s1\" is sequences[1]'s too"),
              std::string::npos)
        << r.status();
  }
  // The refusals changed nothing: the kept batch trains (the duplicate-id call kept nothing).
  auto ids = std::vector<std::string>{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"};
  auto first = compact(ids);
  first.set_global_step(1);
  ASSERT_TRUE(t.TrainStep(first).ok());
  // The update used the kept log-probs up: they were of the weights before it.
  expect(t.TrainStep(compact(ids)), absl::StatusCode::kFailedPrecondition,
         "no sequences were kept");
  // Kept, then the weights change (a supervised step): stale.
  ASSERT_TRUE(t.ComputeOldLogProbs(OldRequest(true)).ok());
  v1::SftStepRequest sft;
  *sft.add_sequences() = OldRequest(false).sequences(0);
  ASSERT_TRUE(t.SftStep(sft).ok());
  expect(t.TrainStep(compact(ids)), absl::StatusCode::kFailedPrecondition,
         "the kept old log-probs are of weight version 1 while the policy is at version 2");
}

// The rollout correction's weights (TrainingSample.rollout_is_weights) multiply each token's
// policy-gradient loss: 2 on every token doubles the loss and the gradient of the first
// optimizer step, 0 on every token leaves no policy-gradient loss at all.
TEST(TrainerTest, ImportanceWeightsScaleEachTokensLoss) {
  const std::string model = MakeModel("is_weights");
  std::map<std::string, double> metrics[3];
  for (int variant = 0; variant < 3; ++variant) {
    config::TrainerSettings settings =
        Settings(model, "float32", absl::StrCat("is_weights", variant));
    settings.actor.ppo_mini_batch_size = 8;  // one optimizer step
    auto trainer = Trainer::Create(settings);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    v1::TrainStepRequest train = Batch(**trainer, 1, 1);
    const float weight = variant == 1 ? 2.0f : 0.0f;
    if (variant > 0) {
      for (auto& sample : *train.mutable_samples()) {
        for (int j = 0; j < sample.old_logprobs_size(); ++j) sample.add_rollout_is_weights(weight);
      }
    }
    auto r = (*trainer)->TrainStep(train);
    ASSERT_TRUE(r.ok()) << r.status();
    metrics[variant] = {r->metrics().begin(), r->metrics().end()};
  }
  ASSERT_NE(metrics[0].at("actor/pg_loss"), 0);
  EXPECT_NEAR(metrics[1].at("actor/pg_loss"), 2 * metrics[0].at("actor/pg_loss"), 1e-6);
  EXPECT_NEAR(metrics[1].at("actor/grad_norm"), 2 * metrics[0].at("actor/grad_norm"), 1e-5);
  EXPECT_EQ(metrics[2].at("actor/pg_loss"), 0);
  EXPECT_EQ(metrics[2].at("actor/grad_norm"), 0);
  // The ratio metrics are the unweighted ones.
  EXPECT_EQ(metrics[1].at("actor/ppo_kl"), metrics[0].at("actor/ppo_kl"));
}

TEST(TrainerTest, ImportanceWeightsAreCheckedNamingTheSample) {
  const std::string model = MakeModel("is_weights_errors");
  auto trainer = Trainer::Create(Settings(model, "float32", "is_weights_errors"));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto expect = [&](float value, int count, const std::string& text) {
    v1::TrainStepRequest train = Batch(**trainer, 1, 1);
    for (int j = 0; j < count; ++j) train.mutable_samples(2)->add_rollout_is_weights(value);
    auto r = (*trainer)->TrainStep(train);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status();
  };
  // Sample 2 has five response tokens.
  expect(1.0f, 4, "samples[2].rollout_is_weights: expected 5 values");
  expect(-0.5f, 5, "samples[2].rollout_is_weights[0]: -0.5 is not a finite number >= 0");
  expect(std::nanf(""), 5, "samples[2].rollout_is_weights[0]: nan");
}

// A log-probability is at most 0: a value above (beyond float rounding) is refused naming the
// sample and the token, instead of training on a wrong ratio.
TEST(TrainerTest, LogProbsAboveZeroAreRefusedNamingTheSample) {
  const std::string model = MakeModel("positive_logprobs");
  auto trainer = Trainer::Create(Settings(model, "float32", "positive_logprobs"));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  v1::TrainStepRequest train = Batch(**trainer, 1, 1);
  train.mutable_samples(2)->set_old_logprobs(1, 0.75f);
  auto r = (*trainer)->TrainStep(train);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_EQ(r.status().message(),
            "samples[2].old_logprobs[1]: 0.75 is above 0, and a log-probability is at most 0 (a "
            "probability sent in its place?)");
  // Rounding above 0 is no error.
  train.mutable_samples(2)->set_old_logprobs(1, 1e-6f);
  r = (*trainer)->TrainStep(train);
  EXPECT_TRUE(r.ok()) << r.status();
}

// Rejection sampling's tokens (TrainingSample.rejected_tokens) leave the update as a 0 in the
// sequence's own response_mask does: the same loss, gradient norm and metrics.
TEST(TrainerTest, RejectedTokensTrainAsMaskedOnes) {
  const std::string model = MakeModel("rejected");
  std::map<std::string, double> metrics[2];
  for (int variant = 0; variant < 2; ++variant) {
    auto trainer = Trainer::Create(Settings(model, "float32", absl::StrCat("rejected", variant)));
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    v1::TrainStepRequest train = Batch(**trainer, 1, 1);
    // Sample 2 (five response tokens) loses tokens 1 and 4; sample 0 its first.
    for (const auto& [b, r] : std::vector<std::pair<int, int>>{{2, 1}, {2, 4}, {0, 0}}) {
      auto* sample = train.mutable_samples(b);
      if (variant == 0) {
        sample->add_rejected_tokens(r);
      } else {
        auto* seq = sample->mutable_sequence();
        const int response = seq->token_ids_size() - seq->prompt_length();
        if (seq->response_mask_size() == 0) {
          for (int t = 0; t < response; ++t) seq->add_response_mask(1);
        }
        seq->set_response_mask(r, 0);
      }
    }
    auto result = (*trainer)->TrainStep(train);
    ASSERT_TRUE(result.ok()) << result.status();
    metrics[variant] = {result->metrics().begin(), result->metrics().end()};
  }
  for (const char* name : {"actor/pg_loss", "actor/grad_norm", "actor/ppo_kl", "actor/entropy"}) {
    ASSERT_EQ(metrics[0].count(name), 1u) << name;
    EXPECT_EQ(metrics[0].at(name), metrics[1].at(name)) << name;
  }

  auto trainer = Trainer::Create(Settings(model, "float32", "rejected_bad"));
  ASSERT_TRUE(trainer.ok());
  v1::TrainStepRequest bad = Batch(**trainer, 1, 1);
  bad.mutable_samples(2)->add_rejected_tokens(5);
  auto refused = (*trainer)->TrainStep(bad);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(
                "samples[2].rejected_tokens[0]: 5 is not a response position (the response has 5"),
            std::string::npos)
      << refused.status();
}

// An on-policy update (one mini-batch, one epoch) takes the current policy's log-probs as the
// old ones, as verl does, so the ratio is 1; with old_logprobs_from_rollout (bypass mode) the
// samples' old log-probs stay: Batch's are off the policy's by +-0.1, which ppo_kl then shows.
TEST(TrainerTest, OldLogProbsFromTheRolloutStayTheRatiosDenominator) {
  const std::string model = MakeModel("old_from_rollout");
  double ppo_kl[2] = {0, 0};
  for (bool from_rollout : {false, true}) {
    config::TrainerSettings settings =
        Settings(model, "float32", absl::StrCat("old_from_rollout", from_rollout));
    settings.actor.ppo_mini_batch_size = 8;
    auto trainer = Trainer::Create(settings);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    v1::TrainStepRequest train = Batch(**trainer, 1, 1);
    train.set_old_logprobs_from_rollout(from_rollout);
    auto r = (*trainer)->TrainStep(train);
    ASSERT_TRUE(r.ok()) << r.status();
    ppo_kl[from_rollout] = r->metrics().at("actor/ppo_kl");
  }
  EXPECT_EQ(ppo_kl[0], 0);
  // old - logp = +0.1 on even, -0.1 on odd response positions: responses of 3, 4, 5, 3, 4, 5,
  // 3, 4 tokens leave 5 more +0.1 than -0.1 over 31 tokens.
  EXPECT_NEAR(ppo_kl[1], 0.5 / 31, 1e-6);
}

std::map<std::string, torch::Tensor> Weights(const std::string& dir) {
  auto reader = model::SafetensorsReader::Open(dir);
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, entry] : (*reader)->entries()) {
    out[name] = *model::ReadTensor(**reader, name, torch::kFloat32);
  }
  return out;
}

// Issue #12: with bfloat16 and lr 1e-6, AdamW updated the bf16 weights in place, and after ten
// steps only 1.9 % of them had changed at all (a step of 1e-6 is below a bf16 ulp of weights
// of order 1e-2). With fp32 master weights the masters move as a float32 run's weights do,
// and the bf16 weights the trainer publishes are the masters rounded.
TEST(TrainerTest, BfloatTrainingUpdatesFp32MasterWeightsAsAFloat32RunDoes) {
  const std::string model = MakeModel("bf16");
  std::map<std::string, torch::Tensor> after;  // fp32 run's weights
  std::map<std::string, torch::Tensor> masters, published;
  for (const std::string dtype : {"float32", "bfloat16"}) {
    config::TrainerSettings settings = Settings(model, dtype, "bf16_" + dtype);
    settings.actor.lr = 1e-6;
    auto trainer = Trainer::Create(settings);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    for (int step = 1; step <= 5; ++step) {  // two optimizer steps each: ten AdamW steps
      auto r = (*trainer)->TrainStep(Batch(**trainer, step, 5));
      ASSERT_TRUE(r.ok()) << r.status();
      ASSERT_EQ(r->optimizer_steps(), 2);
    }
    v1::SaveCheckpointRequest save;
    save.set_global_step(5);
    auto saved = (*trainer)->SaveCheckpoint(save);
    ASSERT_TRUE(saved.ok()) << saved.status();
    const fs::path actor = fs::path(saved->checkpoint().path()) / "actor";
    if (dtype == "float32") {
      EXPECT_FALSE(fs::exists(actor / kActorMasterWeightsFile));
      after = Weights((actor / "huggingface").string());
      continue;
    }
    published = Weights((actor / "huggingface").string());
    torch::serialize::InputArchive archive;
    archive.load_from((actor / kActorMasterWeightsFile).string());
    // The masters are the trainable parameters in the module's order.
    auto loaded = model::LoadPretrained((actor / "huggingface").string(), {});
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    int i = 0;
    for (const auto& item : (*loaded)->named_parameters()) {
      torch::Tensor t;
      archive.read(absl::StrCat("master_", i++), t);
      masters[item.key()] = t;
    }
  }
  const std::map<std::string, torch::Tensor> before = Weights(model);
  double changed_fp32 = 0, changed_masters = 0, total = 0, diff_sq = 0, delta_sq = 0;
  double masters_sq = 0, dot = 0;
  for (const auto& [name, w0] : before) {
    const torch::Tensor d32 = after.at(name) - w0;
    const torch::Tensor dm = masters.at(name) - w0;
    changed_fp32 += (d32 != 0).sum().item<double>();
    changed_masters += (dm != 0).sum().item<double>();
    total += static_cast<double>(w0.numel());
    diff_sq += (dm - d32).pow(2).sum().item<double>();
    delta_sq += d32.pow(2).sum().item<double>();
    masters_sq += dm.pow(2).sum().item<double>();
    dot += (dm * d32).sum().item<double>();
    // What the trainer publishes is the masters rounded to bfloat16, exactly.
    EXPECT_TRUE(
        torch::equal(published.at(name), masters.at(name).to(torch::kBFloat16).to(torch::kFloat32)))
        << name;
  }
  const double norm_ratio = std::sqrt(masters_sq / delta_sq);
  const double cosine = dot / std::sqrt(masters_sq * delta_sq);
  std::printf(
      "weights changed: float32 run %.4f, bf16 masters %.4f; update norm ratio %.6f, "
      "cosine %.6f, ||d_masters - d_fp32|| / ||d_fp32|| = %.3g\n",
      changed_fp32 / total, changed_masters / total, norm_ratio, cosine,
      std::sqrt(diff_sq / delta_sq));
  EXPECT_GT(changed_fp32 / total, 0.99);
  EXPECT_GT(changed_masters / total, 0.99);
  // The update is as large as the float32 run's and points the same way; element by element
  // the two differ by the bfloat16 rounding of the gradients (a few per cent here), which no
  // master copy can remove.
  EXPECT_NEAR(norm_ratio, 1.0, 1e-3);
  EXPECT_GT(cosine, 0.999);
}

config::TrainerSettings GroupSettings(const std::string& model, const std::string& name) {
  config::TrainerSettings settings = Settings(model, "float32", "group_" + name);
  settings.actor.ppo_micro_batch_size = 1;  // a share of a mini-batch of 4 on 4 ranks is 1
  settings.checkpoint_dir = testing::TempDir() + "/rlmesh_trainer_group_test_" + name;
  fs::remove_all(settings.checkpoint_dir);
  return settings;
}

// The step's metrics are `want`'s within 1e-5 relative.
void ExpectSameStep(const v1::TrainStepResponse& got, const v1::TrainStepResponse& want, int step) {
  for (const char* key :
       {"actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/ppo_kl", "actor/lr"}) {
    const double w = want.metrics().at(key), g = got.metrics().at(key);
    EXPECT_LE(std::abs(g - w), 1e-5 * std::max(std::abs(w), 1e-3))
        << key << " step " << step << ": " << g << " vs " << w;
  }
}

// An unbroken run at W = 1: each step's response and the weights after the last.
struct Unbroken {
  std::map<int, v1::TrainStepResponse> steps;
  std::map<std::string, torch::Tensor> weights;
};
Unbroken RunUnbroken(const std::string& model, const std::string& name, int steps) {
  Unbroken out;
  TrainerGroup one(1, GroupSettings(model, name));
  for (int step = 1; step <= steps; ++step) {
    auto r = one.rank0().TrainStep(Batch(one.rank0(), step, steps));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return out;
    out.steps[step] = *r;
  }
  v1::SaveCheckpointRequest save;
  save.set_global_step(steps);
  auto saved = one.rank0().SaveCheckpoint(save);
  EXPECT_TRUE(saved.ok()) << saved.status();
  if (saved.ok()) out.weights = Weights(saved->checkpoint().path() + "/actor/huggingface");
  return out;
}

// ||w - unbroken|| / ||unbroken - initial|| of the weights in checkpoint `dir`.
double RelativeToUnbroken(const std::string& model, const std::string& dir,
                          const Unbroken& unbroken) {
  double diff = 0, norm = 0;
  const auto before = Weights(model);
  for (const auto& [name, w] : Weights(dir + "/actor/huggingface")) {
    diff += (w - unbroken.weights.at(name)).pow(2).sum().item<double>();
    norm += (unbroken.weights.at(name) - before.at(name)).pow(2).sum().item<double>();
  }
  return std::sqrt(diff / norm);
}

// Resumes `rank0`'s group from `load`, runs steps `saved` + 1 .. `steps` checking each against
// the unbroken run, saves (into `directory`; empty = the group's folder) and returns the
// saved weights' distance from the unbroken run's (RelativeToUnbroken); NaN on failure.
double ResumeAndCompare(Trainer& rank0, const v1::LoadCheckpointRequest& load, int saved, int steps,
                        const Unbroken& unbroken, const std::string& model,
                        const std::string& directory) {
  auto loaded = rank0.LoadCheckpoint(load);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  if (!loaded.ok()) return std::nan("");
  EXPECT_EQ(loaded->checkpoint().global_step(), saved);
  for (int step = saved + 1; step <= steps; ++step) {
    auto r = rank0.TrainStep(Batch(rank0, step, steps));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return std::nan("");
    ExpectSameStep(*r, unbroken.steps.at(step), step);
  }
  v1::SaveCheckpointRequest save;
  save.set_global_step(steps);
  save.set_directory(directory);
  auto written = rank0.SaveCheckpoint(save);
  EXPECT_TRUE(written.ok()) << written.status();
  if (!written.ok()) return std::nan("");
  return RelativeToUnbroken(model, written->checkpoint().path(), unbroken);
}

// A run saved at W = 2 after two steps resumes at W = 1 and at W = 4, and the next two steps
// give the metrics and the weights of an unbroken run at W = 1 within 1e-5 relative.
void ResumeAcrossWorldSizes(bool sharded) {
  process::CountCpuTensorMemory();  // as the trainer's main does: perf/max_memory_allocated_gb
  const std::string tag = sharded ? "sharded_" : "replicated_";
  const std::string model = MakeModel(tag + "group");
  auto at = [sharded](config::TrainerSettings settings, int world_size) {
    settings.sharded = sharded && world_size > 1;  // as fsdp_size -1 gives
    return settings;
  };
  auto merged_logprobs_match = [&](Trainer& group_rank0, const std::string& folder) {
    v1::ComputeOldLogProbsRequest request;
    for (int b = 0; b < 6; ++b) {
      auto* seq = request.add_sequences();
      seq->set_id(absl::StrCat("m", b));
      for (int t = 0; t < 5 + b; ++t) seq->add_token_ids(2 + (b * 3 + t * 7) % 17);
      seq->set_prompt_length(3);
    }
    auto from_group = group_rank0.ComputeOldLogProbs(request);
    ASSERT_TRUE(from_group.ok()) << from_group.status();
    config::TrainerSettings alone = GroupSettings(folder, tag + "merged");
    TrainerGroup one(1, alone);
    auto from_folder = one.rank0().ComputeOldLogProbs(request);
    ASSERT_TRUE(from_folder.ok()) << from_folder.status();
    double most = 0;
    for (int b = 0; b < request.sequences_size(); ++b) {
      ASSERT_EQ(from_group->results(b).logprobs_size(), from_folder->results(b).logprobs_size());
      for (int j = 0; j < from_group->results(b).logprobs_size(); ++j) {
        most = std::max<double>(most, std::abs(from_group->results(b).logprobs(j) -
                                               from_folder->results(b).logprobs(j)));
      }
    }
    std::printf("merged folder vs %s group: log-probs differ by at most %.3g\n",
                sharded ? "sharded" : "replicated", most);
    EXPECT_LT(most, 1e-5);
  };
  constexpr int kSteps = 4, kSaved = 2;
  const Unbroken unbroken = RunUnbroken(model, tag + "unbroken", kSteps);
  const config::TrainerSettings saved_at_two = GroupSettings(model, tag + "two");
  {
    TrainerGroup two(2, at(saved_at_two, 2));
    EXPECT_EQ(two.rank0().Status().world_size(), 2);
    for (int step = 1; step <= kSaved; ++step) {
      auto r = two.rank0().TrainStep(Batch(two.rank0(), step, kSteps));
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->metrics().at("rlmesh/micro_batches/update_actor"), 8);  // 8 samples, 1 each
      // Every rank's peak memory, and the group's largest as verl's names.
      for (const char* kind : {"allocated", "reserved"}) {
        const std::string name = absl::StrCat("max_memory_", kind, "_gb");
        const double rank0 = r->metrics().at(absl::StrCat("perf/rank_0/", name));
        const double rank1 = r->metrics().at(absl::StrCat("perf/rank_1/", name));
        EXPECT_GT(rank0, 0) << name;
        EXPECT_GT(rank1, 0) << name;
        EXPECT_EQ(r->metrics().at(absl::StrCat("perf/", name)), std::max(rank0, rank1));
      }
    }
    v1::SaveCheckpointRequest save;
    save.set_global_step(kSaved);
    auto saved = two.rank0().SaveCheckpoint(save);
    ASSERT_TRUE(saved.ok()) << saved.status();
    // Sharded: each rank's optimizer shard, and the whole Hugging Face folder.
    const fs::path actor = fs::path(saved->checkpoint().path()) / "actor";
    EXPECT_EQ(fs::exists(actor / "actor_shard_0_of_2.pt"), sharded);
    EXPECT_EQ(fs::exists(actor / "actor_shard_1_of_2.pt"), sharded);
    EXPECT_EQ(fs::exists(actor / "actor_optimizer.pt"), !sharded);
    EXPECT_TRUE(fs::exists(actor / "huggingface" / "model.safetensors"));
    // The merged Hugging Face folder is the sharded policy: a trainer started from it alone
    // gives the group's log-probs.
    merged_logprobs_match(two.rank0(), (actor / "huggingface").string());
  }
  for (int world_size : {1, 4}) {
    SCOPED_TRACE(::testing::Message() << "resumed at W = " << world_size);
    config::TrainerSettings settings = at(saved_at_two, world_size);
    TrainerGroup group(world_size, settings);
    const double relative =
        ResumeAndCompare(group.rank0(), {}, kSaved, kSteps, unbroken, model,
                         settings.checkpoint_dir + "_w" + std::to_string(world_size));
    std::printf("%s W = 2 -> %d: 4-step update differs from the unbroken W = 1 run's by %.3g\n",
                sharded ? "sharded" : "replicated", world_size, relative);
    EXPECT_LT(relative, 1e-5);
  }
}

TEST(TrainerGroupTest, ARunSavedAtTwoRanksResumesAtOneAndFourAsTheUnbrokenRun) {
  ResumeAcrossWorldSizes(/*sharded=*/false);
}

// Saved as two ranks' shards; resumed whole at W = 1 and resharded at W = 4.
TEST(TrainerGroupTest, AShardedRunSavedAtTwoRanksResumesWholeAtOneAndReshardedAtFour) {
  ResumeAcrossWorldSizes(/*sharded=*/true);
}

// A whole (W = 1) checkpoint resumed by a sharded group of 2 continues as the unbroken run.
TEST(TrainerGroupTest, AWholeCheckpointResumesSharded) {
  const std::string model = MakeModel("whole_to_sharded");
  constexpr int kSteps = 3;
  std::map<int, v1::TrainStepResponse> unbroken;
  const config::TrainerSettings settings = GroupSettings(model, "whole_to_sharded");
  {
    TrainerGroup one(1, settings);
    for (int step = 1; step <= kSteps; ++step) {
      auto r = one.rank0().TrainStep(Batch(one.rank0(), step, kSteps));
      ASSERT_TRUE(r.ok()) << r.status();
      unbroken[step] = *r;
      if (step == 1) {
        v1::SaveCheckpointRequest save;
        save.set_global_step(1);
        ASSERT_TRUE(one.rank0().SaveCheckpoint(save).ok());
      }
    }
  }
  config::TrainerSettings sharded = settings;
  sharded.sharded = true;
  TrainerGroup two(2, sharded);
  auto loaded = two.rank0().LoadCheckpoint({});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (int step = 2; step <= kSteps; ++step) {
    auto r = two.rank0().TrainStep(Batch(two.rank0(), step, kSteps));
    ASSERT_TRUE(r.ok()) << r.status();
    ExpectSameStep(*r, unbroken[step], step);
  }
}

// Hybrid sharding (fsdp_size 2 of 4 ranks): two shard groups of two, each holding the whole
// policy. Its steps are W = 1's; its checkpoint is two shard files (replica 0 writes them),
// and it resumes whole at W = 1, fully sharded at W = 2 and hybrid again at W = 4, every
// continuation matching the unbroken W = 1 run within 1e-5.
TEST(TrainerGroupTest, HybridShardGroupsTrainAsOneRankAndResumeAcrossLayouts) {
  const std::string model = MakeModel("hybrid");
  constexpr int kSteps = 4, kSaved = 2;
  const Unbroken unbroken = RunUnbroken(model, "hybrid_unbroken", kSteps);
  // Settings of a layout, with a (cleared) checkpoint folder of its own.
  auto layout = [&](int world_size, int shard_size, const std::string& name) {
    config::TrainerSettings settings = GroupSettings(model, "hybrid_" + name);
    settings.sharded = world_size > 1 && shard_size > 1;
    settings.shard_size = shard_size;
    return settings;
  };
  const std::string saved_dir = layout(4, 2, "saved").checkpoint_dir;
  {
    TrainerGroup hybrid(4, layout(4, 2, "saved"));
    for (int step = 1; step <= kSaved; ++step) {
      auto r = hybrid.rank0().TrainStep(Batch(hybrid.rank0(), step, kSteps));
      ASSERT_TRUE(r.ok()) << r.status();
      ExpectSameStep(*r, unbroken.steps.at(step), step);
    }
    v1::SaveCheckpointRequest save;
    save.set_global_step(kSaved);
    auto saved = hybrid.rank0().SaveCheckpoint(save);
    ASSERT_TRUE(saved.ok()) << saved.status();
    const fs::path actor = fs::path(saved->checkpoint().path()) / "actor";
    EXPECT_TRUE(fs::exists(actor / "actor_shard_0_of_2.pt"));
    EXPECT_TRUE(fs::exists(actor / "actor_shard_1_of_2.pt"));
    EXPECT_FALSE(fs::exists(actor / "actor_shard_0_of_4.pt"));
  }
  for (const auto& [world_size, shard_size] :
       std::vector<std::pair<int, int>>{{1, 1}, {2, 2}, {4, 2}}) {
    SCOPED_TRACE(::testing::Message()
                 << "resumed at W = " << world_size << ", shard groups of " << shard_size);
    const std::string name = absl::StrCat("w", world_size, "_f", shard_size);
    TrainerGroup group(world_size, layout(world_size, shard_size, name));
    v1::LoadCheckpointRequest load;
    load.set_directory(saved_dir);
    const double relative =
        ResumeAndCompare(group.rank0(), load, kSaved, kSteps, unbroken, model, "");
    std::printf(
        "hybrid W = 4 (shard groups of 2) -> W = %d, groups of %d: the 4-step update "
        "differs from the unbroken W = 1 run's by %.3g\n",
        world_size, shard_size, relative);
    EXPECT_LT(relative, 1e-5);
  }
}

// Every rank keeps the old log-probs of the whole batch (each has every row after the
// gather), so a compact step at W = 2, sharded, trains as the full form at W = 1.
TEST(TrainerGroupTest, ACompactStepOnAShardedGroupTrainsAsTheFullFormAlone) {
  const std::string model = MakeModel("group_compact");
  auto alone = Trainer::Create(GroupSettings(model, "compact_alone"));
  ASSERT_TRUE(alone.ok()) << alone.status();
  auto want = OldThenTrain(**alone, /*compact=*/false);
  ASSERT_TRUE(want.ok()) << want.status();
  config::TrainerSettings settings = GroupSettings(model, "compact_two");
  settings.sharded = true;
  TrainerGroup two(2, settings);
  auto got = OldThenTrain(two.rank0(), /*compact=*/true);
  ASSERT_TRUE(got.ok()) << got.status();
  for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/entropy", "actor/ppo_kl"}) {
    const double w = want->metrics().at(key), g = got->metrics().at(key);
    EXPECT_LE(std::abs(g - w), 1e-5 * std::max(std::abs(w), 1e-3)) << key;
  }
}

// A request that fails on one rank fails on rank 0 naming that rank, and the group goes on.
TEST(TrainerGroupTest, AFailureOnAnyRankReachesRankZeroAndTheGroupServesOn) {
  const std::string model = MakeModel("group_fail");
  TrainerGroup two(2, GroupSettings(model, "fail"));
  // A folder whose manifest lists nothing passes rank 0's check, then fails on every rank.
  const std::string empty = testing::TempDir() + "/rlmesh_empty_checkpoint";
  std::filesystem::remove_all(empty);
  std::filesystem::create_directories(empty);
  ASSERT_TRUE(WriteManifest(empty).ok());
  v1::LoadCheckpointRequest missing;
  missing.set_path(empty);
  auto r = two.rank0().LoadCheckpoint(missing);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("trainer rank 0: cannot read"),
            std::string::npos)
      << r.status();
  auto step = two.rank0().TrainStep(Batch(two.rank0(), 1, 1));
  EXPECT_TRUE(step.ok()) << step.status();
}

// trainer.max_actor_ckpt_to_keep keeps the newest checkpoints of the line being trained: after
// a resume from step 2, saving step 3 keeps steps 3 and 2, and leaves alone the folders of the
// later steps (4, 6) of the line given up, instead of deleting the checkpoint just written.
TEST(TrainerTest, KeepingTheNewestCheckpointsNeverDeletesTheOneJustWritten) {
  const std::string model = MakeModel("keep");
  config::TrainerSettings settings = Settings(model, "float32", "keep");
  settings.max_checkpoints_to_keep = 2;
  auto trainer = Trainer::Create(settings);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  auto save = [&](int64_t step) {
    v1::SaveCheckpointRequest request;
    request.set_global_step(step);
    auto saved = (*trainer)->SaveCheckpoint(request);
    ASSERT_TRUE(saved.ok()) << saved.status();
  };
  auto folders = [&] {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(settings.checkpoint_dir)) {
      if (entry.is_directory()) names.insert(entry.path().filename().string());
    }
    return names;
  };
  // A save killed earlier left its temporary folder; the next complete save removes it.
  fs::create_directories(fs::path(settings.checkpoint_dir) / ".global_step_1.tmp/actor");
  for (int64_t step : {2, 4, 6}) save(step);
  EXPECT_EQ(folders(), (std::set<std::string>{"global_step_4", "global_step_6"}));
  // Step 2 again (as a resume from it would have), then step 3.
  save(2);
  save(3);
  EXPECT_EQ(folders(), (std::set<std::string>{"global_step_2", "global_step_3", "global_step_4",
                                              "global_step_6"}));
  std::ifstream marker(fs::path(settings.checkpoint_dir) / "latest_checkpointed_iteration.txt");
  std::string named;
  marker >> named;
  EXPECT_EQ(named, "3");
}

// A disk that fills up during a save fails the save naming the file and the reason, and the
// process goes on (LibTorch's own file writer throws from a destructor there, which aborts).
// The state file's temporary name is made a link to /dev/full, which refuses every write
// with ENOSPC.
TEST(ActorStateIoTest, AFullDiskFailsTheSaveAndLeavesNothingBehind) {
  const std::filesystem::path dir = testing::TempDir() + "/rlmesh_full_disk";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::filesystem::path tmp = dir / (std::string(kActorRngFile) + ".tmp");
  std::filesystem::create_symlink("/dev/full", tmp);
  const at::Generator generator = at::detail::createCPUGenerator(7);
  const absl::Status saved = WriteRngState(dir.string(), generator, 0);
  EXPECT_EQ(saved.code(), absl::StatusCode::kInternal) << saved;
  EXPECT_NE(std::string(saved.message()).find(tmp.string() + ": No space left on device"),
            std::string::npos)
      << saved;
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(tmp)));
  EXPECT_FALSE(std::filesystem::exists(dir / kActorRngFile));
  // With room, the same save succeeds.
  EXPECT_TRUE(WriteRngState(dir.string(), generator, 0).ok());
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / kActorRngFile));
}

}  // namespace
}  // namespace rlmesh::trainer
