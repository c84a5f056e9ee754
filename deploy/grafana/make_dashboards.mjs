// Writes the rlmesh Grafana dashboards (JSON, Grafana 10+ schema) into the folder given as
// the first argument (deploy/grafana/sync-chart-files.sh passes helm/rlmesh/dashboards, the copy
// the chart ships and the one tests/deploy checks). Every query uses only metrics of
// docs/metrics.md; panels with a health target draw it as a threshold.
//   node deploy/grafana/make_dashboards.mjs OUT_DIR
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const DS = { type: 'prometheus', uid: '${datasource}' };

// Restricts every selector of an expression to the dashboard's $namespace (one run per
// namespace on Kubernetes; "All" is .*, which also matches a local run's series, which
// have no namespace label).
function inNamespace(expr) {
  return expr.replace(/\b(rlmesh_[a-z0-9_]+|up)\b(?:\{([^}]*)\})?/g,
    (_, name, matchers) => `${name}{namespace=~"$namespace"${matchers ? `, ${matchers}` : ''}}`);
}

// A panel: kind 'timeseries' or 'stat'; targets as [expr, legend]; opts for units and thresholds.
function panel(title, targets, { kind = 'timeseries', unit = 'short', w = 12, h = 8, min, max,
  thresholds, stack = false, description = '' } = {}) {
  const defaults = { unit, custom: {} };
  if (min !== undefined) defaults.min = min;
  if (max !== undefined) defaults.max = max;
  if (kind === 'timeseries') {
    defaults.custom = { drawStyle: 'line', lineWidth: 1, fillOpacity: stack ? 60 : 10,
      showPoints: 'never', spanNulls: true,
      stacking: { mode: stack ? 'normal' : 'none', group: 'A' } };
  }
  if (thresholds) {
    // thresholds: { good: 'above'|'below', value }
    const steps = thresholds.good === 'above'
      ? [{ color: 'red', value: null }, { color: 'green', value: thresholds.value }]
      : [{ color: 'green', value: null }, { color: 'red', value: thresholds.value }];
    defaults.thresholds = { mode: 'absolute', steps };
    if (kind === 'timeseries') defaults.custom.thresholdsStyle = { mode: 'line+area' };
    defaults.color = { mode: kind === 'stat' ? 'thresholds' : 'palette-classic' };
  } else {
    defaults.color = { mode: 'palette-classic' };
  }
  return {
    type: kind, title, description, datasource: DS,
    gridPos: { w, h },
    fieldConfig: { defaults, overrides: [] },
    options: kind === 'stat'
      ? { reduceOptions: { calcs: ['lastNotNull'], fields: '', values: false }, colorMode: 'value', graphMode: 'area' }
      : { legend: { displayMode: 'list', placement: 'bottom', showLegend: true }, tooltip: { mode: 'multi', sort: 'none' } },
    targets: targets.map(([expr, legendFormat], i) => ({
      datasource: DS, expr: inNamespace(expr), legendFormat, refId: String.fromCharCode(65 + i) })),
  };
}

function row(title) {
  return { type: 'row', title, collapsed: false, gridPos: { w: 24, h: 1 }, panels: [] };
}

// Lays panels out left to right, wrapping at 24 columns, and numbers them.
function layout(items) {
  let x = 0, y = 0, rowH = 0, id = 1;
  for (const p of items) {
    if (x + p.gridPos.w > 24) { x = 0; y += rowH; rowH = 0; }
    p.gridPos = { ...p.gridPos, x, y };
    p.id = id++;
    x += p.gridPos.w;
    rowH = Math.max(rowH, p.gridPos.h);
    if (p.type === 'row') { x = 0; y += p.gridPos.h; rowH = 0; }
  }
  return items;
}

