#include "services/coordinator/rollout_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace rlmesh::coordinator {

namespace {

void Log(const std::string& line) { std::fprintf(stderr, "coordinator: %s\n", line.c_str()); }

int64_t NowUnixMs() { return absl::ToUnixMillis(absl::Now()); }

}  // namespace

struct RolloutPool::Unit {
  size_t prompt = 0;  // index into the prompts of the call
  int32_t first = 0;  // first missing sample index of the run
  int32_t count = 0;  // run length
};

RolloutPool::RolloutPool(const RolloutPoolOptions& options, RolloutClientFactory factory)
    : options_(options), factory_(std::move(factory)) {}

RolloutPool::~RolloutPool() {
  {
    absl::MutexLock lock(&heartbeat_mu_);
    stopping_ = true;
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void RolloutPool::StartHeartbeat() {
  if (options_.heartbeat <= absl::ZeroDuration() || heartbeat_thread_.joinable()) return;
  heartbeat_thread_ = std::thread([this] {
    while (true) {
      {
        absl::MutexLock lock(&heartbeat_mu_);
        if (heartbeat_mu_.AwaitWithTimeout(absl::Condition(&stopping_), options_.heartbeat)) {
          return;
        }
      }
      Heartbeat();
    }
  });
}

void RolloutPool::Heartbeat() {
  struct Probe {
    std::string id;
    std::shared_ptr<RolloutClient> client;
    bool lost;
    absl::Status answer;
  };
  std::vector<Probe> probes;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, replica] : replicas_) {
      const auto state = replica.info.state();
      if (state == v1::REPLICA_STATE_READY || state == v1::REPLICA_STATE_LOST) {
        probes.push_back({id, replica.client, state == v1::REPLICA_STATE_LOST, {}});
      }
    }
  }
  // At once: a frozen replica holds its probe for the whole deadline.
  std::vector<std::thread> threads;
  for (Probe& probe : probes) {
    threads.emplace_back([&probe] { probe.answer = probe.client->GetStatus().status(); });
  }
  for (auto& t : threads) t.join();
  for (const Probe& probe : probes) {
    if (!probe.lost) {
      if (!probe.answer.ok()) {
        MarkLost(probe.id, absl::StrCat("no answer to the heartbeat: ", probe.answer.ToString()));
      }
      continue;
    }
    absl::MutexLock lock(&mu_);
    auto it = replicas_.find(probe.id);
    if (it == replicas_.end() || it->second.info.state() != v1::REPLICA_STATE_LOST) continue;
    if (probe.answer.ok()) {
      // Re-synced by the running step's wait for replicas, or at the next step boundary.
      it->second.info.set_state(v1::REPLICA_STATE_SYNCING);
      it->second.lost_since = absl::InfiniteFuture();
      Log(absl::StrCat("replica ", probe.id, " answers again; syncing weights"));
    } else if (absl::Now() - it->second.lost_since >= options_.evict_after) {
      Log(absl::StrCat("replica ", probe.id, " left the pool: no answer for ",
                       absl::FormatDuration(absl::Now() - it->second.lost_since), " (",
                       probe.answer.ToString(), ")"));
      replicas_.erase(it);
      ++counters_.replicas_evicted;
    }
  }
}

absl::Status RolloutPool::CheckRegistration(const std::string& address, int32_t max_num_seqs) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "address: expected \"host:port\" with a port in 1..65535, got \"", address, "\""));
  }
  if (max_num_seqs < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_num_seqs: expected >= 0 (0 = not said), got ", max_num_seqs));
  }
  return absl::OkStatus();
}

