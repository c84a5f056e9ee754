#include "services/coordinator/grpo_step.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/grpo/grpo.h"
#include "common/status/status_macros.h"

namespace rlmesh::coordinator {

namespace {

double SecondsSince(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

// <prefix><kind>: the samples given rlmesh.reward.failed_item_score, for each kind of item
// error that can reach it (zero included, so that a dashboard sees the series from the
// start) and any other kind the reward service reported.
void AddRewardFailed(const std::string& prefix, const std::map<std::string, int64_t>& failed,
                     std::map<std::string, double>& metrics) {
  for (const char* kind : {"exception", "timeout", "remote", "invalid"}) {
    metrics[absl::StrCat(prefix, kind)] = 0;
  }
  for (const auto& [kind, count] : failed) {
    metrics[absl::StrCat(prefix, kind)] = static_cast<double>(count);
  }
}

struct Stats {
  double mean = 0, max = 0, min = 0;
};

Stats Summarize(const std::vector<double>& values) {
  Stats s;
  if (values.empty()) return s;
  s.max = *std::max_element(values.begin(), values.end());
  s.min = *std::min_element(values.begin(), values.end());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  return s;
}

void PutStats(std::map<std::string, double>& m, const std::string& prefix, const Stats& s) {
  m[prefix + "/mean"] = s.mean;
  m[prefix + "/max"] = s.max;
  m[prefix + "/min"] = s.min;
}

// Seed of a step's sampling: the run seed and the step mixed (splitmix64), so every step draws
// differently and a resumed run draws exactly what the unbroken one did.
uint64_t StepSeed(uint64_t seed, int64_t step) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(step + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

v1::TokenSequence MakeSequence(const std::string& id, const std::vector<int32_t>& prompt,
                               const v1::Sample& sample) {
  v1::TokenSequence seq;
  seq.set_id(id);
  seq.mutable_token_ids()->Add(prompt.begin(), prompt.end());
  seq.mutable_token_ids()->MergeFrom(sample.token_ids());
  seq.set_prompt_length(static_cast<int32_t>(prompt.size()));
  return seq;
}

// The step's sequences in group order, each named "<prompt uid>/<sample index>".
std::vector<v1::TokenSequence> StepSequences(const std::vector<StepPrompt>& prompts,
                                             const std::vector<GeneratedGroup>& groups, int32_t n) {
  std::vector<v1::TokenSequence> sequences;
  sequences.reserve(prompts.size() * static_cast<size_t>(n));
  for (size_t g = 0; g < prompts.size(); ++g) {
    for (int32_t i = 0; i < n; ++i) {
      sequences.push_back(MakeSequence(absl::StrCat(prompts[g].uid, "/", i), prompts[g].token_ids,
                                       groups[g].samples[i]));
    }
  }
  return sequences;
}

using PerToken = google::protobuf::RepeatedField<float>;

// Two per-token values of each response of a batch, right-padded into [B, W] float64 rows
// (W the longest response), with the 0/1 mask of each row's tokens.
struct TokenRows {
  torch::Tensor first, second, mask;
};

// Row i holds first(i) and second(i); first(i) sets the row's length and second(i) has at
// least as many values.
template <typename First, typename Second>
TokenRows PadTokenRows(int64_t b, First first, Second second) {
  int64_t width = 1;
  for (int64_t i = 0; i < b; ++i) width = std::max<int64_t>(width, first(i).size());
  TokenRows rows{torch::zeros({b, width}, torch::kFloat64),
                 torch::zeros({b, width}, torch::kFloat64),
                 torch::zeros({b, width}, torch::kFloat64)};
  auto f = rows.first.accessor<double, 2>();
  auto s = rows.second.accessor<double, 2>();
  auto m = rows.mask.accessor<double, 2>();
  for (int64_t i = 0; i < b; ++i) {
    const PerToken& a = first(i);
    const PerToken& c = second(i);
    for (int t = 0; t < a.size(); ++t) {
      f[i][t] = a.Get(t);
      s[i][t] = c.Get(t);
      m[i][t] = 1;
    }
  }
  return rows;
}

// The in-reward KL of a batch: per token the estimator (what the reward loses, times beta),
// and verl's current_kl for the controller: each sample's token mean, averaged over the
// samples.
struct InRewardKl {
  torch::Tensor per_token;  // [B, W] float64, 0 past each response
  double current_kl = 0;
};

absl::StatusOr<InRewardKl> MeasureInRewardKl(const v1::ComputeOldLogProbsResponse& old,
                                             const v1::ComputeLogProbsResponse& ref,
                                             grpo::KlEstimator type) {
  const int64_t b = old.results_size();
  const TokenRows rows = PadTokenRows(
      b, [&](int64_t i) -> const PerToken& { return old.results(i).logprobs(); },
      [&](int64_t i) -> const PerToken& { return ref.results(i).logprobs(); });
  const torch::Tensor& mask = rows.mask;
  ASSIGN_OR_RETURN(torch::Tensor kld, grpo::KlPenalty(rows.first, rows.second, type));
  kld = kld * mask;
  const torch::Tensor sums = kld.sum(1);
  const torch::Tensor means = sums / (mask.sum(1) + 1e-8);
  InRewardKl out;
  out.per_token = kld;
  out.current_kl = b > 0 ? means.mean().item<double>() : 0.0;
  return out;
}

// FailedPrecondition naming the first sample whose replica did not return one log-prob per
// token (real replicas always do); `why` says what needs them.
absl::Status CheckRolloutLogProbs(const std::vector<const v1::Sample*>& samples,
                                  const std::vector<std::string>& ids, absl::string_view why) {
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i]->logprobs_size() != samples[i]->token_ids_size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("sample ", ids[i], " came back from its replica with ",
                       samples[i]->logprobs_size(), " log-probs for ", samples[i]->token_ids_size(),
                       " tokens; ", why, " needs one per token"));
    }
  }
  return absl::OkStatus();
}

// The rollout's log-probs of the batch's samples as the answer of an old-log-prob pass: bypass
// mode trains with them as the old policy's.
v1::ComputeOldLogProbsResponse RolloutLogProbsAsOld(const std::vector<const v1::Sample*>& samples) {
  v1::ComputeOldLogProbsResponse out;
  for (const v1::Sample* sample : samples)
    *out.add_results()->mutable_logprobs() = sample->logprobs();
  return out;
}

