#include "services/reward/reward_service.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"

namespace rlmesh::reward {
namespace {

class DeadlineWaiter : public BatchWaiter {
 public:
  void Wait(absl::Mutex& mu, const int& done, int total, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    struct Args {
      const int* done;
      int total;
    } args{&done, total};
    mu.AwaitWithDeadline(absl::Condition(
                             +[](Args* a) { return *a->done >= a->total; }, &args),
                         deadline);
  }
};

ItemOutcome Failure(absl::Status status, ItemErrorKind kind) {
  ItemOutcome outcome;
  outcome.status = std::move(status);
  outcome.error_kind = kind;
  return outcome;
}

ItemOutcome TimedOut(const RewardItem& item) {
  return Failure(absl::DeadlineExceededError(
                     absl::StrCat("timeout: item \"", item.id, "\" (data_source \"",
                                  item.data_source, "\") was not scored by the request deadline")),
                 ItemErrorKind::kTimeout);
}

}  // namespace

const char* ItemErrorKindName(ItemErrorKind kind) {
  switch (kind) {
    case ItemErrorKind::kNone:
      return "none";
    case ItemErrorKind::kException:
      return "exception";
    case ItemErrorKind::kTimeout:
      return "timeout";
    case ItemErrorKind::kRemote:
      return "remote";
    case ItemErrorKind::kUnknownDataSource:
      return "unknown_data_source";
    case ItemErrorKind::kInvalid:
      return "invalid";
  }
  return "none";
}

// The shared state of one ScoreBatch call. Tasks hold it by shared_ptr, so a task still
// running after its batch timed out writes into a live object that nobody reads any more.
struct RewardService::Batch {
  absl::Mutex mu;
  std::vector<std::optional<ItemOutcome>> outcomes ABSL_GUARDED_BY(mu);  // local items only
  int done ABSL_GUARDED_BY(mu) = 0;
};

RewardServiceOptions RewardServiceOptionsFrom(const config::RewardSettings& settings) {
  RewardServiceOptions options;
  options.num_workers = static_cast<int>(settings.num_workers);
  options.default_timeout = absl::Seconds(settings.timeout_s);
  options.scorers.format_score = settings.format_score;
  options.custom_data_sources = settings.custom_data_sources;
  return options;
}

absl::StatusOr<std::unique_ptr<RewardService>> RewardService::Create(
    const RewardServiceOptions& options, std::unique_ptr<RemoteScorer> remote,
    std::unique_ptr<BatchWaiter> waiter, std::unique_ptr<ScorerRegistry> registry,
    std::unique_ptr<RemoteScorer> reward_model) {
  if (options.num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("config key rlmesh.reward.num_workers: expected an integer >= 1, got ",
                     options.num_workers));
  }
  if (options.default_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config key rlmesh.reward.timeout_s: expected a number > 0, got ",
                     absl::ToDoubleSeconds(options.default_timeout)));
  }
  if (!options.custom_data_sources.empty() && remote == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config key rlmesh.reward.custom_data_sources lists [",
        absl::StrJoin(options.custom_data_sources, ", "),
        "] but rlmesh.reward.custom_address is empty: expected the address of the custom "
        "RewardService"));
  }
  if (registry == nullptr) {
    ASSIGN_OR_RETURN(registry, ScorerRegistry::Create(options.scorers));
  }
  if (waiter == nullptr) waiter = std::make_unique<DeadlineWaiter>();
  return std::unique_ptr<RewardService>(new RewardService(
      options, std::move(registry), std::move(remote), std::move(waiter), std::move(reward_model)));
}

RewardService::RewardService(const RewardServiceOptions& options,
                             std::unique_ptr<ScorerRegistry> registry,
                             std::unique_ptr<RemoteScorer> remote,
                             std::unique_ptr<BatchWaiter> waiter,
                             std::unique_ptr<RemoteScorer> reward_model)
    : options_(options),
      registry_(std::move(registry)),
      remote_(std::move(remote)),
      waiter_(std::move(waiter)),
      reward_model_(std::move(reward_model)),
      custom_sources_(options.custom_data_sources.begin(), options.custom_data_sources.end()),
      pool_(options.num_workers) {}

RewardService::~RewardService() = default;

absl::Time RewardService::DeadlineFor(absl::Duration timeout, absl::Time cap) const {
  const absl::Duration budget = timeout > absl::ZeroDuration() ? timeout : options_.default_timeout;
  return std::min(absl::Now() + budget, cap);
}

bool RewardService::GoesRemote(const std::string& data_source) const {
  return remote_ != nullptr && (custom_sources_.empty() || custom_sources_.count(data_source) > 0);
}

bool RewardService::IsKnownDataSource(const std::string& data_source) const {
  return registry_->Find(data_source) != nullptr || custom_sources_.count(data_source) > 0;
}

std::vector<std::string> RewardService::KnownDataSources() const {
  std::set<std::string> sources(custom_sources_);
  for (const std::string& source : registry_->DataSources()) sources.insert(source);
  return std::vector<std::string>(sources.begin(), sources.end());
}

