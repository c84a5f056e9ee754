#include "services/trainer/trainer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics/process_metrics.h"
#include "common/model/pretrained.h"
#include "common/model/safetensors.h"
#include "common/process/tensor_memory.h"
#include "common/status/nesting.h"
#include "common/status/status_macros.h"
#include "services/trainer/checkpoint_manifest.h"

namespace rlmesh::trainer {

namespace fs = std::filesystem;

namespace {

absl::StatusOr<ActorOptions> MakeActorOptions(const config::TrainerSettings& t, double lr) {
  const config::ActorSettings& a = t.actor;
  ActorOptions o;
  o.ppo_mini_batch_size = a.ppo_mini_batch_size;
  o.ppo_micro_batch_size = a.ppo_micro_batch_size;
  o.log_prob_micro_batch_size = a.log_prob_micro_batch_size;
  o.ppo_max_token_len = a.ppo_max_token_len;
  o.log_prob_max_token_len = a.log_prob_max_token_len;
  o.ppo_epochs = a.ppo_epochs;
  o.remove_padding = t.remove_padding;
  o.balance_batch = a.balance_batch;
  o.shuffle = a.shuffle;
  o.seed = t.seed;
  o.clip_ratio_low = a.clip_ratio_low;
  o.clip_ratio_high = a.clip_ratio_high;
  o.clip_ratio_c = a.clip_ratio_c;
  ASSIGN_OR_RETURN(o.loss_agg_mode, grpo::ParseLossAggMode(a.loss_agg_mode));
  o.loss_scale_factor = a.loss_scale_factor;
  ASSIGN_OR_RETURN(o.loss_mode, grpo::ParsePolicyLossMode(a.loss_mode));
  o.tau_pos = a.tau_pos;
  o.tau_neg = a.tau_neg;
  o.clip_cov_ratio = a.clip_cov_ratio;
  o.clip_cov_lb = a.clip_cov_lb;
  o.clip_cov_ub = a.clip_cov_ub;
  o.kl_cov_ratio = a.kl_cov_ratio;
  o.ppo_kl_coef = a.ppo_kl_coef;
  o.entropy_coeff = a.entropy_coeff;
  o.use_kl_loss = a.use_kl_loss;
  o.kl_loss_coef = a.kl_loss_coef;
  ASSIGN_OR_RETURN(o.kl_loss_type, grpo::ParseKlType(a.kl_loss_type));
  o.grad_clip = a.grad_clip;
  o.temperature = t.logprob_temperature;
  o.lr = lr;
  o.beta1 = a.beta1;
  o.beta2 = a.beta2;
  o.weight_decay = a.weight_decay;
  return o;
}

absl::Status WriteFileAtomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp.string()));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot rename ", tmp.string(), ": ", ec.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const config::TrainerSettings& settings,
                                                         const rpc::ChannelOptions& publish_channel,
                                                         dist::Group* group) {
  ASSIGN_OR_RETURN(model::CausalLmOptions model_options,
                   model::CausalLmOptionsFromConfig(settings.dtype, settings.device));
  WeightPublisherOptions publisher_options;
  publisher_options.transport = settings.weight_transport;
  publisher_options.bind_host = settings.bind_host;
  publisher_options.bucket_bytes = settings.weight_bucket_bytes;
  publisher_options.transfer_timeout_seconds = settings.weight_timeout_s;
  publisher_options.same_node_transport = SameNodeTransportFor(settings.weight_transport);
  // A rank placed on GPU N (common/dist/placement.h) sends from there.
  if (model_options.device.is_cuda() && model_options.device.has_index()) {
    publisher_options.device = model_options.device.index();
  }
  ASSIGN_OR_RETURN(auto publisher, WeightPublisher::Create(publisher_options));
  model_options.gradient_checkpointing = settings.gradient_checkpointing;
  const torch::Dtype reduce_dtype =
      settings.reduce_dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  // Sharded, both actors step on this rank's shards; whole and below float32, they update one
  // set of fp32 master weights.
  std::optional<FsdpOptions> fsdp;
  if (settings.sharded) {
    // Hybrid sharding: shard groups of fsdp_size ranks, replicated across the group.
    const int64_t ranks = group != nullptr ? group->world_size() : 1;
    if (group != nullptr && settings.shard_size > 0 && settings.shard_size < ranks) {
      RETURN_IF_ERROR(group->FormMesh(static_cast<int>(settings.shard_size)));
    }
    fsdp.emplace();
    fsdp->param_offload = settings.param_offload;
    fsdp->optimizer_offload = settings.optimizer_offload;
    fsdp->reduce_dtype = reduce_dtype;
  }
  ASSIGN_OR_RETURN(LoadedPolicy policy,
                   LoadPolicy(settings.model_path, model_options, group, fsdp));
  std::shared_ptr<model::CausalLmImpl> model = std::move(policy.model);
  std::shared_ptr<ShardedParameters> sharded = std::move(policy.sharded);
  // The peak counts from here: a sharded load allocates the whole network without writing
  // it (no page of it is ever touched) before cutting the shards.
  process::ResetPeakCpuTensorMemory();
  model->train();
  auto forward = [model](const torch::Tensor& ids, const torch::Tensor& mask,
                         const torch::Tensor& positions) {
    const auto device = model->options().device;
    return model->Forward(ids.to(device), mask.to(device), positions.to(device));
  };
  auto packed = [model](const torch::Tensor& ids, const torch::Tensor& positions,
                        const torch::Tensor& cu_seqlens) {
    const auto device = model->options().device;
    return model->ForwardPacked(ids.to(device), positions.to(device), cu_seqlens);
  };
  ASSIGN_OR_RETURN(ActorOptions options, MakeActorOptions(settings, settings.actor.lr));
  std::shared_ptr<MasterWeights> masters;
  if (sharded == nullptr) masters = MasterWeights::Create(*model, reduce_dtype);
  ASSIGN_OR_RETURN(auto actor,
                   Actor::Create(options, model, forward, masters, group, sharded, packed));
  if (sharded == nullptr) {  // to resume a sharded checkpoint
    std::vector<std::vector<torch::Tensor>> units;
    for (int u = 0; u < model->NumUnits(); ++u) units.push_back(model->UnitParameters(u));
    actor->SetShardingUnits(units);
  }
  // The warm-up's whole batch is one micro-batch, a rank's share of it in a group.
  const int64_t ranks = group != nullptr ? group->world_size() : 1;
  ActorOptions warmup_options = options;
  warmup_options.lr = settings.warmup_lr;
  warmup_options.ppo_micro_batch_size = (settings.warmup_batch_size + ranks - 1) / ranks;
  warmup_options.ppo_mini_batch_size = warmup_options.ppo_micro_batch_size * ranks;
  warmup_options.ppo_max_token_len = 0;
  ASSIGN_OR_RETURN(auto warmup,
                   Actor::Create(warmup_options, model, forward, masters, group, sharded, packed));
  auto trainer =
      std::unique_ptr<Trainer>(new Trainer(settings, std::move(model), std::move(actor),
                                           std::move(warmup), std::move(publisher), group));
  trainer->sharded_ = std::move(sharded);
  ASSIGN_OR_RETURN(trainer->schedule_.type,
                   grpo::ParseLrScheduleType(settings.actor.lr_scheduler_type));
  trainer->schedule_.warmup_steps = settings.actor.lr_warmup_steps;
  trainer->schedule_.warmup_steps_ratio = settings.actor.lr_warmup_steps_ratio;
  trainer->schedule_.min_lr_ratio = settings.actor.min_lr_ratio;
  trainer->schedule_.num_cycles = settings.actor.num_cycles;
  trainer->publish_channel_ = publish_channel;
  return trainer;
}