// What the rollout correction (algorithm.rollout_correction) gives a step: its metrics, named
// as verl names them, and per sample the importance weight of each response token (empty
// without rollout_is).
struct Correction {
  std::map<std::string, double> metrics;
  std::vector<std::vector<float>> weights;
  // Per sample, the response positions rejection sampling leaves out (empty without
  // rollout_rs).
  std::vector<std::vector<int32_t>> rejected;
};

// old: the trainer's log-probs of each sample's response; samples: the rollout's, one per
// response token (CheckRolloutLogProbs).
absl::StatusOr<Correction> CorrectRollout(const v1::ComputeOldLogProbsResponse& old,
                                          const std::vector<const v1::Sample*>& samples,
                                          std::optional<grpo::RolloutIsLevel> level,
                                          double threshold, bool batch_normalize,
                                          const std::vector<grpo::RsOption>& rejection) {
  const int64_t b = static_cast<int64_t>(samples.size());
  const TokenRows rows = PadTokenRows(
      b, [&](int64_t i) -> const PerToken& { return old.results(i).logprobs(); },
      [&](int64_t i) -> const PerToken& { return samples[i]->logprobs(); });
  const torch::Tensor& old_logp = rows.first;
  const torch::Tensor& rollout_logp = rows.second;
  const torch::Tensor& mask = rows.mask;
  const int64_t width = old_logp.size(1);
  Correction out;
  ASSIGN_OR_RETURN(auto metrics, grpo::OffPolicyMetrics(old_logp, rollout_logp, mask));
  if (level.has_value()) {
    ASSIGN_OR_RETURN(auto is, grpo::RolloutIsWeights(old_logp, rollout_logp, mask, *level,
                                                     threshold, batch_normalize));
    metrics.merge(is.metrics);
    const auto w = is.weights.to(torch::kFloat32).contiguous();
    for (int64_t i = 0; i < b; ++i) {
      const float* row = w.data_ptr<float>() + i * width;
      out.weights.emplace_back(row, row + samples[i]->token_ids_size());
    }
  }
  if (!rejection.empty()) {
    // On the unrejected mask, as verl: the weights and the metrics above see every token.
    ASSIGN_OR_RETURN(auto rs, grpo::RolloutRejection(old_logp, rollout_logp, mask, rejection));
    metrics.merge(rs.metrics);
    const auto kept = rs.mask.to(torch::kFloat64).contiguous();
    for (int64_t i = 0; i < b; ++i) {
      std::vector<int32_t> rejected;
      for (int32_t t = 0; t < samples[i]->token_ids_size(); ++t) {
        if (kept.data_ptr<double>()[i * width + t] == 0) rejected.push_back(t);
      }
      out.rejected.push_back(std::move(rejected));
    }
  }
  for (const auto& [name, value] : metrics)
    out.metrics[absl::StrCat("rollout_corr/", name)] = value;
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpoStep>> GrpoStep::Create(const GrpoStepOptions& options,
                                                           RolloutPool* pool, RewardClient* reward,
                                                           ReferenceClient* reference,
                                                           TrainerClient* trainer,
                                                           DecodeFn decode) {
  RETURN_IF_ERROR(grpo::CheckOverlongBuffer(options.overlong));
  auto kl_penalty = grpo::ParseKlType(options.kl_penalty);
  if (!kl_penalty.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("algorithm.kl_penalty: ", kl_penalty.status().message()));
  }
  ASSIGN_OR_RETURN(grpo::KlController kl_ctrl,
                   grpo::KlController::Create(options.kl_ctrl_type, options.kl_coef,
                                              options.target_kl, options.kl_horizon));
  std::optional<grpo::RolloutIsLevel> rollout_is;
  if (!options.rollout_is.empty()) {
    auto level = grpo::ParseRolloutIsLevel(options.rollout_is);
    if (!level.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("algorithm.rollout_correction.", level.status().message()));
    }
    if (options.bypass_mode) {
      return absl::InvalidArgumentError(
          "algorithm.rollout_correction.rollout_is: bypass_mode's ppo_clip loss applies no "
          "importance weights; set rollout_is to null");
    }
    rollout_is = *level;
  }
  if (!(options.rollout_is_threshold > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("algorithm.rollout_correction.rollout_is_threshold: expected a value > 0, "
                     "got ",
                     options.rollout_is_threshold));
  }
  ASSIGN_OR_RETURN(const grpo::AdvEstimator adv_estimator,
                   grpo::ParseAdvEstimator(options.adv_estimator));
  std::vector<grpo::RsOption> rollout_rs;
  if (!options.rollout_rs.empty()) {
    if (options.bypass_mode) {
      return absl::InvalidArgumentError(
          "algorithm.rollout_correction.rollout_rs: in bypass mode the old log-probs are the "
          "rollout's, so no token is ever out of bounds; set rollout_rs to null");
    }
    ASSIGN_OR_RETURN(rollout_rs,
                     grpo::ParseRolloutRs(options.rollout_rs, options.rollout_rs_threshold));
  }
  auto step = std::unique_ptr<GrpoStep>(new GrpoStep(options, *kl_penalty, kl_ctrl, pool, reward,
                                                     reference, trainer, std::move(decode)));
  step->rollout_is_ = rollout_is;
  step->adv_estimator_ = adv_estimator;
  step->rollout_rs_ = std::move(rollout_rs);
  return step;
}

GrpoStep::GrpoStep(const GrpoStepOptions& options, grpo::KlEstimator kl_penalty,
                   grpo::KlController kl_ctrl, RolloutPool* pool, RewardClient* reward,
                   ReferenceClient* reference, TrainerClient* trainer, DecodeFn decode)
    : options_(options),
      kl_penalty_(kl_penalty),
      kl_ctrl_(kl_ctrl),
      pool_(pool),
      reward_(reward),
      reference_(reference),
      trainer_(trainer),
      decode_(std::move(decode)) {}

absl::StatusOr<GrpoStep::Scored> GrpoStep::GenerateAndScore(const std::vector<StepPrompt>& prompts,
                                                            const v1::SamplingParams& params,
                                                            const std::string& tag,
                                                            double* gen_seconds,
                                                            double* reward_seconds) {
  Scored out;
  const absl::Time start = absl::Now();
  RETURN_IF_ERROR(SampleGroups(prompts, params, tag, out));
  *gen_seconds = SecondsSince(start);
  // Validation: the rule scorers, also with a reward model (verl validates with the rules).
  RETURN_IF_ERROR(ScoreGroups(prompts, params.n(), out, /*training=*/false));
  *reward_seconds = out.reward_seconds;
  return out;
}

