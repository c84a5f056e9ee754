// The chart on a real one-node Kubernetes (scripts/k8s/cluster.sh up; images loaded by
// scripts/k8s/images.sh), driven the way an operator would: `helm install` with
// values-cpu.yaml, a GRPO Job of the quickstart's tiny model and task to completion, and
// during it: the rollout Deployment scaled 1 -> 3 -> 2, one rollout pod deleted while it
// generates, the trainer pod deleted once (the run resumes from its checkpoint). A real
// Prometheus outside the cluster scrapes the pods.
// Asserted:
//   - the Job completes, and its metrics.jsonl (the run folder on a claim) has every step
//     from 1 to total_training_steps, each trained on all its samples exactly once
//     (rollout/samples = prompts x n), with the scaled replica counts in rollout/replicas_used;
//   - the step after the trainer came back continues from its checkpoint;
//   - every rollout pod that took weights took them over the TCP chain, never inline, and the
//     pods added during the run took at least one version;
//   - every metric a dashboard panel or an alert rule uses has samples, and every dashboard
//     query returns data while the run goes on.
// Everything it creates (namespace, volumes, Prometheus, folders) is removed at the end.
// With K8S_TEST_TLS=1 the services speak mutual TLS: a CA and one certificate made with
// openssl as docs/deploy.md ("TLS between the services") says, naming rlmesh.internal (the
// chart's tls.serverName, since replicas are dialed by pod IP) and the Services' and the
// trainer pods' DNS names, in the Secret the chart mounts.
//   K8S_DIR=build-k8s node tests/k8s/k8s_test.mjs      (scripts/k8s/k8s-test.sh runs it)
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { REPO, YAML, tinyModelArgs } from '../deploy/lib.mjs';
import { parseExposition } from '../deploy/exposition.mjs';
import { freePort, missingMetrics, panelProblems, prometheusApi, usedMetrics } from '../deploy/prometheus_lib.mjs';

const K8S_DIR = resolve(process.env.K8S_DIR || join(REPO, 'build-k8s'));
const BUILD = resolve(process.env.BUILD || join(REPO, 'build'));
const KUBECTL = join(K8S_DIR, 'bin', 'kubectl');
const KUBECONFIG = join(K8S_DIR, 'state', 'kubeconfig');
const HELM = join(REPO, 'tools', 'bin', 'helm');
const NS = 'rlmesh-k8s-test';
const RELEASE = 'grpo';
const ROLLOUT = `${RELEASE}-rlmesh-rollout`;
const TRAINER_POD = `${RELEASE}-rlmesh-trainer-0`;
const TEST_VALUES = join(REPO, 'tests', 'k8s', 'values-k8s-test.yaml');
const testValues = YAML.parse(readFileSync(TEST_VALUES, 'utf8')).config;
const STEPS = testValues.trainer.total_training_steps;
const SAMPLES = testValues.data.train_batch_size * testValues.actor_rollout_ref.rollout.n;
// Generous bounds on waits that normally take seconds; a wait that runs out fails the test,
// naming what it waited for.
const WAIT_S = Number(process.env.K8S_TEST_WAIT_S || 600);
const TLS = process.env.K8S_TEST_TLS === '1';

const work = join(K8S_DIR, 'test');
const hostDirs = { data: join(work, 'data'), checkpoints: join(work, 'checkpoints'), runs: join(work, 'runs') };
const metricsFile = join(hostDirs.runs, testValues.trainer.experiment_name, 'metrics.jsonl');
const t0 = Date.now();
const log = (msg) => console.log(`[k8s-test ${((Date.now() - t0) / 1000).toFixed(0).padStart(4)} s] ${msg}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function run(cmd, args, { input, check = true } = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', input, maxBuffer: 256 << 20, env: { ...process.env, KUBECONFIG } });
  if (check && r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: exit ${r.status}\n${r.stderr}${r.stdout}`);
  return r;
}
const kubectl = (...args) => run(KUBECTL, ['-n', NS, ...args]).stdout;
const kjson = (...args) => JSON.parse(kubectl(...args, '-o', 'json'));