Trainer::Trainer(const config::TrainerSettings& settings,
                 std::shared_ptr<model::CausalLmImpl> model, std::unique_ptr<Actor> actor,
                 std::unique_ptr<Actor> warmup_actor, std::unique_ptr<WeightPublisher> publisher,
                 dist::Group* group)
    : settings_(settings),
      group_(group),
      model_(std::move(model)),
      actor_(std::move(actor)),
      warmup_actor_(std::move(warmup_actor)),
      publisher_(std::move(publisher)) {
  version_.set_version(0);
  version_.set_source(settings.model_path);
}

BatchLimits Trainer::Limits() const {
  BatchLimits limits;
  limits.vocab_size = model_->config().vocab_size;
  limits.max_length = model_->config().max_position_embeddings;
  return limits;
}

void Trainer::BumpVersion() {
  version_.set_version(version_.version() + 1);
  version_.set_global_step(global_step_);
  version_.set_source("trainer");
}

template <typename Response>
absl::StatusOr<Response> Trainer::OnEveryRank(
    absl::string_view op, const google::protobuf::Message& request,
    const std::function<absl::StatusOr<Response>()>& run) {
  if (group_ == nullptr || group_->world_size() == 1) return run();
  RETURN_IF_ERROR(group_->Post(op, request.SerializeAsString()));
  absl::StatusOr<Response> here = run();
  RETURN_IF_ERROR(group_->Finish(here.status()));
  return here;
}

namespace {

// The requests ranks > 0 run, by the op rank 0 posts them under.
constexpr char kOldLogProbs[] = "ComputeOldLogProbs";
constexpr char kTrainStep[] = "TrainStep";
constexpr char kSftStep[] = "SftStep";
constexpr char kLoadCheckpoint[] = "LoadCheckpoint";
constexpr char kSaveCheckpoint[] = "SaveCheckpoint";  // sharded only
constexpr char kGatherWeights[] = "GatherWeights";    // sharded only, snapshot (nccl)
constexpr char kPublishUnits[] = "PublishUnits";      // sharded only, unit by unit
constexpr char kStop[] = "stop";

// Parses the command's request and runs `run` on it; the parse error otherwise.
template <typename Request, typename F>
absl::Status RunParsed(const dist::Command& command, F run) {
  absl::StatusOr<Request> request = dist::ParseRequest<Request>(command);
  return request.ok() ? run(*request) : request.status();
}

}  // namespace