ItemOutcome RewardService::RunScorer(const Scorer& scorer, const RewardItem& item) {
  const std::string where = absl::StrCat("scorer for data_source \"", item.data_source, "\"");
  try {
    absl::StatusOr<ScoreResult> result = scorer.Score(item);
    if (!result.ok()) {
      const ItemErrorKind kind = result.status().code() == absl::StatusCode::kInvalidArgument
                                     ? ItemErrorKind::kInvalid
                                     : ItemErrorKind::kException;
      return Failure(absl::Status(result.status().code(),
                                  absl::StrCat(where, ": ", result.status().message())),
                     kind);
    }
    if (!std::isfinite(result->score)) {
      return Failure(
          absl::InternalError(absl::StrCat(where, " returned a non-finite score ", result->score)),
          ItemErrorKind::kException);
    }
    ItemOutcome outcome;
    outcome.result = *std::move(result);
    return outcome;
  } catch (const std::exception& e) {
    return Failure(absl::InternalError(absl::StrCat(where, " threw: ", e.what())),
                   ItemErrorKind::kException);
  } catch (...) {
    return Failure(absl::InternalError(absl::StrCat(where, " threw a non-standard exception")),
                   ItemErrorKind::kException);
  }
}

void RewardService::ScoreRemotely(RemoteScorer& scorer, const std::vector<RewardItem>& items,
                                  const std::vector<size_t>& indices, absl::Time deadline,
                                  std::vector<ItemOutcome>& outcomes) {
  std::vector<RewardItem> batch;
  batch.reserve(indices.size());
  for (size_t i : indices) batch.push_back(items[i]);
  const std::string where = scorer.where();
  absl::StatusOr<std::vector<absl::StatusOr<ScoreResult>>> results;
  try {
    results = scorer.ScoreBatch(batch, deadline);
  } catch (const std::exception& e) {
    results = absl::InternalError(absl::StrCat("client threw: ", e.what()));
  }
  if (results.ok() && results->size() != indices.size()) {
    results = absl::InternalError(
        absl::StrCat("expected ", indices.size(), " results, got ", results->size()));
  }
  for (size_t k = 0; k < indices.size(); ++k) {
    ItemOutcome& outcome = outcomes[indices[k]];
    if (!results.ok()) {
      outcome = Failure(absl::Status(results.status().code(),
                                     absl::StrCat(where, ": ", results.status().message())),
                        ItemErrorKind::kRemote);
      continue;
    }
    absl::StatusOr<ScoreResult>& result = (*results)[k];
    if (!result.ok()) {
      outcome = Failure(absl::Status(result.status().code(),
                                     absl::StrCat(where, ": ", result.status().message())),
                        scorer.KindOf(result.status()));
    } else if (!std::isfinite(result->score)) {
      outcome = Failure(
          absl::InternalError(absl::StrCat(where, " returned a non-finite score ", result->score)),
          ItemErrorKind::kRemote);
    } else {
      outcome = ItemOutcome();
      outcome.result = *std::move(result);
    }
  }
}

std::vector<ItemOutcome> RewardService::ScoreBatch(const std::vector<RewardItem>& items,
                                                   absl::Time deadline, bool use_reward_model) {
  std::vector<ItemOutcome> outcomes(items.size());
  if (use_reward_model) {
    std::vector<size_t> all(items.size());
    for (size_t i = 0; i < items.size(); ++i) all[i] = i;
    if (reward_model_ == nullptr) {
      for (ItemOutcome& outcome : outcomes) {
        outcome = Failure(absl::FailedPreconditionError(
                              "the request asks for the reward model, and this service has none "
                              "(reward_model.enable)"),
                          ItemErrorKind::kInvalid);
      }
      return outcomes;
    }
    ScoreRemotely(*reward_model_, items, all, deadline, outcomes);
    return outcomes;
  }
  std::vector<size_t> local;
  std::vector<size_t> remote;
  auto batch = std::make_shared<Batch>();
  for (size_t i = 0; i < items.size(); ++i) {
    const RewardItem& item = items[i];
    if (GoesRemote(item.data_source)) {
      remote.push_back(i);
      continue;
    }
    const Scorer* scorer = registry_->Find(item.data_source);
    if (scorer == nullptr) {
      outcomes[i] = Failure(
          absl::NotFoundError(absl::StrCat(
              "no scorer for data_source \"", item.data_source,
              "\"; built-in: ", absl::StrJoin(registry_->DataSources(), ", "),
              remote_ ? "" : " (a custom scorer can be set with rlmesh.reward.custom_address)")),
          ItemErrorKind::kUnknownDataSource);
      continue;
    }
    const size_t slot = local.size();
    local.push_back(i);
    {
      absl::MutexLock lock(&batch->mu);
      batch->outcomes.emplace_back();
    }
    // The task owns a copy of its item: the caller's vector may be gone when it runs.
    pool_.Schedule([batch, scorer, slot, deadline, item] {
      ItemOutcome outcome = absl::Now() > deadline ? TimedOut(item) : RunScorer(*scorer, item);
      absl::MutexLock lock(&batch->mu);
      batch->outcomes[slot] = std::move(outcome);
      ++batch->done;
    });
  }
  // The remote call runs on this thread while the pool scores the local items.
  if (!remote.empty()) ScoreRemotely(*remote_, items, remote, deadline, outcomes);

  absl::MutexLock lock(&batch->mu);
  waiter_->Wait(batch->mu, batch->done, static_cast<int>(local.size()), deadline);
  for (size_t k = 0; k < local.size(); ++k) {
    std::optional<ItemOutcome>& outcome = batch->outcomes[k];
    outcomes[local[k]] = outcome.has_value() ? *outcome : TimedOut(items[local[k]]);
  }
  return outcomes;
}

}  // namespace rlmesh::reward
