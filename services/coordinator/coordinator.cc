#include "services/coordinator/coordinator.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status/status_macros.h"
#include "services/coordinator/dynamic_sampling.h"
#include "services/coordinator/pipeline.h"
#include "services/coordinator/resume_state.h"
#include "services/coordinator/validation.h"
#include "services/coordinator/warmup.h"

namespace rlmesh::coordinator {

namespace {

void Log(const std::string& line) { std::fprintf(stderr, "coordinator: %s\n", line.c_str()); }

double Get(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0.0 : it->second;
}

v1::DataPosition ToDataPosition(const data::SamplerPosition& p, uint64_t seed, int64_t consumed) {
  v1::DataPosition out;
  out.set_epoch(p.epoch);
  out.set_index_in_epoch(p.index);
  out.set_shuffle_seed(seed);
  out.set_consumed_prompts(consumed);
  return out;
}

}  // namespace

Coordinator::Coordinator(const config::CoordinatorSettings& settings, CoordinatorClients clients,
                         prometheus::Registry& registry)
    : settings_(settings), clients_(std::move(clients)), metrics_(registry) {}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    const config::CoordinatorSettings& settings, CoordinatorClients clients,
    prometheus::Registry& registry) {
  auto coordinator =
      std::unique_ptr<Coordinator>(new Coordinator(settings, std::move(clients), registry));
  RETURN_IF_ERROR(coordinator->Prepare());
  return coordinator;
}

