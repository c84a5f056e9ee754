// Tests of the dashboards and alert rules against the metric catalog (docs/metrics.md):
// every dashboard parses, every PromQL expression in a dashboard or a rule reads only
// catalogued metrics, and the chart's copies equal their sources.
//   node --test tests/deploy/monitoring_test.mjs
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { CHART, REPO, YAML, inCatalog, loadCatalog, metricsInExpr } from './lib.mjs';

const DASH_DIR = join(CHART, 'dashboards');
const RULES = join(REPO, 'deploy', 'prometheus', 'rules', 'rlmesh-alerts.yml');
const dashboards = () => readdirSync(DASH_DIR).filter((f) => f.endsWith('.json'))
  .map((f) => ({ file: f, json: JSON.parse(readFileSync(join(DASH_DIR, f), 'utf8')) }));
const panelsOf = (d) => d.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
const rules = () => YAML.parse(readFileSync(RULES, 'utf8')).groups.flatMap((g) => g.rules);

test('the catalog lists every component and types every metric', () => {
  const catalog = loadCatalog();
  for (const c of ['process', 'rollout', 'reward', 'reference', 'trainer', 'coordinator']) {
    assert.ok([...catalog.keys()].some((n) => n.startsWith(`rlmesh_${c}_`)), `no rlmesh_${c}_* metric`);
  }
  for (const [name, { type }] of catalog) {
    if (name === 'up') continue;
    assert.match(name, /^rlmesh_[a-z]+_[a-z0-9_]+$/, name);
    if (type === 'counter') assert.match(name, /_total$/, `counter ${name} must end in _total`);
    else assert.doesNotMatch(name, /_total$/, `${type} ${name} must not end in _total`);
  }
  // Spot checks written from the brief, not from the file.
  assert.deepEqual(catalog.get('rlmesh_rollout_generate_request_duration_seconds'), { type: 'histogram', labels: [],
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600] });
  for (const [name, e] of catalog) {
    if (e.type !== 'histogram') continue;
    assert.ok(e.buckets.length >= 5 && e.buckets.every((b, i) => Number.isFinite(b) && (i === 0 || b > e.buckets[i - 1])),
      `${name}: buckets must be explicit and increasing`);
  }
  assert.deepEqual(catalog.get('rlmesh_coordinator_actor_pg_loss'), { type: 'gauge', labels: [] });
  assert.deepEqual(catalog.get('rlmesh_reward_items_total'), { type: 'counter', labels: ['data_source', 'outcome'] });
  assert.deepEqual(catalog.get('rlmesh_coordinator_phase_seconds_total'), { type: 'counter', labels: ['phase'] });
});

test('the PromQL metric extractor finds metrics and skips functions, labels and keywords', () => {
  assert.deepEqual(metricsInExpr('sum by (le, instance) (rate(foo_bucket{job="a", x=~"b|c"}[5m])) / on(instance) group_left(pod) bar offset 1h').sort(),
    ['bar', 'foo_bucket']);
  assert.deepEqual(metricsInExpr('(a != a) or (b > 1e3) unless c'), ['a', 'b', 'c']);
  assert.deepEqual(metricsInExpr('rate(x_total[$__rate_interval]) * ${factor}'), ['x_total']);
  const catalog = loadCatalog();
  assert.equal(inCatalog(catalog, 'rlmesh_trainer_step_duration_seconds_bucket'), true);
  assert.equal(inCatalog(catalog, 'rlmesh_trainer_tokens_total_bucket'), false, 'only histograms have _bucket');
  assert.equal(inCatalog(catalog, 'rlmesh_rollout_queue_depthh'), false);
});

test('every dashboard parses and has uid, title, datasource variable and laid-out panels', () => {
  const ds = dashboards();
  assert.deepEqual(ds.map((d) => d.json.uid).sort(), ['rlmesh-fleet', 'rlmesh-health', 'rlmesh-throughput', 'rlmesh-training']);
  for (const { file, json } of ds) {
    assert.equal(`${json.uid}.json`, file);
    assert.ok(json.title && json.schemaVersion >= 30, file);
    assert.ok(json.templating.list.some((v) => v.type === 'datasource' && v.name === 'datasource'), file);
    const ids = new Set();
    for (const p of panelsOf(json)) {
      assert.ok(!ids.has(p.id), `${file}: duplicate panel id ${p.id}`);
      ids.add(p.id);
      const g = p.gridPos;
      assert.ok(g.x >= 0 && g.x + g.w <= 24 && g.y >= 0 && g.h > 0, `${file}: ${p.title} gridPos`);
      if (p.type !== 'row') assert.ok(p.targets.length > 0 && p.targets.every((t) => t.expr), `${file}: ${p.title} has no query`);
    }
  }
});