absl::Status GrpoStep::SampleGroups(const std::vector<StepPrompt>& prompts,
                                    const v1::SamplingParams& params, const std::string& tag,
                                    Scored& out) {
  std::vector<PromptToGenerate> to_generate;
  to_generate.reserve(prompts.size());
  for (const auto& p : prompts) to_generate.push_back({p.uid, p.token_ids});
  const std::map<std::string, double> compute_before = pool_->ComputeSecondsByReplica();
  ASSIGN_OR_RETURN(out.groups, pool_->Generate(to_generate, params, tag));
  // Replicas generate in parallel: the phase's compute is the busiest replica's.
  for (const auto& [id, after] : pool_->ComputeSecondsByReplica()) {
    auto before = compute_before.find(id);
    if (before != compute_before.end()) {
      out.gen_compute_seconds = std::max(out.gen_compute_seconds, after - before->second);
    }
  }
  return absl::OkStatus();
}

absl::Status GrpoStep::ScoreGroups(const std::vector<StepPrompt>& prompts, int32_t n, Scored& out,
                                   bool training) {
  if (out.groups.size() != prompts.size()) {
    return absl::InternalError(
        absl::StrCat("scoring ", out.groups.size(), " groups for ", prompts.size(), " prompts"));
  }
  const absl::Time start = absl::Now();
  out.scores.clear();
  out.texts.clear();
  v1::ScoreRequest request;
  request.set_timeout_seconds(options_.reward_timeout_s);
  // reward_model.enable: the model's score replaces the rule score of training samples.
  request.set_use_reward_model(training && options_.use_reward_model);
  for (size_t g = 0; g < prompts.size(); ++g) {
    for (int32_t i = 0; i < n; ++i) {
      const v1::Sample& sample = out.groups[g].samples[i];
      std::vector<int32_t> ids(sample.token_ids().begin(), sample.token_ids().end());
      ASSIGN_OR_RETURN(std::string text, decode_(ids));
      auto* item = request.add_items();
      item->set_id(absl::StrCat(prompts[g].uid, "/", i));
      item->set_data_source(prompts[g].data_source);
      item->set_prompt(prompts[g].text);
      out.texts.push_back(text);
      item->set_response(std::move(text));
      item->set_ground_truth(prompts[g].ground_truth);
      item->set_extra_info_json(prompts[g].extra_info_json);
    }
  }
  ASSIGN_OR_RETURN(v1::ScoreResponse scored, reward_->Score(request));
  out.reward_compute_seconds = scored.compute_seconds();
  if (scored.results_size() != request.items_size()) {
    return absl::InternalError(absl::StrCat("reward service returned ", scored.results_size(),
                                            " results for ", request.items_size(), " items"));
  }
  for (int k = 0; k < scored.results_size(); ++k) {
    if (scored.results(k).id() != request.items(k).id()) {
      return absl::InternalError(absl::StrCat("reward result ", k, " has id \"",
                                              scored.results(k).id(), "\", expected \"",
                                              request.items(k).id(), "\""));
    }
  }
  // Items that failed for a passing reason (a scoring deadline, a remote scorer away) are
  // scored again, up to kRewardItemAttempts calls in all; the others would fail the same way.
  for (int attempt = 2; attempt <= kRewardItemAttempts; ++attempt) {
    v1::ScoreRequest again;
    again.set_timeout_seconds(request.timeout_seconds());
    again.set_use_reward_model(request.use_reward_model());
    std::vector<int> where;
    for (int k = 0; k < scored.results_size(); ++k) {
      const auto& kind = scored.results(k).error_kind();
      if (!scored.results(k).error().empty() && (kind == "timeout" || kind == "remote")) {
        *again.add_items() = request.items(k);
        where.push_back(k);
      }
    }
    if (where.empty()) break;
    std::fprintf(stderr, "coordinator: scoring %zu samples again (attempt %d of %d): %s\n",
                 where.size(), attempt, kRewardItemAttempts,
                 scored.results(where[0]).error().c_str());
    ++out.reward_retries;
    ASSIGN_OR_RETURN(v1::ScoreResponse retried, reward_->Score(again));
    if (retried.results_size() != again.items_size()) {
      return absl::InternalError(absl::StrCat("reward service returned ", retried.results_size(),
                                              " results for ", again.items_size(), " items"));
    }
    out.reward_compute_seconds += retried.compute_seconds();
    for (size_t j = 0; j < where.size(); ++j) {
      *scored.mutable_results(where[j]) = retried.results(static_cast<int>(j));
    }
  }
  out.scores.resize(request.items_size());
  out.extras.assign(request.items_size(), {});
  out.reward_failed.clear();
  std::map<std::string, int64_t> failed_by_kind;
  std::string first_error;
  int64_t errors = 0;  // items unscored after every attempt (the step then fails)
  for (int k = 0; k < scored.results_size(); ++k) {
    const auto& result = scored.results(k);
    if (result.error_kind() == "unknown_data_source") {
      // No scorer will ever score these rows: training on zeros to the end would lie.
      return absl::FailedPreconditionError(
          absl::StrCat("reward for sample ", result.id(), " (data_source \"",
                       request.items(k).data_source(), "\"): ", result.error(),
                       "; fix the dataset's data_source, or score it with a reward file "
                       "(custom_reward_function.path, verl's way) or a RewardService at "
                       "rlmesh.reward.custom_address"));
    }
    if (!result.error().empty()) {
      ++errors;
      ++failed_by_kind[result.error_kind().empty() ? "unknown" : result.error_kind()];
      if (first_error.empty()) first_error = absl::StrCat(result.id(), ": ", result.error());
      out.scores[k] = options_.failed_item_score.value_or(0.0);
    } else {
      out.scores[k] = result.score();
      out.extras[k].insert(result.extra_values().begin(), result.extra_values().end());
    }
  }
  if (errors > 0) {
    std::string kinds;
    for (const auto& [kind, count] : failed_by_kind) {
      absl::StrAppend(&kinds, kinds.empty() ? "" : ", ", count, " ", kind);
    }
    if (!options_.failed_item_score.has_value()) {
      // Unasked, a score of 0 would teach the policy that these responses are wrong; the step
      // stops instead, and the run with it, resumable from the last checkpoint.
      return absl::UnavailableError(absl::StrCat(
          errors, " of ", request.items_size(), " samples could not be scored (", kinds, ") after ",
          kRewardItemAttempts,
          " attempts for passing failures; not training on them (rlmesh.reward.failed_item_score "
          "would score them instead). First: ",
          first_error));
    }
    std::fprintf(stderr,
                 "coordinator: %lld of %d samples scored %g (rlmesh.reward.failed_item_score) "
                 "after their scoring failed (%s). First: %s\n",
                 static_cast<long long>(errors), request.items_size(), *options_.failed_item_score,
                 kinds.c_str(), first_error.c_str());
    out.reward_failed = std::move(failed_by_kind);
  }
  // DAPO's overlong shaping, on the score of every sample by its response's token count.
  out.overlong_rewards.clear();
  if (options_.overlong.enable) {
    for (size_t g = 0; g < prompts.size(); ++g) {
      for (int32_t i = 0; i < n; ++i) {
        const double shaped =
            grpo::OverlongReward(out.groups[g].samples[i].token_ids_size(), options_.overlong);
        out.scores[g * n + i] += shaped;
        out.overlong_rewards.push_back(shaped);
      }
    }
  }
  out.reward_seconds = SecondsSince(start);
  return absl::OkStatus();
}

