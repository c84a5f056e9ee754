#include "common/config/dry_run_checks.h"

#include <filesystem>
#include <system_error>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/config/memory_estimate.h"
#include "common/config/schema.h"
#include "common/model/safetensors_reader.h"
#include "common/transport/transport.h"

namespace rlmesh::config {
namespace {

class Checker {
 public:
  Checker(const Config& config, const ModelShape* shape, bool check_data)
      : c_(config), shape_(shape), check_data_(check_data) {}

  std::vector<Finding> Run() {
    CheckRefusals();
    CheckParallelLayout();
    CheckBatches();
    CheckMicroBatchKeys();
    if (shape_ != nullptr) CheckModel();
    CheckAlgorithm();
    if (check_data_) CheckData();
    CheckServices();
    return std::move(findings_);
  }

 private:
  void Error(std::string message) {
    findings_.push_back({Finding::Severity::kError, std::move(message)});
  }
  void Warning(std::string message) {
    findings_.push_back({Finding::Severity::kWarning, std::move(message)});
  }

  // Every key whose value this build cannot run, named with the value and what is supported.
  void CheckRefusals() {
    for (const KeySpec& spec : Schema()) {
      if (!spec.refusal) continue;
      const std::string reason = spec.refusal(c_);
      if (!reason.empty()) {
        Error(absl::StrCat(spec.key, " = ", ValueText(spec.get(c_)), ": ", reason));
      }
    }
  }

  void CheckParallelLayout() {
    const auto& actor = c_.actor_rollout_ref.actor.megatron;
    const int64_t devices = c_.trainer.n_gpus_per_node * c_.trainer.nnodes;
    if (c_.rlmesh.trainer.rank >= devices) {
      Error(absl::StrCat("rlmesh.trainer.rank = ", c_.rlmesh.trainer.rank,
                         " is not a rank of the trainer group of trainer.n_gpus_per_node x "
                         "trainer.nnodes = ",
                         devices, " ranks (0 to ", devices - 1, ")"));
    }
    if (c_.rlmesh.reference.rank >= c_.rlmesh.reference.world_size) {
      Error(absl::StrCat("rlmesh.reference.rank = ", c_.rlmesh.reference.rank,
                         " is not a rank of the reference group of rlmesh.reference.world_size = ",
                         c_.rlmesh.reference.world_size, " ranks (0 to ",
                         c_.rlmesh.reference.world_size - 1, ")"));
    }
    const int64_t model_parallel =
        actor.tensor_model_parallel_size * actor.pipeline_model_parallel_size;
    if (devices % model_parallel != 0) {
      Error(absl::StrCat(
          "devices = trainer.n_gpus_per_node x trainer.nnodes = ", c_.trainer.n_gpus_per_node,
          " x ", c_.trainer.nnodes, " = ", devices,
          " is not divisible by tensor x pipeline parallel = ", actor.tensor_model_parallel_size,
          " x ", actor.pipeline_model_parallel_size, " = ", model_parallel,
          ": TP x PP x DP must equal the number of devices"));
      return;
    }
    const int64_t dp = devices / model_parallel;
    const int64_t ep = actor.expert_model_parallel_size;
    if (shape_ == nullptr) return;
    if (ep > 1 && shape_->num_experts == 0) {
      Error(absl::StrCat(
          "actor_rollout_ref.actor.megatron.expert_model_parallel_size = ", ep,
          " needs a mixture-of-experts model, but ", shape_->source,
          " describes a dense model (num_experts = 0): expert parallelism places different "
          "experts of each MoE layer on different devices, and a dense model has no experts "
          "to place; set it to 1"));
    } else if (ep > 1) {
      if (shape_->num_experts % ep != 0) {
        Error(absl::StrCat("actor_rollout_ref.actor.megatron.expert_model_parallel_size = ", ep,
                           " does not divide the model's ", shape_->num_experts,
                           " experts per layer"));
      }
      if (dp % ep != 0) {
        Error(absl::StrCat("actor_rollout_ref.actor.megatron.expert_model_parallel_size = ", ep,
                           " does not divide the data-parallel size ", dp,
                           " (expert-parallel groups are formed inside the data-parallel group)"));
      }
    }
  }

