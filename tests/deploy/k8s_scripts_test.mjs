// What `make k8s-test` (scripts/k8s, tests/k8s) depends on, checked without a cluster, so
// that `make test` catches it drifting: the scripts parse; the cluster DNS names match what
// CoreDNS answers; and the test's values, on top of values-cpu.yaml with the claims the test
// adds, render and pass `rlmesh dry-run` (RLMESH_BIN) as the coordinator's init container
// runs it, against a model made with the sizes those values name, as the test makes it.
//   RLMESH_BIN=build/bin/rlmesh node --test tests/deploy/k8s_scripts_test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { hostsLines } from '../../scripts/k8s/dns-hosts.mjs';
import { CHART, REPO, YAML, find, initDryRunArgv, render, tinyModelArgs } from './lib.mjs';

const BIN = process.env.RLMESH_BIN;
const dir = mkdtempSync(join(tmpdir(), 'rlmesh-k8s-scripts-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('the cluster scripts and the test parse', () => {
  const k8s = join(REPO, 'scripts', 'k8s');
  for (const f of readdirSync(k8s)) {
    const r = f.endsWith('.sh') ? spawnSync('bash', ['-n', join(k8s, f)], { encoding: 'utf8' })
      : spawnSync(process.execPath, ['--check', join(k8s, f)], { encoding: 'utf8' });
    assert.equal(r.status, 0, `${f}: ${r.stderr}`);
  }
  const r = spawnSync(process.execPath, ['--check', join(REPO, 'tests', 'k8s', 'k8s_test.mjs')], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
});

test('cluster DNS: a Service name answers its ready endpoints, a StatefulSet pod its own name', () => {
  const endpoints = {
    items: [
      { metadata: { name: 'rel-rlmesh-rollout', namespace: 'rl' }, subsets: [{
        addresses: [{ ip: '10.232.0.4' }, { ip: '10.232.0.7' }], notReadyAddresses: [{ ip: '10.232.0.9' }] }] },
      { metadata: { name: 'rel-rlmesh-trainer', namespace: 'rl' }, subsets: [{
        addresses: [{ ip: '10.232.0.5', hostname: 'rel-rlmesh-trainer-0' }] }] },
      { metadata: { name: 'kubernetes', namespace: 'default' } },
    ],
  };
  assert.deepEqual(hostsLines(endpoints, 'cluster.local'), [
    '10.232.0.4 rel-rlmesh-rollout.rl.svc.cluster.local',
    '10.232.0.5 rel-rlmesh-trainer-0.rel-rlmesh-trainer.rl.svc.cluster.local',
    '10.232.0.5 rel-rlmesh-trainer.rl.svc.cluster.local',
    '10.232.0.7 rel-rlmesh-rollout.rl.svc.cluster.local',
  ]);
});

test("the k8s test's values render and pass rlmesh dry-run with the model the test makes", () => {
  assert.ok(BIN && existsSync(BIN), `RLMESH_BIN must name the built rlmesh CLI, got "${BIN}"`);
  const values = join(REPO, 'tests', 'k8s', 'values-k8s-test.yaml');
  const objs = render(['-f', join(CHART, 'values-cpu.yaml'), '-f', values, '--set',
    'sharedData.existingClaim=data,trainer.checkpoints.existingClaim=checkpoints,coordinator.runDirClaim=runs']);
  // Every pod runs the image the test loads, never pulled, and asks for no GPU.
  for (const kind of ['Deployment', 'StatefulSet', 'Job']) {
    for (const o of find(objs, kind)) {
      const spec = o.spec.template.spec;
      for (const c of [...spec.containers, ...(spec.initContainers ?? [])]) {
        assert.equal(c.image, 'localhost/rlmesh:k8s-test', `${o.metadata.name}/${c.name}`);
        assert.equal(c.imagePullPolicy, 'Never', `${o.metadata.name}/${c.name}`);
        assert.equal(c.resources?.limits?.['nvidia.com/gpu'], undefined, `${o.metadata.name}/${c.name}`);
      }
    }
  }
  const m = YAML.parse(readFileSync(values, 'utf8')).config.rlmesh.model;
  const model = join(dir, 'model');
  const made = spawnSync(BIN, tinyModelArgs(m, model), { encoding: 'utf8' });
  assert.equal(made.status, 0, made.stderr);
  const r = spawnSync(BIN, initDryRunArgv(objs, join(dir, 'config.yaml'), [`actor_rollout_ref.model.path=${model}`]),
    { encoding: 'utf8' });
  assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, /result: valid \(0 error\(s\), 0 warning\(s\)\)/, r.stdout);
});