absl::Status Trainer::ServeRank() {
  if (group_ == nullptr || group_->rank() == 0) {
    return absl::InternalError("ServeRank: only ranks > 0 of a group serve rank 0's requests");
  }
  while (true) {
    ASSIGN_OR_RETURN(const dist::Command command, group_->Next());
    if (command.op == kStop) return absl::OkStatus();
    absl::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (command.op == kOldLogProbs) {
        status = RunParsed<v1::ComputeOldLogProbsRequest>(
            command, [&](const auto& r) { return ComputeOldLogProbsHere(r).status(); });
      } else if (command.op == kTrainStep) {
        status = RunParsed<v1::TrainStepRequest>(
            command, [&](const auto& r) { return TrainStepHere(r).status(); });
      } else if (command.op == kSftStep) {
        status = RunParsed<v1::SftStepRequest>(
            command, [&](const auto& r) { return SftStepHere(r).status(); });
      } else if (command.op == kLoadCheckpoint) {
        status = RunParsed<v1::LoadCheckpointRequest>(
            command, [&](const auto& r) { return LoadCheckpointHere(r).status(); });
      } else if (command.op == kSaveCheckpoint) {
        status = RunParsed<v1::SaveCheckpointRequest>(
            command, [&](const auto& r) { return SaveShardsHere(r); });
      } else if (command.op == kGatherWeights) {
        status = SnapshotHere(nullptr);
      } else if (command.op == kPublishUnits) {
        status = FollowPublishHere();
      } else {
        status = absl::InternalError(absl::StrCat("unknown command \"", command.op, "\""));
      }
    }
    const absl::Status all = group_->Finish(status);
    if (!group_->broken().ok()) return group_->broken();
    if (!all.ok()) {
      std::fprintf(stderr, "[trainer rank %d] %s failed: %s\n", group_->rank(), command.op.c_str(),
                   std::string(all.message()).c_str());
    }
  }
}

void Trainer::StopRanks() {
  if (group_ == nullptr || group_->world_size() == 1 || group_->rank() != 0) return;
  absl::MutexLock lock(&mu_);
  // The others exit on it and do not answer; a broken group has no one left to tell.
  (void)group_->Post(kStop, "");
}

absl::StatusOr<v1::ComputeOldLogProbsResponse> Trainer::ComputeOldLogProbs(
    const v1::ComputeOldLogProbsRequest& request) {
  absl::MutexLock lock(&mu_);
  return OnEveryRank<v1::ComputeOldLogProbsResponse>(
      kOldLogProbs, request, [&] { return ComputeOldLogProbsHere(request); });
}

absl::StatusOr<v1::ComputeOldLogProbsResponse> Trainer::ComputeOldLogProbsHere(
    const v1::ComputeOldLogProbsRequest& request) {
  // 0 (unset) means the configured one; anything else must be it (NaN and negatives too).
  if (request.temperature() != 0 && request.temperature() != actor_->options().temperature) {
    return absl::InvalidArgumentError(absl::StrCat(
        "temperature: the trainer computes log-probs at actor_rollout_ref.rollout.temperature = ",
        actor_->options().temperature, ", got ", request.temperature()));
  }
  BatchLimits limits = Limits();
  limits.max_sequences = settings_.max_batch_sequences;
  ASSIGN_OR_RETURN(ActorBatch batch, BatchFromSequences(request.sequences(), limits));
  const absl::Time compute_start = absl::Now();
  ASSIGN_OR_RETURN(LogProbs logp, actor_->ComputeLogProbs(batch, request.calculate_entropy()));
  if (request.keep()) {
    ASSIGN_OR_RETURN(KeptOldLogProbs kept,
                     KeepOldLogProbs(request.sequences(), logp.log_probs, version_.version()));
    kept_ = std::move(kept);
  }
  v1::ComputeOldLogProbsResponse response;
  response.set_compute_seconds(absl::ToDoubleSeconds(absl::Now() - compute_start));
  response.set_micro_batches(static_cast<int32_t>(logp.micro_batches));
  for (int b = 0; b < request.sequences_size(); ++b) {
    const auto& seq = request.sequences(b);
    auto* result = response.add_results();
    result->set_id(seq.id());
    for (float v : ResponseValues(logp.log_probs, b, seq)) result->add_logprobs(v);
    if (logp.entropy.defined()) {
      for (float v : ResponseValues(logp.entropy, b, seq)) result->add_entropies(v);
    }
  }
  *response.mutable_weight_version() = version_;
  return response;
}

absl::StatusOr<std::map<std::string, double>> Trainer::MemoryMetrics() {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const int w = group_ != nullptr ? group_->world_size() : 1;
  const int rank = group_ != nullptr ? group_->rank() : 0;
  // Each rank's peak of tensor memory, peak resident set and current resident set (GiB).
  auto memory = torch::zeros({3, w}, torch::kFloat64);
  memory[0][rank] = static_cast<double>(process::CpuTensorMemory().peak_bytes) / kGiB;
  memory[1][rank] = metrics::PeakResidentBytes() / kGiB;
  memory[2][rank] = metrics::ResidentBytes() / kGiB;
  if (w > 1) RETURN_IF_ERROR(group_->AllReduceSum({memory}, "gathering the ranks' memory"));
  std::map<std::string, double> out = {
      {"perf/max_memory_allocated_gb", memory[0].max().item<double>()},
      {"perf/max_memory_reserved_gb", memory[1].max().item<double>()},
      {"perf/cpu_memory_used_gb", memory[2].max().item<double>()},
  };
  if (w > 1) {
    for (int r = 0; r < w; ++r) {
      out[absl::StrCat("perf/rank_", r, "/max_memory_allocated_gb")] = memory[0][r].item<double>();
      out[absl::StrCat("perf/rank_", r, "/max_memory_reserved_gb")] = memory[1][r].item<double>();
    }
  }
  return out;
}

absl::StatusOr<v1::TrainStepResponse> Trainer::TrainStep(const v1::TrainStepRequest& request) {
  absl::MutexLock lock(&mu_);
  return OnEveryRank<v1::TrainStepResponse>(kTrainStep, request,
                                            [&] { return TrainStepHere(request); });
}

