#include "common/config/dry_run.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/config/dry_run_checks.h"
#include "common/config/memory_estimate.h"
#include "common/config/model_shape.h"
#include "common/config/schema.h"
#include "common/config/service_settings.h"
#include "common/status/status_macros.h"

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
  } else if (options.whole_run) {
    findings.push_back(
        {Finding::Severity::kError,
         absl::StartsWith(shape.status().message(), "config key ")
             ? std::string(shape.status().message())
             : absl::StrCat("actor_rollout_ref.model.path: ", shape.status().message())});
  }
  AppendLayoutAndBatches(config, &out);
  if (options.print_config) {
    // What each process will run with, derived once from the keys (service_settings.h).
    if (absl::StatusOr<Settings> settings = DeriveSettings(config); settings.ok()) {
      absl::StrAppend(&out, "services:\n", SettingsText(*settings));
    }
  }
  if (options.whole_run) {
    std::vector<Finding> folder = CheckModelFolder(config, options.for_run);
    findings.insert(findings.end(), folder.begin(), folder.end());
  }
  // The reward file is the reward service's to load, where it runs (in the chart, its own
  // pod): missing here is a warning; the service stops at start, naming it, if it is missing
  // there.
  if (const std::optional<std::string>& file = config.custom_reward_function.path;
      file.has_value() && !file->empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(*file, ec)) {
      findings.push_back({Finding::Severity::kWarning,
                          absl::StrCat("custom_reward_function.path = ", *file,
                                       ": no such file here; the reward service loads it at "
                                       "start and stops if it finds none where it runs")});
    }
  }
  // Likewise the reward model's folder.
  if (const std::optional<std::string>& folder = config.reward_model.model.path;
      config.reward_model.enable && folder.has_value() && !folder->empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(std::filesystem::path(*folder) / "config.json", ec)) {
      findings.push_back({Finding::Severity::kWarning,
                          absl::StrCat("reward_model.model.path = ", *folder,
                                       ": no config.json here; the reward service loads the "
                                       "model at start and stops if it finds none where it "
                                       "runs")});
    }
  }
  std::vector<Finding> checks =
      CheckConfig(config, shape.ok() ? &*shape : nullptr, /*check_data=*/options.whole_run);
  findings.insert(findings.end(), checks.begin(), checks.end());

  if (shape.ok()) {
    const auto& fsdp = config.actor_rollout_ref.actor.fsdp_config;
    const bool param = fsdp.param_offload || fsdp.offload_policy;
    const bool optimizer = fsdp.optimizer_offload || fsdp.offload_policy;
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
    if (config.rlmesh.device == "cpu") {
      // The figures the trainer reports: perf/max_memory_allocated_gb (its tensors) and
      // perf/max_memory_reserved_gb (its resident set).
      absl::StrAppendFormat(&out, "  %-58s %14s %18s\n", "trainer tensors at peak",
                            FormatBytes(TrainerTensorBytes(none)),
                            FormatBytes(TrainerTensorBytes(full)));
    }
    absl::StrAppendFormat(&out, "  %-58s %14s %18s\n",
                          config.rlmesh.device == "cpu" ? "trainer process, resident set at peak"
                                                        : "trainer process, device memory at peak",
                          FormatBytes(TrainerProcessBytes(config, none)),
                          FormatBytes(TrainerProcessBytes(config, full)));
    const std::string configured_name = param && optimizer ? "param+opt offload"
                                        : param            ? "param offload"
                                        : optimizer        ? "optimizer offload"
                                                           : "no offload";
    const DeviceCapacity capacity = DetectCapacity(config, options.meminfo_path, options.gpu_query);
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
              ? absl::StrFormat(
                    "; offloading the trainer (actor_rollout_ref.actor.fsdp_config."
                    "param_offload and optimizer_offload) would bring it to %.1f%%",
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

  if (options.local_run) {
    for (Finding& f : findings) {
      if (f.blocks_run) f.severity = Finding::Severity::kError;
    }
    for (const std::string& key : LauncherSetKeys()) {
      const KeySpec* spec = FindKey(key);
      const std::string value = ValueText(spec->get(config));
      if (value == ReadBackText(*spec, spec->default_value)) continue;
      findings.push_back(
          {Finding::Severity::kError,
           absl::StrCat(key, " = ", value,
                        ": `rlmesh run` sets it for every service it starts (free loopback "
                        "ports, its own replicas and ranks; RUN_DIR/targets.json lists the "
                        "metrics ports); set it where you start the services yourself "
                        "(docs/services.md) or in the Helm chart")});
    }
  }
  absl::StrAppend(&out, "\n");
  for (const Finding& f : findings) {
    const bool error = f.severity == Finding::Severity::kError;
    (error ? result.errors : result.warnings)++;
    if (!error && f.blocks_run) ++result.run_blockers;
    const std::string line = absl::StrCat(error ? "error: " : "warning: ", f.message);
    absl::StrAppend(&out, line, "\n");
    (error ? result.error_lines : result.warning_lines).push_back(line);
  }
  absl::StrAppendFormat(
      &out, "result: %s (%d error(s), %d warning(s))%s\n", result.valid() ? "valid" : "invalid",
      result.errors, result.warnings,
      result.valid() && result.run_blockers > 0
          ? absl::StrCat("; a plan only: `rlmesh run` would refuse it on ", result.run_blockers,
                         " of the warnings (the folder or files they name)")
          : "");
  return result;
}

const std::vector<std::string>& LauncherSetKeys() {
  static const auto* keys = [] {
    auto* out = new std::vector<std::string>;
    for (const char* service : {"coordinator", "rollout", "reward", "reference", "trainer"}) {
      out->push_back(absl::StrCat("rlmesh.", service, ".port"));
      out->push_back(absl::StrCat("rlmesh.", service, ".metrics_port"));
    }
    for (const char* service : {"reward", "reference", "trainer"}) {
      out->push_back(absl::StrCat("rlmesh.", service, ".address"));
    }
    for (const char* group : {"reference", "trainer"}) {
      for (const char* key : {"rank", "group_host", "group_port"}) {
        out->push_back(absl::StrCat("rlmesh.", group, ".", key));
      }
    }
    for (const char* key :
         {"addresses", "discovery_dns", "register_with", "advertise_address", "replica_id"}) {
      out->push_back(absl::StrCat("rlmesh.rollout.", key));
    }
    return out;
  }();
  return *keys;
}

absl::Status CheckBeforeStart(const Config& config, bool whole_run,
                              std::vector<std::string>* warnings, bool local_run) {
  DryRunOptions options;
  options.print_config = false;
  options.for_run = true;
  options.whole_run = whole_run;
  options.local_run = local_run;
  const DryRunResult result = RunDryRun(config, options);
  if (warnings != nullptr) *warnings = result.warning_lines;
  if (result.valid()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(absl::StrJoin(result.error_lines, "\n"),
                   "\n(`rlmesh dry-run CONFIG` prints the whole report)"));
}

absl::StatusOr<Config> LoadConfigForStart(const std::string& program, const std::string& path,
                                          const std::vector<std::string>& overrides,
                                          bool whole_run) {
  if (path.empty()) {
    return absl::InvalidArgumentError(
        "--config FILE is required: the run's YAML config (for example "
        "deploy/configs/quickstart.yaml), which every service of a run shares");
  }
  ASSIGN_OR_RETURN(Config config, LoadConfig(path, overrides));
  std::vector<std::string> warnings;
  RETURN_IF_ERROR(CheckBeforeStart(config, whole_run, &warnings));
  for (const std::string& line : warnings)
    std::fprintf(stderr, "%s: %s\n", program.c_str(), line.c_str());
  return config;
}

}  // namespace rlmesh::config