std::vector<size_t> FreshGroups(const std::vector<GeneratedGroup>& groups, uint64_t trainer_version,
                                int64_t max_staleness) {
  std::vector<size_t> fresh;
  for (size_t g = 0; g < groups.size(); ++g) {
    const bool all_fresh =
        std::all_of(groups[g].samples.begin(), groups[g].samples.end(), [&](const v1::Sample& s) {
          return s.weight_version() + static_cast<uint64_t>(max_staleness) >= trainer_version;
        });
    if (all_fresh) fresh.push_back(g);
  }
  return fresh;
}

absl::StatusOr<StepResult> GrpoStep::Run(int64_t global_step,
                                         const std::vector<StepPrompt>& prompts) {
  ASSIGN_OR_RETURN(StepRollout rollout, Generate(global_step, prompts));
  return Train(global_step, prompts, std::move(rollout), TrainOptions{});
}

absl::StatusOr<StepRollout> GrpoStep::Generate(int64_t global_step,
                                               const std::vector<StepPrompt>& prompts) {
  ASSIGN_OR_RETURN(StepRollout rollout, Sample(global_step, prompts));
  RETURN_IF_ERROR(Score(prompts, rollout));
  return rollout;
}

absl::StatusOr<StepRollout> GrpoStep::Sample(int64_t global_step,
                                             const std::vector<StepPrompt>& prompts) {
  v1::SamplingParams params;
  params.set_n(options_.n);
  params.set_temperature(options_.temperature);
  params.set_top_p(options_.top_p);
  params.set_top_k(options_.top_k);
  params.set_max_new_tokens(options_.max_response_length);
  params.set_seed(StepSeed(options_.seed, global_step));
  const absl::Time start = absl::Now();
  StepRollout rollout;
  rollout.pool_before = pool_->counters();
  RETURN_IF_ERROR(SampleGroups(prompts, params, absl::StrCat("step", global_step), rollout));
  rollout.gen_seconds = SecondsSince(start);
  rollout.start = start;
  rollout.pool_after = pool_->counters();
  return rollout;
}

absl::Status GrpoStep::Score(const std::vector<StepPrompt>& prompts, StepRollout& rollout) {
  return ScoreGroups(prompts, options_.n, rollout, /*training=*/true);
}

absl::Status GrpoStep::ComputeReference(const std::vector<StepPrompt>& prompts,
                                        StepRollout& rollout) {
  if (!needs_reference()) return absl::OkStatus();
  if (rollout.groups.size() != prompts.size()) {
    return absl::InternalError(absl::StrCat("reference log-probs of ", rollout.groups.size(),
                                            " groups for ", prompts.size(), " prompts"));
  }
  ASSIGN_OR_RETURN(ReferencePass pass,
                   RunReference(StepSequences(prompts, rollout.groups, options_.n)));
  rollout.reference = std::move(pass);
  return absl::OkStatus();
}

absl::StatusOr<ReferencePass> GrpoStep::RunReference(
    const std::vector<v1::TokenSequence>& sequences) {
  const absl::Time t = absl::Now();
  ReferencePass pass;
  v1::ComputeLogProbsRequest request;
  for (const auto& s : sequences) *request.add_sequences() = s;
  // verl divides by rollout.temperature in every log-prob pass, greedy sampling or not.
  request.set_temperature(options_.logprob_temperature);
  pass.request_bytes = request.ByteSizeLong();
  ASSIGN_OR_RETURN(pass.response, reference_->ComputeLogProbs(request));
  if (reference_anchor_.has_value() &&
      pass.response.weight_version().version() != *reference_anchor_) {
    // A restarted reference holds the initial model: send it the warmed-up policy again
    // rather than anchor the KL term elsewhere.
    std::fprintf(stderr,
                 "coordinator: the reference answers with weight version %llu, not the "
                 "warmed-up %llu; sending it again\n",
                 static_cast<unsigned long long>(pass.response.weight_version().version()),
                 static_cast<unsigned long long>(*reference_anchor_));
    RETURN_IF_ERROR(reanchor_());
    ASSIGN_OR_RETURN(pass.response, reference_->ComputeLogProbs(request));
    ++pass.reanchored;
    if (pass.response.weight_version().version() != *reference_anchor_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the reference answers with weight version ", pass.response.weight_version().version(),
          " after it was sent the warmed-up policy (version ", *reference_anchor_, ")"));
    }
  }
  if (pass.response.results_size() != static_cast<int>(sequences.size())) {
    return absl::InternalError("log-prob results do not match the batch size");
  }
  pass.seconds = SecondsSince(t);
  return pass;
}

