#include "common/config/dry_run.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/config/dry_run_checks.h"
#include "common/config/memory_estimate.h"
#include "common/config/model_shape.h"

namespace rlmesh::config {
namespace {

void AppendModel(const ModelShape& shape, std::string* out) {
  const model::ModelConfig& m = shape.model;
  absl::StrAppendFormat(
      out,
      "model: %s from %s%s\n  %.3f M parameters; %d layers, hidden %d, "
      "MLP %d, heads %d (kv %d, dim %d), vocab %d%s%s\n",
      m.architecture, shape.source, shape.note.empty() ? "" : absl::StrCat(" (", shape.note, ")"),
      static_cast<double>(shape.total_params) / 1e6, m.num_hidden_layers, m.hidden_size,
      m.intermediate_size, m.num_attention_heads, m.num_key_value_heads, m.head_dim, m.vocab_size,
      m.tie_word_embeddings ? ", tied embeddings" : "",
      shape.num_experts > 0 ? absl::StrCat(", ", shape.num_experts, " experts") : "");
}

void AppendLayoutAndBatches(const Config& c, std::string* out) {
  const Layout layout = LayoutOf(c);
  const int64_t n = c.actor_rollout_ref.rollout.n;
  const auto& actor = c.actor_rollout_ref.actor;
  absl::StrAppendFormat(out,
                        "layout: %d devices (trainer.n_gpus_per_node %d x trainer.nnodes %d) "
                        "= TP %d x PP %d x DP %d; EP %d; rollout TP %d; device %s, %s\n",
                        layout.devices, c.trainer.n_gpus_per_node, c.trainer.nnodes, layout.tp,
                        layout.pp, layout.dp, layout.ep, layout.rollout_tp, c.rlmesh.device,
                        c.rlmesh.dtype);
  const int64_t samples = c.data.train_batch_size * n;
  const int64_t mini = actor.ppo_mini_batch_size * n;
  const int64_t per_device = mini / std::max<int64_t>(1, layout.dp);
  const int64_t micro = TrainMicroBatch(c, layout);
  absl::StrAppendFormat(
      out,
      "batches: %d prompts x n %d = %d samples per step; %d mini-batch(es) of %d samples x %d "
      "epoch(s); %d samples per device per mini-batch in micro-batches of %d (%d accumulation "
      "step(s))\n",
      c.data.train_batch_size, n, samples, samples / std::max<int64_t>(1, mini), mini,
      actor.ppo_epochs, per_device, micro, per_device / std::max<int64_t>(1, micro));
}

}  // namespace

DryRunResult RunDryRun(const Config& config, const DryRunOptions& options) {
  DryRunResult result;
  std::string& out = result.report;
  std::vector<Finding> findings;
  if (options.print_config) absl::StrAppend(&out, "resolved config:\n", ConfigToYaml(config), "\n");

  absl::StatusOr<ModelShape> shape = LoadModelShape(config);
  if (shape.ok()) {
    AppendModel(*shape, &out);
  } else {
    findings.push_back(
        {Finding::Severity::kError, absl::StrCat("model sizes: ", shape.status().message())});
  }
  AppendLayoutAndBatches(config, &out);
  std::vector<Finding> checks = CheckConfig(config, shape.ok() ? &*shape : nullptr);
  findings.insert(findings.end(), checks.begin(), checks.end());

  if (shape.ok()) {
    const bool param = config.rlmesh.offload.param;
    const bool optimizer = config.rlmesh.offload.optimizer;
    const MemoryEstimate none = EstimateMemory(config, *shape, false, false);
    const MemoryEstimate full = EstimateMemory(config, *shape, true, true);
    const MemoryEstimate configured = EstimateMemory(config, *shape, param, optimizer);
    absl::StrAppendFormat(&out,
                          "\nmemory per device (%s, sequence %d + %d tokens; formulas in "
                          "docs/config.md):\n  %-58s %14s %18s\n",
                          config.rlmesh.dtype, config.data.max_prompt_length,
                          config.data.max_response_length, "", "no offload", "param+opt offload");
    for (size_t i = 0; i < none.items.size(); ++i) {
      absl::StrAppendFormat(&out, "  %-58s %14s %18s\n", none.items[i].name,
                            FormatBytes(none.items[i].bytes), FormatBytes(full.items[i].bytes));
    }
    absl::StrAppendFormat(&out, "  %-58s %14s %18s\n", "total on the device",
                          FormatBytes(none.device_total), FormatBytes(full.device_total));
    absl::StrAppendFormat(&out, "  %-58s %14s %18s\n", "moved to host memory", FormatBytes(0),
                          FormatBytes(full.host_total));
    absl::StrAppendFormat(&out, "  %-58s %14s %18s\n",
                          config.rlmesh.device == "cpu" ? "trainer process, resident set at peak"
                                                        : "trainer process, device memory at peak",
                          FormatBytes(TrainerProcessBytes(config, none)),
                          FormatBytes(TrainerProcessBytes(config, full)));
    const std::string configured_name = param && optimizer ? "param+opt offload"
                                        : param            ? "param offload"
                                        : optimizer        ? "optimizer offload"
                                                           : "no offload";
    const DeviceCapacity capacity = DetectCapacity(config, options.meminfo_path);
    if (capacity.bytes <= 0) {
      absl::StrAppendFormat(&out, "capacity: unknown\n");
      findings.push_back({Finding::Severity::kWarning,
                          "device capacity unknown (set rlmesh.device_memory_gb): memory not "
                          "checked"});
    } else {
      const double fraction = configured.device_total / capacity.bytes;
      absl::StrAppendFormat(&out, "capacity: %s per device (%s); configured (%s): %s = %.1f%%\n",
                            FormatBytes(capacity.bytes), capacity.source, configured_name,
                            FormatBytes(configured.device_total), 100 * fraction);
      const std::string what =
          absl::StrFormat("estimated memory per device %s (%s) is %.1f%% of the %s capacity",
                          FormatBytes(configured.device_total), configured_name, 100 * fraction,
                          FormatBytes(capacity.bytes));
      const std::string hint =
          full.device_total < configured.device_total
              ? absl::StrFormat("; rlmesh.offload.param/optimizer=true brings it to %.1f%%",
                                100 * full.device_total / capacity.bytes)
              : "";
      if (fraction > 1) {
        findings.push_back(
            {Finding::Severity::kError, absl::StrCat(what, ": it does not fit", hint,
                                                     ", or lower the micro-batch sizes or "
                                                     "actor_rollout_ref.rollout.max_num_seqs")});
      } else if (fraction > kMemoryWarningFraction) {
        findings.push_back(
            {Finding::Severity::kWarning,
             absl::StrFormat("%s, above %.0f%%%s", what, 100 * kMemoryWarningFraction, hint)});
      }
    }
  }

  absl::StrAppend(&out, "\n");
  for (const Finding& f : findings) {
    const bool error = f.severity == Finding::Severity::kError;
    (error ? result.errors : result.warnings)++;
    absl::StrAppend(&out, error ? "error: " : "warning: ", f.message, "\n");
  }
  absl::StrAppendFormat(&out, "result: %s (%d error(s), %d warning(s))\n",
                        result.valid() ? "valid" : "invalid", result.errors, result.warnings);
  return result;
}

}  // namespace rlmesh::config
