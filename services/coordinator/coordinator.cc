#include "services/coordinator/coordinator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/data/prompt_fit.h"
#include "common/data/synthetic_tasks.h"
#include "common/status/nesting.h"
#include "common/status/status_macros.h"
#include "services/coordinator/val_generations.h"

namespace rlmesh::coordinator {

namespace {

void Log(const std::string& line) { std::fprintf(stderr, "coordinator: %s\n", line.c_str()); }

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

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

  // Prompts: the quickstart's synthetic task when one is set (it replaces the data files, as
  // the dry-run warns), else the data files.
  if (cfg.synthetic_task == "none" && !cfg.train_files.empty()) {
    data::DatasetOptions options;
    options.prompt_key = cfg.prompt_key;
    options.reward_fn_key = cfg.reward_fn_key;
    ASSIGN_OR_RETURN(train_rows_, data::ReadDataset(cfg.train_files, options));
    if (!cfg.val_files.empty()) {
      ASSIGN_OR_RETURN(val_rows_, data::ReadDataset(cfg.val_files, options));
    }
  } else if (cfg.synthetic_task != "none") {
    data::SyntheticTaskOptions options;
    options.task = cfg.synthetic_task;
    options.train_size = cfg.synthetic_train;
    options.val_size = cfg.synthetic_val;
    options.seed = cfg.seed;
    options.min_digits = static_cast<int>(cfg.synthetic_min_digits);
    options.max_digits = static_cast<int>(cfg.synthetic_max_digits);
    ASSIGN_OR_RETURN(auto dataset, data::MakeSyntheticDataset(options));
    train_rows_ = std::move(dataset.train);
    val_rows_ = std::move(dataset.val);
  } else {
    return absl::InvalidArgumentError(
        "data.train_files: expected at least one file (or rlmesh.quickstart.task)");
  }