absl::StatusOr<StepResult> GrpoStep::Train(int64_t global_step,
                                           const std::vector<StepPrompt>& all_prompts,
                                           StepRollout scored, const TrainOptions& train_options) {
  const absl::Time step_start = train_options.step_start.value_or(scored.start);
  StepResult result;
  auto& m = result.metrics;
  const int32_t n = options_.n;
  const double gen_s = scored.gen_seconds, reward_s = scored.reward_seconds;
  result.reward_retries = scored.reward_retries;
  if (scored.groups.size() != all_prompts.size() ||
      scored.scores.size() != all_prompts.size() * static_cast<size_t>(n)) {
    return absl::InternalError(absl::StrCat("step ", global_step, ": the rollout holds ",
                                            scored.groups.size(), " groups for ",
                                            all_prompts.size(), " prompts"));
  }

  // Staleness: how many versions each sample's first token lags the policy being updated.
  // Groups with a sample beyond the bound are left out of the update, counted.
  std::vector<StepPrompt> prompts = all_prompts;
  if (train_options.trainer_version.has_value()) {
    const uint64_t version = *train_options.trainer_version;
    std::vector<double> staleness;
    std::map<uint64_t, int64_t> histogram;  // staleness -> samples
    uint64_t widest_span = 0;
    int64_t spanning = 0;
    for (const auto& group : scored.groups) {
      for (const auto& s : group.samples) {
        const uint64_t lag = s.weight_version() >= version ? 0 : version - s.weight_version();
        staleness.push_back(static_cast<double>(lag));
        histogram[lag] += 1;
        // Partial rollouts: newer weights took over while the sample ran.
        const uint64_t span = s.last_weight_version() > s.weight_version()
                                  ? s.last_weight_version() - s.weight_version()
                                  : 0;
        widest_span = std::max(widest_span, span);
        if (span > 0) ++spanning;
      }
    }
    PutStats(m, "rlmesh/staleness", Summarize(staleness));
    for (const auto& [lag, count] : histogram) {
      m[absl::StrCat("rlmesh/staleness/samples_at_", lag)] = static_cast<double>(count);
    }
    m["rlmesh/version_span/max"] = static_cast<double>(widest_span);
    m["rlmesh/samples_spanning_versions"] = static_cast<double>(spanning);
    const std::vector<size_t> fresh =
        FreshGroups(scored.groups, version, train_options.max_staleness);
    if (fresh.size() != scored.groups.size()) {
      result.samples_dropped_stale = static_cast<int64_t>(scored.groups.size() - fresh.size()) * n;
      std::fprintf(
          stderr,
          "coordinator: step %lld: %lld samples (%zu groups) were started from weights "
          "more than rlmesh.max_staleness = %lld versions older than the policy "
          "(version %llu); not training on them\n",
          static_cast<long long>(global_step), static_cast<long long>(result.samples_dropped_stale),
          scored.groups.size() - fresh.size(), static_cast<long long>(train_options.max_staleness),
          static_cast<unsigned long long>(version));
      if (fresh.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "every sample of step ", global_step, " is older than rlmesh.max_staleness = ",
            train_options.max_staleness, " versions (policy at version ", version, ")"));
      }
      StepRollout kept = scored;
      kept.groups.clear();
      kept.scores.clear();
      kept.texts.clear();
      kept.overlong_rewards.clear();
      kept.extras.clear();
      if (kept.reference.has_value()) kept.reference->response.clear_results();
      prompts.clear();
      for (size_t g : fresh) {
        prompts.push_back(all_prompts[g]);
        kept.groups.push_back(scored.groups[g]);
        if (kept.reference.has_value()) {
          for (int32_t i = 0; i < n; ++i) {
            *kept.reference->response.add_results() =
                scored.reference->response.results(static_cast<int>(g) * n + i);
          }
        }
        kept.scores.insert(kept.scores.end(), scored.scores.begin() + g * n,
                           scored.scores.begin() + (g + 1) * n);
        kept.texts.insert(kept.texts.end(), scored.texts.begin() + g * n,
                          scored.texts.begin() + (g + 1) * n);
        // Per-sample lists that are present keep the kept groups' samples, so that the
        // reward/overlong and reward_extra_info metrics describe what is trained on.
        if (!scored.overlong_rewards.empty()) {
          kept.overlong_rewards.insert(kept.overlong_rewards.end(),
                                       scored.overlong_rewards.begin() + g * n,
                                       scored.overlong_rewards.begin() + (g + 1) * n);
        }
        if (!scored.extras.empty()) {
          kept.extras.insert(kept.extras.end(), scored.extras.begin() + g * n,
                             scored.extras.begin() + (g + 1) * n);
        }
      }
      scored = std::move(kept);
    }
    m["rlmesh/samples_dropped_stale"] = static_cast<double>(result.samples_dropped_stale);
  }
  result.groups_trained = static_cast<int64_t>(prompts.size());
  const PoolCounters pool_before = scored.pool_before;

  // The sequences, in group order.
  std::vector<v1::TokenSequence> sequences;
  std::vector<const v1::Sample*> samples;
  std::vector<std::string> sample_ids;
  std::vector<double> response_lengths, prompt_lengths;
  // verl's clip ratios: the share of samples whose prompt, or response, is exactly as long as
  // its limit (a prompt truncated to it, a response cut at it or ending there).
  int64_t total_tokens = 0, clipped = 0, prompts_clipped = 0;
  for (size_t g = 0; g < prompts.size(); ++g) {
    for (int32_t i = 0; i < n; ++i) {
      const v1::Sample& sample = scored.groups[g].samples[i];
      samples.push_back(&sample);
      sample_ids.push_back(absl::StrCat(prompts[g].uid, "/", i));
      sequences.push_back(MakeSequence(sample_ids.back(), prompts[g].token_ids, sample));
      response_lengths.push_back(sample.token_ids_size());
      prompt_lengths.push_back(static_cast<double>(prompts[g].token_ids.size()));
      total_tokens += static_cast<int64_t>(prompts[g].token_ids.size()) + sample.token_ids_size();
      if (sample.token_ids_size() == options_.max_response_length) ++clipped;
      if (static_cast<int64_t>(prompts[g].token_ids.size()) == options_.max_prompt_length) {
        ++prompts_clipped;
      }
    }
  }
  for (const auto& seq : sequences) {
    if (seq.token_ids_size() <= seq.prompt_length()) {
      return absl::InternalError(absl::StrCat("sample ", seq.id(), " has an empty response"));
    }
  }

  // Reference and old log-probs run in parallel: they are independent services. The
  // pipelined loop computed the reference's already, while an earlier step trained.
  // verl divides by rollout.temperature in every log-prob pass, greedy sampling or not.
  const double temperature = options_.logprob_temperature;
  std::future<absl::StatusOr<ReferencePass>> ref_future;
  if (needs_reference() && !scored.reference.has_value()) {
    ref_future = std::async(std::launch::async, [&]() { return RunReference(sequences); });
  }
  absl::Time logprob_start = absl::Now();
  v1::ComputeOldLogProbsRequest old_request;
  absl::StatusOr<v1::ComputeOldLogProbsResponse> old;
  if (options_.bypass_mode) {
    // The rollout's log-probs are the old policy's: no pass over the batch on the trainer.
    RETURN_IF_ERROR(
        CheckRolloutLogProbs(samples, sample_ids, "algorithm.rollout_correction.bypass_mode"));
    old = RolloutLogProbsAsOld(samples);
  } else {
    for (const auto& s : sequences) *old_request.add_sequences() = s;
    old_request.set_temperature(temperature);
    old_request.set_calculate_entropy(false);
    // The trainer keeps the sequences and their old log-probs for the update, which then names
    // each sequence by id only (the compact step, docs/api.md).
    old_request.set_keep(true);
    old = trainer_->ComputeOldLogProbs(old_request);
  }
  const double old_s = SecondsSince(logprob_start);
  ReferencePass reference;
  const bool reference_ahead = scored.reference.has_value();
  if (needs_reference()) {
    if (reference_ahead) {
      reference = std::move(*scored.reference);
    } else {
      auto ref_or = ref_future.get();
      if (!ref_or.ok()) return ref_or.status();
      reference = *std::move(ref_or);
    }
  }
  const double ref_s = reference.seconds;
  const int64_t reanchored = reference.reanchored;
  const size_t ref_request_bytes = reference.request_bytes;
  const v1::ComputeLogProbsResponse& ref = reference.response;
  if (!old.ok()) return old.status();
  if (old->results_size() != static_cast<int>(sequences.size()) ||
      (needs_reference() && ref.results_size() != static_cast<int>(sequences.size()))) {
    return absl::InternalError("log-prob results do not match the batch size");
  }
  for (size_t k = 0; k < samples.size(); ++k) {
    const int32_t len = samples[k]->token_ids_size();
    if (old->results(k).logprobs_size() != len ||
        (needs_reference() && ref.results(k).logprobs_size() != len)) {
      return absl::InternalError(absl::StrCat("log-probs of ", sample_ids[k],
                                              " do not have one value per response token"));
    }
  }

  // The rollout correction, before the advantages as in verl: the off-policy metrics (when
  // every sample has its log-probs, as real replicas' do), the importance weights with
  // rollout_is and the rejected tokens with rollout_rs, which need them. In bypass mode the old
  // log-probs are the rollout's: there is nothing to correct or measure.
  Correction correction;
  if (!options_.bypass_mode) {
    // Named after the key that needs the log-probs (either, when neither does: the metrics).
    const absl::Status complete =
        CheckRolloutLogProbs(samples, sample_ids,
                             rollout_is_.has_value() ? "algorithm.rollout_correction.rollout_is"
                             : !rollout_rs_.empty()  ? "algorithm.rollout_correction.rollout_rs"
                                                     : "the rollout correction's metrics");
    if (rollout_is_.has_value() || !rollout_rs_.empty()) RETURN_IF_ERROR(complete);
    if (complete.ok()) {
      ASSIGN_OR_RETURN(correction,
                       CorrectRollout(*old, samples, rollout_is_, options_.rollout_is_threshold,
                                      options_.rollout_is_batch_normalize, rollout_rs_));
    }
  }

  // verl's token_level_rewards: each sample's score at its last response token, minus beta
  // times the per-token KL of the old policy to the reference when the KL is in the reward
  // (verl's apply_kl_penalty); a sample's reward is their sum.
  const int64_t batch = static_cast<int64_t>(samples.size());
  int64_t width = 1;
  for (const v1::Sample* sample : samples)
    width = std::max<int64_t>(width, sample->token_ids_size());
  torch::Tensor token_rewards = torch::zeros({batch, width}, torch::kFloat64);
  torch::Tensor response_mask = torch::zeros({batch, width}, torch::kFloat64);
  for (int64_t k = 0; k < batch; ++k) {
    const int64_t len = samples[k]->token_ids_size();
    token_rewards[k][len - 1] = scored.scores[k];
    response_mask.select(0, k).narrow(0, 0, len).fill_(1.0);
    // Rejected tokens leave the mask the estimators see, as verl's rejection leaves its
    // response_mask before compute_advantage.
    if (!correction.rejected.empty()) {
      for (int32_t r : correction.rejected[k]) response_mask[k][r] = 0.0;
    }
  }
  if (options_.use_kl_in_reward) {
    ASSIGN_OR_RETURN(const InRewardKl kl, MeasureInRewardKl(*old, ref, kl_penalty_));
    const double beta = kl_ctrl_.value();
    token_rewards.narrow(1, 0, kl.per_token.size(1)).sub_(beta * kl.per_token);
    m["actor/reward_kl_penalty"] = kl.current_kl;
    m["actor/reward_kl_penalty_coeff"] = beta;
    kl_ctrl_.Update(kl.current_kl, batch);
  }
  // A sample's reward is the sum of its token rewards.
  const torch::Tensor reward_sums = token_rewards.sum(1).contiguous();
  const std::vector<double> rewards(reward_sums.data_ptr<double>(),
                                    reward_sums.data_ptr<double>() + batch);
  absl::Time start = absl::Now();
  grpo::AdvantageOptions adv_options;
  adv_options.norm_adv_by_std = options_.norm_adv_by_std;
  adv_options.gamma = options_.gamma;
  torch::Tensor group_ids = torch::arange(batch, torch::kInt64).div(n, "floor");
  ASSIGN_OR_RETURN(const grpo::Advantages estimated,
                   grpo::EstimateAdvantages(adv_estimator_, token_rewards, response_mask, group_ids,
                                            adv_options));
  const torch::Tensor advantages = estimated.advantages.contiguous();
  const torch::Tensor returns = estimated.returns.contiguous();
  for (size_t g = 0; g < prompts.size(); ++g) {
    const auto first = rewards.begin() + static_cast<std::ptrdiff_t>(g * n);
    if (std::all_of(first, first + n, [&](double r) { return r == *first; })) {
      ++result.equal_reward_groups;
    }
  }
  const double adv_s = SecondsSince(start);

  // The training batch.
  v1::TrainStepRequest train;
  train.set_global_step(global_step);
  train.set_temperature(temperature);
  train.set_total_training_steps(options_.total_training_steps);
  train.set_old_logprobs_from_rollout(options_.bypass_mode);
  double rollout_diff_sum = 0, rollout_diff_max = 0, rollout_diff_sq = 0;
  int64_t rollout_tokens = 0;
  std::vector<double> token_advantages, token_returns;
  int64_t per_token_advantages = 0;  // samples whose advantage varies along the response
  for (size_t k = 0; k < sequences.size(); ++k) {
    const size_t g = k / n;
    const v1::Sample& sample = scored.groups[g].samples[k % n];
    auto* ts = train.add_samples();
    if (options_.bypass_mode) {
      // Nothing was kept on the trainer: the tokens and the rollout's log-probs as the old.
      *ts->mutable_sequence() = sequences[k];
      *ts->mutable_old_logprobs() = sample.logprobs();
    } else {
      // Compact: the trainer kept the sequence and its old log-probs under this id, and the
      // advantage is one per sequence.
      ts->mutable_sequence()->set_id(sequences[k].id());
    }
    if (!correction.rejected.empty()) {
      ts->mutable_rejected_tokens()->Add(correction.rejected[k].begin(),
                                         correction.rejected[k].end());
    }
    if (!correction.weights.empty()) {
      ts->mutable_rollout_is_weights()->Add(correction.weights[k].begin(),
                                            correction.weights[k].end());
    }
    const int32_t len = sample.token_ids_size();
    // One advantage per sequence where it is the same at every token the update sees (the
    // outcome estimators); each token's otherwise (reinforce_plus_plus's discounted returns,
    // or returns of per-token KL rewards). Rejected tokens count nowhere, as in verl's
    // metrics over the rejected response_mask.
    const double* row = advantages.data_ptr<double>() + static_cast<int64_t>(k) * width;
    const double* row_returns = returns.data_ptr<double>() + static_cast<int64_t>(k) * width;
    const double* kept = response_mask.data_ptr<double>() + static_cast<int64_t>(k) * width;
    std::optional<double> first;
    bool uniform = true;
    for (int32_t t = 0; t < len; ++t) {
      if (kept[t] == 0) continue;
      token_advantages.push_back(row[t]);
      token_returns.push_back(row_returns[t]);
      if (!first.has_value()) first = row[t];
      uniform = uniform && row[t] == *first;
    }
    if (uniform) {
      ts->set_advantage(static_cast<float>(first.value_or(0.0)));
    } else {
      ++per_token_advantages;
      for (int32_t t = 0; t < len; ++t) ts->add_advantages(static_cast<float>(row[t]));
    }
    if (options_.use_kl_loss) *ts->mutable_ref_logprobs() = ref.results(k).logprobs();
    ts->set_group_id(prompts[g].uid);
    ts->set_weight_version(sample.weight_version());
    for (int32_t t = 0; t < len && t < sample.logprobs_size(); ++t) {
      const double d = std::abs(std::exp(static_cast<double>(sample.logprobs(t))) -
                                std::exp(static_cast<double>(old->results(k).logprobs(t))));
      rollout_diff_sum += d;
      rollout_diff_sq += d * d;
      rollout_diff_max = std::max(rollout_diff_max, d);
      ++rollout_tokens;
    }
  }
  start = absl::Now();
  ASSIGN_OR_RETURN(v1::TrainStepResponse trained, trainer_->TrainStep(train));
  const double update_s = SecondsSince(start);

  if (train_options.before_publish) RETURN_IF_ERROR(train_options.before_publish());
  start = absl::Now();
  v1::PublishWeightsRequest publish;
  for (auto& target : pool_->ReadyTargets()) *publish.add_targets() = std::move(target);
  for (auto& id : pool_->LostIds()) publish.add_suspended(std::move(id));
  ASSIGN_OR_RETURN(v1::PublishWeightsResponse published, trainer_->PublishWeights(publish));
  pool_->ApplyPublishResults(published);
  result.weight_version = published.weight_version();
  const double sync_s = SecondsSince(start);
  const double step_s = SecondsSince(step_start);
  // Time the services spent in model compute (scoring for reward), on the step's critical
  // path: reference and old log-probs run side by side. The rest of the step, minus the
  // weight sync (a data-plane transfer), is serialization, gRPC and waiting between stages.
  const double ref_compute = needs_reference() ? ref.compute_seconds() : 0.0;
  const double compute_s = scored.gen_compute_seconds + scored.reward_compute_seconds +
                           std::max(old->compute_seconds(), reference_ahead ? 0.0 : ref_compute) +
                           trained.compute_seconds();
  const double overhead_s = std::max(0.0, step_s - compute_s - sync_s);

  for (const auto& [name, value] : trained.metrics()) m[name] = value;
  m.insert(correction.metrics.begin(), correction.metrics.end());
  PutStats(m, "critic/score", Summarize(scored.scores));
  if (options_.overlong_log && !scored.overlong_rewards.empty()) {
    // verl's DAPO manager logs overlong_reward and overlong (penalised or not) per sample.
    double sum = 0, penalised = 0;
    for (double r : scored.overlong_rewards) sum += r, penalised += r < 0 ? 1 : 0;
    const double count = static_cast<double>(scored.overlong_rewards.size());
    m["reward/overlong_reward/mean"] = sum / count;
    m["reward/overlong/mean"] = penalised / count;
  }
  PutStats(m, "critic/rewards", Summarize(rewards));
  PutStats(m, "critic/advantages", Summarize(token_advantages));
  PutStats(m, "critic/returns", Summarize(token_returns));
  m["rlmesh/per_token_advantages"] = static_cast<double>(per_token_advantages);
  PutStats(m, "response_length", Summarize(response_lengths));
  m["response_length/clip_ratio"] = static_cast<double>(clipped) / response_lengths.size();
  PutStats(m, "prompt_length", Summarize(prompt_lengths));
  m["prompt_length/clip_ratio"] = static_cast<double>(prompts_clipped) / prompt_lengths.size();
  m["timing_s/gen"] = gen_s;
  m["timing_s/reward"] = reward_s;
  m["timing_s/adv"] = adv_s;
  m["timing_s/old_log_prob"] = old_s;
  m["timing_s/ref"] = ref_s;
  m["timing_s/update_actor"] = update_s;
  m["timing_s/update_weights"] = sync_s;
  m["timing_s/step"] = step_s;
  // The pool's books for this step: every prompt's n samples once, from which replicas, and
  // how many had to be sent again because their replica failed or left.
  {
    std::set<std::string> replicas;
    int64_t samples = 0;
    for (const auto& group : scored.groups) {
      for (const auto& id : group.replica_ids) {
        if (!id.empty()) ++samples;
        replicas.insert(id);
      }
    }
    const PoolCounters pool_after =
        train_options.books_of_generation_only ? scored.pool_after : pool_->counters();
    m["rollout/samples"] = static_cast<double>(samples);
    m["rollout/replicas_used"] = static_cast<double>(replicas.size());
    m["rollout/samples_redispatched"] =
        static_cast<double>(pool_after.samples_redispatched - pool_before.samples_redispatched);
    m["rollout/replicas_lost"] =
        static_cast<double>(pool_after.replicas_lost - pool_before.replicas_lost);
    m["rollout/requests_refused"] =
        static_cast<double>(pool_after.requests_refused - pool_before.requests_refused);
  }
  m["timing_s/compute/gen"] = scored.gen_compute_seconds;
  m["timing_s/compute/reward"] = scored.reward_compute_seconds;
  m["timing_s/compute/old_log_prob"] = old->compute_seconds();
  m["rlmesh/micro_batches/old_log_prob"] = old->micro_batches();
  if (needs_reference()) m["rlmesh/micro_batches/ref"] = ref.micro_batches();
  if (needs_reference()) {
    m["rlmesh/reference_reanchored"] = static_cast<double>(reanchored);
    m["rlmesh/reference_ahead"] = reference_ahead ? 1.0 : 0.0;
  }
  // What the step's requests weigh on the wire (docs/api.md, "Message sizes"): the sequences
  // go to the trainer and the reference once each, the update names them by id.
  m["rlmesh/request_bytes/old_log_prob"] = static_cast<double>(old_request.ByteSizeLong());
  if (needs_reference()) {
    m["rlmesh/request_bytes/ref"] = static_cast<double>(ref_request_bytes);
  }
  m["rlmesh/request_bytes/update_actor"] = static_cast<double>(train.ByteSizeLong());
  m["timing_s/compute/ref"] = ref_compute;
  m["timing_s/compute/update_actor"] = trained.compute_seconds();
  m["timing_s/outside_compute"] = overhead_s;
  m["perf/outside_compute_share"] = step_s > 0 ? overhead_s / step_s : 0.0;
  const double response_tokens =
      std::accumulate(response_lengths.begin(), response_lengths.end(), 0.0);
  m["timing_per_token_ms/gen"] = response_tokens > 0 ? 1000.0 * gen_s / response_tokens : 0.0;
  m["timing_per_token_ms/update_actor"] = 1000.0 * update_s / total_tokens;
  m["timing_per_token_ms/ref"] = 1000.0 * ref_s / total_tokens;
  m["perf/total_num_tokens"] = static_cast<double>(total_tokens);
  m["perf/time_per_step"] = step_s;
  m["perf/throughput"] = total_tokens / (step_s * static_cast<double>(options_.n_devices));
  if (rollout_tokens > 0) {
    const double mean = rollout_diff_sum / rollout_tokens;
    m["training/rollout_probs_diff_max"] = rollout_diff_max;
    m["training/rollout_probs_diff_mean"] = mean;
    m["training/rollout_probs_diff_std"] =
        std::sqrt(std::max(0.0, rollout_diff_sq / rollout_tokens - mean * mean));
  }
  m["training/global_step"] = static_cast<double>(global_step);
  m["rlmesh/equal_reward_groups_ratio"] =
      static_cast<double>(result.equal_reward_groups) / prompts.size();
  m["rlmesh/reward_retries"] = static_cast<double>(result.reward_retries);
  if (options_.failed_item_score.has_value()) {
    AddRewardFailed("rlmesh/reward_failed/", scored.reward_failed, m);
  }
  m["rlmesh/weight_version"] = static_cast<double>(result.weight_version.version());
  return result;
}