std::string RolloutPool::Register(const std::string& address, const std::string& replica_id,
                                  int32_t max_num_seqs,
                                  const std::map<std::string, std::string>& labels) {
  absl::MutexLock lock(&mu_);
  std::string id = replica_id;
  if (id.empty()) {
    // Reuse the id of a replica already known at this address (a re-registration).
    for (const auto& [known_id, replica] : replicas_) {
      if (replica.info.address() == address) id = known_id;
    }
    // A new id, not one a replica chose for itself (or kept from a coordinator before a
    // restart).
    while (id.empty() || replicas_.contains(id))
      id = absl::StrCat("rollout-", next_replica_number_++);
  }
  auto known = replicas_.find(id);
  if (known != replicas_.end() && known->second.info.address() == address &&
      known->second.info.state() != v1::REPLICA_STATE_LOST) {
    // A heartbeat of a replica already in the fleet: refresh, keep its state, client and the
    // largest max_num_seqs heard (DNS discovery registers with 1; bring-up reads the real one).
    known->second.info.set_max_num_seqs(std::max(known->second.info.max_num_seqs(), max_num_seqs));
    known->second.info.mutable_labels()->clear();
    for (const auto& [k, v] : labels) (*known->second.info.mutable_labels())[k] = v;
    return id;
  }
  Replica& replica = replicas_[id];
  replica.info.set_replica_id(id);
  replica.info.set_address(address);
  replica.info.set_state(v1::REPLICA_STATE_SYNCING);
  replica.lost_since = absl::InfiniteFuture();
  replica.info.set_max_num_seqs(std::max(1, max_num_seqs));
  replica.info.set_inflight_samples(0);
  replica.info.set_registered_unix_ms(NowUnixMs());
  replica.info.mutable_labels()->clear();
  for (const auto& [k, v] : labels) (*replica.info.mutable_labels())[k] = v;
  replica.client = factory_(address);
  Log(absl::StrCat("replica ", id, " at ", address, " registered; syncing weights"));
  return id;
}

absl::StatusOr<std::string> RolloutPool::RegisterReplica(
    const std::string& address, const std::string& replica_id, int32_t max_num_seqs,
    const std::map<std::string, std::string>& labels) {
  std::shared_ptr<RolloutClient> holder;
  std::string holder_address;
  if (!replica_id.empty()) {
    absl::MutexLock lock(&mu_);
    auto known = replicas_.find(replica_id);
    if (known != replicas_.end() && known->second.info.address() != address &&
        known->second.info.state() != v1::REPLICA_STATE_LOST) {
      holder = known->second.client;
      holder_address = known->second.info.address();
    }
  }
  if (holder != nullptr) {  // asked outside the lock: the probe may take its whole deadline
    absl::StatusOr<v1::GetRolloutStatusResponse> status = holder->GetStatus();
    if (status.ok() && status->replica_id() == replica_id) {
      return absl::AlreadyExistsError(absl::StrCat(
          "replica_id: \"", replica_id, "\" is the live replica at ", holder_address,
          ", which still answers as it; ", address,
          " needs an id of its own (rlmesh.rollout.replica_id), or none for the coordinator to "
          "assign one"));
    }
  }
  return Register(address, replica_id, max_num_seqs, labels);
}

absl::Status RolloutPool::Unregister(const std::string& replica_id, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(replica_id);
  if (it == replicas_.end()) {
    return absl::NotFoundError(absl::StrCat("replica_id: no replica \"", replica_id, "\""));
  }
  // A Generate call in flight holds its own reference to the client; samples it still
  // returns are accepted, the rest are re-dispatched when the call ends.
  replicas_.erase(it);
  Log(absl::StrCat("replica ", replica_id, " unregistered: ", reason));
  return absl::OkStatus();
}

void RolloutPool::SetCurrentVersion(const v1::WeightVersion& version) {
  absl::MutexLock lock(&mu_);
  current_version_ = version;
  DemoteBehindLocked();
}

void RolloutPool::DemoteBehindLocked() {
  // A ready replica that does not have the current version must be synced before more work.
  for (auto& [id, replica] : replicas_) {
    if (replica.info.state() == v1::REPLICA_STATE_READY &&
        replica.info.weight_version().version() != current_version_.version()) {
      replica.info.set_state(v1::REPLICA_STATE_SYNCING);
    }
  }
}

void RolloutPool::SetBringUp(BringUpFn bring_up) {
  absl::MutexLock lock(&mu_);
  bring_up_ = std::move(bring_up);
}

