// The quickstart under a real Prometheus: `rlmesh run deploy/configs/quickstart.yaml` (the
// real five binaries, shortened: a few warm-up steps, two GRPO steps per epoch, frequent
// validation) is scraped by Debian's `prometheus` through the targets.json the run writes,
// with deploy/prometheus/prometheus-local.yml and the shipped alert rules, at a 1 s interval.
// Through Prometheus' HTTP API the test asserts that every target is up with its component
// label, every metric a dashboard panel or an alert rule uses has samples, every dashboard
// query returns data (those of failed calls only, which a healthy run need not have, must
// evaluate), the health and fleet series hold plausible values, and every alert rule
// evaluates without error. The run is stopped with SIGINT (rlmesh run's graceful stop) once
// the checks have passed or their time is up.
//   RLMESH_BIN=build/bin/rlmesh node --test tests/deploy/quickstart_prometheus_test.mjs
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { REPO, YAML } from './lib.mjs';
import { freePort, missingMetrics, panelProblems, prometheusApi, usedMetrics } from './prometheus_lib.mjs';

const BIN = process.env.RLMESH_BIN || join(process.env.RLMESH_BUILD_DIR || join(REPO, 'build'), 'bin', 'rlmesh');
// Time the run gets to produce every series; the checks poll and stop as soon as they pass.
const LIMIT_MS = 150000;
// One rollout replica; the other components once each.
const COMPONENTS = ['coordinator', 'reference', 'reward', 'rollout', 'trainer'];

let dir;
let prometheus;
let run;
let runLog = '';
let runExit;
// Results of the checks, made while the run is still going (before()).
let state;

