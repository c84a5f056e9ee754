#include "common/generation/generation_engine.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <random>
#include <set>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/generation/engine_state.h"
#include "common/status/status_macros.h"

namespace rlmesh::generation {

absl::StatusOr<std::unique_ptr<GenerationEngine>> GenerationEngine::Create(
    std::shared_ptr<model::CausalLmImpl> model, const GenerationEngineOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("generation engine: model is null");
  const model::ModelConfig& config = model->config();
  GenerationEngineOptions resolved = options;
  if (resolved.max_num_seqs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generation engine option max_num_seqs: expected >= 1, got ", resolved.max_num_seqs));
  }
  if (resolved.max_model_len < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generation engine option max_model_len: expected >= 0, got ", resolved.max_model_len));
  }
  if (resolved.max_model_len == 0) {
    resolved.max_model_len = config.max_position_embeddings > 0
                                 ? std::min<int64_t>(config.max_position_embeddings, 4096)
                                 : 4096;
  }
  if (config.max_position_embeddings > 0 &&
      resolved.max_model_len > config.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("generation engine option max_model_len: expected at most the model's "
                     "max_position_embeddings ",
                     config.max_position_embeddings, ", got ", resolved.max_model_len));
  }
  if (resolved.max_num_batched_tokens < resolved.max_num_seqs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "actor_rollout_ref.rollout.max_num_batched_tokens = ", resolved.max_num_batched_tokens,
        " is below max_num_seqs = ", resolved.max_num_seqs,
        ": one step must hold a decode token of every running sequence"));
  }
  if (!resolved.enable_chunked_prefill &&
      resolved.max_num_batched_tokens < resolved.max_model_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "actor_rollout_ref.rollout.max_num_batched_tokens = ", resolved.max_num_batched_tokens,
        " is below max_model_len = ", resolved.max_model_len,
        " with enable_chunked_prefill = false: the longest prompt must fit one step (or "
        "enable chunked prefill)"));
  }
  for (int64_t id : resolved.banned_token_ids) {
    if (id < 0 || id >= config.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("generation engine option banned_token_ids: expected ids in [0, ",
                       config.vocab_size, "), got ", id));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Sampler> sampler,
                   Sampler::Create({.banned_token_ids = resolved.banned_token_ids}));
  model::KvCache cache;
  try {
    cache = model->NewCache(resolved.max_num_seqs, resolved.max_model_len);
  } catch (const std::exception& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("generation engine: allocating the KV cache for ", resolved.max_num_seqs,
                     " slots of ", resolved.max_model_len, " tokens failed: ", e.what()));
  }
  return std::unique_ptr<GenerationEngine>(
      new GenerationEngine(std::move(model), resolved, std::move(sampler), std::move(cache)));
}

GenerationEngine::GenerationEngine(std::shared_ptr<model::CausalLmImpl> model,
                                   const GenerationEngineOptions& options,
                                   std::unique_ptr<Sampler> sampler, model::KvCache cache)
    : options_(options),
      vocab_size_(model->config().vocab_size),
      model_(std::move(model)),
      sampler_(std::move(sampler)),
      cache_(std::move(cache)),
      weight_version_(options.initial_weight_version) {
  for (int64_t slot = options_.max_num_seqs - 1; slot >= 0; --slot) free_slots_.push_back(slot);
  absl::MutexLock lock(&mu_);
  stats_.max_num_seqs = options_.max_num_seqs;
  stats_.kv_tokens_capacity = options_.max_num_seqs * options_.max_model_len;
  for (const auto& t : cache_.keys) stats_.kv_cache_bytes += t.numel() * t.element_size();
  for (const auto& t : cache_.values) stats_.kv_cache_bytes += t.numel() * t.element_size();
  stats_.kv_cache_allocations_total = 1;
  stats_.weight_version = weight_version_;
  next_seed_ = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
}