function dashboard(uid, title, description, items) {
  return {
    uid, title, description, tags: ['rlmesh'], editable: true, schemaVersion: 39, version: 1,
    time: { from: 'now-6h', to: 'now' }, refresh: '30s', timezone: '', graphTooltip: 1,
    templating: { list: [{
      name: 'datasource', label: 'Prometheus', type: 'datasource', query: 'prometheus',
      current: {}, hide: 0, refresh: 1, options: [] }, {
      name: 'namespace', label: 'Namespace', type: 'query', datasource: DS,
      query: { query: 'label_values(rlmesh_process_start_time_seconds, namespace)', refId: 'namespace' },
      definition: 'label_values(rlmesh_process_start_time_seconds, namespace)',
      includeAll: true, allValue: '.*', multi: false, current: { text: 'All', value: '$__all' },
      hide: 0, refresh: 2, sort: 1, options: [] }] },
    annotations: { list: [] },
    links: [{ title: 'rlmesh', type: 'dashboards', tags: ['rlmesh'], asDropdown: true }],
    panels: layout(items),
  };
}

const C = 'component="coordinator"';
const training = dashboard('rlmesh-training', 'rlmesh / training',
  'GRPO training metrics per step, with verl names (docs/metrics.md).', [
    panel('Global step', [[`max(rlmesh_coordinator_global_step)`, 'step'], [`max(rlmesh_coordinator_total_steps)`, 'total']], { kind: 'stat', w: 6, h: 4 }),
    panel('Epoch', [[`max(rlmesh_coordinator_training_epoch)`, 'epoch']], { kind: 'stat', w: 6, h: 4 }),
    panel('Validation reward', [[`rlmesh_coordinator_validation_reward_mean`, '{{data_source}}']], { kind: 'stat', w: 6, h: 4 }),
    panel('Learning rate', [[`rlmesh_coordinator_actor_lr`, 'lr']], { kind: 'stat', w: 6, h: 4 }),
    row('Reward'),
    panel('Reward (critic/score)', [
      [`rlmesh_coordinator_critic_score_mean`, 'mean'], [`rlmesh_coordinator_critic_score_max`, 'max'],
      [`rlmesh_coordinator_critic_score_min`, 'min']]),
    panel('Validation reward (val-core/<data_source>/reward/mean@1)', [[`rlmesh_coordinator_validation_reward_mean`, '{{data_source}}']]),
    row('Policy'),
    panel('KL (actor/kl_loss, actor/ppo_kl)', [[`rlmesh_coordinator_actor_kl_loss`, 'kl_loss'], [`rlmesh_coordinator_actor_ppo_kl`, 'ppo_kl']], { w: 8 }),
    panel('Clip fraction (actor/pg_clipfrac)', [[`rlmesh_coordinator_actor_pg_clipfrac`, 'pg_clipfrac']], { w: 8, unit: 'percentunit', min: 0 }),
    panel('Policy loss (actor/pg_loss)', [[`rlmesh_coordinator_actor_pg_loss`, 'pg_loss']], { w: 8 }),
    panel('Gradient norm (actor/grad_norm)', [[`rlmesh_coordinator_actor_grad_norm`, 'grad_norm']], { w: 8, min: 0 }),
    panel('Entropy (actor/entropy)', [[`rlmesh_coordinator_actor_entropy`, 'entropy']], { w: 8, min: 0 }),
    panel('Advantages (critic/advantages/mean)', [[`rlmesh_coordinator_critic_advantages_mean`, 'mean']], { w: 8 }),
    row('Lengths'),
    panel('Response length', [[`rlmesh_coordinator_response_length_mean`, 'mean'], [`rlmesh_coordinator_response_length_max`, 'max'],
      [`rlmesh_coordinator_prompt_length_mean`, 'prompt mean']], { unit: 'none' }),
    panel('Responses cut at the length limit (response_length/clip_ratio)', [[`rlmesh_coordinator_response_length_clip_ratio`, 'clip_ratio']], { unit: 'percentunit', min: 0, max: 1 }),
    panel('Steps with all-equal rewards (per 15m)', [[`increase(rlmesh_coordinator_equal_reward_steps_total{${C}}[15m])`, 'equal-reward steps'],
      [`increase(rlmesh_coordinator_steps_total{${C}}[15m])`, 'steps']], { unit: 'none' }),
    panel('Skipped optimizer steps (non-finite grad norm, per 15m)', [[`increase(rlmesh_trainer_skipped_steps_total[15m])`, '{{instance}}']], { unit: 'none' }),
  ]);