async function until(what, fn, { seconds = WAIT_S, every = 1000 } = {}) {
  const end = Date.now() + seconds * 1000;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${seconds} s waiting for ${what}`);
    await sleep(every);
  }
}

// The step lines of the Job's metrics.jsonl so far (validation-only lines have no samples).
function stepLines() {
  if (!existsSync(metricsFile)) return [];
  return readFileSync(metricsFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
    .filter((m) => m['rollout/samples'] !== undefined);
}
const lastStep = () => stepLines().at(-1)?.step ?? 0;

function rolloutPods() {
  return kjson('get', 'pods', '-l', 'app.kubernetes.io/component=rollout').items
    .filter((p) => !p.metadata.deletionTimestamp);
}
const ready = (p) => (p.status.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');

// One pod's /metrics, parsed: name -> { type, samples }.
async function podMetrics(pod, port) {
  const text = await (await fetch(`http://${pod.status.podIP}:${port}/metrics`, { signal: AbortSignal.timeout(2000) })).text();
  return parseExposition(text).families;
}

// `kubectl logs -f` of a pod that is about to go, kept to say how it stopped.
// `kubectl logs -f` ends when the container does; stoppedLine waits up to 10 s for that.
const followed = {};
function followLog(pod) {
  const p = spawn(KUBECTL, ['-n', NS, 'logs', '-f', pod], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, KUBECONFIG } });
  const f = { text: '', proc: p, ended: new Promise((r) => p.on('close', r)) };
  p.stdout.on('data', (d) => { f.text = (f.text + d).slice(-20000); });
  followed[pod] = f;
}
async function stoppedLine(pod) {
  const f = followed[pod];
  if (!f) return 'logged nothing the test saw';
  await Promise.race([f.ended, sleep(10000)]);
  const lines = f.text.split('\n').filter((l) => /draining|stopped/.test(l));
  return lines.length ? `logged: ${lines.map((l) => `"${l.trim()}"`).join(', ')}` : 'logged no stop';
}

function volumes() {
  const pv = (name, path, mode) => ({
    apiVersion: 'v1', kind: 'PersistentVolume', metadata: { name: `${NS}-${name}`, labels: { 'rlmesh.io/k8s-test': name } },
    spec: { capacity: { storage: '1Gi' }, accessModes: [mode], persistentVolumeReclaimPolicy: 'Retain', storageClassName: '',
      hostPath: { path, type: 'Directory' } },
  });
  const pvc = (name, mode) => ({
    apiVersion: 'v1', kind: 'PersistentVolumeClaim', metadata: { name, namespace: NS },
    spec: { accessModes: [mode], storageClassName: '', resources: { requests: { storage: '1Gi' } },
      selector: { matchLabels: { 'rlmesh.io/k8s-test': name } } },
  });
  return [pv('data', hostDirs.data, 'ReadOnlyMany'), pv('checkpoints', hostDirs.checkpoints, 'ReadWriteMany'),
    pv('runs', hostDirs.runs, 'ReadWriteOnce'), pvc('data', 'ReadOnlyMany'), pvc('checkpoints', 'ReadWriteMany'),
    pvc('runs', 'ReadWriteOnce')].map((o) => YAML.stringify(o)).join('---\n');
}

// Prometheus outside the cluster, scraping the pods' `metrics` ports over the route to the
// pod network. Debian's prometheus is built without Kubernetes discovery, so the pods are
// found the same way through the API server here: every 2 s the running pods of the
// namespace, with the labels the ServiceMonitor gives them (component, pod, namespace), go
// into a file_sd targets file.
function prometheusConfig(targetsFile) {
  return YAML.stringify({
    global: { scrape_interval: '2s', scrape_timeout: '2s', evaluation_interval: '2s' },
    rule_files: [join(REPO, 'deploy', 'prometheus', 'rules', 'rlmesh-alerts.yml')],
    scrape_configs: [{ job_name: 'rlmesh', file_sd_configs: [{ files: [targetsFile], refresh_interval: '2s' }] }],
  });
}

