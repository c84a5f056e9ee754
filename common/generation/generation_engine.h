// The generation engine: a queue of requests, each expanded into n sequences, run over a
// KV cache of `max_num_seqs` slots with continuous batching. Between two decode steps the
// finished sequences leave and queued ones join (their prompts prefilled together), so a long
// response never holds up the rest of the batch.
//
// Threads: Submit, Abort, AbortAll, UpdateWeightsBetweenSteps, Stats, TakeFinished and
// HasWork may be called from any thread. Step() does the work and runs on one thread at a
// time (concurrent calls take turns); drive it with Serve() on a dedicated thread (blocks
// until Shutdown()), or with `while (engine->HasWork()) engine->Step();`, or use the
// synchronous Generate(). The model and the KV cache are touched only inside Step().
//
// Delivery: each sample is delivered as soon as it finishes, to the callback given to
// Submit (called on the Step() thread, with no engine lock held, so it may call Submit or
// Abort), or, without a callback, queued for TakeFinished().
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/generation/sampler.h"
#include "common/generation/sampling_params.h"
#include "common/model/causal_lm.h"

namespace rlmesh::generation {

struct GenerationEngineOptions {
  // KV-cache slots: sequences decoded together (actor_rollout_ref.rollout.max_num_seqs).
  int64_t max_num_seqs = 64;
  // Tokens per slot (prompt + response). 0: the model's max_position_embeddings, at most 4096.
  int64_t max_model_len = 0;
  // Tokens one Step processes, decodes (one each) and prompt tokens together
  // (actor_rollout_ref.rollout.max_num_batched_tokens); also the padded size (rows x longest
  // chunk) of one prefill forward. At least max_num_seqs, so that every decode fits.
  int64_t max_num_batched_tokens = 8192;
  // A prompt longer than what is left of a step's budget is prefilled over several steps
  // (actor_rollout_ref.rollout.enable_chunked_prefill); without it a prompt is prefilled in
  // one step and max_num_batched_tokens must hold max_model_len.
  bool enable_chunked_prefill = true;
  // Release the KV cache whenever the engine runs out of work and allocate it again for the
  // next request (actor_rollout_ref.rollout.free_cache_engine).
  bool release_cache_when_idle = false;
  // Tokens never generated (for example the pad token).
  std::vector<int64_t> banned_token_ids;
  // Weight version the engine starts at (samples carry the version that produced them).
  int64_t initial_weight_version = 0;
  // What running sequences do when new weights arrive between two steps: keep their KV cache
  // (false: the cached positions stay those of the older weights, as vLLM's pause with
  // mode=keep) or compute it again with the new weights from the prompt and the tokens
  // sampled so far before they decode on (true: every token after the update is what a
  // forward pass of the new weights over the whole sequence gives).
  bool recompute_kv_on_update = false;
};

struct GenerationRequest {
  std::string request_id;           // unique among requests not yet fully delivered
  std::vector<int64_t> prompt_ids;  // 1 .. max_model_len token ids
  SamplingParams params;
  // The prompt's index of this request's first sample: with a seed, sample i draws from the
  // generator of (seed, first_index + i), so a prompt's sample k is the same whichever call
  // carries it (a re-dispatch of the rest of a group). Sample::index stays 0 .. n - 1.
  int32_t first_index = 0;
};

// Queue depth, batch occupancy and KV use, for the rollout service's load reports and metrics.
struct EngineStats {
  int64_t queued_requests = 0;    // requests with at least one sequence still queued
  int64_t queued_sequences = 0;   // sequences waiting for a slot
  int64_t running_sequences = 0;  // sequences holding a slot
  int64_t max_num_seqs = 0;
  int64_t kv_tokens_used = 0;      // tokens cached in the slots of running sequences
  int64_t kv_tokens_capacity = 0;  // max_num_seqs * max_model_len
  int64_t weight_version = 0;
  int64_t prompt_tokens_total = 0;     // prompt tokens prefilled (shared prefixes once)
  int64_t generated_tokens_total = 0;  // tokens sampled
  int64_t finished_sequences_total = 0;
  int64_t decode_steps_total = 0;
  double forward_seconds_total = 0;   // wall time inside the model's forward (prefill + decode)
  double sampling_seconds_total = 0;  // wall time inside the sampler
  int64_t steps_total = 0;            // Step() iterations that did work
  int64_t prefill_forwards_total = 0;
  int64_t chunked_prefills_total = 0;   // prompts prefilled over more than one step
  int64_t kv_cache_bytes = 0;           // allocated now (0 while released)
  int64_t recomputed_tokens_total = 0;  // cache positions computed again after weight updates
  int64_t kv_cache_allocations_total = 0;
};

class GenerationEngine {
 public:
  using SampleCallback = std::function<void(Sample)>;
  // Applied to the model between two decode steps (e.g. copy a new weight version in).
  using WeightUpdateFn = std::function<absl::Status(model::CausalLmImpl& model)>;

  // Allocates the KV cache on the model's device. InvalidArgument naming the option when an
  // option is out of range. The engine keeps `model` and is its only user while it lives.
  static absl::StatusOr<std::unique_ptr<GenerationEngine>> Create(
      std::shared_ptr<model::CausalLmImpl> model, const GenerationEngineOptions& options);
  ~GenerationEngine();