absl::StatusOr<ValidationResult> GrpoStep::Validate(const std::vector<StepPrompt>& prompts,
                                                    const v1::SamplingParams& params,
                                                    int64_t batch_size) {
  const size_t chunk = batch_size > 0 ? static_cast<size_t>(batch_size) : prompts.size();
  const int32_t n = params.n();
  std::map<std::string, std::pair<double, int64_t>> by_source;
  // data_source -> extra key -> (sum, samples): verl's reward_extra_info, val-aux/.
  std::map<std::string, std::map<std::string, std::pair<double, int64_t>>> extras;
  std::map<std::string, int64_t> failed;
  double total = 0, seconds = 0;
  int64_t batches = 0;
  ValidationResult result;
  for (size_t begin = 0; begin < prompts.size(); begin += chunk) {
    const std::vector<StepPrompt> part(
        prompts.begin() + static_cast<std::ptrdiff_t>(begin),
        prompts.begin() + static_cast<std::ptrdiff_t>(std::min(prompts.size(), begin + chunk)));
    double gen_s = 0, reward_s = 0;
    ASSIGN_OR_RETURN(
        Scored scored,
        GenerateAndScore(part, params, absl::StrCat("validate", batches), &gen_s, &reward_s));
    seconds += gen_s + reward_s;
    ++batches;
    for (size_t g = 0; g < part.size(); ++g) {
      for (int32_t i = 0; i < n; ++i) {
        const double score = scored.scores[g * n + i];
        auto& [sum, count] = by_source[part[g].data_source];
        sum += score;
        total += score;
        ++count;
        result.samples.push_back({part[g].text, scored.texts[g * n + i], score});
        for (const auto& [key, value] : scored.extras[g * n + i]) {
          auto& [extra_sum, extra_count] = extras[part[g].data_source][key];
          extra_sum += value;
          ++extra_count;
        }
      }
    }
    for (const auto& [kind, count] : scored.reward_failed) failed[kind] += count;
  }
  for (const auto& [source, acc] : by_source) {
    result.metrics[absl::StrCat("val-core/", source, "/reward/mean@", n)] = acc.first / acc.second;
  }
  for (const auto& [source, keys] : extras) {
    for (const auto& [key, acc] : keys) {
      result.metrics[absl::StrCat("val-aux/", source, "/", key, "/mean@", n)] =
          acc.first / static_cast<double>(acc.second);
    }
  }
  if (options_.failed_item_score.has_value()) {
    AddRewardFailed("val/reward_failed/", failed, result.metrics);
  }
  result.metrics["val/reward/mean"] =
      prompts.empty() ? 0.0 : total / (static_cast<double>(prompts.size()) * n);
  result.metrics["val/batches"] = static_cast<double>(batches);
  result.metrics["timing_s/testing"] = seconds;
  return result;
}

}  // namespace rlmesh::coordinator
