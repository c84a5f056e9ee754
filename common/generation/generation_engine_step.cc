// GenerationEngine::Step and its parts: the scheduler iteration that runs the model.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/generation/engine_state.h"
#include "common/generation/generation_engine.h"

namespace rlmesh::generation {
namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

torch::Tensor IdsTensor(const std::vector<int64_t>& ids, int64_t rows, int64_t cols,
                        const torch::Device& device) {
  torch::Tensor t =
      torch::from_blob(const_cast<int64_t*>(ids.data()), {rows, cols}, torch::kInt64).clone();
  return device.is_cpu() ? t : t.to(device);
}

}  // namespace

void GenerationEngine::Step() {
  absl::MutexLock step_lock(&step_mu_);
  torch::NoGradGuard no_grad;
  std::vector<std::unique_ptr<Sequence>> finished;
  ApplyPendingUpdates();
  RetireAborted(&finished);
  if (EnsureCache(&finished)) {
    // One decode token per running sequence; what is left of the budget goes to prompts,
    // unfinished chunked prefills first (in admission order), then newcomers.
    std::vector<Sequence*> decoding;
    std::vector<Chunk> chunks;
    decoding.reserve(running_.size());
    for (const auto& seq : running_) {
      if (seq->follower) continue;
      if (seq->prefilled < ContextLength(*seq)) {
        chunks.push_back({seq.get(), 0});
      } else {
        decoding.push_back(seq.get());
      }
    }
    int64_t budget = options_.max_num_batched_tokens - static_cast<int64_t>(decoding.size());
    for (Chunk& chunk : chunks) {
      const int64_t left = ContextLength(*chunk.leader) - chunk.leader->prefilled;
      chunk.tokens = std::min(left, std::max<int64_t>(0, budget));
      budget -= chunk.tokens;
    }
    chunks.erase(
        std::remove_if(chunks.begin(), chunks.end(), [](const Chunk& c) { return c.tokens == 0; }),
        chunks.end());
    // Rows in slot order: the model reads a run of consecutive slots without a gather.
    std::sort(decoding.begin(), decoding.end(),
              [](const Sequence* a, const Sequence* b) { return a->slot < b->slot; });
    Admit(&budget, &chunks);
    Prefill(chunks);
    Decode(decoding, &finished);
    if (!chunks.empty() || !decoding.empty()) {
      absl::MutexLock lock(&mu_);
      stats_.steps_total += 1;
    }
    Retire(&finished);
    PublishStats();
    MaybeReleaseCache();
  }
  Deliver(std::move(finished));
}

bool GenerationEngine::EnsureCache(std::vector<std::unique_ptr<Sequence>>* finished) {
  if (!cache_released_) return true;
  {
    absl::MutexLock lock(&mu_);
    if (queue_.empty()) return false;  // nothing to run: stay released
  }
  int64_t bytes = 0;
  try {
    cache_ = model_->NewCache(options_.max_num_seqs, options_.max_model_len);
    for (const auto& t : cache_.keys) bytes += t.numel() * t.element_size();
    for (const auto& t : cache_.values) bytes += t.numel() * t.element_size();
  } catch (const std::exception& e) {
    const absl::Status error = absl::ResourceExhaustedError(
        absl::StrCat("generation engine: allocating the KV cache again failed: ", e.what()));
    std::fprintf(stderr, "%s\n", std::string(error.message()).c_str());
    absl::MutexLock lock(&mu_);
    while (!queue_.empty()) {
      std::unique_ptr<Sequence> seq = std::move(queue_.front());
      queue_.pop_front();
      seq->done = true;
      seq->finish_reason = FinishReason::kAbort;
      seq->error = error;
      Request* req = seq->request.get();
      req->queued -= 1;
      if (req->queued == 0) stats_.queued_requests -= 1;
      stats_.queued_sequences -= 1;
      finished->push_back(std::move(seq));
    }
    return false;
  }
  cache_released_ = false;
  absl::MutexLock lock(&mu_);
  stats_.kv_cache_bytes = bytes;
  stats_.kv_cache_allocations_total += 1;
  return true;
}

void GenerationEngine::MaybeReleaseCache() {
  if (!options_.release_cache_when_idle || cache_released_ || !running_.empty()) return;
  absl::MutexLock lock(&mu_);
  if (!queue_.empty() || !pending_updates_.empty()) return;
  cache_ = model::KvCache();
  cache_released_ = true;
  stats_.kv_cache_bytes = 0;
}