  void CheckBatches() {
    const auto& actor = c_.actor_rollout_ref.actor;
    const int64_t n = c_.actor_rollout_ref.rollout.n;
    const int64_t train = c_.data.train_batch_size;
    const int64_t mini = actor.ppo_mini_batch_size;
    if (train < mini) {
      Error(absl::StrCat("data.train_batch_size = ", train,
                         " is smaller than actor_rollout_ref.actor.ppo_mini_batch_size = ", mini,
                         ": a step must hold at least one mini-batch (both count prompts)"));
      return;
    }
    if ((train * n) % (mini * n) != 0) {
      Error(absl::StrCat("data.train_batch_size x actor_rollout_ref.rollout.n = ", train, " x ", n,
                         " = ", train * n,
                         " samples is not divisible by the mini-batch of "
                         "actor_rollout_ref.actor.ppo_mini_batch_size x n = ",
                         mini, " x ", n, " = ", mini * n,
                         " samples: every optimizer step must see a full mini-batch"));
      return;
    }
    const Layout layout = LayoutOf(c_);
    const int64_t mini_samples = mini * n;
    if (mini_samples % layout.dp != 0) {
      Error(absl::StrCat("the mini-batch of ", mini_samples,
                         " samples (ppo_mini_batch_size x n) does not split evenly over the ",
                         layout.dp, " data-parallel ranks"));
      return;
    }
    const int64_t per_device = mini_samples / layout.dp;
    const bool micro_set =
        actor.ppo_micro_batch_size_per_gpu.has_value() || actor.ppo_micro_batch_size.has_value();
    const int64_t micro = TrainMicroBatch(c_, layout);
    if (!actor.use_dynamic_bsz && micro_set && per_device % micro != 0) {
      Error(absl::StrCat(
          "the mini-batch per device, ppo_mini_batch_size x n / data-parallel ranks = ", mini,
          " x ", n, " / ", layout.dp, " = ", per_device, " samples, is not divisible by ",
          actor.ppo_micro_batch_size_per_gpu.has_value()
              ? "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"
              : "actor_rollout_ref.actor.ppo_micro_batch_size / data-parallel ranks",
          " = ", micro));
    }
    if (train == mini && actor.ppo_epochs == 1) {
      Warning(
          "one mini-batch per step and ppo_epochs = 1: the update is exactly on-policy, the "
          "ratio is 1 and clipping never acts (use several mini-batches for a PPO-style update)");
    }
  }

  // verl's older global micro-batch keys and the _per_gpu ones replace each other; setting
  // both is verl's error too. Token budgets must hold the longest sequence (verl asserts it).
  void CheckMicroBatchKeys() {
    const auto& a = c_.actor_rollout_ref;
    const std::tuple<const char*, bool, const char*, bool> pairs[] = {
        {"actor_rollout_ref.actor.ppo_micro_batch_size", a.actor.ppo_micro_batch_size.has_value(),
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
         a.actor.ppo_micro_batch_size_per_gpu.has_value()},
        {"actor_rollout_ref.rollout.log_prob_micro_batch_size",
         a.rollout.log_prob_micro_batch_size.has_value(),
         "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu",
         a.rollout.log_prob_micro_batch_size_per_gpu.has_value()},
        {"actor_rollout_ref.ref.log_prob_micro_batch_size",
         a.ref.log_prob_micro_batch_size.has_value(),
         "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
         a.ref.log_prob_micro_batch_size_per_gpu.has_value()},
    };
    for (const auto& [global, global_set, per_gpu, per_gpu_set] : pairs) {
      if (global_set && per_gpu_set) {
        Error(absl::StrCat(global, " and ", per_gpu, " are both set: set one (", global,
                           " is verl's older total over the ranks, ", per_gpu,
                           " the size on one "
                           "device)"));
      }
    }
    const int64_t longest = c_.data.max_prompt_length + c_.data.max_response_length;
    const std::tuple<const char*, bool, int64_t> budgets[] = {
        {"actor_rollout_ref.actor.ppo_max_token_len_per_gpu", a.actor.use_dynamic_bsz,
         a.actor.ppo_max_token_len_per_gpu},
        {"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
         a.rollout.log_prob_use_dynamic_bsz.value_or(a.actor.use_dynamic_bsz),
         a.rollout.log_prob_max_token_len_per_gpu.value_or(a.actor.ppo_max_token_len_per_gpu)},
        {"actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
         a.ref.log_prob_use_dynamic_bsz.value_or(a.actor.use_dynamic_bsz),
         a.ref.log_prob_max_token_len_per_gpu.value_or(a.actor.ppo_max_token_len_per_gpu)},
    };
    for (const auto& [key, used, budget] : budgets) {
      if (used && budget < longest) {
        Error(absl::StrCat(key, " = ", budget,
                           " is below data.max_prompt_length + "
                           "data.max_response_length = ",
                           longest, ": one micro-batch must hold the longest sequence"));
      }
    }
  }