function writeTargets(targetsFile) {
  const r = run(KUBECTL, ['-n', NS, 'get', 'pods', '-o', 'json'], { check: false });
  if (r.status !== 0 || !existsSync(dirname(targetsFile))) return;
  const targets = [];
  for (const p of JSON.parse(r.stdout).items) {
    if (p.status.phase !== 'Running' || !p.status.podIP) continue;
    for (const c of p.spec.containers) {
      for (const port of c.ports ?? []) {
        if (port.name !== 'metrics') continue;
        targets.push({ targets: [`${p.status.podIP}:${port.containerPort}`], labels: {
          component: p.metadata.labels['app.kubernetes.io/component'], pod: p.metadata.name, namespace: NS } });
      }
    }
  }
  writeFileSync(`${targetsFile}.tmp`, JSON.stringify(targets));
  renameSync(`${targetsFile}.tmp`, targetsFile);
}

// The docs' openssl recipe for this namespace and release; the Secret rlmesh-mtls.
function tlsSecret() {
  const d = join(work, 'tls');
  mkdirSync(d, { recursive: true });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  run('openssl', ['req', '-x509', ...ec, '-keyout', join(d, 'ca.key'), '-out', join(d, 'ca.crt'), '-days', '2', '-subj', '/CN=rlmesh-ca']);
  run('openssl', ['req', ...ec, '-keyout', join(d, 'tls.key'), '-out', join(d, 'tls.csr'), '-subj', '/CN=rlmesh']);
  writeFileSync(join(d, 'san.ext'), `subjectAltName=DNS:rlmesh.internal,DNS:*.${NS}.svc.cluster.local,` +
    `DNS:*.${RELEASE}-rlmesh-trainer.${NS}.svc.cluster.local\nextendedKeyUsage=serverAuth,clientAuth\n`);
  run('openssl', ['x509', '-req', '-in', join(d, 'tls.csr'), '-CA', join(d, 'ca.crt'), '-CAkey', join(d, 'ca.key'),
    '-CAcreateserial', '-out', join(d, 'tls.crt'), '-days', '2', '-extfile', join(d, 'san.ext')]);
  kubectl('create', 'secret', 'generic', 'rlmesh-mtls', ...['tls.crt', 'tls.key', 'ca.crt'].map((f) => `--from-file=${join(d, f)}`));
  return ['--set', 'tls.enabled=true,tls.secretName=rlmesh-mtls,tls.serverName=rlmesh.internal'];
}

let prometheus;
let discovery;
async function startPrometheus() {
  const dir = join(work, 'prometheus');
  mkdirSync(dir, { recursive: true });
  const targetsFile = join(dir, 'targets.json');
  writeTargets(targetsFile);
  discovery = setInterval(() => writeTargets(targetsFile), 2000);
  writeFileSync(join(dir, 'prometheus.yml'), prometheusConfig(targetsFile));
  const port = await freePort();
  prometheus = spawn('prometheus', [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'tsdb')}`,
    `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let promLog = '';
  prometheus.stderr.on('data', (d) => { promLog = (promLog + d).slice(-4000); });
  prometheus.on('exit', (code) => { if (code) console.error(`prometheus exited ${code}:\n${promLog}`); });
  const api = prometheusApi(`http://127.0.0.1:${port}`);
  await until('Prometheus to answer', async () => { try { await api.query('up'); return true; } catch { return false; } });
  log(`Prometheus on 127.0.0.1:${port} scrapes the pods of namespace ${NS}`);
  return api;
}