absl::Status Coordinator::Prepare() {
  const config::CoordinatorSettings& cfg = settings_;
  const std::string& model_path = cfg.model_path;
  auto tok = tokenizer::Tokenizer::FromDirectory(model_path);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat("actor_rollout_ref.model.path: cannot load the tokenizer of ",
                                     model_path, ": ", tok.status().message()));
  }
  tokenizer_ = std::move(tok).value();

  ASSIGN_OR_RETURN(prompts_, PromptSource::Create(cfg, *tokenizer_));
  total_steps_ = prompts_->total_steps();
  metrics_.SetTotalSteps(total_steps_);
  metrics_.SetStaleness(cfg.max_staleness, 0);

  RolloutPoolOptions pool_options;
  pool_options.max_samples_per_request = cfg.max_samples_per_request;
  pool_options.heartbeat = absl::Seconds(cfg.heartbeat_s);
  pool_options.evict_after = absl::Seconds(cfg.evict_after_s);
  pool_options.no_replica_timeout = absl::Seconds(cfg.ready_wait_s);
  pool_options.newer_weights_allowed = cfg.partial_rollout;
  pool_ = std::make_unique<RolloutPool>(pool_options, clients_.rollout_factory);
  pool_->SetBringUp([this](const std::string& replica_id,
                           const std::string& address) -> absl::StatusOr<v1::WeightVersion> {
    v1::PublishWeightsRequest request;
    auto* target = request.add_targets();
    target->set_replica_id(replica_id);
    target->set_address(address);
    ASSIGN_OR_RETURN(auto response, clients_.trainer->PublishWeights(request));
    if (response.results_size() != 1 || !response.results(0).ok()) {
      return absl::UnavailableError(
          absl::StrCat("trainer could not send weights to ", address, ": ",
                       response.results_size() == 1 ? response.results(0).error() : "no result"));
    }
    return response.weight_version();
  });
  for (const auto& address : cfg.rollout_addresses) {
    pool_->Register(address, "", static_cast<int32_t>(cfg.max_num_seqs), {});
  }
  if (!cfg.discovery_dns.empty()) {
    DnsDiscoveryOptions discovery;
    discovery.name = cfg.discovery_dns;
    discovery.port = static_cast<int>(cfg.discovery_port);
    discovery.interval = absl::Seconds(cfg.discovery_interval_s);
    discovery_ = std::make_unique<DnsDiscovery>(discovery, pool_.get());
    discovery_->Start();
  }

  GrpoStepOptions step_options;
  step_options.n = static_cast<int32_t>(cfg.train_sampling.n);
  step_options.temperature = cfg.train_sampling.temperature;
  step_options.top_p = cfg.train_sampling.top_p;
  step_options.top_k = static_cast<int32_t>(cfg.train_sampling.top_k);
  step_options.logprob_temperature = cfg.logprob_temperature;
  step_options.max_response_length = static_cast<int32_t>(cfg.max_response_length);
  step_options.max_prompt_length = cfg.max_prompt_length;
  step_options.seed = cfg.seed;
  step_options.adv_estimator = cfg.adv_estimator;
  step_options.norm_adv_by_std = cfg.norm_adv_by_std;
  step_options.gamma = cfg.gamma;
  step_options.rollout_is = cfg.rollout_is.value_or("");
  step_options.rollout_rs = cfg.rollout_rs.value_or("");
  step_options.rollout_rs_threshold = cfg.rollout_rs_threshold.value_or("");
  step_options.rollout_is_threshold = cfg.rollout_is_threshold;
  step_options.rollout_is_batch_normalize = cfg.rollout_is_batch_normalize;
  step_options.bypass_mode = cfg.bypass_mode;
  step_options.use_kl_loss = cfg.use_kl_loss;
  step_options.reward_timeout_s = cfg.reward_timeout_s;
  step_options.failed_item_score = cfg.failed_item_score;
  step_options.use_reward_model = cfg.use_reward_model;
  step_options.overlong = {.enable = cfg.overlong_enable,
                           .len = cfg.overlong_len,
                           .penalty_factor = cfg.overlong_penalty_factor,
                           .max_resp_len = cfg.overlong_max_resp_len};
  step_options.overlong_log = cfg.overlong_log;
  step_options.n_devices = std::max<int64_t>(1, cfg.trainer_devices);
  step_options.total_training_steps = total_steps_;
  step_options.use_kl_in_reward = cfg.use_kl_in_reward;
  step_options.kl_penalty = cfg.kl_penalty;
  step_options.kl_ctrl_type = cfg.kl_ctrl_type;
  step_options.kl_coef = cfg.kl_coef;
  step_options.target_kl = cfg.target_kl;
  step_options.kl_horizon = cfg.kl_horizon;
  ASSIGN_OR_RETURN(step_, GrpoStep::Create(step_options, pool_.get(), clients_.reward.get(),
                                           clients_.reference.get(), clients_.trainer.get(),
                                           [this](const std::vector<int32_t>& ids) {
                                             tokenizer::DecodeOptions options;
                                             options.skip_special_tokens = true;
                                             return tokenizer_->Decode(ids, options);
                                           }));

  RunLogOptions log_options;
  log_options.run_dir = cfg.run_dir;
  log_options.jsonl = cfg.log_jsonl;
  log_options.console = cfg.log_console;
  log_options.val_generations = cfg.log_val_generations;
  log_options.total_steps = total_steps_;
  log_options.max_staleness = cfg.max_staleness;
  if (cfg.log_tensorboard) log_options.tensorboard_dir = cfg.tensorboard_dir;
  ASSIGN_OR_RETURN(run_log_, RunLog::Create(log_options));
  Log(absl::StrCat(prompts_->train_rows().size(), " training prompts, ",
                   prompts_->num_validation_prompts(), " validation prompts, ", total_steps_,
                   " steps of ", cfg.train_batch_size, " prompts x ", step_options.n, " samples"));
  return absl::OkStatus();
}