const PHASES = ['gen', 'reward', 'old_log_prob', 'ref', 'update_actor', 'update_weights'];
const throughput = dashboard('rlmesh-throughput', 'rlmesh / throughput',
  'Tokens per second per rollout replica and the step time split into its phases.', [
    panel('Generated tokens/s per replica', [[`sum by (instance) (rate(rlmesh_rollout_generated_tokens_total{component="rollout"}[$__rate_interval]))`, '{{instance}}']], { unit: 'short', stack: true }),
    panel('Tokens/s: generation, training, reference', [
      [`sum(rate(rlmesh_rollout_generated_tokens_total[$__rate_interval]))`, 'generated'],
      [`sum(rate(rlmesh_trainer_tokens_total[$__rate_interval]))`, 'trained'],
      [`sum(rate(rlmesh_reference_tokens_total[$__rate_interval]))`, 'reference'],
      [`rlmesh_coordinator_perf_throughput`, 'perf/throughput (per device)']]),
    panel('Step time split (timing_s/*)', PHASES.map((p) => [`rlmesh_coordinator_timing_seconds_${p}`, p]), { unit: 's', stack: true }),
    panel('Step time', [[`rlmesh_coordinator_timing_seconds_step`, 'last step'],
      [`histogram_quantile(0.5, sum by (le) (rate(rlmesh_coordinator_step_duration_seconds_bucket[$__rate_interval])))`, 'p50'],
      [`histogram_quantile(0.9, sum by (le) (rate(rlmesh_coordinator_step_duration_seconds_bucket[$__rate_interval])))`, 'p90']], { unit: 's' }),
    panel('Share of wall time per phase', [[`sum by (phase) (rate(rlmesh_coordinator_phase_seconds_total[$__rate_interval])) / scalar(sum(rate(rlmesh_coordinator_phase_seconds_total[$__rate_interval])))`, '{{phase}}']],
      { unit: 'percentunit', stack: true, min: 0, max: 1 }),
    panel('Samples per second by finish reason', [[`sum by (finish_reason) (rate(rlmesh_rollout_samples_total[$__rate_interval]))`, '{{finish_reason}}']], { stack: true }),
    panel('Request latency p90', [
      [`histogram_quantile(0.9, sum by (le) (rate(rlmesh_rollout_generate_request_duration_seconds_bucket[$__rate_interval])))`, 'rollout generate'],
      [`histogram_quantile(0.9, sum by (le) (rate(rlmesh_reward_request_duration_seconds_bucket[$__rate_interval])))`, 'reward score'],
      [`histogram_quantile(0.9, sum by (le) (rate(rlmesh_reference_request_duration_seconds_bucket[$__rate_interval])))`, 'reference log-probs'],
      [`histogram_quantile(0.9, sum by (le) (rate(rlmesh_trainer_old_log_prob_duration_seconds_bucket[$__rate_interval])))`, 'trainer old log-probs'],
      [`histogram_quantile(0.9, sum by (le) (rate(rlmesh_trainer_step_duration_seconds_bucket[$__rate_interval])))`, 'trainer update']], { unit: 's' }),
    panel('Reward items/s by data source and outcome', [[`sum by (data_source, outcome) (rate(rlmesh_reward_items_total[$__rate_interval]))`, '{{data_source}} {{outcome}}'],
      [`sum by (kind) (rate(rlmesh_reward_errors_total[$__rate_interval]))`, 'error: {{kind}}']]),
    panel('Mean score given by the reward service', [[`(sum by (data_source) (rate(rlmesh_reward_score_sum_total[$__rate_interval])) - sum by (data_source) (rate(rlmesh_reward_score_negative_sum_total[$__rate_interval]))) / sum by (data_source) (rate(rlmesh_reward_items_total{outcome="ok"}[$__rate_interval]))`, '{{data_source}}']]),
    panel('Reference sequences/s', [[`sum(rate(rlmesh_reference_sequences_total[$__rate_interval]))`, 'sequences/s']]),
    row('gRPC'),
    panel('gRPC errors/s by component, method and code', ['coordinator', 'trainer', 'reference', 'reward', 'rollout'].map((c) =>
      [`sum by (method, code) (rate(rlmesh_${c}_grpc_requests_total{code!="OK"}[$__rate_interval]))`, `${c} {{method}} {{code}}`])),
    panel('gRPC latency p90 by method', ['coordinator', 'trainer', 'reference', 'reward', 'rollout'].map((c) =>
      [`histogram_quantile(0.9, sum by (le, method) (rate(rlmesh_${c}_grpc_request_duration_seconds_bucket[$__rate_interval])))`, `${c} {{method}}`]), { unit: 's' }),
  ]);