function cleanup() {
  log('cleaning up: helm uninstall, namespace, volumes, Prometheus, folders');
  run(HELM, ['uninstall', RELEASE, '-n', NS, '--wait', '--timeout', '120s'], { check: false });
  run(KUBECTL, ['delete', 'namespace', NS, '--wait=true', '--timeout=180s'], { check: false });
  run(KUBECTL, ['delete', 'pv', '-l', 'rlmesh.io/k8s-test', '--wait=true', '--timeout=60s'], { check: false });
  clearInterval(discovery);
  for (const f of Object.values(followed)) if (f.proc.exitCode === null) f.proc.kill();
  if (prometheus && prometheus.exitCode === null) prometheus.kill('SIGTERM');
  rmSync(work, { recursive: true, force: true });
}

// The last value of `metric` in each pod that has it.
async function byPod(api, metric) {
  const out = {};
  for (const s of await api.query(`last_over_time(${metric}[1h])`)) out[s.metric.pod] = Number(s.value[1]);
  return out;
}

// Every pod of `component` Prometheus saw, with the versions it committed by transport.
async function weightPaths(api, component = 'rollout') {
  const r = await api.query(`max_over_time(rlmesh_${component}_weight_updates_total[1h])`);
  const paths = {};
  for (const s of r) (paths[s.metric.pod] ??= {})[s.metric.transport] = Number(s.value[1]);
  return paths;
}