absl::Status Coordinator::Restore() {
  const std::string& mode = settings_.resume_mode;
  ASSIGN_OR_RETURN(v1::GetTrainerStatusResponse trainer_status, clients_.trainer->GetStatus());
  v1::WeightVersion version = trainer_status.weight_version();
  if (mode != "disable") {
    v1::LoadCheckpointRequest request;
    if (mode == "resume_path") {
      request.set_path(settings_.resume_from_path.value_or(""));
    } else if (mode != "auto") {
      request.set_path(mode);
    }
    auto loaded = clients_.trainer->LoadCheckpoint(request);
    if (loaded.ok()) {
      for (const std::string& reason : loaded->skipped()) Log("passed over " + reason);
      const auto& ckpt = loaded->checkpoint();
      // The data position is an index into the order data.seed shuffled: under another seed
      // it would repeat some prompts of the epoch and skip others.
      if (settings_.shuffle && ckpt.has_data_position() &&
          ckpt.data_position().shuffle_seed() != settings_.data_seed) {
        return absl::FailedPreconditionError(absl::StrCat(
            "data.seed = ", settings_.data_seed, ", but ", ckpt.path(),
            " drew its prompts in the order of data.seed = ", ckpt.data_position().shuffle_seed(),
            ": resuming under another seed would repeat some prompts of the epoch and skip "
            "others; set data.seed=",
            ckpt.data_position().shuffle_seed(), ", or trainer.resume_mode=disable to start over"));
      }
      start_step_ = ckpt.global_step();
      {
        absl::MutexLock lock(&mu_);
        last_checkpoint_ = ckpt.path();
      }
      data::SamplerPosition position;
      position.epoch = ckpt.data_position().epoch();
      position.index = ckpt.data_position().index_in_epoch();
      RETURN_IF_ERROR(prompts_->Restore(position));
      version = ckpt.weight_version();
      const ResumeState state = DecodeResumeState(ckpt.coordinator_state());
      // The adaptive controller's coefficient continues where the run stopped.
      if (state.kl_coef.has_value()) step_->set_kl_coef(*state.kl_coef);
      if (state.first_validation.has_value()) first_validation_ = state.first_validation;
      if (!state.reference_checkpoint.empty()) {
        RETURN_IF_ERROR(
            AnchorReference(ResolveFromCheckpoint(state.reference_checkpoint, ckpt.path())));
      }
      run_log_->Truncate(start_step_);
      Log(absl::StrCat("resumed from ", ckpt.path(), " at step ", start_step_, " (epoch ",
                       position.epoch, ", prompt ", position.index, ")"));
      if (start_step_ >= total_steps_) {
        Log(absl::StrCat("the checkpoint is at step ", start_step_, ", and the run has ",
                         total_steps_,
                         " steps (trainer.total_training_steps, or the epochs): nothing is left "
                         "to train; raise it to go on"));
      }
    } else if (loaded.status().code() == absl::StatusCode::kNotFound && mode == "auto") {
      Log("no checkpoint to resume from; starting fresh");
    } else {
      return absl::Status(loaded.status().code(), absl::StrCat("trainer.resume_mode=", mode, ": ",
                                                               loaded.status().message()));
    }
  }
  // From the start (nothing to resume, or resume_mode=disable): the log starts over too, so
  // the step-0 validation is not recorded twice.
  if (start_step_ == 0) run_log_->Truncate(-1);
  {
    absl::MutexLock lock(&mu_);
    global_step_ = start_step_;
    weight_version_ = version;
    trained_position_ = prompts_->position();
  }
  pool_->SetCurrentVersion(version);
  metrics_.SetWeightVersion(version.version());
  return absl::OkStatus();
}

namespace {

// The last references.size() results of `published` answer for `references`: they are taken
// out of it, and an error names every reference that failed.
absl::Status TakeReferenceResults(const std::vector<v1::WeightTarget>& references,
                                  const std::string& what, v1::PublishWeightsResponse& published) {
  const int n = static_cast<int>(references.size());
  if (published.results_size() < n) {
    return absl::InternalError("the trainer's publish answered for fewer targets than asked");
  }
  const int first = published.results_size() - n;
  std::vector<std::string> failed;
  for (int i = 0; i < n; ++i) {
    const v1::WeightTargetResult& result = published.results(first + i);
    if (!result.ok()) failed.push_back(absl::StrCat(references[i].address(), ": ", result.error()));
  }
  published.mutable_results()->DeleteSubrange(first, n);
  if (failed.empty()) return absl::OkStatus();
  return absl::UnavailableError(
      absl::StrCat(what, " to the reference at ", absl::StrJoin(failed, "; ")));
}

}  // namespace