const fleet = dashboard('rlmesh-fleet', 'rlmesh / fleet',
  'Rollout replicas, their queues and weight versions, and the weight sync.', [
    panel('Rollout replicas up / known', [[`max(rlmesh_coordinator_rollout_replicas_up)`, 'up'], [`max(rlmesh_coordinator_rollout_replicas_known)`, 'known']], { kind: 'stat', w: 6, h: 4 }),
    panel('Targets up', [[`sum by (component) (up{component=~"coordinator|trainer|reference|reward|rollout"})`, '{{component}}']], { kind: 'stat', w: 6, h: 4 }),
    panel('Current weight version', [[`max(rlmesh_coordinator_weight_version)`, 'coordinator'], [`max(rlmesh_trainer_weight_version)`, 'trainer']], { kind: 'stat', w: 6, h: 4 }),
    panel('Samples re-dispatched / replicas removed', [[`sum(rlmesh_coordinator_samples_redispatched_total)`, 'samples re-dispatched'], [`sum(rlmesh_coordinator_replica_removals_total)`, 'replicas removed']], { kind: 'stat', w: 6, h: 4 }),
    row('Replicas'),
    panel('Replicas over time', [[`rlmesh_coordinator_rollout_replicas_up`, 'up'], [`rlmesh_coordinator_rollout_replicas_known`, 'known'], [`sum(up{component="rollout"})`, 'scraped']], { unit: 'none' }),
    panel('Queue depth per replica', [[`rlmesh_rollout_queue_depth`, '{{instance}}']], { unit: 'none' }),
    panel('Running sequences per replica', [[`rlmesh_rollout_running_sequences`, '{{instance}}'], [`max(rlmesh_rollout_max_sequences)`, 'limit']], { unit: 'none' }),
    panel('KV cache usage per replica', [[`rlmesh_rollout_kv_cache_usage_ratio`, '{{instance}}']], { unit: 'percentunit', min: 0, max: 1 }),
    row('Weights'),
    panel('Weight version per replica (coordinator view)', [[`rlmesh_coordinator_rollout_replica_weight_version`, '{{replica}}'], [`rlmesh_coordinator_weight_version`, 'current']], { unit: 'none' }),
    panel('Weight version per replica (replica view)', [[`rlmesh_rollout_weight_version`, '{{instance}}'], [`rlmesh_trainer_weight_version`, 'trainer']], { unit: 'none' }),
    panel('Sync duration', [
      [`histogram_quantile(0.5, sum by (le) (rate(rlmesh_trainer_weight_publish_duration_seconds_bucket[$__rate_interval])))`, 'publish p50'],
      [`histogram_quantile(0.9, sum by (le) (rate(rlmesh_trainer_weight_publish_duration_seconds_bucket[$__rate_interval])))`, 'publish p90'],
      [`histogram_quantile(0.9, sum by (le, instance) (rate(rlmesh_rollout_weight_update_duration_seconds_bucket[$__rate_interval])))`, 'apply p90 {{instance}}'],
      [`rlmesh_coordinator_timing_seconds_update_weights`, 'timing_s/update_weights']], { unit: 's' }),
    panel('Sync bytes/s', [[`sum(rate(rlmesh_trainer_weight_publish_bytes_total[$__rate_interval]))`, 'sent'],
      [`sum by (instance) (rate(rlmesh_rollout_weight_update_bytes_total[$__rate_interval]))`, 'received {{instance}}']], { unit: 'Bps' }),
    panel('Sync failures (per 10m)', [[`increase(rlmesh_trainer_weight_publish_failures_total[10m])`, 'publish'],
      [`increase(rlmesh_rollout_weight_update_failures_total[10m])`, 'apply {{instance}}']], { unit: 'none' }),
    panel('Staleness', [[`rlmesh_coordinator_sample_staleness_max_versions`, 'max sample staleness'], [`rlmesh_coordinator_staleness_bound_versions`, 'bound'],
      [`increase(rlmesh_coordinator_samples_dropped_stale_total[15m])`, 'dropped stale (15m)']], { unit: 'none' }),
  ]);