  // rlmesh.model.* stand in for a missing config.json (their help says so); set beside one and
  // different from it, they are named, so that nobody believes they are what runs.
  void CheckModelSizeKeys() {
    if (shape_->source == "rlmesh.model.*") return;
    const ModelSizeConfig& k = c_.rlmesh.model;
    const model::ModelConfig& m = shape_->model;
    const std::tuple<const char*, int64_t, int64_t> sizes[] = {
        {"rlmesh.model.hidden_size", k.hidden_size, m.hidden_size},
        {"rlmesh.model.intermediate_size", k.intermediate_size, m.intermediate_size},
        {"rlmesh.model.num_hidden_layers", k.num_hidden_layers, m.num_hidden_layers},
        {"rlmesh.model.num_attention_heads", k.num_attention_heads, m.num_attention_heads},
        {"rlmesh.model.num_key_value_heads", k.num_key_value_heads, m.num_key_value_heads},
        {"rlmesh.model.head_dim", k.head_dim, m.head_dim},
        {"rlmesh.model.vocab_size", k.vocab_size, m.vocab_size},
        {"rlmesh.model.num_experts", k.num_experts, 0},
    };
    for (const auto& [key, value, actual] : sizes) {
      if (value != 0 && value != actual) {
        Warning(absl::StrCat(key, " = ", value, " is not used: ", shape_->source, " says ", actual,
                             " and is what runs (the key stands in for a missing config.json)"));
      }
    }
    // Keys with a non-zero default count as set once the block is filled in (hidden_size).
    if (k.hidden_size == 0) return;
    if (k.architecture != m.architecture) {
      Warning(absl::StrCat("rlmesh.model.architecture = ", k.architecture, " but ", shape_->source,
                           " says ", m.architecture));
    }
    if (k.max_position_embeddings != m.max_position_embeddings) {
      Warning(absl::StrCat("rlmesh.model.max_position_embeddings = ", k.max_position_embeddings,
                           " but ", shape_->source, " says ", m.max_position_embeddings));
    }
    if (k.tie_word_embeddings != m.tie_word_embeddings) {
      Warning(absl::StrCat(
          "rlmesh.model.tie_word_embeddings = ", k.tie_word_embeddings ? "true" : "false", " but ",
          shape_->source, " says ", m.tie_word_embeddings ? "true" : "false"));
    }
  }

  void CheckModel() {
    CheckModelSizeKeys();
    const model::ModelConfig& m = shape_->model;
    const int64_t length = c_.data.max_prompt_length + c_.data.max_response_length;
    if (length > m.max_position_embeddings) {
      Error(absl::StrCat("data.max_prompt_length + data.max_response_length = ", length,
                         " exceeds the model's max_position_embeddings = ",
                         m.max_position_embeddings, " (", shape_->source, ")"));
    }
    const int64_t tp = c_.actor_rollout_ref.actor.megatron.tensor_model_parallel_size;
    if (m.num_attention_heads % tp != 0) {
      Error(absl::StrCat("actor_rollout_ref.actor.megatron.tensor_model_parallel_size = ", tp,
                         " does not divide num_attention_heads = ", m.num_attention_heads, " (",
                         shape_->source, "): each shard holds whole heads"));
    }
    if (m.num_key_value_heads % tp != 0 && tp % m.num_key_value_heads != 0) {
      Error(absl::StrCat("actor_rollout_ref.actor.megatron.tensor_model_parallel_size = ", tp,
                         " and num_key_value_heads = ", m.num_key_value_heads,
                         ": one must divide the other"));
    }
    const int64_t pp = c_.actor_rollout_ref.actor.megatron.pipeline_model_parallel_size;
    if (m.num_hidden_layers % pp != 0) {
      Error(absl::StrCat("actor_rollout_ref.actor.megatron.pipeline_model_parallel_size = ", pp,
                         " does not divide num_hidden_layers = ", m.num_hidden_layers));
    }
  }