test('the dashboards cover the panels issue 6 asks for', () => {
  const titles = Object.fromEntries(dashboards().map(({ json }) => [json.uid, panelsOf(json).map((p) => p.title).join('\n')]));
  for (const w of ['Reward', 'KL', 'Clip fraction', 'Gradient norm', 'Entropy', 'Response length']) assert.match(titles['rlmesh-training'], new RegExp(w), w);
  for (const w of ['tokens/s per replica', 'Step time split']) assert.match(titles['rlmesh-throughput'], new RegExp(w), w);
  for (const w of ['Replicas', 'Queue depth', 'Weight version per replica', 'Sync duration', 'Sync bytes']) assert.match(titles['rlmesh-fleet'], new RegExp(w), w);
  const health = dashboards().find((d) => d.json.uid === 'rlmesh-health').json;
  const thresholds = Object.fromEntries(panelsOf(health).filter((p) => p.fieldConfig?.defaults?.thresholds)
    .map((p) => [p.title.replace(/ \(target.*$/, ''), p.fieldConfig.defaults.thresholds.steps[1].value]));
  assert.deepEqual(thresholds, {
    'Device utilization': 0.8,
    'Peak device memory / capacity': 0.85,
    'Communication / compute time': 0.2,
    'Gradient norm coefficient of variation, 30m': 0.15,
    'Reward growth per epoch': 0,
  });
});

test('every metric used by a dashboard or an alert rule is in docs/metrics.md', () => {
  const catalog = loadCatalog();
  const unknown = [];
  for (const { file, json } of dashboards()) {
    for (const p of panelsOf(json)) {
      for (const t of p.targets ?? []) {
        for (const m of metricsInExpr(t.expr)) if (!inCatalog(catalog, m)) unknown.push(`${file} "${p.title}": ${m}`);
      }
    }
  }
  const rs = rules();
  assert.ok(rs.length >= 10);
  for (const r of rs) {
    for (const m of metricsInExpr(r.expr)) if (!inCatalog(catalog, m)) unknown.push(`alert ${r.alert}: ${m}`);
  }
  assert.deepEqual(unknown, []);
});

test('the health indicators of docs/metrics.md have alerts, and docs/metrics.md lists every alert', () => {
  const names = rules().map((r) => r.alert);
  for (const a of ['RlmeshLowDeviceUtilization', 'RlmeshDeviceMemoryNearCapacity', 'RlmeshCommunicationOverhead',
    'RlmeshGradNormUnstable', 'RlmeshRewardNotGrowing', 'RlmeshRolloutReplicaDown', 'RlmeshComponentDown', 'RlmeshStepTimeHigh',
    'RlmeshRewardOrLossNaN', 'RlmeshWeightSyncFailing', 'RlmeshWeightSyncSlow', 'RlmeshSamplesStale']) {
    assert.ok(names.includes(a), `missing alert ${a}`);
  }
  const doc = readFileSync(join(REPO, 'docs', 'metrics.md'), 'utf8');
  // Every alert of the file is named in the doc's tables (health indicators, alerts on the run).
  for (const a of names) assert.ok(doc.includes(`| \`${a}\``), `docs/metrics.md does not list ${a} in a table`);
});

test('the chart ships exactly the generated dashboards and the alert rules of deploy/', () => {
  const out = mkdtempSync(join(tmpdir(), 'rlmesh-dash-'));
  execFileSync('node', [join(REPO, 'deploy', 'grafana', 'make_dashboards.mjs'), out]);
  const generated = readdirSync(out).sort();
  assert.deepEqual(generated, readdirSync(DASH_DIR).sort());
  for (const f of generated) {
    assert.equal(readFileSync(join(DASH_DIR, f), 'utf8'), readFileSync(join(out, f), 'utf8'),
      `${f} differs from make_dashboards.mjs output: run deploy/grafana/sync-chart-files.sh`);
  }
  assert.equal(readFileSync(join(CHART, 'files', 'rlmesh-alerts.yml'), 'utf8'), readFileSync(RULES, 'utf8'),
    'helm/rlmesh/files/rlmesh-alerts.yml differs from deploy/prometheus/rules: run deploy/grafana/sync-chart-files.sh');
});