const health = dashboard('rlmesh-health', 'rlmesh / health',
  'The health indicators GRPO operators watch, each with its target (docs/metrics.md).', [
    panel('Device utilization (target >= 80%)', [[`avg by (component) (rlmesh_process_device_utilization_ratio{component=~"trainer|rollout"})`, '{{component}}']],
      { unit: 'percentunit', min: 0, max: 1, thresholds: { good: 'above', value: 0.8 },
        description: 'The process CPU share of the cores it may use (on a GPU run too: GPU utilization is not read yet).' }),
    panel('Peak device memory / capacity (target <= 85%)', [[`max by (component, instance, device) (rlmesh_process_device_memory_peak_bytes / rlmesh_process_device_memory_capacity_bytes)`, '{{component}} {{instance}} {{device}}']],
      { unit: 'percentunit', min: 0, max: 1, thresholds: { good: 'below', value: 0.85 } }),
    panel('Communication / compute time (target <= 20%)', [[`sum(rate(rlmesh_coordinator_phase_seconds_total{phase=~"sync|overhead"}[15m])) / sum(rate(rlmesh_coordinator_phase_seconds_total{phase=~"gen|reward|old_log_prob|ref|update"}[15m]))`, 'comm / compute']],
      { unit: 'percentunit', min: 0, thresholds: { good: 'below', value: 0.2 },
        description: 'Weight sync plus the time between stages, over model compute time, 15-minute window.' }),
    panel('Gradient norm coefficient of variation, 30m (target <= 15%)', [[`stddev_over_time(rlmesh_trainer_grad_norm[30m]) / avg_over_time(rlmesh_trainer_grad_norm[30m])`, '{{instance}}']],
      { unit: 'percentunit', min: 0, thresholds: { good: 'below', value: 0.15 } }),
    panel('Reward growth per epoch (target > 0)', [[`rlmesh_coordinator_epoch_reward_mean - rlmesh_coordinator_previous_epoch_reward_mean`, 'this epoch - last epoch']],
      { thresholds: { good: 'above', value: 0 } }),
    panel('Mean reward by epoch', [[`rlmesh_coordinator_epoch_reward_mean`, 'this epoch (running)'], [`rlmesh_coordinator_previous_epoch_reward_mean`, 'last epoch']]),
    row('Processes'),
    panel('CPU cores used', [[`rate(rlmesh_process_cpu_seconds_total[$__rate_interval])`, '{{component}} {{instance}}']], { unit: 'none', w: 8 }),
    panel('Resident memory', [[`rlmesh_process_resident_memory_bytes`, '{{component}} {{instance}}'], [`rlmesh_process_peak_resident_memory_bytes`, 'peak {{component}} {{instance}}']], { unit: 'bytes', w: 8 }),
    panel('Device memory used / capacity', [[`rlmesh_process_device_memory_used_bytes`, 'used {{component}} {{device}}'], [`rlmesh_process_device_memory_capacity_bytes`, 'capacity {{component}} {{device}}']], { unit: 'bytes', w: 8 }),
    panel('Ready (health SERVING)', [[`rlmesh_process_ready`, '{{component}} {{instance}}']], { unit: 'none', w: 8 }),
    panel('Uptime', [[`time() - rlmesh_process_start_time_seconds`, '{{component}} {{instance}}']], { unit: 's', w: 8 }),
    panel('Checkpoint save time p90 and failures', [[`histogram_quantile(0.9, sum by (le) (rate(rlmesh_trainer_checkpoint_save_duration_seconds_bucket[1h])))`, 'save p90 (1h)'],
      [`increase(rlmesh_trainer_checkpoint_failures_total[1h])`, 'failures (1h)'], [`rlmesh_trainer_global_step`, 'trainer step'],
      [`rate(rlmesh_trainer_optimizer_steps_total[$__rate_interval])`, 'optimizer steps/s']], { unit: 'none', w: 8 }),
  ]);

const out = process.argv[2];
if (!out) {
  console.error('usage: node make_dashboards.mjs OUT_DIR');
  process.exit(2);
}
mkdirSync(out, { recursive: true });
for (const d of [training, throughput, fleet, health]) {
  writeFileSync(join(out, `${d.uid}.json`), JSON.stringify(d, null, 2) + '\n');
}