  void CheckAlgorithm() {
    const auto& rollout = c_.actor_rollout_ref.rollout;
    if (rollout.n == 1) {
      Warning(
          "actor_rollout_ref.rollout.n = 1: a GRPO group of one sample has mean 0 and std 1, "
          "so the advantage is the raw score with no baseline; set n > 1");
    }
    if (rollout.n > 1 && !rollout.do_sample) {
      Warning(absl::StrCat("actor_rollout_ref.rollout.do_sample = false with n = ", rollout.n,
                           ": the n greedy samples of a prompt are identical, so every "
                           "advantage is 0"));
    }
    if (c_.actor_rollout_ref.actor.use_kl_loss && c_.algorithm.use_kl_in_reward) {
      Warning(
          "actor_rollout_ref.actor.use_kl_loss and algorithm.use_kl_in_reward are both true: "
          "the KL to the reference is penalised twice");
    }
    if (c_.trainer.resume_mode == "resume_path" && !c_.trainer.resume_from_path.has_value()) {
      Error("trainer.resume_mode = resume_path needs trainer.resume_from_path, which is null");
    }
    if (c_.trainer.resume_from_path.has_value() &&
        !absl::StrContains(*c_.trainer.resume_from_path, "global_step_")) {
      Error(absl::StrCat("trainer.resume_from_path = \"", *c_.trainer.resume_from_path,
                         "\": expected a checkpoint folder named global_step_N"));
    }
  }

  static bool Exists(const std::string& path) {
    std::error_code ec;
    return std::filesystem::exists(ExpandHome(path), ec);
  }

  void CheckData() {
    const auto& q = c_.rlmesh.quickstart;
    const bool synthetic = q.task != "none";
    if (!synthetic && c_.data.train_files.empty()) {
      Error("no training data: data.train_files is empty and rlmesh.quickstart.task is none");
    }
    if (synthetic && !c_.data.train_files.empty()) {
      Warning(absl::StrCat("rlmesh.quickstart.task = ", q.task,
                           " replaces data.train_files, which are ignored"));
    }
    for (const auto* files : {&c_.data.train_files, &c_.data.val_files}) {
      const char* key = files == &c_.data.train_files ? "data.train_files" : "data.val_files";
      for (const std::string& file : *files) {
        if (!synthetic && !Exists(file)) {
          findings_.push_back({Finding::Severity::kWarning,
                               absl::StrCat(key, ": \"", file,
                                            "\" does not exist (yet): the coordinator reads it "
                                            "at start; `rlmesh run` needs it"),
                               /*blocks_run=*/true});
        }
      }
    }
    const bool validates = c_.trainer.val_before_train || c_.trainer.test_freq > 0;
    if (validates && !synthetic && c_.data.val_files.empty()) {
      Warning(
          "trainer.val_before_train / trainer.test_freq ask for validation but "
          "data.val_files is empty: no validation will run");
    }
    if (synthetic) {
      if (q.min_digits > q.max_digits) {
        Error(absl::StrCat("rlmesh.quickstart.min_digits = ", q.min_digits,
                           " is greater than rlmesh.quickstart.max_digits = ", q.max_digits));
      }
      // The prompt is BOS, the digits and "="; the answer is the digits and EOS.
      if (q.max_digits + 2 > c_.data.max_prompt_length) {
        Error(absl::StrCat("data.max_prompt_length = ", c_.data.max_prompt_length,
                           " cannot hold a prompt of rlmesh.quickstart.max_digits = ", q.max_digits,
                           " digits (needs ", q.max_digits + 2, " tokens)"));
      }
      if (q.max_digits + 1 > c_.data.max_response_length) {
        Error(absl::StrCat("data.max_response_length = ", c_.data.max_response_length,
                           " cannot hold an answer of rlmesh.quickstart.max_digits = ",
                           q.max_digits, " digits and EOS (needs ", q.max_digits + 1, " tokens)"));
      }
    }
  }

  static bool IsLoopback(const std::string& host) {
    return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
  }