let api;
const query = (expr) => api.query(expr);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The shipped local Prometheus config, pointed at this run's targets.json and the rules, with
// 1 s intervals so a run of a minute gives every series many samples.
function prometheusConfig(runDir) {
  const cfg = YAML.parse(readFileSync(join(REPO, 'deploy', 'prometheus', 'prometheus-local.yml'), 'utf8'));
  cfg.global = { ...cfg.global, scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' };
  cfg.rule_files = cfg.rule_files.map((f) => join(REPO, 'deploy', 'prometheus', f));
  assert.equal(cfg.scrape_configs.length, 1);
  const sd = cfg.scrape_configs[0].file_sd_configs[0];
  sd.files = [join(runDir, 'targets.json')];
  sd.refresh_interval = '1s';
  return YAML.stringify(cfg);
}

// The series behind the health indicators and the fleet panels, read back as numbers (the
// largest value across targets), while every target is up.
async function healthValues() {
  const one = async (expr) => {
    const r = await query(expr);
    return r.length ? Math.max(...r.map((x) => Number(x.value[1]))) : undefined;
  };
  return {
    utilization: await one('rlmesh_process_device_utilization_ratio'),
    memoryShare: await one('rlmesh_process_device_memory_peak_bytes / rlmesh_process_device_memory_capacity_bytes'),
    commOverCompute: await one('sum(rate(rlmesh_coordinator_phase_seconds_total{phase=~"sync|overhead"}[1m])) / ' +
      'sum(rate(rlmesh_coordinator_phase_seconds_total{phase=~"gen|reward|old_log_prob|ref|update"}[1m]))'),
    replicaVersion: await one('rlmesh_coordinator_rollout_replica_weight_version'),
    published: await one('rlmesh_trainer_weight_publish_bytes_total'),
    received: await one('rlmesh_rollout_weight_update_bytes_total'),
    steps: await one('rlmesh_coordinator_global_step'),
  };
}

before(async () => {
  if (spawnSync('sh', ['-c', 'command -v prometheus']).status !== 0) {
    throw new Error('prometheus not found: run scripts/setup.sh (Debian package prometheus)');
  }
  if (!existsSync(BIN)) throw new Error(`${BIN} not found: build the rlmesh targets first`);
  dir = mkdtempSync(join(tmpdir(), 'rlmesh-qs-prom-'));
  const runDir = join(dir, 'run');
  mkdirSync(runDir);
  const model = join(dir, 'model');
  const made = spawnSync(BIN, ['make-tiny-model', '--arch', 'llama', '--out', model, '--hidden', '128', '--layers', '2',
    '--heads', '4', '--kv-heads', '4', '--intermediate', '352', '--max-position', '64', '--seed', '1'], { encoding: 'utf8' });
  assert.equal(made.status, 0, made.stderr);

  writeFileSync(join(dir, 'prometheus.yml'), prometheusConfig(runDir));
  const port = await freePort();
  api = prometheusApi(`http://127.0.0.1:${port}`);
  prometheus = spawn('prometheus', [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'tsdb')}`,
    `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let promLog = '';
  prometheus.stderr.on('data', (d) => { promLog = (promLog + d).slice(-4000); });
  prometheus.on('exit', (code) => { if (code) console.error(`prometheus exited ${code}:\n${promLog}`); });

  // The quickstart, short: 64 training strings (2 steps an epoch, so epochs end and the
  // epoch-over-epoch reward gauge appears), validation every 2 steps on 16 strings, 5 warm-up
  // steps; total_training_steps only bounds a run that the checks never stop.
  run = spawn(BIN, ['run', join(REPO, 'deploy', 'configs', 'quickstart.yaml'),
    `actor_rollout_ref.model.path=${model}`, `rlmesh.run_dir=${runDir}`,
    `trainer.default_local_dir=${join(dir, 'checkpoints')}`, 'trainer.total_epochs=1000',
    'trainer.total_training_steps=400', 'trainer.test_freq=2', 'trainer.save_freq=-1',
    'rlmesh.warmup.sft_steps=5', 'rlmesh.quickstart.num_train=64', 'rlmesh.quickstart.num_val=16',
    'data.val_batch_size=16'], { stdio: ['ignore', 'pipe', 'pipe'] });
  run.stdout.on('data', (d) => { runLog = (runLog + d).slice(-8000); });
  run.stderr.on('data', (d) => { runLog = (runLog + d).slice(-8000); });
  runExit = new Promise((resolve) => run.on('exit', (code, signal) => resolve({ code, signal })));

  // Poll until every check passes while the run goes on, or the time is up; the run ending
  // early (a crash) ends the wait too.
  const used = usedMetrics();
  const start = Date.now();
  let ended = false;
  runExit.then(() => { ended = true; });
  state = { missing: used, up: [], panels: ['not evaluated'], used: used.length };
  while (!ended && Date.now() - start < LIMIT_MS) {
    await sleep(2000);
    try {
      const up = (await query('up == 1')).map((s) => s.metric.component).sort();
      if (up.length < COMPONENTS.length) continue;
      const missing = await missingMetrics(api, used);
      state = { ...state, up, missing };
      if (missing.length) continue;
      // Panels: evaluated now, with every target up and a minute of rate window.
      const panels = await panelProblems(api, { healthy: true });
      state = { ...state, panels, values: await healthValues() };
      if (panels.length === 0) break;
    } catch { /* Prometheus still starting */ }
  }
  // Out of time with metrics missing: still say which panels lack data.
  if (!ended && state.panels[0] === 'not evaluated') state.panels = await panelProblems(api, { healthy: true });
  state.rules = await api.rules();
  if (!ended) run.kill('SIGINT');
  state.exit = await runExit;
});

after(async () => {
  if (run && run.exitCode === null && run.signalCode === null) {
    run.kill('SIGKILL');
    await runExit;
  }
  if (prometheus && prometheus.exitCode === null) {
    const exited = new Promise((r) => prometheus.once('exit', r));
    prometheus.kill('SIGTERM');
    await exited;
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('the run trains until stopped and stops gracefully', () => {
  // 130: stopped by the SIGINT after the checks (the current step finishes first).
  assert.deepEqual(state.exit, { code: 130, signal: null }, runLog);
});

test('every service of the run is a target that is up, with its component label', () => {
  assert.deepEqual(state.up, COMPONENTS, runLog);
});

test('every metric used by a dashboard panel or an alert rule has samples from the real services', () => {
  assert.deepEqual(state.missing, [], `no samples of ${state.missing.join(', ')}`);
  assert.ok(state.used >= 50, `only ${state.used} metrics used`);
});

test('every dashboard query returns data while the run goes on', () => {
  assert.deepEqual(state.panels, []);
});

test('the health and fleet series hold plausible values', () => {
  const v = state.values;
  assert.ok(v, 'not read: the metrics or panels checks did not pass');
  // Busy fraction of the cores a process may use: positive while training, finite.
  assert.ok(v.utilization > 0 && Number.isFinite(v.utilization), `utilization ${v.utilization}`);
  // The tiny model's processes use a sliver of the machine's memory.
  assert.ok(v.memoryShare > 0 && v.memoryShare < 1, `peak memory / capacity ${v.memoryShare}`);
  assert.ok(v.commOverCompute > 0 && Number.isFinite(v.commOverCompute), `comm / compute ${v.commOverCompute}`);
  // Weights were synced: the replica reports a published version and the bytes moved.
  assert.ok(v.replicaVersion >= 1, `replica weight version ${v.replicaVersion}`);
  assert.ok(v.published > 0 && v.received > 0, `published ${v.published}, received ${v.received}`);
  // Two steps an epoch: the previous-epoch reward (present, checked above) needs two.
  assert.ok(v.steps >= 2, `global step ${v.steps}`);
});

test('every alert rule evaluates without error on the real series', () => {
  assert.ok(state.rules.length >= 10, `${state.rules.length} rules`);
  for (const r of state.rules) assert.equal(r.health, 'ok', `alert ${r.name}: ${r.lastError}`);
});
