// In-process fakes of the services for the coordinator's tests (test-only).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "services/coordinator/clients.h"

namespace rlmesh::coordinator {

// A replica that answers every sample with token ids [prompt length, sample index], at a
// configurable weight version, and can fail after a number of samples.
class FakeRollout : public RolloutClient {
 public:
  struct State {
    absl::Mutex mu;
    uint64_t version = 0;
    uint64_t sample_version = 0;  // version stamped on samples
    // last_weight_version = sample_version + span: newer weights took over while it ran.
    uint64_t span = 0;
    int fail_after = -1;  // samples before the stream breaks; -1 = never
    int full_calls = 0;   // calls refused with RESOURCE_EXHAUSTED before serving
    bool reachable = true;
    int calls = 0;
    int status_calls = 0;  // GetStatus calls, answered or not
    int samples = 0;
    std::vector<v1::GenerateRequest> requests;  // every Generate call, in order
    // Samples carry log-probs, as real replicas' do: token t of sample index i has
    // -0.2 - 0.1 ((i + t) mod 3). Off: none (what the rollout correction must refuse).
    bool logprobs = false;
    std::string replica_id;  // what GetStatus says the replica was registered as
  };
  explicit FakeRollout(std::shared_ptr<State> state) : state_(std::move(state)) {}

