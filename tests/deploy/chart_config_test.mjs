// The training config the chart renders is accepted by the real config validator:
// `rlmesh dry-run` (RLMESH_BIN, the built CLI), run as the coordinator's init container
// runs it (with the coordinator's key=value overrides), on the ConfigMap's config.yaml for
// the default and the all-on values and the two files users pass (values-cpu.yaml,
// values-gpu.yaml). The model folder is not here; the dry-run takes the model's sizes from
// the chart's rlmesh.model.* defaults.
//   RLMESH_BIN=build/bin/rlmesh node --test tests/deploy/chart_config_test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { VALUE_SETS, initDryRunArgv, render } from './lib.mjs';

const BIN = process.env.RLMESH_BIN;
const dir = mkdtempSync(join(tmpdir(), 'rlmesh-chart-config-'));
after(() => rmSync(dir, { recursive: true, force: true }));

// The Secret's files, as the pods see them at tls.mountPath (dry-run checks they exist).
const tlsDir = join(dir, 'tls');
mkdirSync(tlsDir);
for (const f of ['tls.crt', 'tls.key', 'ca.crt']) writeFileSync(join(tlsDir, f), '');

// `extra`: key=value overrides after the init container's own.
function dryRun(args, name, extra = []) {
  assert.ok(BIN && existsSync(BIN), `RLMESH_BIN must name the built rlmesh CLI, got "${BIN}"`);
  const objs = render([...args, '--set', `tls.mountPath=${tlsDir}`]);
  // Run it the way the coordinator's init container does, on a copy of the file.
  return spawnSync(BIN, initDryRunArgv(objs, join(dir, `${name}.yaml`), extra), { encoding: 'utf8' });
}

for (const name of ['default', 'all']) {
  test(`rlmesh dry-run accepts the config rendered with ${name} values`, () => {
    const r = dryRun(VALUE_SETS[name], name);
    assert.equal(r.status, 0, `rlmesh dry-run exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
  });
}

// On cpu the dry-run compares its memory estimate of every process with the memory of the
// node it runs on (/proc/meminfo); rlmesh.device_memory_gb stands for a 32 GiB node instead
// of this machine's. On cuda (no nvidia-smi here) the capacity is unknown and not checked.
test('rlmesh dry-run accepts the config rendered with values-cpu.yaml, on a 32 GiB node', () => {
  const r = dryRun(VALUE_SETS['values-cpu.yaml'], 'values-cpu', ['rlmesh.device_memory_gb=32']);
  assert.equal(r.status, 0, `rlmesh dry-run exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
});

test('rlmesh dry-run accepts the config rendered with values-gpu.yaml', () => {
  const r = dryRun(VALUE_SETS['values-gpu.yaml'], 'values-gpu');
  assert.equal(r.status, 0, `rlmesh dry-run exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
});

test('rlmesh dry-run rejects a rendered config with a misspelled key, naming it', () => {
  const r = dryRun(['--set', 'config.actor_rollout_ref.actor.ppo_mini_batch_sise=8'], 'misspelled');
  assert.notEqual(r.status, 0);
  assert.match(r.stdout + r.stderr, /ppo_mini_batch_sise/);
});
