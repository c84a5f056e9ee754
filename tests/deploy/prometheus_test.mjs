// A real Prometheus (Debian's `prometheus`, started by deploy/prometheus/run-local.sh with
// prometheus-local.yml) scrapes stand-in exporters that print every metric of
// docs/metrics.md the way the services must (checked by exposition.mjs), through the
// targets.json file `rlmesh run` writes. Through the HTTP API the test asserts that every
// target is up with its `component` label, every metric a dashboard or an alert uses has
// samples, every dashboard query evaluates to data, and every alert rule evaluates
// without error. quickstart_prometheus_test.mjs runs the same checks against the real
// services of `rlmesh run`; this one stays as the fast check that also covers series a
// healthy run never produces (errors, failures, a second replica).
//   node --test tests/deploy/prometheus_test.mjs
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { checkExposition } from './exposition.mjs';
import { REPO, loadCatalog } from './lib.mjs';
import { freePort, panelProblems, prometheusApi, usedMetrics } from './prometheus_lib.mjs';

// One value per label for the stand-ins; two for the labels that split a panel.
const LABEL_VALUES = {
  phase: ['gen', 'reward', 'old_log_prob', 'ref', 'update', 'sync', 'overhead'],
  finish_reason: ['stop', 'length'], outcome: ['ok', 'error'], kind: ['timeout'],
  data_source: ['openai/gsm8k'], code: ['OK', 'INVALID_ARGUMENT'], device: ['0'], replica: ['r0', 'r1'],
  method: ['rlmesh.v1.Service/Call'], transport: ['inline', 'shm'],
};

// Exposition of one component after `tick` scrapes: gauges hold 1 + tick/100 (finite, so
// no NaN alert), counters grow by a fixed amount per scrape, histograms observe one value
// in the third bucket per scrape.
export function standInExposition(component, tick, catalog = loadCatalog()) {
  const lines = [];
  const combos = (labels) => labels.reduce((acc, l) => acc.flatMap((c) => LABEL_VALUES[l].map((v) => ({ ...c, [l]: v }))), [{}]);
  const fmt = (labels) => {
    const e = Object.entries(labels);
    return e.length ? `{${e.map(([k, v]) => `${k}="${v}"`).join(',')}}` : '';
  };
  for (const [name, { type, labels, buckets }] of catalog) {
    if (!(name.startsWith(`rlmesh_${component}_`) || name.startsWith('rlmesh_process_'))) continue;
    lines.push(`# HELP ${name} stand-in`, `# TYPE ${name} ${type}`);
    for (const l of combos(labels)) {
      if (type === 'gauge') lines.push(`${name}${fmt(l)} ${1 + tick / 100}`);
      else if (type === 'counter') lines.push(`${name}${fmt(l)} ${tick * 3}`);
      else {
        buckets.forEach((b, i) => lines.push(`${name}_bucket${fmt({ ...l, le: String(b) })} ${i >= 2 ? tick : 0}`));
        lines.push(`${name}_bucket${fmt({ ...l, le: '+Inf' })} ${tick}`,
          `${name}_sum${fmt(l)} ${tick * buckets[2]}`, `${name}_count${fmt(l)} ${tick}`);
      }
    }
  }
  return lines.join('\n') + '\n';
}

const TARGETS = [['coordinator'], ['trainer'], ['reference'], ['reward'], ['rollout', '0'], ['rollout', '1']];
const servers = [];
let prometheus;
let promUrl;
let runDir;

let api;
const query = (expr) => api.query(expr);