absl::StatusOr<v1::TrainStepResponse> Trainer::TrainStepHere(const v1::TrainStepRequest& request) {
  if (request.global_step() < 0 || request.total_training_steps() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        request.global_step() < 0 ? "global_step" : "total_training_steps",
        ": expected >= 0 (0 = unset), got ",
        request.global_step() < 0 ? request.global_step() : request.total_training_steps()));
  }
  if (request.temperature() != 0 && request.temperature() != actor_->options().temperature) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature: expected actor_rollout_ref.rollout.temperature = ",
                     actor_->options().temperature, ", got ", request.temperature()));
  }
  BatchLimits limits = Limits();
  limits.max_sequences = settings_.max_batch_sequences;
  // Compact samples take their sequences and old log-probs from what ComputeOldLogProbs kept.
  ASSIGN_OR_RETURN(const auto samples,
                   ExpandSamples(request.samples(), kept_ ? &*kept_ : nullptr, version_.version()));
  ASSIGN_OR_RETURN(ActorBatch batch,
                   BatchFromSamples(samples, limits, actor_->options().use_kl_loss));
  int64_t tokens = 0;
  for (const auto& sample : samples) tokens += sample.sequence().token_ids_size();
  // verl steps its scheduler once per actor update and the k-th update uses lambda(k - 1): the
  // lr follows from the step alone, so a resumed run continues the schedule exactly.
  const int64_t step = request.global_step() > 0 ? request.global_step() : global_step_ + 1;
  const int64_t total = request.total_training_steps();
  const bool needs_total = schedule_.type != grpo::LrScheduleType::kConstant ||
                           (schedule_.warmup_steps < 0 && schedule_.warmup_steps_ratio > 0);
  if (needs_total && total <= 0) {
    return absl::InvalidArgumentError(
        "total_training_steps: the learning-rate schedule (cosine, or a warm-up ratio) needs the "
        "run's length, got none");
  }
  actor_->SetLearningRate(settings_.actor.lr * grpo::LrFactor(schedule_, total, step - 1));
  // The supervised warm-up is over once GRPO updates begin: its AdamW moments (8 bytes per
  // parameter) would otherwise stay allocated beside the GRPO optimizer's for the whole run;
  // freed, the GRPO optimizer's moments take their place (one malloc arena,
  // common/process/malloc_arenas.h).
  warmup_actor_->ReleaseOptimizerState();
  state_ = v1::TRAINER_STATE_TRAINING;
  const int64_t skipped_before = actor_->nonfinite_steps_total();
  const absl::Time compute_start = absl::Now();
  auto metrics = actor_->UpdatePolicy(batch, request.old_logprobs_from_rollout(), step);
  const double compute_seconds = absl::ToDoubleSeconds(absl::Now() - compute_start);
  state_ = v1::TRAINER_STATE_IDLE;
  if (!metrics.ok()) return metrics.status();
  ASSIGN_OR_RETURN(auto memory, MemoryMetrics());
  metrics->merge(memory);
  global_step_ = step;
  BumpVersion();
  kept_.reset();  // of the weights before this update
  v1::TrainStepResponse response;
  response.set_tokens(tokens);
  for (const auto& [name, value] : *metrics) (*response.mutable_metrics())[name] = value;
  *response.mutable_weight_version() = version_;
  response.set_compute_seconds(compute_seconds);
  response.set_skipped_optimizer_steps(
      static_cast<int32_t>(actor_->nonfinite_steps_total() - skipped_before));
  const int64_t mini = actor_->options().ppo_mini_batch_size;
  response.set_optimizer_steps(static_cast<int32_t>(actor_->options().ppo_epochs *
                                                    ((request.samples_size() + mini - 1) / mini)));
  return response;
}

absl::StatusOr<v1::SftStepResponse> Trainer::SftStep(const v1::SftStepRequest& request) {
  absl::MutexLock lock(&mu_);
  return OnEveryRank<v1::SftStepResponse>(kSftStep, request, [&] { return SftStepHere(request); });
}

absl::StatusOr<v1::SftStepResponse> Trainer::SftStepHere(const v1::SftStepRequest& request) {
  if (request.lr() != 0 && request.lr() != settings_.warmup_lr) {
    return absl::InvalidArgumentError(absl::StrCat("lr: supervised steps use rlmesh.warmup.lr = ",
                                                   settings_.warmup_lr, ", got ", request.lr()));
  }
  ASSIGN_OR_RETURN(ActorBatch batch, BatchFromSequences(request.sequences(), Limits()));
  ASSIGN_OR_RETURN(SftResult result, warmup_actor_->SftStep(batch));
  BumpVersion();
  v1::SftStepResponse response;
  (*response.mutable_metrics())["sft/loss"] = result.loss;
  (*response.mutable_metrics())["actor/grad_norm"] = result.grad_norm;
  (*response.mutable_metrics())["actor/lr"] = settings_.warmup_lr;
  *response.mutable_weight_version() = version_;
  return response;
}

namespace {

struct CheckpointPaths {
  fs::path root, final_dir, tmp_dir;
};

CheckpointPaths PathsOf(const v1::SaveCheckpointRequest& request, const std::string& default_dir) {
  CheckpointPaths p;
  p.root = request.directory().empty() ? fs::path(default_dir) : fs::path(request.directory());
  p.final_dir = p.root / absl::StrCat("global_step_", request.global_step());
  p.tmp_dir = p.root / absl::StrCat(".global_step_", request.global_step(), ".tmp");
  return p;
}

}  // namespace