GenerationEngine::~GenerationEngine() {
  absl::MutexLock lock(&mu_);
  for (PendingUpdate& update : pending_updates_) {
    update.done.set_value(absl::CancelledError("generation engine destroyed before the update"));
  }
}

absl::Status GenerationEngine::Check(const GenerationRequest& request) const {
  if (request.request_id.empty()) {
    return absl::InvalidArgumentError("generation request: request_id is empty");
  }
  // At most max_model_len - 1 prompt tokens: the first response token needs a position too.
  if (request.prompt_ids.empty() ||
      static_cast<int64_t>(request.prompt_ids.size()) >= options_.max_model_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("generation request ", request.request_id,
                     ": expected a prompt of 1 to max_model_len - 1 = ", options_.max_model_len - 1,
                     " tokens, got ", request.prompt_ids.size()));
  }
  for (int64_t id : request.prompt_ids) {
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("generation request ", request.request_id, ": prompt token id ", id,
                       " is outside the vocabulary [0, ", vocab_size_, ")"));
    }
  }
  absl::Status valid = ValidateSamplingParams(request.params, vocab_size_);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("generation request ", request.request_id, ": ", valid.message()));
  }
  return absl::OkStatus();
}

absl::Status GenerationEngine::SubmitAll(
    std::vector<std::pair<GenerationRequest, SampleCallback>> requests) {
  std::set<std::string> ids;
  for (const auto& [request, on_sample] : requests) {
    RETURN_IF_ERROR(Check(request));
    if (!ids.insert(request.request_id).second) {
      return absl::AlreadyExistsError(
          absl::StrCat("generation request ", request.request_id, ": given twice"));
    }
  }
  absl::MutexLock lock(&mu_);
  if (shutdown_) return absl::FailedPreconditionError("generation engine is shut down");
  for (const auto& [request, on_sample] : requests) {
    if (requests_.contains(request.request_id)) {
      return absl::AlreadyExistsError(absl::StrCat("generation request ", request.request_id,
                                                   ": a request with this id is pending"));
    }
  }
  for (auto& [request, on_sample] : requests) QueueLocked(std::move(request), std::move(on_sample));
  return absl::OkStatus();
}

absl::Status GenerationEngine::Submit(GenerationRequest request, SampleCallback on_sample) {
  std::vector<std::pair<GenerationRequest, SampleCallback>> one;
  one.emplace_back(std::move(request), std::move(on_sample));
  return SubmitAll(std::move(one));
}

void GenerationEngine::QueueLocked(GenerationRequest request, SampleCallback on_sample) {
  auto req = std::make_shared<Request>();
  req->id = std::move(request.request_id);
  req->prompt = std::move(request.prompt_ids);
  req->params = std::move(request.params);
  req->first_index = request.first_index;
  req->on_sample = std::move(on_sample);
  req->undelivered = req->params.n;
  req->queued = req->params.n;

  uint64_t seed = 0;
  if (req->params.seed.has_value()) {
    seed = *req->params.seed;
  } else {
    seed = next_seed_;
    next_seed_ = next_seed_ * 6364136223846793005ULL + 1442695040888963407ULL;
  }
  for (int32_t i = 0; i < req->params.n; ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->request = req;
    seq->index = i;
    seq->generator = MakeSequenceGenerator(seed, req->first_index + i);
    queue_.push_back(std::move(seq));
  }
  stats_.queued_requests += 1;
  stats_.queued_sequences += req->params.n;
  requests_[req->id] = std::move(req);
}

absl::Status GenerationEngine::Abort(const std::string& request_id, int64_t* undelivered) {
  absl::MutexLock lock(&mu_);
  auto it = requests_.find(request_id);
  if (it == requests_.end()) {
    return absl::NotFoundError(
        absl::StrCat("generation request ", request_id, ": no such pending request"));
  }
  Request* req = it->second.get();
  if (undelivered != nullptr) *undelivered = req->undelivered;
  req->aborted = true;
  if (req->queued > 0) {
    for (auto q = queue_.begin(); q != queue_.end();) {
      if ((*q)->request.get() == req) {
        (*q)->done = true;
        (*q)->finish_reason = FinishReason::kAbort;
        (*q)->weight_version_start = (*q)->weight_version_end = stats_.weight_version;
        aborted_queued_.push_back(std::move(*q));
        q = queue_.erase(q);
      } else {
        ++q;
      }
    }
    stats_.queued_sequences -= req->queued;
    stats_.queued_requests -= 1;
    req->queued = 0;
  }
  return absl::OkStatus();
}