  // Weights sent inline (transport grpc; and any target the data plane does not reach) go in
  // UpdateWeights calls of one bucket each, or of the whole model when it is smaller: that
  // and the tensors' names and shapes must fit in one gRPC message.
  void CheckInlineWeightMessages() {
    const RlmeshConfig& r = c_.rlmesh;
    int64_t bucket = r.weight_sync.bucket_bytes;
    std::string what = absl::StrCat("rlmesh.weight_sync.bucket_bytes = ", bucket);
    if (shape_ != nullptr) {
      const int64_t model = shape_->total_params * WeightBytes(c_);
      if (model < bucket) {
        bucket = model;
        what = absl::StrCat("the whole model in ", r.dtype, ", ", model, " bytes");
      }
    }
    constexpr int64_t kFraming = 64 << 10;  // names, shapes and offsets of a bucket's tensors
    if (bucket + kFraming <= r.rpc.max_message_bytes) return;
    const std::string message = absl::StrCat(
        "rlmesh.rpc.max_message_bytes = ", r.rpc.max_message_bytes, " cannot carry one inline ",
        "weight update (", what, ", plus ", kFraming,
        " for the tensors' names and shapes): raise it, or lower rlmesh.weight_sync.bucket_bytes");
    if (r.weight_sync.transport == "grpc") {
      Error(message);
    } else {
      Warning(absl::StrCat(message, " (rlmesh.weight_sync.transport = ", r.weight_sync.transport,
                           " sends inline only to a target its data plane does not reach)"));
    }
  }

  void CheckServices() {
    const RlmeshConfig& r = c_.rlmesh;
    if (transport::MovesDeviceMemory(r.weight_sync.transport) && r.device != "cuda") {
      Error(absl::StrCat("rlmesh.weight_sync.transport = ", r.weight_sync.transport,
                         " needs rlmesh.device = cuda, got ", r.device,
                         " (use shm or tcp on cpu)"));
    }
    CheckInlineWeightMessages();
    for (const auto& [key, n] :
         {std::pair<const char*, int64_t>{"actor_rollout_ref.rollout.n",
                                          c_.actor_rollout_ref.rollout.n},
          {"actor_rollout_ref.rollout.val_kwargs.n", c_.actor_rollout_ref.rollout.val_kwargs.n}}) {
      if (n > r.rollout.max_queue) {
        Error(absl::StrCat(key, " = ", n,
                           " is over rlmesh.rollout.max_queue = ", r.rollout.max_queue,
                           ": a replica refuses a Generate call of more samples than that"));
      }
    }
    const auto& rollout = c_.actor_rollout_ref.rollout;
    const int64_t model_len =
        rollout.max_model_len.value_or(c_.data.max_prompt_length + c_.data.max_response_length);
    if (rollout.max_num_batched_tokens < rollout.max_num_seqs) {
      Error(absl::StrCat(
          "actor_rollout_ref.rollout.max_num_batched_tokens = ", rollout.max_num_batched_tokens,
          " is below max_num_seqs = ", rollout.max_num_seqs,
          ": one engine step must hold a decode token of every running sequence"));
    }
    if (!rollout.enable_chunked_prefill && rollout.max_num_batched_tokens < model_len) {
      Error(absl::StrCat(
          "actor_rollout_ref.rollout.max_num_batched_tokens = ", rollout.max_num_batched_tokens,
          " is below the longest sequence (", model_len,
          " tokens) with enable_chunked_prefill = false: a prompt "
          "must fit one step, or enable chunked prefill"));
    }
    if (rollout.max_model_len.has_value() &&
        *rollout.max_model_len < c_.data.max_prompt_length + c_.data.max_response_length) {
      Warning(absl::StrCat("actor_rollout_ref.rollout.max_model_len = ", *rollout.max_model_len,
                           " is below data.max_prompt_length + data.max_response_length = ",
                           c_.data.max_prompt_length + c_.data.max_response_length,
                           ": responses end (finish reason length) when a sequence fills it"));
    }
    if (!r.rollout.addresses.empty() && !r.rollout.discovery_dns.empty()) {
      Error(
          "rlmesh.rollout.addresses and rlmesh.rollout.discovery_dns are both set: choose one "
          "way to find the rollout replicas");
    }
    if (!r.rollout.addresses.empty() && r.rollout.replicas != 1 &&
        r.rollout.replicas != static_cast<int64_t>(r.rollout.addresses.size())) {
      Error(absl::StrCat("rlmesh.rollout.replicas = ", r.rollout.replicas,
                         " but rlmesh.rollout.addresses lists ", r.rollout.addresses.size(),
                         " replicas"));
    }
    // Fixed ports must not collide on one host.
    const std::pair<std::string, int64_t> ports[] = {
        {"rlmesh.rollout.port", r.rollout.port},
        {"rlmesh.rollout.metrics_port", r.rollout.metrics_port},
        {"rlmesh.reward.port", r.reward.port},
        {"rlmesh.reward.metrics_port", r.reward.metrics_port},
        {"rlmesh.reference.port", r.reference.port},
        {"rlmesh.reference.metrics_port", r.reference.metrics_port},
        {"rlmesh.trainer.port", r.trainer.port},
        {"rlmesh.trainer.metrics_port", r.trainer.metrics_port},
        {"rlmesh.trainer.group_port", r.trainer.group_port},
        {"rlmesh.reference.group_port", r.reference.group_port},
        {"rlmesh.coordinator.port", r.coordinator.port},
        {"rlmesh.coordinator.metrics_port", r.coordinator.metrics_port},
    };
    for (size_t i = 0; i < std::size(ports); ++i) {
      for (size_t j = i + 1; j < std::size(ports); ++j) {
        if (ports[i].second != 0 && ports[i].second == ports[j].second) {
          Error(
              absl::StrCat(ports[i].first, " and ", ports[j].first, " are both ", ports[i].second));
        }
      }
    }
    if (r.tls.enabled) {
      for (const auto& [key, file] :
           {std::pair<const char*, std::string>{"rlmesh.tls.cert_file", r.tls.cert_file},
            {"rlmesh.tls.key_file", r.tls.key_file}}) {
        if (file.empty()) {
          Error(absl::StrCat("rlmesh.tls.enabled = true needs ", key));
        } else if (!Exists(file)) {
          Error(absl::StrCat(key, ": \"", file, "\" does not exist"));
        }
      }
    } else if (!IsLoopback(r.host) && !r.tls.insecure_plaintext) {
      Error(absl::StrCat("rlmesh.host = ", r.host,
                         " is not a loopback address: enable rlmesh.tls.enabled, or accept "
                         "unencrypted traffic with rlmesh.tls.insecure_plaintext = true"));
    }
  }