absl::Status Trainer::SaveShardsHere(const v1::SaveCheckpointRequest& request) {
  const CheckpointPaths paths = PathsOf(request, settings_.checkpoint_dir);
  const bool rank0 = group_ == nullptr || group_->rank() == 0;
  // Rank 0's shard group gathers the parameters unit by unit while rank 0 writes them (the
  // other replicas of a hybrid group hold the same shards and sit it out).
  if (sharded_->replica() == 0) {
    RETURN_IF_ERROR(SaveGatheredUnitByUnit(*sharded_, *model_,
                                           (paths.tmp_dir / "actor" / "huggingface").string(),
                                           settings_.model_path, rank0));
  }
  return actor_->SaveState((paths.tmp_dir / "actor").string());
}

absl::StatusOr<v1::SaveCheckpointResponse> Trainer::SaveCheckpoint(
    const v1::SaveCheckpointRequest& request) {
  absl::MutexLock lock(&mu_);
  if (request.global_step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_step: expected >= 0, got ", request.global_step()));
  }
  const absl::Time start = absl::Now();
  const CheckpointPaths paths = PathsOf(request, settings_.checkpoint_dir);
  const fs::path& root = paths.root;
  const fs::path& final_dir = paths.final_dir;
  const fs::path& tmp_dir = paths.tmp_dir;
  const int64_t step = request.global_step();
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
  fs::create_directories(tmp_dir / "actor", ec);
  if (ec)
    return absl::InternalError(
        absl::StrCat("cannot create ", tmp_dir.string(), ": ", ec.message()));
  state_ = v1::TRAINER_STATE_SAVING;
  absl::Status status;
  if (sharded_ != nullptr) {
    // Each rank writes its shards into the temporary folder, which rank 0 then completes.
    auto written = OnEveryRank<bool>(kSaveCheckpoint, request, [&]() -> absl::StatusOr<bool> {
      RETURN_IF_ERROR(SaveShardsHere(request));
      return true;
    });
    status = written.status();
  } else {
    status = model::SavePretrained(*model_, (tmp_dir / "actor" / "huggingface").string(),
                                   settings_.model_path);
    if (status.ok()) status = actor_->SaveState((tmp_dir / "actor").string());
  }
  v1::CheckpointInfo info;
  info.set_global_step(step);
  info.set_path(final_dir.string());
  *info.mutable_weight_version() = version_;
  *info.mutable_data_position() = request.data_position();
  info.set_coordinator_state(request.coordinator_state());
  if (status.ok()) {
    nlohmann::json state = {{"global_step", step},
                            {"weight_version", version_.version()},
                            {"data_position",
                             {{"epoch", request.data_position().epoch()},
                              {"index_in_epoch", request.data_position().index_in_epoch()},
                              {"shuffle_seed", request.data_position().shuffle_seed()},
                              {"consumed_prompts", request.data_position().consumed_prompts()}}},
                            {"coordinator_state", request.coordinator_state()}};
    status = WriteFileAtomically(tmp_dir / "trainer_state.json", state.dump(2) + "\n");
  }
  // Last, once every rank's files are in place: what a complete checkpoint holds.
  if (status.ok()) status = WriteManifest(tmp_dir.string());
  if (status.ok()) {
    fs::remove_all(final_dir, ec);
    fs::rename(tmp_dir, final_dir, ec);
    if (ec)
      status =
          absl::InternalError(absl::StrCat("cannot rename ", tmp_dir.string(), ": ", ec.message()));
  }
  if (status.ok()) {
    status =
        WriteFileAtomically(root / "latest_checkpointed_iteration.txt", absl::StrCat(step, "\n"));
  }
  state_ = v1::TRAINER_STATE_IDLE;
  if (!status.ok()) {
    fs::remove_all(tmp_dir, ec);
    return status;
  }
  // One look at the folder, for two clean-ups. Temporary folders of saves that died (a killed
  // process leaves .global_step_<N>.tmp, never loaded) go: this save is complete, so none of
  // them is being written. And the newest max_actor_ckpt_to_keep checkpoints of this line of
  // training stay: the one just written and those of earlier steps. Folders of later steps
  // are of a line given up when the run resumed from an earlier checkpoint; resuming passes
  // over them (ChooseCheckpoint), and they are left for whoever wants them back.
  std::vector<fs::path> stale;
  std::vector<int64_t> steps;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_directory() && name.rfind(".global_step_", 0) == 0 && name.size() > 4 &&
        name.compare(name.size() - 4, 4, ".tmp") == 0) {
      stale.push_back(entry.path());
    } else if (name.rfind("global_step_", 0) == 0) {
      try {
        const int64_t saved = std::stoll(name.substr(12));
        if (saved <= step) steps.push_back(saved);
      } catch (...) {
      }
    }
  }
  for (const fs::path& path : stale) fs::remove_all(path, ec);
  if (settings_.max_checkpoints_to_keep.has_value() && *settings_.max_checkpoints_to_keep > 0) {
    std::sort(steps.rbegin(), steps.rend());
    for (size_t i = static_cast<size_t>(*settings_.max_checkpoints_to_keep); i < steps.size();
         ++i) {
      fs::remove_all(root / absl::StrCat("global_step_", steps[i]), ec);
    }
  }
  last_checkpoint_ = info;
  v1::SaveCheckpointResponse response;
  *response.mutable_checkpoint() = info;
  response.set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  return response;
}

