// Static checks of deploy/docker/Dockerfile (Docker cannot run on the test machines): it
// builds with the packages scripts/setup.sh installs, builds every binary the chart runs,
// and runs as the non-root user the chart's pod security context names.
//   node --test tests/deploy/dockerfile_test.mjs
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { CHART, REPO, YAML, render } from './lib.mjs';

const dockerfile = readFileSync(join(REPO, 'deploy', 'docker', 'Dockerfile'), 'utf8');
const [buildStage, runtimeStage] = dockerfile.split(/^FROM .* AS runtime$/m);

test('the build stage installs every build package of scripts/setup.sh', () => {
  const setup = readFileSync(join(REPO, 'scripts', 'setup.sh'), 'utf8');
  const list = setup.match(/packages=\(([\s\S]*?)\)/)[1].split(/\s+/).filter(Boolean);
  // Tools only the tests use are not needed to build the binaries (openssl: the TLS tests'
  // certificates; python3-crcmod: the TensorBoard event reader's CRCs).
  const testOnly = new Set(['prometheus', 'yamllint', 'python3', 'python3-torch', 'python3-grpcio',
    'python3-protobuf', 'python3-crcmod', 'nodejs', 'npm', 'openssl']);
  const missing = list.filter((p) => !testOnly.has(p) && !new RegExp(`\\s${p.replace(/[+]/g, '\\+')}\\s`).test(buildStage));
  assert.deepEqual(missing, []);
});

test('the image builds every binary the chart runs', () => {
  const targets = dockerfile.match(/ARG TARGETS="([^"]+)"/)[1].split(' ');
  const objs = render(['-f', join(CHART, 'ci', 'all-values.yaml')]);
  const commands = objs.filter((o) => o.spec?.template?.spec)
    .flatMap((o) => [...o.spec.template.spec.containers, ...(o.spec.template.spec.initContainers ?? [])])
    .map((c) => c.command[0]);
  assert.ok(commands.length >= 6);
  for (const c of new Set(commands)) assert.ok(targets.includes(c), `${c} is not built by the Dockerfile`);
});

test('the image carries what rlmesh-reward needs to run a verl reward file', () => {
  // FindPythonPackage (services/reward/python_pool.cc): <bin>/../lib/rlmesh/python.
  assert.match(buildStage, /--target \$\{TARGETS\} rlmesh_python/);
  assert.match(runtimeStage, /COPY --from=build \/out\/lib\/rlmesh\/ \/usr\/local\/lib\/rlmesh\//);
  assert.match(runtimeStage, /COPY --from=build \/out\/bin\/ \/usr\/local\/bin\//);
  for (const p of ['python3', 'python3-grpcio', 'python3-protobuf']) {
    assert.match(runtimeStage, new RegExp(`\\s${p}\\s`), `${p} is not installed in the runtime stage`);
  }
});

test('the runtime stage runs as the numeric non-root user of the chart', () => {
  const values = YAML.parse(readFileSync(join(CHART, 'values.yaml'), 'utf8'));
  const user = runtimeStage.match(/^USER (\d+):(\d+)$/m);
  assert.ok(user, 'USER uid:gid with numbers, so runAsNonRoot can verify it');
  assert.equal(Number(user[1]), values.podSecurityContext.runAsUser);
  assert.equal(Number(user[2]), values.podSecurityContext.runAsGroup);
  assert.notEqual(Number(user[1]), 0);
  assert.doesNotMatch(runtimeStage, /-dev\b/, 'no development packages in the runtime stage');
});