absl::Status Coordinator::WarmUp() {
  if (settings_.warmup_steps <= 0) return absl::OkStatus();
  RETURN_IF_ERROR(RunSftWarmUp(settings_, *clients_.trainer, *tokenizer_, *prompts_));
  // The replicas take the warmed-up weights before the first GRPO step. GRPO's KL term
  // anchors to the policy RL starts from, as in verl where the reference is the SFT model, so
  // the reference takes the same version from the trainer in the same publish.
  const bool anchor = settings_.use_kl_loss || settings_.use_kl_in_reward;
  v1::PublishWeightsRequest publish;
  for (auto& target : pool_->ReadyTargets()) *publish.add_targets() = std::move(target);
  for (auto& id : pool_->LostIds()) publish.add_suspended(std::move(id));
  std::vector<v1::WeightTarget> references;
  if (anchor) {
    ASSIGN_OR_RETURN(references, ReferenceTargets());
    for (const auto& target : references) *publish.add_targets() = target;
  }
  ASSIGN_OR_RETURN(auto published, clients_.trainer->PublishWeights(publish));
  if (anchor) {
    if (published.results_size() != publish.targets_size()) {
      return absl::InternalError("the trainer's publish answered for fewer targets than asked");
    }
    RETURN_IF_ERROR(TakeReferenceResults(references, "sending the warmed-up policy", published));
    // Saved apart from the step checkpoints: a resumed run, or a reference that restarts,
    // gets the same weights from the trainer again (checkpoints record the folder).
    v1::SaveCheckpointRequest save;
    save.set_global_step(0);
    save.set_directory((std::filesystem::path(settings_.checkpoint_dir) / "warmup").string());
    ASSIGN_OR_RETURN(auto saved, clients_.trainer->SaveCheckpoint(save));
    SetReferenceAnchor(saved.checkpoint().path(), published.weight_version().version());
  }
  pool_->ApplyPublishResults(published);
  pool_->SetCurrentVersion(published.weight_version());
  absl::MutexLock lock(&mu_);
  weight_version_ = published.weight_version();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::WeightTarget>> Coordinator::ReferenceTargets() const {
  auto addresses = ReplicaAddresses(settings_.reference_address);
  if (!addresses.ok()) {
    return absl::Status(
        addresses.status().code(),
        absl::StrCat("finding the reference replicas of ", settings_.reference_address, ": ",
                     addresses.status().message()));
  }
  std::vector<v1::WeightTarget> targets;
  for (const auto& address : *addresses) {
    v1::WeightTarget& target = targets.emplace_back();
    // The trainer's sender tells receivers apart by id.
    target.set_replica_id(addresses->size() == 1 ? "reference"
                                                 : absl::StrCat("reference/", address));
    target.set_address(address);
    target.set_kind(v1::WEIGHT_TARGET_KIND_REFERENCE);
  }
  return targets;
}

absl::StatusOr<uint64_t> Coordinator::SendReferenceWeights(const std::string& checkpoint) {
  const std::string what = absl::StrCat("sending the warmed-up policy of ", checkpoint);
  // Resolved again each time: a replaced or added replica is sent the weights too.
  auto references = ReferenceTargets();
  if (!references.ok()) {
    return absl::Status(references.status().code(),
                        absl::StrCat(what, ": ", references.status().message()));
  }
  v1::PublishWeightsRequest request;
  request.set_checkpoint(checkpoint);
  for (const auto& target : *references) *request.add_targets() = target;
  auto published = clients_.trainer->PublishWeights(request);
  if (!published.ok()) {
    return absl::Status(published.status().code(),
                        absl::StrCat(what, " to the reference at ", settings_.reference_address,
                                     ": ", published.status().message()));
  }
  if (published->results_size() != request.targets_size()) {
    return absl::InternalError(absl::StrCat(what, ": the trainer answered for ",
                                            published->results_size(), " of ",
                                            request.targets_size(), " references"));
  }
  RETURN_IF_ERROR(TakeReferenceResults(*references, what, *published));
  return published->weight_version().version();
}

absl::Status Coordinator::AnchorReference(const std::string& checkpoint) {
  ASSIGN_OR_RETURN(const uint64_t version, SendReferenceWeights(checkpoint));
  SetReferenceAnchor(checkpoint, version);
  return absl::OkStatus();
}

void Coordinator::SetReferenceAnchor(const std::string& checkpoint, uint64_t version) {
  reference_checkpoint_ = checkpoint;
  step_->SetReferenceAnchor(
      version, [this, checkpoint] { return SendReferenceWeights(checkpoint).status(); });
  Log(absl::StrCat("the KL reference is the warmed-up policy (weight version ", version,
                   ", saved in ", checkpoint, "), sent by the trainer"));
}

absl::Status Coordinator::Validate(int64_t global_step, bool before_warmup) {
  if (prompts_->num_validation_prompts() == 0) return absl::OkStatus();
  pool_->SyncReplicas();
  ASSIGN_OR_RETURN(auto prompts, prompts_->ValidationPrompts());
  ASSIGN_OR_RETURN(ValidationResult validation,
                   step_->Validate(prompts, ValidationSampling(settings_),
                                   settings_.val_batch_size.value_or(0)));
  auto& metrics = validation.metrics;
  const double mean = metrics["val/reward/mean"];
  if (!first_validation_.has_value()) first_validation_ = mean;
  last_validation_ = mean;
  metrics_.SetValidation(metrics);
  if (settings_.log_console) {
    std::printf("%s\n", ValidationLine(global_step, before_warmup, metrics).c_str());
    std::fflush(stdout);
  }
  RETURN_IF_ERROR(run_log_->LogValGenerations(global_step, validation.samples));
  if (before_warmup) return absl::OkStatus();  // the step-0 record holds the warmed-up model's
  metrics["training/global_step"] = static_cast<double>(global_step);
  return run_log_->Append(global_step, metrics);
}

absl::Status Coordinator::SaveCheckpoint(int64_t global_step) {
  v1::SaveCheckpointRequest request;
  request.set_global_step(global_step);
  data::SamplerPosition position;
  {
    absl::MutexLock lock(&mu_);
    position = trained_position_;
  }
  // The position after the last trained step: prompts drawn for steps generated ahead are
  // drawn (and generated) again after a resume.
  *request.mutable_data_position() =
      ToDataPosition(position, settings_.data_seed, global_step * settings_.train_batch_size);
  ResumeState state;
  state.first_validation = first_validation_;
  if (settings_.use_kl_in_reward) state.kl_coef = step_->kl_coef();
  state.reference_checkpoint = RelativeToRoot(reference_checkpoint_, settings_.checkpoint_dir);
  request.set_coordinator_state(EncodeResumeState(state));
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(auto response, clients_.trainer->SaveCheckpoint(request));
  {
    absl::MutexLock lock(&mu_);
    last_checkpoint_ = response.checkpoint().path();
  }
  Log(absl::StrFormat("checkpoint %s written in %.2fs", response.checkpoint().path(),
                      absl::ToDoubleSeconds(absl::Now() - start)));
  return absl::OkStatus();
}

bool Coordinator::WaitWhilePaused() {
  absl::MutexLock lock(&mu_);
  auto resumed = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !paused_ || stop_requested_; };
  if (paused_) {
    state_ = v1::RUN_STATE_PAUSED;
    mu_.Await(absl::Condition(&resumed));
  }
  state_ = v1::RUN_STATE_RUNNING;
  return !stop_requested_;
}