absl::StatusOr<v1::LoadCheckpointResponse> Trainer::LoadCheckpoint(
    const v1::LoadCheckpointRequest& request) {
  absl::MutexLock lock(&mu_);
  // Rank 0 chooses the checkpoint and checks every file of it before anything is loaded;
  // the other ranks load the folder it names.
  v1::LoadCheckpointRequest chosen = request;
  std::vector<std::string> skipped;
  if (chosen.path().empty()) {
    const std::string root =
        request.directory().empty() ? settings_.checkpoint_dir : request.directory();
    ASSIGN_OR_RETURN(std::string dir, ChooseCheckpoint(root, &skipped));
    chosen.set_path(dir);
  } else {
    RETURN_IF_ERROR(VerifyManifest(chosen.path()));
  }
  for (const std::string& reason : skipped) {
    std::fprintf(stderr, "[trainer] passing over %s\n", reason.c_str());
  }
  ASSIGN_OR_RETURN(v1::LoadCheckpointResponse response,
                   OnEveryRank<v1::LoadCheckpointResponse>(
                       kLoadCheckpoint, chosen, [&] { return LoadCheckpointHere(chosen); }));
  for (const std::string& reason : skipped) response.add_skipped(reason);
  return response;
}

absl::StatusOr<v1::LoadCheckpointResponse> Trainer::LoadCheckpointHere(
    const v1::LoadCheckpointRequest& request) {
  const fs::path dir = request.path();  // chosen and checked by LoadCheckpoint on rank 0
  ASSIGN_OR_RETURN(std::string text, ReadFile(dir / "trainer_state.json"));
  auto state = CheckNesting(text, "trainer_state.json").ok()
                   ? nlohmann::json::parse(text, nullptr, false)
                   : nlohmann::json();
  if (!state.is_object() || !state.contains("global_step") ||
      !state["global_step"].is_number_integer() || !state.contains("data_position") ||
      !state["data_position"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat((dir / "trainer_state.json").string(), ": not a trainer state"));
  }
  state_ = v1::TRAINER_STATE_LOADING;
  absl::Status status;
  if (sharded_ != nullptr) {
    // Every rank reads the whole weights one unit at a time and keeps its slice of each.
    status = LoadFolderUnitByUnit(*sharded_, *model_, (dir / "actor" / "huggingface").string());
  } else {
    status = model::LoadWeights((dir / "actor" / "huggingface").string(), *model_);
  }
  if (status.ok()) status = actor_->LoadState((dir / "actor").string());
  state_ = v1::TRAINER_STATE_IDLE;
  if (!status.ok()) return status;
  global_step_ = state["global_step"].get<int64_t>();
  version_.set_version(state.value("weight_version", uint64_t{0}));
  version_.set_global_step(global_step_);
  version_.set_source(dir.string());
  v1::CheckpointInfo info;
  info.set_global_step(global_step_);
  info.set_path(dir.string());
  *info.mutable_weight_version() = version_;
  const auto& p = state["data_position"];
  info.mutable_data_position()->set_epoch(p.value("epoch", int64_t{0}));
  info.mutable_data_position()->set_index_in_epoch(p.value("index_in_epoch", int64_t{0}));
  info.mutable_data_position()->set_shuffle_seed(p.value("shuffle_seed", uint64_t{0}));
  info.mutable_data_position()->set_consumed_prompts(p.value("consumed_prompts", int64_t{0}));
  info.set_coordinator_state(state.value("coordinator_state", std::string()));
  resumed_from_ = info;
  v1::LoadCheckpointResponse response;
  *response.mutable_checkpoint() = info;
  return response;
}

namespace {

// The trainer's parameters handed over unit by unit (WeightPublisher::PublishFeed). Sharded:
// each Fetch gathers one unit and releases the one before, and a pass gathers every unit in
// order on every rank of the group, whichever units rank 0 asks for; the ranks then agree
// whether another pass follows. Whole: the parameters themselves (a host copy of each unit on
// a GPU). Throws nothing: a failed collective is a status.
class ParameterFeed : public UnitFeed {
 public:
  ParameterFeed(const model::CausalLmImpl& model, ShardedParameters* sharded)
      : model_(model), sharded_(sharded) {
    for (const auto& item : model.named_parameters())
      names_[item.value().unsafeGetTensorImpl()] = item.key();
    for (int u = 0; u < model.NumUnits(); ++u) {
      for (const torch::Tensor& p : model.UnitParameters(u))
        entries_.push_back(
            {names_.at(p.unsafeGetTensorImpl()), p.scalar_type(), p.sizes().vec(), u});
    }
  }
  ~ParameterFeed() override { Drop(); }

  const std::vector<FeedEntry>& entries() const override { return entries_; }
  int num_units() const override { return model_.NumUnits(); }
  int64_t peak_held_bytes() const override { return peak_held_; }

  absl::StatusOr<NamedTensors> Fetch(int unit) override {
    try {
      SkipTo(unit);
      if (sharded_ != nullptr) sharded_->Gather(unit);
      held_ = unit;
      next_ = unit + 1;
      torch::NoGradGuard no_grad;
      NamedTensors out;
      int64_t held = 0;
      for (const torch::Tensor& p : model_.UnitParameters(unit)) {
        torch::Tensor t = p.detach();
        const int64_t bytes = t.numel() * t.element_size();
        if (sharded_ != nullptr) held += bytes;  // gathered for this unit only
        if (!t.device().is_cpu() || !t.is_contiguous()) {
          t = t.to(torch::kCPU).contiguous();
          held += bytes;
        }
        out.emplace_back(names_.at(p.unsafeGetTensorImpl()), std::move(t));
      }
      peak_held_ = std::max(peak_held_, held);
      return out;
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("gathering unit ", unit, " to publish: ", e.what()));
    }
  }