// Polls until fn() returns true; the limit only bounds a broken run.
async function waitFor(what, fn, limitMs = 120000) {
  const start = Date.now();
  for (;;) {
    try { if (await fn()) return; } catch { /* not up yet */ }
    if (Date.now() - start > limitMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

before(async () => {
  if (spawnSync('sh', ['-c', 'command -v prometheus']).status !== 0) {
    throw new Error('prometheus not found: run scripts/setup.sh (Debian package prometheus)');
  }
  runDir = mkdtempSync(join(tmpdir(), 'rlmesh-prom-'));
  const entries = [];
  for (const [component, replica] of TARGETS) {
    let tick = 0;
    const server = createServer((req, res) => {
      if (req.url !== '/metrics') { res.writeHead(404).end(); return; }
      res.writeHead(200, { 'Content-Type': 'text/plain; version=0.0.4' }).end(standInExposition(component, ++tick));
    });
    await new Promise((r) => server.listen(0, '127.0.0.1', r));
    servers.push(server);
    entries.push({ targets: [`127.0.0.1:${server.address().port}`],
      labels: replica === undefined ? { component } : { component, replica } });
  }
  writeFileSync(join(runDir, 'targets.json'), JSON.stringify(entries));
  const port = await freePort();
  promUrl = `http://127.0.0.1:${port}`;
  api = prometheusApi(promUrl);
  prometheus = spawn(join(REPO, 'deploy', 'prometheus', 'run-local.sh'),
    [runDir, `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  prometheus.stderr.on('data', (d) => { log = (log + d).slice(-4000); });
  prometheus.on('exit', (code) => { if (code) console.error(`prometheus exited ${code}:\n${log}`); });
  // Two scrapes of every target (rate() needs two samples) and one rule evaluation after them.
  await waitFor('two scrapes of every target', async () =>
    (await query('count(count_over_time(up[1m]) >= 2)'))[0]?.value[1] === String(TARGETS.length));
  await waitFor('a rule evaluation', async () => {
    const r = await (await fetch(`${promUrl}/api/v1/rules`)).json();
    return r.data.groups.every((g) => g.rules.every((x) => x.lastEvaluation > new Date(Date.now() - 4000).toISOString()));
  });
});

after(async () => {
  if (prometheus && prometheus.exitCode === null) {
    const exited = new Promise((r) => prometheus.once('exit', r));
    prometheus.kill('SIGTERM');
    await exited;
  }
  for (const s of servers) s.close();
  if (runDir) rmSync(runDir, { recursive: true, force: true });
});

test('the stand-in exporters conform to docs/metrics.md', () => {
  for (const c of ['coordinator', 'trainer', 'reference', 'reward', 'rollout']) {
    assert.deepEqual(checkExposition(standInExposition(c, 1), c), { errors: [], missing: [] }, c);
  }
});

test('every target from targets.json is up with its component label', async () => {
  const up = await query('up');
  assert.deepEqual(up.map((s) => `${s.metric.component}${s.metric.replica ?? ''}=${s.value[1]}`).sort(),
    ['coordinator=1', 'reference=1', 'reward=1', 'rollout0=1', 'rollout1=1', 'trainer=1']);
});

// The checks (quickstart_prometheus_test.mjs repeats them on the real services): every metric used by
// a dashboard panel or an alert rule has samples, every panel query returns data, and
// every rule evaluates without error.
export async function checkPrometheus() {
  const problems = [];
  const used = usedMetrics();
  for (const m of used) {
    if ((await query(`count({__name__="${m}"})`)).length === 0) problems.push(`no samples of ${m}`);
  }
  problems.push(...await panelProblems(api));
  const rules = await api.rules();
  for (const r of rules) if (r.health !== 'ok') problems.push(`alert ${r.name}: ${r.health} ${r.lastError}`);
  return { problems, used: used.length, rules: rules.length };
}

test('every metric of the dashboards and alerts has samples, every panel has data, every rule evaluates', async () => {
  const { problems, used, rules } = await checkPrometheus();
  assert.deepEqual(problems, []);
  assert.ok(used >= 50, `only ${used} metrics used`);
  assert.equal(rules, 18);
});

test('no alert fires on healthy stand-in data except the ones its shape implies', async () => {
  const r = await (await fetch(`${promUrl}/api/v1/alerts`)).json();
  const firingOrPending = new Set(r.data.alerts.map((a) => a.labels.alertname));
  // The stand-ins are all up and report every rollout replica known and up, finite losses
  // and no failures.
  for (const a of ['RlmeshRolloutReplicaDown', 'RlmeshComponentDown', 'RlmeshRolloutReplicaNotServing', 'RlmeshRewardOrLossNaN']) {
    assert.ok(!firingOrPending.has(a), `${a} is active`);
  }
});