bool RolloutPool::HasReadyReplica() const {
  for (const auto& [id, replica] : replicas_) {
    if (replica.info.state() == v1::REPLICA_STATE_READY) return true;
  }
  return false;
}

void RolloutPool::MarkLost(const std::string& replica_id, const std::string& why) {
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(replica_id);
  if (it == replicas_.end()) return;
  if (it->second.info.state() == v1::REPLICA_STATE_LOST) return;  // already counted
  ++counters_.replicas_lost;
  it->second.info.set_state(v1::REPLICA_STATE_LOST);
  it->second.info.set_inflight_samples(0);
  it->second.lost_since = absl::Now();
  Log(absl::StrCat("replica ", replica_id, " lost: ", why));
}

void RolloutPool::SyncReplicas() {
  // With a heartbeat, LOST replicas are probed in the background: a dead one costs no step
  // anything.
  SyncReplicas(/*probe_lost=*/options_.heartbeat <= absl::ZeroDuration());
}

void RolloutPool::SyncReplicas(bool probe_lost) {
  struct Pending {
    std::string id, address;
    std::shared_ptr<RolloutClient> client;
    bool probe;
  };
  std::vector<Pending> pending;
  BringUpFn bring_up;
  uint64_t current;
  {
    absl::MutexLock lock(&mu_);
    bring_up = bring_up_;
    current = current_version_.version();
    for (auto& [id, replica] : replicas_) {
      const auto state = replica.info.state();
      if (state == v1::REPLICA_STATE_SYNCING || (probe_lost && state == v1::REPLICA_STATE_LOST)) {
        pending.push_back(
            {id, replica.info.address(), replica.client, state == v1::REPLICA_STATE_LOST});
      }
    }
  }
  for (const Pending& p : pending) {
    // A lost replica comes back only when it answers; it then needs the current weights.
    auto status = p.client->GetStatus();
    if (!status.ok()) {
      if (!p.probe) MarkLost(p.id, status.status().ToString());
      continue;
    }
    v1::WeightVersion version = status->weight_version();
    if (version.version() != current) {
      if (!bring_up) continue;
      auto brought = bring_up(p.id, p.address);
      if (!brought.ok()) {
        MarkLost(p.id, absl::StrCat("weight sync failed: ", brought.status().ToString()));
        continue;
      }
      version = *brought;
    }
    absl::MutexLock lock(&mu_);
    auto it = replicas_.find(p.id);
    if (it == replicas_.end()) continue;
    *it->second.info.mutable_weight_version() = version;
    if (version.version() == current) {
      it->second.info.set_state(v1::REPLICA_STATE_READY);
      it->second.info.set_max_num_seqs(
          std::max(it->second.info.max_num_seqs(), status->max_num_seqs()));
      Log(absl::StrCat("replica ", p.id, " ready at weight version ", current));
    }
  }
}