  absl::Status EndPass(bool another) override { return FinishPass(another).status(); }

  // Ends the pass: the units not fetched are gathered in turn (the group's ranks go through
  // the same collectives), then rank 0's `another` is every rank's answer.
  absl::StatusOr<bool> FinishPass(bool another) {
    try {
      SkipTo(model_.NumUnits());
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("gathering the weights to publish: ", e.what()));
    }
    next_ = 0;
    dist::Group* group = sharded_ != nullptr ? sharded_->group() : nullptr;
    if (group == nullptr || group->world_size() == 1) return another;
    torch::Tensor flag = torch::full({1}, another && group->rank() == 0 ? 1.0f : 0.0f);
    RETURN_IF_ERROR(group->AllReduceSum({flag}, "whether the weights are sent again"));
    return flag.item<float>() > 0;
  }

 private:
  // Releases the unit handed over last, then gathers and releases each unit before `unit` not
  // reached yet, as every rank of the group does. Throws when a collective fails.
  void SkipTo(int unit) {
    Drop();
    for (; sharded_ != nullptr && next_ < unit; ++next_) {
      sharded_->Gather(next_);
      sharded_->Release(next_);
    }
  }
  void Drop() {
    if (held_ >= 0 && sharded_ != nullptr) sharded_->Release(held_);
    held_ = -1;
  }

  const model::CausalLmImpl& model_;
  ShardedParameters* const sharded_;
  std::map<const c10::TensorImpl*, std::string> names_;
  std::vector<FeedEntry> entries_;
  int next_ = 0;   // the next unit this pass gathers
  int held_ = -1;  // the unit handed over last, gathered until the next Fetch or EndPass
  int64_t peak_held_ = 0;
};

// A saved Hugging Face folder's tensors, read one per unit as they are asked for.
class CheckpointFeed : public UnitFeed {
 public:
  explicit CheckpointFeed(const model::SafetensorsReader& reader) : reader_(reader) {}
  void Add(std::string name, torch::ScalarType dtype, std::vector<int64_t> shape) {
    const int unit = static_cast<int>(entries_.size());
    entries_.push_back({std::move(name), dtype, std::move(shape), unit});
  }
  const std::vector<FeedEntry>& entries() const override { return entries_; }
  int num_units() const override { return static_cast<int>(entries_.size()); }
  absl::StatusOr<NamedTensors> Fetch(int unit) override {
    const FeedEntry& e = entries_[static_cast<size_t>(unit)];
    auto tensor = model::ReadTensor(reader_, e.name, e.dtype);
    if (!tensor.ok()) {
      return absl::Status(tensor.status().code(),
                          absl::StrCat("checkpoint: ", tensor.status().message()));
    }
    if (tensor->sizes().vec() != e.shape) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", e.name, " has shape ",
                                                     c10::str(tensor->sizes()), ", expected ",
                                                     c10::str(c10::IntArrayRef(e.shape))));
    }
    peak_held_ = std::max(peak_held_, tensor->numel() * tensor->element_size());
    return NamedTensors{{e.name, tensor->contiguous()}};
  }
  absl::Status EndPass(bool) override { return absl::OkStatus(); }
  int64_t peak_held_bytes() const override { return peak_held_; }

 private:
  const model::SafetensorsReader& reader_;
  std::vector<FeedEntry> entries_;
  int64_t peak_held_ = 0;
};

}  // namespace

absl::StatusOr<v1::PublishWeightsResponse> Trainer::PublishWeights(
    const v1::PublishWeightsRequest& request) {
  PublishOptions options;
  options.bucket_bytes = settings_.weight_bucket_bytes;
  options.channel = publish_channel_;
  options.timeout_seconds =
      request.timeout_seconds() > 0 ? request.timeout_seconds() : settings_.weight_timeout_s;
  if (!request.checkpoint().empty()) return PublishCheckpoint(request, options);
  if (request.suspended_size() > 0) {
    const std::vector<std::string> suspended(request.suspended().begin(),
                                             request.suspended().end());
    if (int closed = publisher_->Disconnect(suspended); closed > 0) {
      std::fprintf(stderr, "trainer: closed the weight subscriptions of %d suspended replicas\n",
                   closed);
    }
  }
  if (!publisher_->FeedsFrom(request.transport())) return PublishSnapshot(request, options);
  // Unit by unit from the parameters (or shards) themselves, with the lock held throughout:
  // no step may change them, and the group's ranks follow the passes.
  absl::MutexLock lock(&mu_);
  state_ = v1::TRAINER_STATE_PUBLISHING;
  auto publish = [&]()
                     ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<v1::PublishWeightsResponse> {
    ParameterFeed feed(*model_, sharded_.get());
    return publisher_->PublishFeed(feed, version_, request.targets(), request.transport(), options);
  };
  auto response = sharded_ != nullptr
                      ? OnEveryRank<v1::PublishWeightsResponse>(kPublishUnits, request, publish)
                      : publish();
  state_ = v1::TRAINER_STATE_IDLE;
  return response;
}

absl::Status Trainer::FollowPublishHere() {
  ParameterFeed feed(*model_, sharded_.get());
  while (true) {
    ASSIGN_OR_RETURN(bool another, feed.FinishPass(false));
    if (!another) return absl::OkStatus();
  }
}