  const Config& c_;
  const ModelShape* shape_;  // null when unknown
  const bool check_data_;
  std::vector<Finding> findings_;
};

}  // namespace

std::vector<Finding> CheckModelFolder(const Config& config, bool for_run) {
  namespace fs = std::filesystem;
  std::vector<Finding> out;
  // What the services need is an error when they are about to start and a warning when the
  // config is only being planned; a missing folder or config.json is fine for planning when
  // rlmesh.model.* gives the sizes instead, and an error otherwise.
  auto needed = [&](bool replaceable_by_sizes, std::string message) {
    const bool error = for_run || !replaceable_by_sizes;
    if (!for_run) absl::StrAppend(&message, "; `rlmesh run` needs it");
    out.push_back({error ? Finding::Severity::kError : Finding::Severity::kWarning,
                   std::move(message), /*blocks_run=*/!error});
  };
  const std::string& path = config.actor_rollout_ref.model.path;
  const bool sizes_given = config.rlmesh.model.hidden_size > 0;
  if (path.empty()) {
    if (for_run) {
      needed(false,
             "actor_rollout_ref.model.path is empty: the services load the policy from a Hugging "
             "Face model folder");
    }
    return out;
  }
  const fs::path dir = ExpandHome(path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    needed(sizes_given, absl::StrCat("actor_rollout_ref.model.path: ", path,
                                     fs::exists(dir, ec) ? " is not a folder" : " does not exist"));
    return out;
  }
  if (!fs::is_regular_file(dir / "config.json", ec)) {
    needed(sizes_given,
           absl::StrCat("actor_rollout_ref.model.path: ", path, " holds no config.json"));
    return out;
  }
  if (!model::ModelConfig::FromFile((dir / "config.json").string()).ok()) return out;
  if (!model::HasSafetensors(dir.string())) {
    needed(true, absl::StrCat("actor_rollout_ref.model.path: ", path,
                              " holds no model.safetensors or model.safetensors.index.json "
                              "(the trainer, reference and rollout load the weights from it)"));
  } else if (absl::StatusOr<model::ModelConfig> checked = model::CheckModelFolder(dir.string());
             !checked.ok()) {
    out.push_back({Finding::Severity::kError,
                   absl::StrCat("actor_rollout_ref.model.path: ", checked.status().message())});
  }
  if (!fs::is_regular_file(dir / "tokenizer.json", ec)) {
    needed(true, absl::StrCat("actor_rollout_ref.model.path: ", path,
                              " holds no tokenizer.json (the coordinator tokenizes the prompts "
                              "with it)"));
  }
  return out;
}

std::vector<Finding> CheckConfig(const Config& config, const ModelShape* shape, bool check_data) {
  return Checker(config, shape, check_data).Run();
}

}  // namespace rlmesh::config