absl::StatusOr<std::vector<GeneratedGroup>> RolloutPool::Generate(
    const std::vector<PromptToGenerate>& prompts, const v1::SamplingParams& params,
    const std::string& request_tag) {
  const int32_t n = params.n();
  if (n < 1) return absl::InvalidArgumentError("sampling_params.n: expected >= 1");
  std::vector<GeneratedGroup> groups(prompts.size());
  std::map<std::string, size_t> prompt_index;
  std::vector<std::vector<int>> dispatches(prompts.size(), std::vector<int>(n, 0));
  for (size_t p = 0; p < prompts.size(); ++p) {
    groups[p].prompt_id = prompts[p].prompt_id;
    groups[p].samples.resize(n);
    groups[p].replica_ids.resize(n);
    if (!prompt_index.emplace(prompts[p].prompt_id, p).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt_id: \"", prompts[p].prompt_id, "\" appears twice"));
    }
  }
  absl::Mutex book_mu;  // guards groups' filled state via replica_ids (empty = missing)
  // Rounds in a row in which a replica refused a call for being full, and since when.
  int full_rounds = 0;
  absl::Time full_since = absl::InfiniteFuture();

  for (int round = 0;; ++round) {
    std::vector<Unit> units;
    int64_t missing = 0;
    {
      absl::MutexLock lock(&book_mu);
      for (size_t p = 0; p < prompts.size(); ++p) {
        for (int32_t i = 0; i < n;) {
          if (!groups[p].replica_ids[i].empty()) {
            ++i;
            continue;
          }
          Unit unit{p, i, 0};
          while (i < n && groups[p].replica_ids[i].empty()) {
            if (++dispatches[p][i] > options_.max_dispatches_per_sample) {
              return absl::UnavailableError(absl::StrCat(
                  "sample ", i, " of prompt ", prompts[p].prompt_id, " was dispatched ",
                  options_.max_dispatches_per_sample, " times without a valid result"));
            }
            ++unit.count;
            ++i;
          }
          missing += unit.count;
          units.push_back(unit);
        }
      }
    }
    if (units.empty()) break;
    if (round > 0) {
      absl::MutexLock lock(&mu_);
      counters_.samples_redispatched += missing;
      Log(absl::StrCat("re-dispatching ", missing, " samples (round ", round + 1, ")"));
    }

    // Wait for a READY replica, bringing up any that joined.
    const absl::Time deadline = absl::Now() + options_.no_replica_timeout;
    absl::Time next_note = absl::Now() + absl::Seconds(5);  // a short wait is not worth a line
    while (true) {
      // Within a step only newcomers are brought up; lost replicas wait for the boundary.
      SyncReplicas(/*probe_lost=*/false);
      absl::MutexLock lock(&mu_);
      if (HasReadyReplica()) break;
      if (absl::Now() >= next_note && absl::Now() < deadline) {
        // Said every 30 s, so that a wait for a frozen or evicted fleet is not silent.
        Log(absl::StrCat(
            "waiting for a ready rollout replica: ", missing,
            " samples of this step wait; giving up in ",
            absl::FormatDuration(absl::Trunc(deadline - absl::Now(), absl::Seconds(1)))));
        next_note = absl::Now() + absl::Seconds(30);
      }
      if (absl::Now() >= deadline) {
        return absl::UnavailableError(
            absl::StrCat("no rollout replica is ready (waited ",
                         absl::FormatDuration(options_.no_replica_timeout), "); ", missing,
                         " samples of this step are still missing"));
      }
      // Wake early when a replica registers.
      auto has_syncing = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        for (const auto& [id, r] : replicas_) {
          if (r.info.state() == v1::REPLICA_STATE_SYNCING) return true;
        }
        return false;
      };
      mu_.AwaitWithDeadline(absl::Condition(&has_syncing),
                            std::min(deadline, absl::Now() + absl::Seconds(1)));
    }

    // Least-loaded assignment: load = samples in flight / max_num_seqs.
    struct Assignment {
      std::string replica_id;
      std::shared_ptr<RolloutClient> client;
      std::map<int32_t, std::vector<const Unit*>> units_by_count;
    };
    std::vector<Assignment> assignments;
    uint64_t expected_version;
    {
      absl::MutexLock lock(&mu_);
      expected_version = current_version_.version();
      std::vector<std::pair<double, Replica*>> ready;
      for (auto& [id, replica] : replicas_) {
        if (replica.info.state() == v1::REPLICA_STATE_READY) {
          ready.push_back(
              {static_cast<double>(replica.info.inflight_samples()) / replica.info.max_num_seqs(),
               &replica});
        }
      }
      std::vector<Assignment> by_replica(ready.size());
      for (size_t r = 0; r < ready.size(); ++r) {
        by_replica[r].replica_id = ready[r].second->info.replica_id();
        by_replica[r].client = ready[r].second->client;
      }
      for (const Unit& unit : units) {
        size_t best = 0;
        for (size_t r = 1; r < ready.size(); ++r) {
          if (ready[r].first < ready[best].first) best = r;
        }
        Replica* replica = ready[best].second;
        ready[best].first += static_cast<double>(unit.count) / replica->info.max_num_seqs();
        replica->info.set_inflight_samples(replica->info.inflight_samples() + unit.count);
        by_replica[best].units_by_count[unit.count].push_back(&unit);
      }
      for (auto& a : by_replica) {
        if (!a.units_by_count.empty()) assignments.push_back(std::move(a));
      }
    }

    std::vector<std::thread> threads;
    std::atomic<int> refused{0};
    for (const Assignment& a : assignments) {
      for (const auto& [count, all_units] : a.units_by_count) {
        // A replica refuses calls over rlmesh.rollout.max_queue samples: split into chunks.
        const size_t per_call = options_.max_samples_per_request > 0
                                    ? static_cast<size_t>(std::max<int64_t>(
                                          1, options_.max_samples_per_request / count))
                                    : all_units.size();
        for (size_t chunk = 0; chunk * per_call < all_units.size(); ++chunk) {
          const std::vector<const Unit*> unit_list(
              all_units.begin() + chunk * per_call,
              all_units.begin() + std::min(all_units.size(), (chunk + 1) * per_call));
          v1::GenerateRequest request;
          request.set_request_id(
              absl::StrCat(request_tag, "/r", round, "/", a.replica_id, "/n", count, "/c", chunk));
          *request.mutable_sampling_params() = params;
          request.mutable_sampling_params()->set_n(count);
          request.set_min_weight_version(expected_version);
          std::map<std::string, std::pair<int32_t, int32_t>> expected;  // prompt -> [first, end)
          for (const Unit* unit : unit_list) {
            auto* prompt = request.add_prompts();
            prompt->set_prompt_id(prompts[unit->prompt].prompt_id);
            prompt->mutable_token_ids()->Add(prompts[unit->prompt].token_ids.begin(),
                                             prompts[unit->prompt].token_ids.end());
            prompt->set_first_sample_index(unit->first);
            expected[prompts[unit->prompt].prompt_id] = {unit->first, unit->first + unit->count};
          }
          threads.emplace_back([this, &groups, &prompt_index, &book_mu, &dispatches, &refused,
                                expected_version, request = std::move(request),
                                expected = std::move(expected), replica_id = a.replica_id,
                                client = a.client]() {
            int64_t accepted = 0, rejected = 0, stale = 0;
            auto on_sample = [&](const v1::GenerateResponse& response) {
              auto range = expected.find(response.prompt_id());
              const int32_t index = response.sample_index();
              const v1::Sample& sample = response.sample();
              const bool fresh = options_.newer_weights_allowed
                                     ? sample.weight_version() >= expected_version &&
                                           sample.last_weight_version() >= sample.weight_version()
                                     : sample.weight_version() == expected_version &&
                                           sample.last_weight_version() == expected_version;
              if (!fresh) ++stale;
              bool ok = fresh && range != expected.end() && index >= range->second.first &&
                        index < range->second.second &&
                        sample.finish_reason() != v1::FINISH_REASON_ABORT &&
                        sample.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
              if (ok) {
                absl::MutexLock lock(&book_mu);
                GeneratedGroup& group = groups[prompt_index.at(response.prompt_id())];
                if (group.replica_ids[index].empty()) {
                  group.samples[index] = sample;
                  group.replica_ids[index] = replica_id;
                } else {
                  ok = false;  // a duplicate: the first copy stands
                }
              }
              ok ? ++accepted : ++rejected;
              absl::MutexLock lock(&mu_);
              auto it = replicas_.find(replica_id);
              if (it != replicas_.end()) {
                it->second.info.set_inflight_samples(
                    std::max(0, it->second.info.inflight_samples() - 1));
                if (ok)
                  it->second.info.set_completed_samples(it->second.info.completed_samples() + 1);
              }
            };
            absl::Status status = client->Generate(request, on_sample);
            {
              absl::MutexLock lock(&mu_);
              counters_.samples_received += accepted;
              counters_.samples_rejected += rejected;
              if (absl::IsResourceExhausted(status)) ++counters_.requests_refused;
            }
            if (absl::IsResourceExhausted(status)) {
              // Full, not broken (admission control): what it did not deliver waits for the
              // next round, and this dispatch does not count against the samples.
              refused.fetch_add(1);
              absl::MutexLock lock(&book_mu);
              for (const auto& [prompt_id, range] : expected) {
                const size_t p = prompt_index.at(prompt_id);
                for (int32_t i = range.first; i < range.second; ++i) {
                  if (groups[p].replica_ids[i].empty()) --dispatches[p][i];
                }
              }
              Log(absl::StrCat("replica ", replica_id, " is full: ", status.message()));
            } else if (!status.ok()) {
              MarkLost(replica_id, absl::StrCat("Generate ", request.request_id(),
                                                " failed: ", status.ToString()));
            } else if (stale > 0) {
              // Out of step with the trainer: no more work until it is synced again.
              MarkLost(replica_id,
                       absl::StrCat("returned ", stale, " samples not at weight version ",
                                    expected_version));
            } else if (rejected > 0) {
              Log(absl::StrCat("replica ", replica_id, " returned ", rejected,
                               " samples that were rejected (duplicate, aborted or stale)"));
            }
          });
        }
      }
    }
    for (auto& t : threads) t.join();
    {
      // Nothing is in flight between rounds.
      absl::MutexLock lock(&mu_);
      for (auto& [id, replica] : replicas_) replica.info.set_inflight_samples(0);
    }
    if (refused.load() == 0) {
      full_rounds = 0;
      full_since = absl::InfiniteFuture();
      continue;
    }
    // Replicas full: wait (50 ms, doubling up to 2 s) before sending the rest again.
    if (full_rounds++ == 0) full_since = absl::Now();
    if (absl::Now() - full_since > options_.no_replica_timeout) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the rollout replicas have refused work for being full (rlmesh.rollout."
          "max_queued_samples) for ",
          absl::FormatDuration(absl::Now() - full_since), "; samples of this step are missing"));
    }
    absl::SleepFor(
        std::min(absl::Milliseconds(50) * (1 << std::min(full_rounds - 1, 6)), absl::Seconds(2)));
  }
  return groups;
}