absl::StatusOr<v1::PublishWeightsResponse> Trainer::PublishSnapshot(
    const v1::PublishWeightsRequest& request, const PublishOptions& options) {
  NamedTensors tensors;
  v1::WeightVersion version;
  {
    absl::MutexLock lock(&mu_);
    // A snapshot of the parameters: the next step may change them while we send.
    if (sharded_ != nullptr) {
      auto taken = OnEveryRank<bool>(kGatherWeights, request, [&]() -> absl::StatusOr<bool> {
        RETURN_IF_ERROR(SnapshotHere(&tensors));
        return true;
      });
      if (!taken.ok()) return taken.status();
    } else {
      RETURN_IF_ERROR(SnapshotHere(&tensors));
    }
    version = version_;
    state_ = v1::TRAINER_STATE_PUBLISHING;
  }
  auto response = publisher_->Publish(std::move(tensors), version, request.targets(),
                                      request.transport(), options);
  absl::MutexLock lock(&mu_);
  state_ = v1::TRAINER_STATE_IDLE;
  return response;
}

absl::StatusOr<v1::PublishWeightsResponse> Trainer::PublishCheckpoint(
    const v1::PublishWeightsRequest& request, const PublishOptions& options) {
  for (int i = 0; i < request.targets_size(); ++i) {
    if (request.targets(i).kind() != v1::WEIGHT_TARGET_KIND_REFERENCE) {
      return absl::InvalidArgumentError(absl::StrCat(
          "targets[", i,
          "].kind: the weights of a checkpoint go to references only "
          "(WEIGHT_TARGET_KIND_REFERENCE); rollout replicas take the current weights"));
    }
  }
  const fs::path dir = request.checkpoint();
  // The reference anchors to these weights for the rest of the run: checked like a resume.
  if (absl::Status complete = VerifyManifest(dir.string()); !complete.ok()) {
    return absl::Status(complete.code(), absl::StrCat("checkpoint: ", complete.message()));
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(dir / "trainer_state.json"));
  auto state = CheckNesting(text, "trainer_state.json").ok()
                   ? nlohmann::json::parse(text, nullptr, false)
                   : nlohmann::json();
  if (!state.is_object() || !state.contains("global_step") ||
      !state["global_step"].is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint: ", (dir / "trainer_state.json").string(), " is not a trainer state"));
  }
  // Rank 0 alone: the folder holds the whole Hugging Face model whatever the sharding. Each
  // tensor is read from it as it is sent, none held beyond that.
  const std::string folder = (dir / "actor" / "huggingface").string();
  auto reader = model::SafetensorsReader::Open(folder);
  if (!reader.ok()) {
    return absl::Status(reader.status().code(),
                        absl::StrCat("checkpoint: ", reader.status().message()));
  }
  CheckpointFeed feed(**reader);
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status fits = (*reader)->ValidateAgainst(model_->config()); !fits.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: ", folder, ": ", fits.message()));
    }
    for (const auto& item : model_->named_parameters())
      feed.Add(item.key(), item.value().scalar_type(), item.value().sizes().vec());
  }
  v1::WeightVersion version;
  version.set_version(state.value("weight_version", uint64_t{0}));
  version.set_global_step(state["global_step"].get<int64_t>());
  version.set_source("trainer");
  return publisher_->PublishFeed(feed, version, request.targets(), "inline", options);
}

absl::Status Trainer::SnapshotHere(NamedTensors* out) {
  torch::NoGradGuard no_grad;
  auto copy = [&](const torch::Tensor& t) {
    return publisher_->wants_device_tensors() ? t.detach().clone()
                                              : t.detach().to(torch::kCPU).clone();
  };
  if (sharded_ == nullptr) {
    for (const auto& item : model_->named_parameters())
      out->emplace_back(item.key(), copy(item.value()));
    return absl::OkStatus();
  }
  // Unit by unit: no rank holds more than one gathered unit beyond its shards (rank 0 keeps
  // the copies it publishes).
  std::map<const c10::TensorImpl*, torch::Tensor> copies;
  try {
    for (int u = 0; u < sharded_->num_units(); ++u) {
      sharded_->Gather(u);
      if (out != nullptr) {
        for (const auto& p : model_->UnitParameters(u)) copies[p.unsafeGetTensorImpl()] = copy(p);
      }
      sharded_->Release(u);
    }
  } catch (const std::exception& e) {
    sharded_->ReleaseAll();
    return absl::InternalError(absl::StrCat("gathering the weights to publish: ", e.what()));
  }
  if (out == nullptr) return absl::OkStatus();
  for (const auto& item : model_->named_parameters()) {
    out->emplace_back(item.key(), copies.at(item.value().unsafeGetTensorImpl()));
  }
  return absl::OkStatus();
}

v1::GetTrainerStatusResponse Trainer::Status() const {
  absl::MutexLock lock(&mu_);
  v1::GetTrainerStatusResponse status;
  status.set_state(state_);
  status.set_global_step(global_step_);
  *status.mutable_weight_version() = version_;
  if (resumed_from_) *status.mutable_resumed_from() = *resumed_from_;
  if (last_checkpoint_) *status.mutable_last_checkpoint() = *last_checkpoint_;
  int64_t params = 0;
  for (const auto& p : model_->parameters()) params += p.numel();
  status.set_num_parameters(params);
  status.set_skipped_optimizer_steps(actor_->nonfinite_steps_total() +
                                     warmup_actor_->nonfinite_steps_total());
  status.set_world_size(group_ != nullptr ? group_->world_size() : 1);
  return status;
}

}  // namespace rlmesh::trainer