  ASSIGN_OR_RETURN(const data::Truncation truncation, data::ParseTruncation(cfg.truncation));
  // Prompts with the chat template applied; with data.filter_overlong_prompts those over
  // max_prompt_length tokens leave `rows` (counted in `dropped`), else data.truncation
  // decides.
  auto encode_all = [&](std::vector<data::DataRow>& rows, std::vector<std::vector<int32_t>>& out,
                        int64_t* dropped) -> absl::Status {
    out.reserve(rows.size());
    tokenizer::ChatTemplateOptions options;
    options.add_generation_prompt = true;
    std::vector<data::DataRow> kept;
    for (auto& row : rows) {
      std::vector<tokenizer::ChatMessage> messages;
      for (const auto& m : row.prompt) {
        tokenizer::ChatMessage message;
        message.role = m.role;
        message.content = m.content;
        messages.push_back(std::move(message));
      }
      auto ids = tokenizer_->EncodeChat(messages, options,
                                        cfg.chat_template == "auto" ? "" : cfg.chat_template);
      if (!ids.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(row.source, ": cannot apply the chat template: ", ids.status().message()));
      }
      if (ids->empty())
        return absl::InvalidArgumentError(absl::StrCat(row.source, ": empty prompt"));
      if (cfg.filter_overlong_prompts &&
          static_cast<int64_t>(ids->size()) > cfg.max_prompt_length) {
        ++*dropped;
        continue;
      }
      auto fitted = data::FitPrompt(*ids, cfg.max_prompt_length, truncation);
      if (!fitted.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(row.source, ": ", fitted.status().message()));
      }
      out.push_back(*std::move(fitted));
      kept.push_back(std::move(row));
    }
    rows = std::move(kept);
    return absl::OkStatus();
  };
  int64_t dropped_train = 0, dropped_val = 0;
  const size_t train_rows = train_rows_.size(), val_rows = val_rows_.size();
  RETURN_IF_ERROR(encode_all(train_rows_, train_prompt_ids_, &dropped_train));
  RETURN_IF_ERROR(encode_all(val_rows_, val_prompt_ids_, &dropped_val));
  if (cfg.filter_overlong_prompts) {
    Log(absl::StrCat("data.filter_overlong_prompts: dropped ", dropped_train, " of ", train_rows,
                     " training and ", dropped_val, " of ", val_rows,
                     " validation prompts longer than data.max_prompt_length = ",
                     cfg.max_prompt_length, " tokens"));
  }
  if (train_rows_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.filter_overlong_prompts: every one of the ", train_rows,
        " training prompts is longer than data.max_prompt_length = ", cfg.max_prompt_length));
  }

  data::SamplerOptions sampler_options;
  sampler_options.batch_size = cfg.train_batch_size;
  sampler_options.shuffle = cfg.shuffle;
  sampler_options.seed = cfg.data_seed;
  auto sampler =
      data::EpochSampler::Create(static_cast<int64_t>(train_rows_.size()), sampler_options);
  if (!sampler.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.train_batch_size: ", sampler.status().message()));
  }
  sampler_ = std::move(sampler).value();
  total_steps_ = cfg.total_training_steps.has_value() && *cfg.total_training_steps > 0
                     ? *cfg.total_training_steps
                     : cfg.total_epochs * sampler_->steps_per_epoch();
  metrics_.SetTotalSteps(total_steps_);
  metrics_.SetStaleness(cfg.max_staleness, 0);

  RolloutPoolOptions pool_options;
  pool_options.max_samples_per_request = cfg.max_samples_per_request;
  pool_options.heartbeat = absl::Seconds(cfg.heartbeat_s);
  pool_options.evict_after = absl::Seconds(cfg.evict_after_s);
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
  step_options.seed = cfg.seed;
  step_options.norm_adv_by_std = cfg.norm_adv_by_std;
  step_options.rollout_is = cfg.rollout_is.value_or("");
  step_options.rollout_is_threshold = cfg.rollout_is_threshold;
  step_options.rollout_is_batch_normalize = cfg.rollout_is_batch_normalize;
  step_options.bypass_mode = cfg.bypass_mode;
  step_options.use_kl_loss = cfg.use_kl_loss;
  step_options.reward_timeout_s = cfg.reward_timeout_s;
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

  std::filesystem::create_directories(cfg.run_dir);
  metrics_path_ = (std::filesystem::path(cfg.run_dir) / "metrics.jsonl").string();
  Log(absl::StrCat(train_rows_.size(), " training prompts, ", val_rows_.size(),
                   " validation prompts, ", total_steps_, " steps of ", cfg.train_batch_size,
                   " prompts x ", step_options.n, " samples"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StepPrompt>> Coordinator::MakePrompts(
    const std::vector<data::DataRow>& rows, const std::vector<std::vector<int32_t>>& ids,
    const std::vector<int64_t>& indices, const std::string& uid_prefix) const {
  std::vector<StepPrompt> prompts;
  prompts.reserve(indices.size());
  for (int64_t index : indices) {
    const auto& row = rows[index];
    StepPrompt p;
    p.uid = absl::StrCat(uid_prefix, "/", index);
    p.token_ids = ids[index];
    tokenizer::DecodeOptions options;
    options.skip_special_tokens = true;
    ASSIGN_OR_RETURN(p.text, tokenizer_->Decode(p.token_ids, options));
    p.data_source = row.data_source;
    p.ground_truth = row.ground_truth;
    p.extra_info_json = row.extra_info_json;
    prompts.push_back(std::move(p));
  }
  return prompts;
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
      start_step_ = ckpt.global_step();
      data::SamplerPosition position;
      position.epoch = ckpt.data_position().epoch();
      position.index = ckpt.data_position().index_in_epoch();
      RETURN_IF_ERROR(sampler_->Restore(position));
      version = ckpt.weight_version();
      if (!ckpt.coordinator_state().empty()) {
        auto state = CheckNesting(ckpt.coordinator_state(), "coordinator_state").ok()
                         ? nlohmann::json::parse(ckpt.coordinator_state(), nullptr, false)
                         : nlohmann::json();
        // The adaptive controller's coefficient continues where the run stopped.
        if (state.is_object() && state.contains("kl_coef") && state["kl_coef"].is_number()) {
          step_->set_kl_coef(state["kl_coef"].get<double>());
        }
        if (state.is_object() && state.contains("first_validation") &&
            state["first_validation"].is_number()) {
          first_validation_ = state["first_validation"].get<double>();
        }
        if (state.is_object() && state.contains("reference_checkpoint") &&
            state["reference_checkpoint"].is_string()) {
          RETURN_IF_ERROR(AnchorReference(state["reference_checkpoint"].get<std::string>()));
        } else if (state.is_object() && state.contains("reference_path") &&
                   state["reference_path"].is_string()) {
          // Written before the reference took weights from the trainer: the Hugging Face
          // folder inside the warm-up checkpoint (<checkpoint>/actor/huggingface).
          RETURN_IF_ERROR(
              AnchorReference(std::filesystem::path(state["reference_path"].get<std::string>())
                                  .parent_path()
                                  .parent_path()
                                  .string()));
        }
      }
      TruncateMetricsLog(start_step_);
      Log(absl::StrCat("resumed from ", ckpt.path(), " at step ", start_step_, " (epoch ",
                       position.epoch, ", prompt ", position.index, ")"));
    } else if (loaded.status().code() == absl::StatusCode::kNotFound && mode == "auto") {
      Log("no checkpoint to resume from; starting fresh");
    } else {
      return absl::Status(loaded.status().code(), absl::StrCat("trainer.resume_mode=", mode, ": ",
                                                               loaded.status().message()));
    }
  }
  // From the start (nothing to resume, or resume_mode=disable): the log starts over too, so
  // the step-0 validation is not recorded twice.
  if (start_step_ == 0) TruncateMetricsLog(-1);
  {
    absl::MutexLock lock(&mu_);
    global_step_ = start_step_;
    weight_version_ = version;
    trained_position_ = sampler_->position();
  }
  pool_->SetCurrentVersion(version);
  metrics_.SetWeightVersion(version.version());
  return absl::OkStatus();
}