absl::StatusOr<bool> Coordinator::FinishStep(int64_t step, const DrawnStep& drawn,
                                             StepResult& result, absl::Time start,
                                             int64_t steps_done) {
  auto& m = result.metrics;
  const int64_t epoch = drawn.epoch;
  m["training/epoch"] = static_cast<double>(epoch);
  // Reward growth per epoch.
  if (epoch != epoch_of_sums_) {
    if (epoch_reward_steps_ > 0) previous_epoch_reward_ = epoch_reward_sum_ / epoch_reward_steps_;
    epoch_reward_sum_ = 0;
    epoch_reward_steps_ = 0;
    epoch_of_sums_ = epoch;
  }
  epoch_reward_sum_ += Get(m, "critic/score/mean");
  ++epoch_reward_steps_;
  metrics_.SetEpochRewards(epoch_reward_sum_ / epoch_reward_steps_,
                           previous_epoch_reward_.has_value(), previous_epoch_reward_.value_or(0));
  metrics_.RecordStep(step, m);
  metrics_.SetWeightVersion(result.weight_version.version());
  metrics_.SetReplicas(pool_->List(), result.weight_version.version());
  metrics_.SetRedispatchedSamples(pool_->counters().samples_redispatched);
  if (result.samples_dropped_stale > 0) metrics_.AddDroppedStale(result.samples_dropped_stale);
  if (m.count("rlmesh/staleness/max") > 0) {
    metrics_.SetStaleness(settings_.max_staleness, static_cast<int64_t>(m["rlmesh/staleness/max"]));
  }
  if (result.equal_reward_groups == result.groups_trained) {
    metrics_.AddEqualRewardStep();
    Log(absl::StrCat("step ", step,
                     ": every group had equal rewards, so every advantage is 0 "
                     "and this step teaches nothing; if this persists the policy has "
                     "collapsed or the task is too hard for it"));
  }
  RETURN_IF_ERROR(run_log_->Append(step, m));
  if (settings_.log_console) {
    run_log_->PrintProgress(step, m, absl::ToDoubleSeconds(absl::Now() - start), steps_done);
  }
  bool stop;
  {
    absl::MutexLock lock(&mu_);
    global_step_ = step;
    weight_version_ = result.weight_version;
    trained_position_ = drawn.position;
    data_position_ =
        ToDataPosition(drawn.position, settings_.data_seed, step * settings_.train_batch_size);
    last_metrics_ = m;
    stop = stop_requested_;
  }
  if (ValidationDue(step, total_steps_, settings_.test_freq)) RETURN_IF_ERROR(Validate(step));
  if (CheckpointDue(step, total_steps_, settings_.save_freq, stop)) {
    RETURN_IF_ERROR(SaveCheckpoint(step));
  }
  if (stop) Log(absl::StrCat("stopping after step ", step, " as requested"));
  return stop;
}