  absl::Status Generate(const v1::GenerateRequest& request,
                        const SampleCallback& on_sample) override {
    {
      absl::MutexLock lock(&state_->mu);
      if (!state_->reachable) return absl::UnavailableError("connection refused");
      ++state_->calls;
      state_->requests.push_back(request);
      if (state_->full_calls > 0) {
        --state_->full_calls;
        return absl::ResourceExhaustedError("rlmesh.rollout.max_queued_samples = 1: full");
      }
    }
    for (const auto& prompt : request.prompts()) {
      for (int32_t i = 0; i < request.sampling_params().n(); ++i) {
        v1::GenerateResponse response;
        bool with_logprobs = false;
        {
          absl::MutexLock lock(&state_->mu);
          with_logprobs = state_->logprobs;
          if (state_->fail_after == 0) return absl::UnavailableError("replica died");
          if (state_->fail_after > 0) --state_->fail_after;
          ++state_->samples;
          response.mutable_sample()->set_weight_version(state_->sample_version);
          response.mutable_sample()->set_last_weight_version(state_->sample_version + state_->span);
        }
        response.set_request_id(request.request_id());
        response.set_prompt_id(prompt.prompt_id());
        response.set_sample_index(prompt.first_sample_index() + i);
        response.mutable_sample()->add_token_ids(prompt.token_ids_size());
        response.mutable_sample()->add_token_ids(prompt.first_sample_index() + i);
        if (with_logprobs) {
          for (int t = 0; t < response.sample().token_ids_size(); ++t) {
            const int k = (prompt.first_sample_index() + i + t) % 3;
            response.mutable_sample()->add_logprobs(-0.2f - 0.1f * static_cast<float>(k));
          }
        }
        response.mutable_sample()->set_finish_reason(v1::FINISH_REASON_STOP);
        on_sample(response);
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<v1::GetRolloutStatusResponse> GetStatus() override {
    absl::MutexLock lock(&state_->mu);
    ++state_->status_calls;
    if (!state_->reachable) return absl::UnavailableError("connection refused");
    v1::GetRolloutStatusResponse status;
    status.mutable_weight_version()->set_version(state_->version);
    status.set_max_num_seqs(8);
    status.set_replica_id(state_->replica_id);
    return status;
  }

 private:
  std::shared_ptr<State> state_;
};

class FakeReward : public RewardClient {
 public:
  std::function<double(const v1::RewardItem&)> score_fn;
  // The extra values of a scored item (verl's reward_extra_info); none when unset.
  std::function<std::map<std::string, double>(const v1::RewardItem&)> extra_fn;
  std::string unknown_data_source;  // items of this data_source have no scorer
  std::string slow_response;        // items with this response time out ...
  int slow_calls = 0;               // ... in this many calls
  std::vector<v1::ScoreRequest> requests;
  absl::StatusOr<v1::ScoreResponse> Score(const v1::ScoreRequest& request) override {
    absl::MutexLock lock(&mu_);  // the pipeline's reward stage and validation may overlap
    requests.push_back(request);
    const bool slow = slow_calls > 0;
    if (slow) --slow_calls;
    v1::ScoreResponse response;
    for (const auto& item : request.items()) {
      auto* result = response.add_results();
      result->set_id(item.id());
      if (item.response() == "error") {
        result->set_error("scorer failed");
        result->set_error_kind("exception");
      } else if (slow && item.response() == slow_response) {
        result->set_error("DEADLINE_EXCEEDED: not scored within the call's timeout");
        result->set_error_kind("timeout");
      } else if (item.data_source() == unknown_data_source) {
        result->set_error("NOT_FOUND: no scorer for data_source \"" + item.data_source() + "\"");
        result->set_error_kind("unknown_data_source");
      } else {
        result->set_score(score_fn(item));
        if (extra_fn) {
          for (const auto& [key, value] : extra_fn(item))
            (*result->mutable_extra_values())[key] = value;
        }
      }
    }
    return response;
  }

 private:
  absl::Mutex mu_;
};

// Log-probs of a constant value per response token.
inline v1::SequenceLogProbs ConstantLogProbs(const v1::TokenSequence& seq, float value) {
  v1::SequenceLogProbs out;
  out.set_id(seq.id());
  for (int t = seq.prompt_length(); t < seq.token_ids_size(); ++t) out.add_logprobs(value);
  return out;
}

class FakeReference : public ReferenceClient {
 public:
  int calls = 0;
  std::vector<v1::ComputeLogProbsRequest> requests;
  absl::StatusOr<v1::ComputeLogProbsResponse> ComputeLogProbs(
      const v1::ComputeLogProbsRequest& request) override {
    absl::MutexLock lock(&mu_);
    ++calls;
    requests.push_back(request);
    v1::ComputeLogProbsResponse response;
    for (const auto& seq : request.sequences())
      *response.add_results() = ConstantLogProbs(seq, -0.5f);
    response.mutable_weight_version()->set_version(version);
    return response;
  }
  uint64_t version = 0;  // the weights it answers with

 private:
  absl::Mutex mu_;
};

// Reference replicas behind one address, called round robin as the gRPC channel does: each
// answers with the weight version it was last sent (Take, from FakeTrainer::on_target), and
// the replica of call number c in `restart_at_call` forgets its weights just before it.
class FakeReferenceFleet : public ReferenceClient {
 public:
  explicit FakeReferenceFleet(std::vector<std::string> addresses)
      : addresses_(std::move(addresses)) {}
  std::set<int> restart_at_call;
  absl::StatusOr<v1::ComputeLogProbsResponse> ComputeLogProbs(
      const v1::ComputeLogProbsRequest& request) override {
    absl::MutexLock lock(&mu_);
    const std::string& address = addresses_[calls_ % addresses_.size()];
    if (restart_at_call.count(calls_) > 0) versions_[address] = 0;
    ++calls_;
    ++served_[address];
    v1::ComputeLogProbsResponse response;
    for (const auto& seq : request.sequences())
      *response.add_results() = ConstantLogProbs(seq, -0.5f);
    response.mutable_weight_version()->set_version(versions_[address]);
    return response;
  }
  void Take(const std::string& address, uint64_t version) {
    absl::MutexLock lock(&mu_);
    versions_[address] = version;
  }
  std::map<std::string, int> served() {
    absl::MutexLock lock(&mu_);
    return served_;
  }

 private:
  const std::vector<std::string> addresses_;
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> versions_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> served_ ABSL_GUARDED_BY(mu_);
};

// Every call holds one lock: the pipeline's reference stage may re-anchor (PublishWeights)
// while the loop trains.
class FakeTrainer : public TrainerClient {
 public:
  uint64_t version = 0;
  std::vector<v1::TrainStepRequest> train_requests;
  std::vector<v1::PublishWeightsRequest> publish_requests;
  std::vector<v1::SftStepRequest> sft_requests;
  std::vector<v1::SaveCheckpointRequest> save_requests;
  std::vector<v1::LoadCheckpointRequest> load_requests;
  // Returned by LoadCheckpoint (its path set to the request's) when set; NotFound otherwise.
  std::optional<v1::CheckpointInfo> checkpoint;
  std::function<void(uint64_t)> on_publish;  // lets the fake replicas take the new version
  // Called for each target a publish reaches, with the version it takes.
  std::function<void(const v1::WeightTarget&, uint64_t)> on_target;
  // Targets at these addresses fail in every publish.
  std::set<std::string> failing_addresses;
  // The old log-prob of every response token of a sequence; -0.25 when unset.
  std::function<float(const v1::TokenSequence&)> old_logprob;

  std::vector<v1::ComputeOldLogProbsRequest> old_requests;
  absl::StatusOr<v1::ComputeOldLogProbsResponse> ComputeOldLogProbs(
      const v1::ComputeOldLogProbsRequest& request) override {
    absl::MutexLock lock(&mu_);
    old_requests.push_back(request);
    v1::ComputeOldLogProbsResponse response;
    for (const auto& seq : request.sequences()) {
      *response.add_results() = ConstantLogProbs(seq, old_logprob ? old_logprob(seq) : -0.25f);
    }
    return response;
  }
  absl::StatusOr<v1::TrainStepResponse> TrainStep(const v1::TrainStepRequest& request) override {
    absl::MutexLock lock(&mu_);
    train_requests.push_back(request);
    ++version;
    v1::TrainStepResponse response;
    (*response.mutable_metrics())["actor/pg_loss"] = 0.125;
    response.mutable_weight_version()->set_version(version);
    return response;
  }
  absl::StatusOr<v1::SftStepResponse> SftStep(const v1::SftStepRequest& request) override {
    absl::MutexLock lock(&mu_);
    sft_requests.push_back(request);
    ++version;
    v1::SftStepResponse response;
    response.mutable_weight_version()->set_version(version);
    return response;
  }
  absl::StatusOr<v1::SaveCheckpointResponse> SaveCheckpoint(
      const v1::SaveCheckpointRequest& request) override {
    absl::MutexLock lock(&mu_);
    save_requests.push_back(request);
    v1::SaveCheckpointResponse response;
    response.mutable_checkpoint()->set_global_step(request.global_step());
    response.mutable_checkpoint()->set_path(request.directory());
    saved_versions_[request.directory()] = version;
    return response;
  }
  absl::StatusOr<v1::LoadCheckpointResponse> LoadCheckpoint(
      const v1::LoadCheckpointRequest& request) override {
    absl::MutexLock lock(&mu_);
    load_requests.push_back(request);
    if (!checkpoint.has_value()) return absl::NotFoundError("no checkpoint");
    v1::LoadCheckpointResponse response;
    *response.mutable_checkpoint() = *checkpoint;
    response.mutable_checkpoint()->set_path(request.path());
    return response;
  }
  absl::StatusOr<v1::PublishWeightsResponse> PublishWeights(
      const v1::PublishWeightsRequest& request) override {
    absl::MutexLock lock(&mu_);
    publish_requests.push_back(request);
    if (on_publish) on_publish(version);
    // A checkpoint's weights carry the version they were saved at.
    const uint64_t sent =
        request.checkpoint().empty() ? version : saved_versions_[request.checkpoint()];
    v1::PublishWeightsResponse response;
    response.mutable_weight_version()->set_version(sent);
    for (const auto& target : request.targets()) {
      auto* result = response.add_results();
      result->set_replica_id(target.replica_id());
      const bool fails = failing_addresses.count(target.address()) > 0;
      result->set_ok(!fails);
      if (fails) result->set_error("connection refused");
      if (!fails && on_target) on_target(target, sent);
    }
    return response;
  }
  absl::StatusOr<v1::GetTrainerStatusResponse> GetStatus() override {
    absl::MutexLock lock(&mu_);
    v1::GetTrainerStatusResponse response;
    response.mutable_weight_version()->set_version(version);
    return response;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, uint64_t> saved_versions_;  // checkpoint folder -> version
};

}  // namespace rlmesh::coordinator