std::map<std::string, double> RolloutPool::ComputeSecondsByReplica() const {
  std::vector<std::pair<std::string, std::shared_ptr<RolloutClient>>> ready;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, replica] : replicas_) {
      if (replica.info.state() == v1::REPLICA_STATE_READY) ready.push_back({id, replica.client});
    }
  }
  std::map<std::string, double> seconds;
  for (const auto& [id, client] : ready) {
    auto status = client->GetStatus();
    if (status.ok()) seconds[id] = status->compute_seconds_total();
  }
  return seconds;
}

std::vector<v1::WeightTarget> RolloutPool::ReadyTargets() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::WeightTarget> targets;
  for (const auto& [id, replica] : replicas_) {
    if (replica.info.state() != v1::REPLICA_STATE_READY) continue;
    v1::WeightTarget target;
    target.set_replica_id(id);
    target.set_address(replica.info.address());
    targets.push_back(std::move(target));
  }
  return targets;
}

std::vector<std::string> RolloutPool::LostIds() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  for (const auto& [id, replica] : replicas_) {
    if (replica.info.state() == v1::REPLICA_STATE_LOST) ids.push_back(id);
  }
  return ids;
}

void RolloutPool::ApplyPublishResults(const v1::PublishWeightsResponse& response) {
  for (const auto& result : response.results()) {
    if (!result.ok()) {
      MarkLost(result.replica_id(), absl::StrCat("weight publish failed: ", result.error()));
      continue;
    }
    absl::MutexLock lock(&mu_);
    auto it = replicas_.find(result.replica_id());
    if (it != replicas_.end())
      *it->second.info.mutable_weight_version() = response.weight_version();
  }
  absl::MutexLock lock(&mu_);
  current_version_ = response.weight_version();
  // A replica that became ready after the targets were chosen missed this version.
  DemoteBehindLocked();
}

std::vector<v1::ReplicaInfo> RolloutPool::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::ReplicaInfo> out;
  for (const auto& [id, replica] : replicas_) out.push_back(replica.info);
  return out;
}

PoolCounters RolloutPool::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

}  // namespace rlmesh::coordinator