namespace {

absl::Status StepError(int64_t step, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("step ", step, ": ", status.message()));
}

}  // namespace

absl::StatusOr<bool> Coordinator::DynamicStep(int64_t step, absl::Time start, int64_t steps_done) {
  DynamicSamplingOptions options;
  options.train_batch_size = settings_.train_batch_size;
  options.n = static_cast<int32_t>(settings_.train_sampling.n);
  options.metric = settings_.filter_metric;
  options.max_num_gen_batches = settings_.max_num_gen_batches;
  DrawnStep last;
  auto batch = SampleDynamically(options, [&](int64_t round) -> absl::StatusOr<SampledRound> {
    if (round > 0) pool_->SyncReplicas();
    ASSIGN_OR_RETURN(last, prompts_->Draw(step, round));
    ASSIGN_OR_RETURN(StepRollout rollout, step_->Generate(step, last.prompts));
    return SampledRound{last.prompts, std::move(rollout)};
  });
  if (!batch.ok()) return StepError(step, batch.status());
  auto result = step_->Train(step, batch->prompts, std::move(batch->rollout), TrainOptions{});
  if (!result.ok()) return StepError(step, result.status());
  result->metrics["train/num_gen_batches"] = static_cast<double>(batch->rounds);
  result->metrics["rlmesh/filter_groups/dropped_groups"] =
      static_cast<double>(batch->dropped_groups);
  result->metrics["rlmesh/filter_groups/surplus_groups"] =
      static_cast<double>(batch->surplus_groups);
  // The sampler stands after the last round; the step trained on the groups kept.
  last.prompts = std::move(batch->prompts);
  return FinishStep(step, last, *result, start, steps_done);
}

absl::Status Coordinator::RunSynchronous(absl::Time start) {
  int64_t steps_done = 0;
  for (int64_t step = start_step_ + 1; step <= total_steps_; ++step) {
    if (!WaitWhilePaused()) break;
    pool_->SyncReplicas();
    if (settings_.filter_groups) {
      ASSIGN_OR_RETURN(const bool stop, DynamicStep(step, start, ++steps_done));
      if (stop) break;
      continue;
    }
    ASSIGN_OR_RETURN(const DrawnStep drawn, prompts_->Draw(step));
    auto result = step_->Run(step, drawn.prompts);
    if (!result.ok()) return StepError(step, result.status());
    ASSIGN_OR_RETURN(const bool stop, FinishStep(step, drawn, *result, start, ++steps_done));
    if (stop) break;
  }
  return absl::OkStatus();
}