void GenerationEngine::ApplyPendingUpdates() {
  while (true) {
    PendingUpdate update;
    {
      absl::MutexLock lock(&mu_);
      if (pending_updates_.empty()) return;
      update = std::move(pending_updates_.front());
      pending_updates_.pop_front();
    }
    absl::Status status;
    try {
      status = update.fn(*model_);
    } catch (const std::exception& e) {
      status = absl::InternalError(
          absl::StrCat("weight update to version ", update.version, " threw: ", e.what()));
    }
    if (status.ok()) {
      weight_version_ = update.version;
      if (options_.recompute_kv_on_update) {
        // Every running sequence fills its cache again with the new weights before it goes
        // on; one still waiting for its leader's prompt copies it once that is done.
        for (const auto& seq : running_) {
          if (seq->follower) continue;
          cache_.lengths[seq->slot] = 0;
          seq->prefilled = 0;
          seq->refill = !seq->tokens.empty();
        }
      }
      absl::MutexLock lock(&mu_);
      stats_.weight_version = weight_version_;
    } else {
      std::fprintf(stderr, "generation engine: weight update to version %lld failed: %s\n",
                   static_cast<long long>(update.version), std::string(status.message()).c_str());
    }
    update.done.set_value(status);
  }
}

void GenerationEngine::RetireAborted(std::vector<std::unique_ptr<Sequence>>* finished) {
  {
    absl::MutexLock lock(&mu_);
    for (auto& seq : aborted_queued_) finished->push_back(std::move(seq));
    aborted_queued_.clear();
    for (const auto& seq : running_) {
      if (seq->request->aborted) {
        seq->done = true;
        seq->finish_reason = FinishReason::kAbort;
      }
    }
  }
  Retire(finished);
}

void GenerationEngine::Admit(int64_t* budget, std::vector<Chunk>* chunks) {
  // Lowest free slot first (popped from the back), keeping the running slots packed.
  std::sort(free_slots_.begin(), free_slots_.end(), std::greater<int64_t>());
  Sequence* leader = nullptr;
  absl::MutexLock lock(&mu_);
  while (!free_slots_.empty() && !queue_.empty()) {
    Sequence* next = queue_.front().get();
    const bool follows = leader != nullptr && next->request == leader->request;
    int64_t take = 0;
    if (!follows) {
      const int64_t length = static_cast<int64_t>(next->request->prompt.size());
      if (*budget <= 0) break;
      // Without chunked prefill a prompt waits for a step with room for all of it.
      if (!options_.enable_chunked_prefill && length > *budget) break;
      take = std::min(length, *budget);
    }
    std::unique_ptr<Sequence> seq = std::move(queue_.front());
    queue_.pop_front();
    seq->slot = free_slots_.back();
    free_slots_.pop_back();
    cache_.lengths[seq->slot] = 0;
    seq->weight_version_start = weight_version_;
    Request* req = seq->request.get();
    req->queued -= 1;
    if (req->queued == 0) stats_.queued_requests -= 1;
    stats_.queued_sequences -= 1;
    stats_.running_sequences += 1;
    if (follows) {
      seq->follower = true;
      leader->followers.push_back(seq.get());
    } else {
      leader = seq.get();
      chunks->push_back({seq.get(), take});
      *budget -= take;
    }
    running_.push_back(std::move(seq));
  }
}