async function main() {
  assert.ok(existsSync(KUBECONFIG), `${KUBECONFIG} missing: run scripts/k8s/cluster.sh up`);
  rmSync(work, { recursive: true, force: true });
  for (const d of Object.values(hostDirs)) mkdirSync(d, { recursive: true });
  // A Llama-style model of the sizes the values name (rlmesh.model), as scripts/quickstart.sh
  // makes its own.
  run(join(BUILD, 'bin', 'rlmesh'), tinyModelArgs(testValues.rlmesh.model, join(hostDirs.data, 'model')));
  run('chown', ['-R', '10001:10001', work]);

  run(KUBECTL, ['create', 'namespace', NS]);
  run(KUBECTL, ['apply', '-f', '-'], { input: volumes() });
  const api = await startPrometheus();

  const tls = TLS ? tlsSecret() : [];
  log(`helm install ${RELEASE} with values-cpu.yaml and ${TEST_VALUES.slice(REPO.length + 1)}` +
    `${TLS ? ', mutual TLS (tls.serverName rlmesh.internal)' : ''}`);
  run(HELM, ['install', RELEASE, join(REPO, 'helm', 'rlmesh'), '-n', NS, '-f', join(REPO, 'helm', 'rlmesh', 'values-cpu.yaml'),
    '-f', TEST_VALUES, '--set', 'sharedData.existingClaim=data,trainer.checkpoints.existingClaim=checkpoints,coordinator.runDirClaim=runs',
    ...tls]);

  const firstRollout = await until('the first rollout pod to be ready', () => rolloutPods().find(ready));
  log(`rollout pod ${firstRollout.metadata.name} ready; waiting for the Job's first GRPO steps`);
  await until('step 2 in metrics.jsonl', () => lastStep() >= 2);

  // Scale out: 1 -> 3. The new replicas must take the current weights before they get work.
  log(`step ${lastStep()}: kubectl scale deployment ${ROLLOUT} --replicas=3`);
  kubectl('scale', 'deployment', ROLLOUT, '--replicas=3');
  const three = await until('a step generated on 3 replicas', () => stepLines().find((m) => m['rollout/replicas_used'] === 3));
  const added = rolloutPods().map((p) => p.metadata.name).filter((n) => n !== firstRollout.metadata.name);
  log(`step ${three.step} generated on 3 replicas (added: ${added.join(', ')})`);

  // Scale in: 3 -> 2 (every replica's log followed first: the one that goes stops in
  // milliseconds).
  for (const p of rolloutPods()) followLog(p.metadata.name);
  log(`step ${lastStep()}: kubectl scale deployment ${ROLLOUT} --replicas=2`);
  kubectl('scale', 'deployment', ROLLOUT, '--replicas=2');
  const leaving = await until('a rollout pod to terminate', () =>
    kjson('get', 'pods', '-l', 'app.kubernetes.io/component=rollout').items.find((p) => p.metadata.deletionTimestamp));
  await until('2 rollout pods', () => rolloutPods().length === 2 &&
    kjson('get', 'pods', '-l', 'app.kubernetes.io/component=rollout').items.length === 2);
  log(`scale-in: ${leaving.metadata.name} ${await stoppedLine(leaving.metadata.name)}`);
  const afterIn = lastStep();
  const two = await until('a step on 2 replicas after the scale-in',
    () => stepLines().find((m) => m.step > afterIn && m['rollout/replicas_used'] === 2));
  log(`scaled in: step ${two.step} generated on 2 replicas`);

  // Delete a rollout pod while it has sequences in flight: generation is a short part of a
  // step, so the ready pods' /metrics are read back to back, all at once, and the pod list
  // (a kubectl call) is refreshed only every 5 s.
  const generating = async (pods) => (await Promise.all(pods.map(async (p) => {
    try {
      const running = (await podMetrics(p, 9101)).get('rlmesh_rollout_running_sequences');
      return running?.samples.some((x) => x.value > 0) ? p : null;
    } catch { return null; /* the pod is starting or going */ }
  }))).find(Boolean);
  const victim = await until('a rollout pod with running sequences', async () => {
    const pods = rolloutPods().filter(ready);
    if (pods.length === 0) return null;
    for (const end = Date.now() + 5000; Date.now() < end;) {
      const p = await generating(pods);
      if (p) return p;
    }
    return null;
  }, { every: 0 });
  const atDelete = lastStep();
  followLog(victim.metadata.name);
  kubectl('delete', 'pod', victim.metadata.name, '--grace-period=1', '--wait=false');
  log(`step ${atDelete + 1} generating: deleted rollout pod ${victim.metadata.name} (grace period 1 s)`);
  const replaced = await until('the replacement rollout pod to be ready',
    () => rolloutPods().filter(ready).find((p) => p.metadata.name !== victim.metadata.name && !added.includes(p.metadata.name) &&
      p.metadata.name !== firstRollout.metadata.name));
  log(`replacement rollout pod ${replaced.metadata.name} ready; ${victim.metadata.name} ${await stoppedLine(victim.metadata.name)}`);

  // Delete the trainer once a checkpoint after the rollout pod's deletion is on its volume
  // (the books of those steps survive the resume); the StatefulSet recreates it and the run
  // resumes from that checkpoint.
  const ckptDir = hostDirs.checkpoints;
  const saved = () => (existsSync(ckptDir) ? readdirSync(ckptDir).filter((d) => /^global_step_\d+$/.test(d))
    .map((d) => Number(d.split('_')[2])) : []);
  await until('a checkpoint after the rollout pod went', () => saved().some((s) => s > atDelete + 5));
  const uid = kjson('get', 'pod', TRAINER_POD).metadata.uid;
  const beforeTrainer = lastStep();
  const newestCheckpoint = Math.max(...saved());
  kubectl('delete', 'pod', TRAINER_POD, '--wait=false');
  log(`step ${beforeTrainer}: deleted trainer pod ${TRAINER_POD} (checkpoints on its volume: up to step ${newestCheckpoint})`);
  await until('the trainer pod to come back', () => {
    const p = kjson('get', 'pods', '-l', 'app.kubernetes.io/component=trainer').items.find((x) => x.metadata.name === TRAINER_POD);
    return p && p.metadata.uid !== uid && ready(p);
  });
  log(`trainer pod ${TRAINER_POD} recreated and ready`);
  // The coordinator loses its trainer mid-step, exits, and the Job restarts it; it asks the
  // new trainer for its newest checkpoint and goes on from there.
  const resumeLine = await until('the coordinator to resume', () => {
    const r = run(KUBECTL, ['-n', NS, 'logs', '-l', 'app.kubernetes.io/component=coordinator', '--tail=-1'], { check: false });
    return r.stdout.split('\n').find((l) => /resumed from \S+ at step \d+/.test(l));
  });
  const resumedAt = Number(resumeLine.match(/at step (\d+)/)[1]);
  log(`the coordinator restarted: "${resumeLine.trim()}"`);
  assert.ok(resumedAt >= newestCheckpoint && resumedAt <= Math.max(beforeTrainer, newestCheckpoint),
    `resumed at step ${resumedAt}: the newest checkpoint when the trainer went was step ${newestCheckpoint}`);
  const resumed = await until('a step after the resume', () => lastStep() > beforeTrainer && lastStep());
  log(`the run goes on: step ${resumed}`);

  // The dashboards, while the run is still going (instant queries over the last minute).
  let problems = [];
  let missing = [];
  const used = usedMetrics();
  const jobDone = () => {
    const j = kjson('get', 'jobs', '-l', 'app.kubernetes.io/component=coordinator').items[0];
    if (j?.status?.failed >= (j?.spec?.backoffLimit ?? 6) + 1) throw new Error(`the Job failed: ${JSON.stringify(j.status)}`);
    return j?.status?.succeeded >= 1;
  };
  let panelsOk = false;
  await until('the Job to complete', async () => {
    if (!panelsOk) {
      missing = await missingMetrics(api, used);
      problems = await panelProblems(api, { healthy: true });
      panelsOk = missing.length === 0 && problems.length === 0;
      if (panelsOk) log(`every one of ${used.length} dashboard and alert metrics has samples; every dashboard query returns data`);
    }
    return jobDone();
  }, { seconds: WAIT_S * 2, every: 3000 });
  log('the Job completed');

  // The books.
  const steps = stepLines();
  const byStep = new Map();
  for (const m of steps) byStep.set(m.step, [...(byStep.get(m.step) ?? []), m]);
  // A resume cuts metrics.jsonl back to the checkpoint's step, so steps redone after it
  // appear once, as trained.
  const twice = [...byStep].filter(([, v]) => v.length > 1).map(([s]) => s);
  log(`books: ${steps.length} step lines, steps ${Math.min(...byStep.keys())}..${Math.max(...byStep.keys())}; ` +
    (resumedAt < beforeTrainer ? `steps ${resumedAt + 1}..${beforeTrainer} trained again after the resume`
      : `no step trained again (the trainer went right after checkpointing step ${resumedAt})`));
  for (const m of steps) {
    log(`  step ${String(m.step).padStart(3)}: samples ${m['rollout/samples']} on ${m['rollout/replicas_used']} replica(s), ` +
      `re-dispatched ${m['rollout/samples_redispatched']}, replicas lost ${m['rollout/replicas_lost']}`);
  }
  assert.deepEqual([...byStep.keys()].sort((a, b) => a - b), Array.from({ length: STEPS }, (_, i) => i + 1),
    'every step from 1 to total_training_steps was trained');
  assert.deepEqual(twice, [], 'each step once in metrics.jsonl');
  for (const m of steps) assert.equal(m['rollout/samples'], SAMPLES, `step ${m.step}: every sample exactly once`);
  assert.ok(steps.some((m) => m['rollout/replicas_used'] === 3), 'a step used the three replicas');
  // The deleted rollout pod: a step right after its deletion either lost it mid-step (its
  // sequences re-dispatched to the other replica) or, where discovery had already dropped
  // it, generated everything on the one replica left; all samples either way (above).
  const after = steps.filter((m) => m.step > atDelete && m.step <= atDelete + 5);
  const gone = after.find((m) => m['rollout/replicas_lost'] >= 1 || m['rollout/replicas_used'] < 2);
  assert.ok(gone, `a step after ${atDelete} went on without the deleted rollout pod: ` +
    JSON.stringify(after.map((m) => [m.step, m['rollout/replicas_used'], m['rollout/replicas_lost']])));
  log(`the deleted rollout pod: step ${gone.step} ran on ${gone['rollout/replicas_used']} replica(s), lost ` +
    `${gone['rollout/replicas_lost']} mid-step, re-dispatched ${gone['rollout/samples_redispatched']} samples`);

  // Weight paths of every rollout pod, from Prometheus (deleted pods included).
  const paths = await weightPaths(api);
  for (const [pod, t] of Object.entries(paths)) log(`  weights to ${pod}: ${JSON.stringify(t)}`);
  for (const [pod, t] of Object.entries(paths)) {
    assert.ok(!(t.inline > 0), `${pod} took weights inline: ${JSON.stringify(t)}`);
  }
  for (const pod of [...added, replaced.metadata.name]) {
    assert.ok(paths[pod]?.tcp > 0, `${pod}, added during the run, took weights over the TCP chain: ${JSON.stringify(paths[pod])}`);
  }
  // The KL reference's two pods: each holds the warmed-up policy the coordinator anchored to
  // (sent to each pod by its own address, over the data plane) and served log-prob calls.
  const anchors = run(KUBECTL, ['-n', NS, 'logs', '-l', 'app.kubernetes.io/component=coordinator', '--tail=-1'], { check: false })
    .stdout.split('\n').map((l) => l.match(/the KL reference is the warmed-up policy \(weight version (\d+)/)).filter(Boolean);
  assert.ok(anchors.length > 0, 'the coordinator logged the KL anchor');
  const anchor = Number(anchors.at(-1)[1]);
  const refVersions = await byPod(api, 'rlmesh_reference_weight_version');
  const refServed = await byPod(api, 'rlmesh_reference_sequences_total');
  const refPaths = await weightPaths(api, 'reference');
  log(`reference pods (anchor: version ${anchor}): versions ${JSON.stringify(refVersions)}, ` +
    `sequences ${JSON.stringify(refServed)}, weights ${JSON.stringify(refPaths)}`);
  const refPods = kjson('get', 'pods', '-l', 'app.kubernetes.io/component=reference').items.map((p) => p.metadata.name);
  assert.equal(refPods.length, 2, `two reference pods: ${refPods}`);
  for (const pod of refPods) {
    assert.equal(refVersions[pod], anchor, `${pod} holds the anchored version ${anchor}`);
    assert.ok(refServed[pod] > 0, `${pod} served log-prob calls`);
    // The warm-up's publish went over the data plane; the resumed coordinator sends the saved
    // warm-up checkpoint again, and a checkpoint's weights always go inline (docs/transport.md).
    assert.ok(refPaths[pod]?.tcp >= 1, `${pod} took the warmed-up policy over the TCP chain: ${JSON.stringify(refPaths[pod])}`);
    assert.ok((refPaths[pod]?.inline ?? 0) <= 1, `${pod} took inline only the checkpoint re-sent after the resume: ${JSON.stringify(refPaths[pod])}`);
  }
  // No version went inline for want of the data plane, in any trainer pod.
  const fallbacks = await byPod(api, 'rlmesh_trainer_weight_inline_fallbacks_total');
  log(`trainer inline fallbacks: ${JSON.stringify(fallbacks)}`);
  assert.ok(Object.keys(fallbacks).length > 0 && Object.values(fallbacks).every((v) => v === 0),
    `the trainer never fell back to inline: ${JSON.stringify(fallbacks)}`);
  assert.deepEqual(missing, [], 'every dashboard and alert metric has samples');
  assert.deepEqual(problems, [], 'every dashboard query returns data');
  log('passed');
}

let failed = false;
try {
  await main();
} catch (e) {
  failed = true;
  console.error(`[k8s-test] FAILED: ${e.stack ?? e}`);
  for (const what of [['get', 'pods', '-o', 'wide'], ['get', 'events', '--sort-by=.lastTimestamp']]) {
    console.error(run(KUBECTL, ['-n', NS, ...what], { check: false }).stdout.split('\n').slice(-40).join('\n'));
  }
  const job = run(KUBECTL, ['-n', NS, 'logs', '-l', 'app.kubernetes.io/component=coordinator', '--tail=40'], { check: false });
  console.error(job.stdout + job.stderr);
} finally {
  if (!process.env.K8S_TEST_KEEP) cleanup();
}
process.exit(failed ? 1 : 0);