absl::Status Coordinator::WarmUp() {
  if (settings_.warmup_steps <= 0) return absl::OkStatus();
  std::mt19937_64 rng(settings_.seed ^ 0x5f7a3c1d2b4e6f80ULL);
  std::uniform_int_distribution<size_t> pick(0, train_rows_.size() - 1);
  const auto eos = tokenizer_->eos_token_id();
  if (!eos.has_value()) {
    return absl::FailedPreconditionError("rlmesh.warmup.sft_steps: the tokenizer has no eos token");
  }
  Log(absl::StrCat("warm-up: ", settings_.warmup_steps, " supervised steps of ",
                   settings_.warmup_batch_size, " examples (target: ", settings_.warmup_target,
                   ")"));
  const absl::Time start = absl::Now();
  v1::WeightVersion version;
  for (int64_t step = 1; step <= settings_.warmup_steps; ++step) {
    v1::SftStepRequest request;
    request.set_lr(settings_.warmup_lr);
    request.set_step(step);
    for (int64_t b = 0; b < settings_.warmup_batch_size; ++b) {
      const size_t index = pick(rng);
      std::string target = train_rows_[index].ground_truth;
      if (settings_.warmup_target == "shuffled_ground_truth")
        std::shuffle(target.begin(), target.end(), rng);
      ASSIGN_OR_RETURN(auto response, tokenizer_->Encode(target));
      response.push_back(*eos);
      auto* seq = request.add_sequences();
      seq->set_id(absl::StrCat("warmup", step, "/", b));
      seq->mutable_token_ids()->Add(train_prompt_ids_[index].begin(),
                                    train_prompt_ids_[index].end());
      seq->mutable_token_ids()->Add(response.begin(), response.end());
      seq->set_prompt_length(static_cast<int32_t>(train_prompt_ids_[index].size()));
    }
    ASSIGN_OR_RETURN(auto response, clients_.trainer->SftStep(request));
    version = response.weight_version();
    if (step % 25 == 0 || step == settings_.warmup_steps) {
      std::printf("warm-up %lld/%lld | sft loss %.4f | %s\n", static_cast<long long>(step),
                  static_cast<long long>(settings_.warmup_steps),
                  Get({response.metrics().begin(), response.metrics().end()}, "sft/loss"),
                  FormatDuration(absl::ToDoubleSeconds(absl::Now() - start)).c_str());
      std::fflush(stdout);
    }
  }
  // The replicas take the warmed-up weights before the first GRPO step. GRPO's KL term
  // anchors to the policy RL starts from, as in verl where the reference is the SFT model, so
  // the reference takes the same version from the trainer in the same publish.
  const bool anchor = settings_.use_kl_loss || settings_.use_kl_in_reward;
  v1::PublishWeightsRequest publish;
  for (auto& target : pool_->ReadyTargets()) *publish.add_targets() = std::move(target);
  for (auto& id : pool_->LostIds()) publish.add_suspended(std::move(id));
  if (anchor) *publish.add_targets() = ReferenceTarget();
  ASSIGN_OR_RETURN(auto published, clients_.trainer->PublishWeights(publish));
  if (anchor) {
    if (published.results_size() != publish.targets_size()) {
      return absl::InternalError("the trainer's publish answered for fewer targets than asked");
    }
    const v1::WeightTargetResult reference = published.results(publish.targets_size() - 1);
    published.mutable_results()->RemoveLast();
    if (!reference.ok()) {
      return absl::UnavailableError(
          absl::StrCat("sending the warmed-up policy to the reference at ",
                       settings_.reference_address, ": ", reference.error()));
    }
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

v1::WeightTarget Coordinator::ReferenceTarget() const {
  v1::WeightTarget target;
  target.set_replica_id("reference");
  target.set_address(settings_.reference_address);
  target.set_kind(v1::WEIGHT_TARGET_KIND_REFERENCE);
  return target;
}

absl::StatusOr<uint64_t> Coordinator::SendReferenceWeights(const std::string& checkpoint) {
  v1::PublishWeightsRequest request;
  request.set_checkpoint(checkpoint);
  *request.add_targets() = ReferenceTarget();
  auto published = clients_.trainer->PublishWeights(request);
  if (published.ok() && (published->results_size() != 1 || !published->results(0).ok())) {
    published = absl::UnavailableError(
        published->results_size() == 1 ? published->results(0).error() : "no result");
  }
  if (!published.ok()) {
    return absl::Status(
        published.status().code(),
        absl::StrCat("sending the warmed-up policy of ", checkpoint, " to the reference at ",
                     settings_.reference_address, ": ", published.status().message()));
  }
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
  if (val_rows_.empty()) return absl::OkStatus();
  pool_->SyncReplicas();
  std::vector<int64_t> indices(val_rows_.size());
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<int64_t>(i);
  ASSIGN_OR_RETURN(auto prompts, MakePrompts(val_rows_, val_prompt_ids_, indices, "val"));
  const config::SamplingSettings& val = settings_.val_sampling;
  v1::SamplingParams params;
  params.set_n(static_cast<int32_t>(std::max<int64_t>(1, val.n)));
  params.set_temperature(val.temperature);
  params.set_top_p(val.top_p);
  params.set_top_k(static_cast<int32_t>(val.top_k));
  params.set_max_new_tokens(static_cast<int32_t>(settings_.max_response_length));
  params.set_seed(settings_.seed);
  ASSIGN_OR_RETURN(ValidationResult validation,
                   step_->Validate(prompts, params, settings_.val_batch_size.value_or(0)));
  auto& metrics = validation.metrics;
  const double mean = metrics["val/reward/mean"];
  if (!first_validation_.has_value()) first_validation_ = mean;
  last_validation_ = mean;
  metrics_.SetValidation(metrics);
  if (settings_.log_console) {
    std::string line = before_warmup ? std::string("validation before warm-up:")
                                     : absl::StrFormat("validation @ step %d:", global_step);
    for (const auto& [name, value] : metrics) {
      if (name.rfind("val-core/", 0) == 0) {
        absl::StrAppend(&line, " ", name, " ", absl::StrFormat("%.3f", value));
      }
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  RETURN_IF_ERROR(LogValGenerations(global_step, validation.samples));
  if (before_warmup) return absl::OkStatus();  // the step-0 record holds the warmed-up model's
  metrics["training/global_step"] = static_cast<double>(global_step);
  return AppendMetrics(global_step, metrics);
}

absl::Status Coordinator::LogValGenerations(int64_t global_step,
                                            const std::vector<ValidationSample>& samples) {
  if (settings_.log_val_generations <= 0 || samples.empty()) return absl::OkStatus();
  std::vector<std::string> inputs;
  inputs.reserve(samples.size());
  for (const auto& s : samples) inputs.push_back(s.input);
  nlohmann::json record = {{"step", global_step}, {"samples", nlohmann::json::array()}};
  for (size_t index :
       PickValGenerations(inputs, static_cast<size_t>(settings_.log_val_generations))) {
    const ValidationSample& s = samples[index];
    record["samples"].push_back({{"input", s.input}, {"output", s.output}, {"score", s.score}});
    if (settings_.log_console) {
      std::printf("val generation @ step %lld | score %.3f | input %s | output %s\n",
                  static_cast<long long>(global_step), s.score,
                  nlohmann::json(s.input).dump().c_str(), nlohmann::json(s.output).dump().c_str());
    }
  }
  std::fflush(stdout);
  if (!settings_.log_jsonl) return absl::OkStatus();
  const std::string path =
      (std::filesystem::path(settings_.run_dir) / "val_generations.jsonl").string();
  std::ofstream out(path, std::ios::app);
  out << record.dump() << "\n";
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("cannot append to ", path));
  return absl::OkStatus();
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
  nlohmann::json state = nlohmann::json::object();
  if (first_validation_.has_value()) state["first_validation"] = *first_validation_;
  if (settings_.use_kl_in_reward) state["kl_coef"] = step_->kl_coef();
  if (!reference_checkpoint_.empty()) state["reference_checkpoint"] = reference_checkpoint_;
  request.set_coordinator_state(state.dump());
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(auto response, clients_.trainer->SaveCheckpoint(request));
  Log(absl::StrFormat("checkpoint %s written in %.2fs", response.checkpoint().path(),
                      absl::ToDoubleSeconds(absl::Now() - start)));
  return absl::OkStatus();
}

void Coordinator::TruncateMetricsLog(int64_t last_kept_step) {
  // A resumed run repeats the steps after its checkpoint: drop their old records so every step
  // appears once.
  std::ifstream in(metrics_path_);
  if (!in) return;
  std::stringstream kept;
  std::string line;
  while (std::getline(in, line)) {
    // A line that is not a step record (cut short, nested too deep, a non-number step) is
    // dropped with the steps after the checkpoint.
    if (!CheckNesting(line, metrics_path_).ok()) continue;
    auto record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
        record["step"].get<int64_t>() <= last_kept_step) {
      kept << line << "\n";
    }
  }
  in.close();
  const std::string tmp = metrics_path_ + ".tmp";
  std::ofstream(tmp) << kept.str();
  std::filesystem::rename(tmp, metrics_path_);
}

absl::Status Coordinator::AppendMetrics(int64_t global_step,
                                        const std::map<std::string, double>& metrics) {
  if (!settings_.log_jsonl) return absl::OkStatus();
  nlohmann::json record = nlohmann::json::object();
  record["step"] = global_step;
  for (const auto& [name, value] : metrics) {
    record[name] = std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
  }
  std::ofstream out(metrics_path_, std::ios::app);
  out << record.dump() << "\n";
  out.flush();
  if (!out) return absl::InternalError(absl::StrCat("cannot append to ", metrics_path_));
  return absl::OkStatus();
}

void Coordinator::PrintProgress(int64_t global_step, const std::map<std::string, double>& m,
                                double elapsed_s, int64_t steps_done) {
  const double eta = steps_done > 0 ? elapsed_s / steps_done * (total_steps_ - global_step) : 0;
  std::printf(
      "step %lld/%lld | reward %.3f | kl %.4f | resp_len %.1f | step %.2fs (gen %.2f reward %.2f "
      "ref %.2f old %.2f update %.2f sync %.2f) | ETA %s\n",
      static_cast<long long>(global_step), static_cast<long long>(total_steps_),
      Get(m, "critic/score/mean"), Get(m, "actor/kl_loss"), Get(m, "response_length/mean"),
      Get(m, "timing_s/step"), Get(m, "timing_s/gen"), Get(m, "timing_s/reward"),
      Get(m, "timing_s/ref"), Get(m, "timing_s/old_log_prob"), Get(m, "timing_s/update_actor"),
      Get(m, "timing_s/update_weights"), FormatDuration(eta).c_str());
  if (m.count("rlmesh/staleness/max") > 0) {
    // Asynchronous: how old the samples were, and how long the update waited for them.
    std::printf("  staleness %.0f-%.0f (bound %lld) | waited %.2fs for samples\n",
                Get(m, "rlmesh/staleness/min"), Get(m, "rlmesh/staleness/max"),
                static_cast<long long>(settings_.max_staleness),
                Get(m, "timing_s/wait_for_samples"));
  }
  std::fflush(stdout);
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

absl::StatusOr<Coordinator::DrawnStep> Coordinator::DrawStep(int64_t step) {
  DrawnStep drawn;
  const std::vector<int64_t> indices = sampler_->Next();
  drawn.position = sampler_->position();
  drawn.epoch = drawn.position.epoch;
  ASSIGN_OR_RETURN(drawn.prompts,
                   MakePrompts(train_rows_, train_prompt_ids_, indices, absl::StrCat("s", step)));
  return drawn;
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
  RETURN_IF_ERROR(AppendMetrics(step, m));
  if (settings_.log_console) {
    PrintProgress(step, m, absl::ToDoubleSeconds(absl::Now() - start), steps_done);
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
  const bool last = step == total_steps_;
  // As verl: every test_freq / save_freq steps and at the last step, but only where the
  // frequency is positive (-1: never). A requested stop always leaves a checkpoint.
  const int64_t test_freq = settings_.test_freq;
  if (test_freq > 0 && (step % test_freq == 0 || last)) RETURN_IF_ERROR(Validate(step));
  const int64_t save_freq = settings_.save_freq;
  if ((save_freq > 0 && (step % save_freq == 0 || last)) || stop) {
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

absl::Status Coordinator::RunSynchronous(absl::Time start) {
  int64_t steps_done = 0;
  for (int64_t step = start_step_ + 1; step <= total_steps_; ++step) {
    if (!WaitWhilePaused()) break;
    pool_->SyncReplicas();
    ASSIGN_OR_RETURN(const DrawnStep drawn, DrawStep(step));
    auto result = step_->Run(step, drawn.prompts);
    if (!result.ok()) return StepError(step, result.status());
    ASSIGN_OR_RETURN(const bool stop, FinishStep(step, drawn, *result, start, ++steps_done));
    if (stop) break;
  }
  return absl::OkStatus();
}

absl::Status Coordinator::RunPipelined(absl::Time start) {
  // Generation of step s starts once step s - 1 - k is finished (its weights published, its
  // validation and checkpoint done), and the weights of step t are published once the
  // generation of step t + k has finished: every generation runs on one version,
  // W(s - 1 - k), and the update of step s (at W(s - 1)) trains on samples exactly k
  // versions old (fewer in the first k steps of a start). With partial rollouts a publish
  // does not wait: the replicas take the new version between two decode steps, and a sample
  // of step s runs from W(s - 1 - k) or newer to whatever is newest when it ends, so no
  // sample is more than k versions old either way. A failed or stopped run waits for the
  // generation in progress to end before it returns.
  const int64_t k = settings_.max_staleness;
  struct Generated {
    DrawnStep drawn;
    absl::StatusOr<StepRollout> rollout;
  };
  absl::Mutex mu;
  std::map<int64_t, Generated> ready ABSL_GUARDED_BY(mu);
  int64_t generated_through ABSL_GUARDED_BY(mu) = start_step_;
  int64_t published_through ABSL_GUARDED_BY(mu) = start_step_;
  bool producer_done ABSL_GUARDED_BY(mu) = false;
  bool stopping ABSL_GUARDED_BY(mu) = false;

  std::thread producer([&]() {
    for (int64_t s = start_step_ + 1; s <= total_steps_; ++s) {
      {
        absl::MutexLock lock(&mu);
        auto may_start = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
          return stopping || published_through >= s - 1 - k;
        };
        mu.Await(absl::Condition(&may_start));
        if (stopping) break;
      }
      pool_->SyncReplicas();
      Generated generated{DrawnStep{}, absl::UnknownError("not generated")};
      auto drawn = DrawStep(s);
      if (drawn.ok()) {
        generated.drawn = *std::move(drawn);
        generated.rollout = step_->Generate(s, generated.drawn.prompts);
      } else {
        generated.rollout = drawn.status();
      }
      const bool failed = !generated.rollout.ok();
      absl::MutexLock lock(&mu);
      ready.emplace(s, std::move(generated));
      generated_through = s;
      if (failed) break;  // the consumer reports it at step s
    }
    absl::MutexLock lock(&mu);
    producer_done = true;
  });

  absl::Status status = [&]() -> absl::Status {
    int64_t steps_done = 0;
    absl::Time cycle_start = absl::Now();
    for (int64_t step = start_step_ + 1; step <= total_steps_; ++step) {
      if (!WaitWhilePaused()) break;
      const absl::Time wait_start = absl::Now();
      Generated generated{DrawnStep{}, absl::UnknownError("not generated")};
      {
        absl::MutexLock lock(&mu);
        auto has_step = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
          return ready.count(step) > 0 || producer_done;
        };
        mu.Await(absl::Condition(&has_step));
        auto it = ready.find(step);
        if (it == ready.end()) {
          return absl::InternalError(absl::StrCat("step ", step, ": no generation came"));
        }
        generated = std::move(it->second);
        ready.erase(it);
      }
      const double waited = absl::ToDoubleSeconds(absl::Now() - wait_start);
      if (!generated.rollout.ok()) return StepError(step, generated.rollout.status());
      TrainOptions options;
      options.step_start = cycle_start;
      options.books_of_generation_only = true;
      options.max_staleness = k;
      {
        absl::MutexLock lock(&mu_);
        options.trainer_version = weight_version_.version();
      }
      const int64_t last_needed = std::min(step + k, total_steps_);
      if (!settings_.partial_rollout) {
        options.before_publish = [&]() {
          absl::MutexLock lock(&mu);
          auto generated_ahead = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu) {
            return generated_through >= last_needed || producer_done;
          };
          mu.Await(absl::Condition(&generated_ahead));
          return absl::OkStatus();
        };
      }
      auto result =
          step_->Train(step, generated.drawn.prompts, *std::move(generated.rollout), options);
      if (!result.ok()) return StepError(step, result.status());
      result->metrics["timing_s/wait_for_samples"] = waited;
      cycle_start = absl::Now();
      // Validation and checkpoint run while no generation does: the producer waits for
      // published_through, so they see the version just published and the books of the
      // steps trained.
      ASSIGN_OR_RETURN(const bool stop,
                       FinishStep(step, generated.drawn, *result, start, ++steps_done));
      if (stop) break;
      {
        absl::MutexLock lock(&mu);
        published_through = step;
      }
    }
    return absl::OkStatus();
  }();
  {
    absl::MutexLock lock(&mu);
    stopping = true;
  }
  producer.join();
  return status;
}

absl::Status Coordinator::Run() {
  absl::Status status = [&]() -> absl::Status {
    RETURN_IF_ERROR(Restore());
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