void GenerationEngine::Prefill(const std::vector<Chunk>& chunks) {
  if (chunks.empty()) return;
  int64_t prompt_tokens = 0, recomputed = 0, forwards = 0, chunked = 0;
  double forward_seconds = 0, sampling_seconds = 0;
  const torch::Device device = model_->options().device;
  size_t begin = 0;
  while (begin < chunks.size()) {
    // The largest run of chunks whose padded size fits max_num_batched_tokens (at least one).
    size_t end = begin + 1;
    int64_t longest = chunks[begin].tokens;
    while (end < chunks.size()) {
      const int64_t padded =
          static_cast<int64_t>(end - begin + 1) * std::max(longest, chunks[end].tokens);
      if (padded > options_.max_num_batched_tokens) break;
      longest = std::max(longest, chunks[end].tokens);
      ++end;
    }
    const int64_t rows = static_cast<int64_t>(end - begin);
    std::vector<int64_t> ids(static_cast<size_t>(rows * longest), 0);
    std::vector<int64_t> slots, num_new;
    std::vector<Sequence*> involved;  // the leaders and their followers, for Fail
    for (size_t i = begin; i < end; ++i) {
      Sequence* leader = chunks[i].leader;
      for (int64_t t = 0; t < chunks[i].tokens; ++t) {
        ids[static_cast<size_t>(static_cast<int64_t>(i - begin) * longest + t)] =
            ContextToken(*leader, leader->prefilled + t);
      }
      slots.push_back(leader->slot);
      num_new.push_back(chunks[i].tokens);
      (leader->refill ? recomputed : prompt_tokens) += chunks[i].tokens;
      involved.push_back(leader);
      involved.insert(involved.end(), leader->followers.begin(), leader->followers.end());
    }

    torch::Tensor logits;
    const double forward_start = Seconds();
    try {
      logits =
          model_->ForwardCachedLast(IdsTensor(ids, rows, longest, device), slots, num_new, &cache_);
      forward_seconds += Seconds() - forward_start;
      ++forwards;
    } catch (const std::exception& e) {
      Fail(involved,
           absl::InternalError(absl::StrCat("prefill of ", rows, " prompts failed: ", e.what())));
      begin = end;
      continue;
    }
    // Prompts now wholly cached: their followers copy the cache, and all sample a first token
    // from the logits of the prompt's last position.
    std::vector<Sequence*> batch;
    std::vector<int64_t> logit_rows;
    for (size_t i = begin; i < end; ++i) {
      Sequence* leader = chunks[i].leader;
      leader->prefilled += chunks[i].tokens;
      if (leader->refill) {
        // Its pending token is the next decode's input: nothing to sample here.
        if (leader->prefilled == ContextLength(*leader)) leader->refill = false;
        continue;
      }
      leader->prefill_chunks += 1;
      const int64_t len = static_cast<int64_t>(leader->request->prompt.size());
      if (leader->prefilled < len) continue;
      if (leader->prefill_chunks > 1) ++chunked;
      batch.push_back(leader);
      logit_rows.push_back(static_cast<int64_t>(i - begin));
      for (Sequence* f : leader->followers) {
        for (size_t layer = 0; layer < cache_.keys.size(); ++layer) {
          cache_.keys[layer][f->slot].narrow(1, 0, len).copy_(
              cache_.keys[layer][leader->slot].narrow(1, 0, len));
          cache_.values[layer][f->slot].narrow(1, 0, len).copy_(
              cache_.values[layer][leader->slot].narrow(1, 0, len));
        }
        cache_.lengths[f->slot] = len;
        f->prefilled = len;
        f->follower = false;
        batch.push_back(f);
        logit_rows.push_back(static_cast<int64_t>(i - begin));
      }
      leader->followers.clear();
    }
    begin = end;
    if (batch.empty()) continue;
    std::vector<Sampler::Row> sampler_rows;
    for (Sequence* seq : batch) sampler_rows.push_back({&seq->request->params, &seq->generator});
    const double sampling_start = Seconds();
    absl::StatusOr<Sampler::Result> sampled = sampler_->Sample(
        logits.index_select(0, torch::tensor(logit_rows, torch::kInt64).to(logits.device())),
        sampler_rows);
    sampling_seconds += Seconds() - sampling_start;
    if (!sampled.ok()) {
      Fail(batch, sampled.status());
      continue;
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      Append(batch[i], sampled->tokens[i], sampled->logprobs[i]);
    }
  }
  absl::MutexLock lock(&mu_);
  stats_.prompt_tokens_total += prompt_tokens;
  stats_.recomputed_tokens_total += recomputed;
  stats_.forward_seconds_total += forward_seconds;
  stats_.sampling_seconds_total += sampling_seconds;
  stats_.prefill_forwards_total += forwards;
  stats_.chunked_prefills_total += chunked;
}

void GenerationEngine::Decode(const std::vector<Sequence*>& decoding,
                              std::vector<std::unique_ptr<Sequence>>* finished) {
  (void)finished;
  if (decoding.empty()) return;
  const int64_t rows = static_cast<int64_t>(decoding.size());
  std::vector<int64_t> ids, slots;
  std::vector<int64_t> num_new(decoding.size(), 1);
  std::vector<Sampler::Row> sampler_rows;
  for (Sequence* seq : decoding) {
    ids.push_back(seq->pending_token);
    slots.push_back(seq->slot);
    sampler_rows.push_back({&seq->request->params, &seq->generator});
  }
  torch::Tensor logits;
  const double forward_start = Seconds();
  try {
    logits = model_->ForwardCachedLast(IdsTensor(ids, rows, 1, model_->options().device), slots,
                                       num_new, &cache_);
  } catch (const std::exception& e) {
    Fail(decoding, absl::InternalError(
                       absl::StrCat("decode step of ", rows, " sequences failed: ", e.what())));
    return;
  }
  const double sampling_start = Seconds();
  absl::StatusOr<Sampler::Result> sampled = sampler_->Sample(logits, sampler_rows);
  const double sampling_end = Seconds();
  if (!sampled.ok()) {
    Fail(decoding, sampled.status());
    return;
  }
  for (size_t i = 0; i < decoding.size(); ++i) {
    Append(decoding[i], sampled->tokens[i], sampled->logprobs[i]);
  }
  absl::MutexLock lock(&mu_);
  stats_.decode_steps_total += 1;
  stats_.forward_seconds_total += sampling_start - forward_start;
  stats_.sampling_seconds_total += sampling_end - sampling_start;
}