void GenerationEngine::AbortAll() {
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, req] : requests_) ids.push_back(id);
  }
  for (const std::string& id : ids) Abort(id).IgnoreError();  // NotFound: delivered meanwhile
}

std::future<absl::Status> GenerationEngine::UpdateWeightsBetweenSteps(int64_t version,
                                                                      WeightUpdateFn fn) {
  absl::MutexLock lock(&mu_);
  pending_updates_.push_back(PendingUpdate{version, std::move(fn), {}});
  return pending_updates_.back().done.get_future();
}

bool GenerationEngine::HasWorkLocked() const {
  return !queue_.empty() || stats_.running_sequences > 0 || !aborted_queued_.empty() ||
         !pending_updates_.empty();
}

bool GenerationEngine::ShouldWakeLocked() const { return shutdown_ || HasWorkLocked(); }

bool GenerationEngine::HasWork() const {
  absl::MutexLock lock(&mu_);
  return HasWorkLocked();
}

void GenerationEngine::Serve() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &GenerationEngine::ShouldWakeLocked));
      if (shutdown_) break;
    }
    Step();
  }
  AbortAll();
  while (HasWork()) Step();
}

void GenerationEngine::Shutdown() {
  absl::MutexLock lock(&mu_);
  shutdown_ = true;
}

std::vector<Sample> GenerationEngine::TakeFinished() {
  absl::MutexLock lock(&mu_);
  return std::exchange(finished_, {});
}

EngineStats GenerationEngine::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::StatusOr<std::vector<Sample>> GenerationEngine::Generate(
    std::vector<GenerationRequest> requests) {
  struct Collected {
    absl::Mutex mu;
    std::vector<std::pair<size_t, Sample>> samples ABSL_GUARDED_BY(mu);
    int64_t remaining ABSL_GUARDED_BY(mu) = 0;
  };
  auto collected = std::make_shared<Collected>();
  {
    absl::MutexLock lock(&collected->mu);
    for (const GenerationRequest& request : requests) collected->remaining += request.params.n;
  }
  absl::Status submit_error;
  std::vector<std::string> submitted;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string id = requests[i].request_id;
    const int32_t n = requests[i].params.n;
    absl::Status status = Submit(std::move(requests[i]), [collected, i](Sample sample) {
      absl::MutexLock lock(&collected->mu);
      collected->samples.emplace_back(i, std::move(sample));
      collected->remaining -= 1;
    });
    if (!status.ok()) {
      submit_error = status;
      absl::MutexLock lock(&collected->mu);
      for (size_t j = i; j < requests.size(); ++j) {
        collected->remaining -= (j == i) ? n : requests[j].params.n;
      }
      break;
    }
    submitted.push_back(id);
  }
  if (!submit_error.ok()) {
    for (const std::string& id : submitted) Abort(id).IgnoreError();
  }
  while (true) {
    {
      absl::MutexLock lock(&collected->mu);
      if (collected->remaining <= 0) break;
    }
    Step();
  }
  if (!submit_error.ok()) return submit_error;
  absl::MutexLock lock(&collected->mu);
  std::vector<std::pair<size_t, Sample>>& samples = collected->samples;
  std::sort(samples.begin(), samples.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second.index < b.second.index;
  });
  std::vector<Sample> out;
  out.reserve(samples.size());
  for (auto& [i, sample] : samples) out.push_back(std::move(sample));
  return out;
}

}  // namespace rlmesh::generation