absl::Status Coordinator::RunPipelined(absl::Time start) {
  // Generation of step s runs on W(s - 1 - k) (pipeline.h), so the update of step s (at
  // W(s - 1)) trains on samples exactly k versions old (fewer in the first k steps of a
  // start). With partial rollouts the replicas take a newer version between two decode steps,
  // and a sample of step s runs from W(s - 1 - k) or newer to whatever is newest when it
  // ends, so no sample is more than k versions old either way.
  const int64_t k = settings_.max_staleness;
  PipelineOptions options;
  options.first_step = start_step_ + 1;
  options.last_step = total_steps_;
  options.max_staleness = k;
  options.publish_waits_for_generation = !settings_.partial_rollout;
  int64_t steps_done = 0;
  absl::Time cycle_start = absl::Now();
  PipelineStages stages;
  stages.draw = [this](int64_t step) { return prompts_->Draw(step); };
  stages.generate = [this](int64_t step, const DrawnStep& drawn) {
    pool_->SyncReplicas();
    return step_->Sample(step, drawn.prompts);
  };
  stages.score = [this](int64_t, const DrawnStep& drawn, StepRollout& rollout) {
    return step_->Score(drawn.prompts, rollout);
  };
  if (step_->needs_reference()) {
    stages.reference = [this](int64_t, const DrawnStep& drawn, StepRollout& rollout) {
      return step_->ComputeReference(drawn.prompts, rollout);
    };
  }
  stages.proceed = [this]() { return WaitWhilePaused(); };
  stages.train = [&](StepWork work, double waited,
                     const std::function<absl::Status()>& before_publish) -> absl::StatusOr<bool> {
    TrainOptions train_options;
    train_options.step_start = cycle_start;
    train_options.books_of_generation_only = true;
    train_options.max_staleness = k;
    train_options.before_publish = before_publish;
    {
      absl::MutexLock lock(&mu_);
      train_options.trainer_version = weight_version_.version();
    }
    auto result =
        step_->Train(work.step, work.drawn.prompts, std::move(work.rollout), train_options);
    if (!result.ok()) return StepError(work.step, result.status());
    result->metrics["timing_s/wait_for_samples"] = waited;
    cycle_start = absl::Now();
    // Validation and checkpoint run while no generation does: the next generation waits for
    // this step to finish, so they see the version just published and the books of the steps
    // trained.
    return FinishStep(work.step, work.drawn, *result, start, ++steps_done);
  };
  return RunPipeline(options, stages);
}

absl::Status Coordinator::Run() {
  bool restored = false;  // a run that fails before has nothing new to say where to go on
  absl::Status status = [&]() -> absl::Status {
    RETURN_IF_ERROR(Restore());
    restored = true;
    pool_->StartHeartbeat();
    pool_->SyncReplicas();
    if (start_step_ == 0 && settings_.warmup_steps > 0) {
      // The run's starting point is the model as given, before the supervised warm-up.
      if (settings_.val_before_train) RETURN_IF_ERROR(Validate(0, /*before_warmup=*/true));
      RETURN_IF_ERROR(WarmUp());
    }
    if (settings_.val_before_train && start_step_ == 0) RETURN_IF_ERROR(Validate(0));
    const absl::Time start = absl::Now();
    return settings_.max_staleness > 0 ? RunPipelined(start) : RunSynchronous(start);
  }();
  absl::MutexLock lock(&mu_);
  if (!status.ok()) {
    state_ = v1::RUN_STATE_FAILED;
    error_ = status.ToString();
    // Where the run can go on from: the failure itself is the caller's to print.
    if (restored) {
      const std::string when = global_step_ > 0 ? absl::StrCat("after step ", global_step_)
                                                : std::string("before its first step");
      Log(last_checkpoint_.empty()
              ? absl::StrCat("the run stopped ", when,
                             "; it has no checkpoint to go on from (trainer.save_freq)")
              : absl::StrCat("the run stopped ", when, "; its newest checkpoint is ",
                             last_checkpoint_,
                             ": run again with trainer.resume_mode=auto to go on from it"));
    }
    return status;
  }
  state_ = v1::RUN_STATE_FINISHED;
  if (first_validation_.has_value() && last_validation_.has_value()) {
    std::printf("rlmesh: finished %lld steps; validation reward %.3f -> %.3f\n",
                static_cast<long long>(global_step_), *first_validation_, *last_validation_);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

void Coordinator::RequestStop() {
  absl::MutexLock lock(&mu_);
  stop_requested_ = true;
}

void Coordinator::Pause(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  paused_ = true;
  pause_reason_ = reason;
}

void Coordinator::Resume() {
  absl::MutexLock lock(&mu_);
  paused_ = false;
  pause_reason_.clear();
}

v1::GetCoordinatorStatusResponse Coordinator::Status() const {
  v1::GetCoordinatorStatusResponse status;
  for (const auto& replica : pool_->List()) *status.add_replicas() = replica;
  absl::MutexLock lock(&mu_);
  *status.mutable_data_position() = data_position_;
  status.set_state(state_);
  status.set_global_step(global_step_);
  status.set_total_steps(total_steps_);
  *status.mutable_weight_version() = weight_version_;
  for (const auto& [k, v] : last_metrics_) (*status.mutable_last_step_metrics())[k] = v;
  status.set_max_staleness(static_cast<int32_t>(settings_.max_staleness));
  status.set_error(error_);
  status.set_pause_reason(pause_reason_);
  return status;
}

}  // namespace rlmesh::coordinator