int64_t GenerationEngine::ContextLength(const Sequence& seq) {
  const int64_t prompt = static_cast<int64_t>(seq.request->prompt.size());
  return seq.refill ? prompt + static_cast<int64_t>(seq.tokens.size()) - 1 : prompt;
}

int64_t GenerationEngine::ContextToken(const Sequence& seq, int64_t i) {
  const int64_t prompt = static_cast<int64_t>(seq.request->prompt.size());
  return i < prompt ? seq.request->prompt[static_cast<size_t>(i)]
                    : seq.tokens[static_cast<size_t>(i - prompt)];
}

bool GenerationEngine::Append(Sequence* seq, int64_t token, float logprob) {
  const int64_t current = seq->tokens.empty() ? seq->weight_version_start : seq->weight_version_end;
  if (weight_version_ != current) {
    seq->version_switches.push_back({static_cast<int64_t>(seq->tokens.size()), weight_version_});
  }
  seq->tokens.push_back(token);
  seq->logprobs.push_back(logprob);
  seq->pending_token = token;
  seq->weight_version_end = weight_version_;
  const SamplingParams& params = seq->request->params;
  const int64_t generated = static_cast<int64_t>(seq->tokens.size());
  const int64_t prompt = static_cast<int64_t>(seq->request->prompt.size());
  if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token) !=
      params.stop_token_ids.end()) {
    seq->done = true;
    seq->finish_reason = FinishReason::kStop;
  } else if (generated >= params.max_new_tokens || prompt + generated >= options_.max_model_len) {
    // The second case: the whole sequence fills max_model_len positions (at most the model's
    // max_position_embeddings), the longest the reference and the trainer can score.
    seq->done = true;
    seq->finish_reason = FinishReason::kLength;
  }
  return seq->done;
}

void GenerationEngine::Fail(const std::vector<Sequence*>& seqs, const absl::Status& error) {
  std::fprintf(stderr, "generation engine: aborting %zu sequences: %s\n", seqs.size(),
               std::string(error.message()).c_str());
  for (Sequence* seq : seqs) {
    seq->done = true;
    seq->finish_reason = FinishReason::kAbort;
    seq->error = error;
  }
}

void GenerationEngine::Retire(std::vector<std::unique_ptr<Sequence>>* finished) {
  int64_t retired = 0;
  auto keep = running_.begin();
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if ((*it)->done) {
      free_slots_.push_back((*it)->slot);
      finished->push_back(std::move(*it));
      ++retired;
    } else {
      if (keep != it) *keep = std::move(*it);
      ++keep;
    }
  }
  running_.erase(keep, running_.end());
  if (retired > 0) {
    absl::MutexLock lock(&mu_);
    stats_.running_sequences -= retired;
  }
}

void GenerationEngine::PublishStats() {
  int64_t kv_used = 0;
  for (const auto& seq : running_) kv_used += cache_.lengths[seq->slot];
  absl::MutexLock lock(&mu_);
  stats_.kv_tokens_used = kv_used;
}

void GenerationEngine::Deliver(std::vector<std::unique_ptr<Sequence>> finished) {
  if (finished.empty()) return;
  std::vector<std::pair<SampleCallback*, Sample>> calls;
  std::vector<std::shared_ptr<Request>> keep_alive;  // callbacks live in their Request
  {
    absl::MutexLock lock(&mu_);
    for (auto& seq : finished) {
      Sample sample;
      sample.request_id = seq->request->id;
      sample.index = seq->index;
      sample.prompt_length = static_cast<int64_t>(seq->request->prompt.size());
      sample.token_ids = std::move(seq->tokens);
      sample.logprobs = std::move(seq->logprobs);
      sample.finish_reason = seq->finish_reason;
      sample.error = seq->error;
      sample.weight_version_start = seq->weight_version_start;
      sample.weight_version_end =
          sample.token_ids.empty() ? seq->weight_version_start : seq->weight_version_end;
      sample.version_switches = std::move(seq->version_switches);
      stats_.generated_tokens_total += static_cast<int64_t>(sample.token_ids.size());
      stats_.finished_sequences_total += 1;
      Request* req = seq->request.get();
      req->undelivered -= 1;
      if (req->undelivered == 0) {
        auto it = requests_.find(req->id);
        if (it != requests_.end() && it->second.get() == req) requests_.erase(it);
      }
      if (req->on_sample) {
        keep_alive.push_back(seq->request);
        calls.emplace_back(&req->on_sample, std::move(sample));
      } else {
        finished_.push_back(std::move(sample));
      }
    }
  }
  for (auto& [callback, sample] : calls) (*callback)(std::move(sample));
}

}  // namespace rlmesh::generation