  // Queues a request. InvalidArgument (for this request only) when the prompt is empty, longer
  // than max_model_len, has an id outside the vocabulary, or a sampling param is out of range;
  // AlreadyExists when request_id is in use; FailedPrecondition after Shutdown().
  absl::Status Submit(GenerationRequest request, SampleCallback on_sample = nullptr);
  // Queues several requests at once: every one is checked first and then all are queued under
  // one lock, so that no engine step sees some of them and not the others (the batches, and
  // with them the float rounding of every step, do not depend on how fast they were handed
  // over). Nothing is queued when one is refused: the error names its request.
  absl::Status SubmitAll(std::vector<std::pair<GenerationRequest, SampleCallback>> requests);
  // What Submit checks of a request before queueing it (the prompt, its ids, the sampling
  // params), with the same errors.
  absl::Status Check(const GenerationRequest& request) const;

  // Ends every sequence of the request with FinishReason::kAbort (running ones keep the tokens
  // generated so far). Queued sequences are delivered at the next Step, running ones at the
  // next Step too. NotFound when no such request is pending.
  // `undelivered`, when given, gets the number of the request's sequences not delivered yet
  // (they end with kAbort, or with their own reason if they had just finished).
  absl::Status Abort(const std::string& request_id, int64_t* undelivered = nullptr);
  void AbortAll();

  // Runs `fn` on the model at the start of the next Step, before any forward, and then sets
  // the weight version to `version`. Running sequences go on: tokens after the update come
  // from the new weights, over their kept KV cache or one computed again
  // (options().recompute_kv_on_update); each sample reports its start and end versions and
  // where each newer version took over (Sample::version_switches). The future is ready once
  // applied. Do not wait on it from the thread that drives Step().
  std::future<absl::Status> UpdateWeightsBetweenSteps(int64_t version, WeightUpdateFn fn);

  // One scheduling iteration: apply pending weight updates, retire aborted sequences, give the
  // step's token budget to one decode token per running sequence and the rest to prompts
  // (unfinished chunked prefills first, then queued sequences admitted into free slots),
  // prefill those (sampling the first token of each prompt that completes), run the decode,
  // and deliver what finished.
  void Step();
  // True while anything is queued, running, waiting for delivery or pending as an update.
  bool HasWork() const;

  // Calls Step() whenever there is work, sleeping otherwise, until Shutdown(); then aborts
  // what is left and delivers it. Join the serving thread before destroying the engine.
  void Serve();
  void Shutdown();

  // Submits `requests`, steps until they are all delivered, and returns their samples ordered
  // by request then index. The first Submit error is returned (after aborting the requests
  // already queued).
  absl::StatusOr<std::vector<Sample>> Generate(std::vector<GenerationRequest> requests);

  // Samples delivered to no callback, in finishing order; empties the queue.
  std::vector<Sample> TakeFinished();
  EngineStats Stats() const;

  const GenerationEngineOptions& options() const { return options_; }

 private:
  struct Request;
  struct Sequence;
  // Queues a checked request whose id is free.
  void QueueLocked(GenerationRequest request, SampleCallback on_sample)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct PendingUpdate {
    int64_t version;
    WeightUpdateFn fn;
    std::promise<absl::Status> done;
  };

  GenerationEngine(std::shared_ptr<model::CausalLmImpl> model,
                   const GenerationEngineOptions& options, std::unique_ptr<Sampler> sampler,
                   model::KvCache cache);

  // Step() parts; run with step_mu_ held and mu_ not held.
  void ApplyPendingUpdates();
  void RetireAborted(std::vector<std::unique_ptr<Sequence>>* finished);
  // A prompt's share of a step: `tokens` more of its prompt into the cache.
  struct Chunk {
    Sequence* leader;
    int64_t tokens;
  };
  // Admits queued sequences while slots are free and `budget` (prompt tokens left in this
  // step) pays for their prompts; appends their chunks. Samples of a request admitted
  // together follow the first: they copy its cache instead of computing their own.
  void Admit(int64_t* budget, std::vector<Chunk>* chunks);
  void Prefill(const std::vector<Chunk>& chunks);
  // The KV cache after a release (free_cache_engine); false when allocating it failed, in
  // which case the queued sequences are failed into `finished`.
  bool EnsureCache(std::vector<std::unique_ptr<Sequence>>* finished);
  void MaybeReleaseCache();
  void Decode(const std::vector<Sequence*>& decoding,
              std::vector<std::unique_ptr<Sequence>>* finished);
  // Records a sampled token; true when it ends the sequence.
  bool Append(Sequence* seq, int64_t token, float logprob);
  // The tokens a sequence's cache holds when complete (the prompt; while refilling, the
  // prompt and every sampled token but the pending one), and its i-th.
  static int64_t ContextLength(const Sequence& seq);
  static int64_t ContextToken(const Sequence& seq, int64_t i);
  // Moves finished sequences out of running_ into `finished` and frees their slots.
  void Retire(std::vector<std::unique_ptr<Sequence>>* finished);
  void Fail(const std::vector<Sequence*>& seqs, const absl::Status& error);
  void Deliver(std::vector<std::unique_ptr<Sequence>> finished);
  void PublishStats();

  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ShouldWakeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const GenerationEngineOptions options_;
  const int64_t vocab_size_;

  // Owned by the thread inside Step() (serialised by step_mu_).
  absl::Mutex step_mu_;
  std::shared_ptr<model::CausalLmImpl> model_;
  std::unique_ptr<Sampler> sampler_;
  model::KvCache cache_;
  bool cache_released_ = false;
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<int64_t> free_slots_;
  int64_t weight_version_;  // version of the weights the model holds now

  mutable absl::Mutex mu_;
  std::deque<std::unique_ptr<Sequence>> queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Request>> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Sequence>> aborted_queued_ ABSL_GUARDED_BY(mu_);
  std::deque<PendingUpdate> pending_updates_ ABSL_GUARDED_BY(mu_);
  std::vector<Sample> finished_ ABSL_GUARDED_BY(mu_);
  EngineStats stats_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seed_ ABSL_GUARDED_BY(mu_);
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace rlmesh::generation
