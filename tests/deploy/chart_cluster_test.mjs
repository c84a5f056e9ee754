// What a real Kubernetes API server asked of the Helm chart (issue #17), checked by rendering
// with real helm for the Kubernetes versions and capabilities of a cluster: Kubernetes 1.20
// up (API versions and probes), monitoring objects only with their CRDs, a coordinator
// startup budget that covers its waits, drainable nodes, upgradable coordinator Jobs, the
// CPU and GPU values files, and the label, name and port rules the API server enforces.
//   node --test tests/deploy/chart_cluster_test.mjs
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  PROMETHEUS_OPERATOR, REPO, VALUE_SETS, configOf, find, helmNotes, helmTemplate, podSpecs, render, selects,
  tempValues, validateObject,
} from './lib.mjs';

// The value sets rendered for a cluster that has the Prometheus Operator.
const rendered = {};
for (const [name, args] of Object.entries(VALUE_SETS)) {
  rendered[name] = () => (rendered[`_${name}`] ??= render([...args, ...PROMETHEUS_OPERATOR]));
}

const gpusOf = (c) => Number(c.resources?.limits?.['nvidia.com/gpu'] ?? c.resources?.requests?.['nvidia.com/gpu'] ?? 0);
const probesOf = (objs) => podSpecs(objs).flatMap(({ owner, spec }) => ['startupProbe', 'livenessProbe', 'readinessProbe']
  .filter((p) => spec.containers[0][p]).map((p) => ({ where: `${owner} ${p}`, probe: spec.containers[0][p], main: spec.containers[0] })));

test('monitoring objects are rendered only where the cluster has the Prometheus Operator\'s kinds', () => {
  const all = VALUE_SETS.all;  // both enabled
  const kinds = (objs) => objs.map((o) => o.kind).filter((k) => ['ServiceMonitor', 'PrometheusRule'].includes(k)).sort();
  // Without the CRDs `kubectl apply` of either fails with "no matches for kind".
  assert.deepEqual(kinds(render(all)), []);
  assert.deepEqual(kinds(render([...all, '--api-versions', 'monitoring.coreos.com/v1/ServiceMonitor'])), ['ServiceMonitor']);
  assert.deepEqual(kinds(render([...all, '--api-versions', 'monitoring.coreos.com/v1/PrometheusRule'])), ['PrometheusRule']);
  assert.deepEqual(kinds(render([...all, ...PROMETHEUS_OPERATOR])), ['PrometheusRule', 'ServiceMonitor']);
  // The values switches still decide where the kinds exist.
  assert.deepEqual(kinds(render(PROMETHEUS_OPERATOR)), []);
  // helm install says what it left out (its --dry-run=client knows no CRDs), and says
  // nothing when the switches are off.
  const notes = helmNotes(all);
  assert.match(notes, /metrics\.serviceMonitor\.enabled is true, but this cluster has no\s+monitoring\.coreos\.com\/v1 ServiceMonitor/);
  assert.match(notes, /metrics\.prometheusRule\.enabled is true, but this cluster has no\s+monitoring\.coreos\.com\/v1 PrometheusRule/);
  assert.doesNotMatch(helmNotes([]), /WARNING/);
});

// Versions from the Kubernetes changelogs: policy/v1 PodDisruptionBudget GA in 1.21 (v1beta1
// removed in 1.25), autoscaling/v2 GA in 1.23 (v2beta2 removed in 1.26), gRPC probes beta
// and on by default in 1.24 (alpha, off, in 1.23).
test('Kubernetes 1.20 to 1.29: API versions and probes follow the cluster, every object valid', () => {
  const args = ['-f', tempValues({ rollout: { autoscaling: { enabled: true } }, reward: { pdb: { enabled: true, maxUnavailable: 1 } } })];
  const expect = {
    '1.20.2': { pdb: 'policy/v1beta1', hpa: 'autoscaling/v2beta2', grpc: false },
    '1.21.0': { pdb: 'policy/v1', hpa: 'autoscaling/v2beta2', grpc: false },
    '1.23.5': { pdb: 'policy/v1', hpa: 'autoscaling/v2', grpc: false },
    '1.24.0': { pdb: 'policy/v1', hpa: 'autoscaling/v2', grpc: true },
    '1.29.0': { pdb: 'policy/v1', hpa: 'autoscaling/v2', grpc: true },
  };
  for (const [version, want] of Object.entries(expect)) {
    const objs = render([...args, '--kube-version', version]);
    assert.deepEqual(objs.flatMap(validateObject), [], version);
    const pdbs = find(objs, 'PodDisruptionBudget');
    assert.equal(pdbs.length, 3, version);
    for (const p of pdbs) assert.equal(p.apiVersion, want.pdb, `${version} ${p.metadata.name}`);
    assert.equal(find(objs, 'HorizontalPodAutoscaler')[0].apiVersion, want.hpa, version);
    const probes = probesOf(objs);
    assert.equal(probes.length, 15, version);
    for (const { where, probe, main } of probes) {
      const ports = Object.fromEntries(main.ports.map((p) => [p.name, p.containerPort]));
      if (want.grpc) {
        assert.deepEqual(probe.grpc, { port: ports.grpc }, `${version} ${where}`);
      } else {
        // The metrics server answers /readyz with the gRPC health status (common/metrics).
        assert.deepEqual(probe.httpGet, { path: '/readyz', port: ports.metrics }, `${version} ${where}`);
        assert.equal(probe.grpc, undefined, `${version} ${where}`);
      }
    }
  }
  const old = helmTemplate(['--kube-version', '1.19.16']);
  assert.equal(old.ok, false);
  assert.match(old.stderr, /kubeVersion/);
});

test('the coordinator\'s startup budget covers its wait for reward, reference and trainer', () => {
  // The coordinator opens its ports (gRPC and /readyz) only after ConnectWhenServing has
  // seen each peer SERVING, one after another, each for up to its timeout.
  const main = readFileSync(join(REPO, 'services', 'coordinator', 'main.cc'), 'utf8');
  const peers = main.match(/std::vector<std::string> peers = \{([^}]*)\};/);
  const wait = main.match(/ConnectWhenServing\(address, "", (\d+),/);
  assert.ok(peers && wait, 'services/coordinator/main.cc no longer waits as this test reads it: update the test');
  const waitS = peers[1].split(',').length * Number(wait[1]);
  assert.equal(waitS, 3 * 900);
  for (const name of ['default', 'all', 'values-cpu.yaml', 'values-gpu.yaml']) {
    const job = find(rendered[name](), 'Job', 'coordinator')[0];
    const p = job.spec.template.spec.containers[0].startupProbe;
    assert.ok(p.failureThreshold * p.periodSeconds >= waitS,
      `${name}: startup budget ${p.failureThreshold} x ${p.periodSeconds} s < ${waitS} s: the kubelet kills a waiting coordinator`);
  }
});

test('PodDisruptionBudgets let a node drain: none keeps every pod', () => {
  const trainer = find(rendered.default(), 'PodDisruptionBudget', 'trainer');
  assert.equal(trainer.length, 1);
  assert.equal(trainer[0].spec.maxUnavailable, 1);
  for (const name of Object.keys(VALUE_SETS)) {
    for (const p of find(rendered[name](), 'PodDisruptionBudget')) {
      assert.ok(![0, '0', '0%'].includes(p.spec.maxUnavailable), `${name}: ${p.metadata.name} blocks drains`);
    }
  }
});

test('the coordinator Job is named by its pod: a changed pod gets a new Job, an unchanged one keeps it', () => {
  const job = (objs) => find(objs, 'Job', 'coordinator')[0];
  const base = render([]);
  const name = job(base).metadata.name;
  assert.match(name, /^rel-rlmesh-coordinator-[0-9a-f]{8}$/);
  assert.equal(job(render([])).metadata.name, name, 'identical renders, one Job');
  // Outside the coordinator's pod: helm upgrade patches the same Job.
  for (const set of [['--set', 'rollout.replicas=5'], ['--set', 'coordinator.backoffLimit=3'], ['--set', 'trainer.pdb.enabled=false']]) {
    assert.equal(job(render(set)).metadata.name, name, set.join(' '));
  }
  // The pod template changes (the config's checksum, the image, an argument): a new Job.
  const names = new Set([name]);
  for (const set of [['--set', 'config.trainer.save_freq=7'], ['--set', 'image.tag=0.2.0'], ['--set', 'coordinator.extraArgs[0]=trainer.total_epochs=3']]) {
    const other = job(render(set)).metadata.name;
    assert.match(other, /^rel-rlmesh-coordinator-[0-9a-f]{8}$/);
    assert.ok(!names.has(other), `${set.join(' ')} must rename the Job`);
    names.add(other);
  }
  // Whatever finds the coordinator keeps finding it: the Service (whose name the config and
  // the replicas use) and the NetworkPolicy select the Job's pods, and NOTES name the Job.
  for (const objs of [base, render(['--set', 'config.trainer.save_freq=7'])]) {
    const labels = job(objs).spec.template.metadata.labels;
    const svc = find(objs, 'Service', 'coordinator')[0];
    assert.equal(svc.metadata.name, 'rel-rlmesh-coordinator');
    assert.ok(selects(svc.spec.selector, labels), 'the coordinator Service selects the Job\'s pods');
    assert.ok(selects(find(objs, 'NetworkPolicy', 'coordinator')[0].spec.podSelector.matchLabels, labels));
    assert.equal(job(objs).metadata.labels['app.kubernetes.io/component'], 'coordinator');
  }
  const notes = helmNotes(['--set', 'config.trainer.save_freq=7']);
  const renamed = job(render(['--set', 'config.trainer.save_freq=7'])).metadata.name;
  assert.ok(notes.includes(`logs -f job/${renamed}\n`), notes);
  // The longest release name still fits.
  const long = job(render([], 'r'.repeat(53))).metadata.name;
  assert.ok(long.length <= 63, long);
  assert.match(long, /-[0-9a-f]{8}$/);
});

test('GPU value sets tolerate the nvidia.com/gpu taint on every pod that asks for a GPU', () => {
  for (const name of ['gpu', 'values-gpu.yaml']) {
    const pods = podSpecs(rendered[name]()).filter(({ spec }) => spec.containers.some((c) => gpusOf(c) > 0));
    assert.deepEqual(pods.map((p) => p.component).sort(), ['reference', 'rollout', 'trainer'], name);
    for (const { owner, spec } of pods) {
      assert.ok((spec.tolerations ?? []).some((t) => t.key === 'nvidia.com/gpu' && t.effect === 'NoSchedule' &&
        (t.operator === 'Exists' || t.operator === undefined)), `${name} ${owner}: no toleration for nvidia.com/gpu:NoSchedule`);
    }
  }
});

test('every value set runs its device on a matching image: cuda on a CUDA build with GPUs, cpu on the CPU build', () => {
  // The chart's convention (docs/deploy.md, "The image"): the CUDA build's repository ends in
  // -cuda. values.yaml alone was once cuda on the CPU image: every service stopped at start.
  for (const name of Object.keys(VALUE_SETS)) {
    const objs = rendered[name]();
    const device = configOf(objs).rlmesh.device;
    for (const { owner, component, spec } of podSpecs(objs)) {
      for (const c of [...spec.containers, ...(spec.initContainers ?? [])]) {
        const repository = c.image.replace(/:[^/:]*$/, '');
        assert.equal(repository.endsWith('-cuda'), device === 'cuda',
          `${name} ${owner} ${c.name}: rlmesh.device ${device} on image ${c.image}`);
      }
      if (['trainer', 'reference', 'rollout'].includes(component)) {
        assert.equal(gpusOf(spec.containers[0]) > 0, device === 'cuda', `${name} ${owner}: GPUs on ${device}`);
      }
    }
  }
});

test('values-cpu.yaml runs on CPUs: cpu, float32, TCP weights, the CPU image, no GPU anywhere', () => {
  const objs = rendered['values-cpu.yaml']();
  const cfg = configOf(objs);
  assert.equal(cfg.rlmesh.device, 'cpu');
  assert.equal(cfg.rlmesh.dtype, 'float32');
  assert.equal(cfg.rlmesh.weight_sync.transport, 'tcp');
  // One rank per trainer pod.
  assert.equal(cfg.trainer.n_gpus_per_node, 1);
  assert.equal(cfg.trainer.nnodes, find(objs, 'StatefulSet', 'trainer')[0].spec.replicas);
  for (const { owner, spec } of podSpecs(objs)) {
    for (const c of [...spec.containers, ...(spec.initContainers ?? [])]) {
      assert.equal(gpusOf(c), 0, `${owner} ${c.name} asks for a GPU`);
      assert.match(c.image, /^ghcr\.io\/rlmesh\/rlmesh:/, `${owner} ${c.name}: the CPU image`);
    }
  }
});

test('values-gpu.yaml: cuda, NCCL, the CUDA image, and n_gpus_per_node = the GPUs of a trainer pod', () => {
  const objs = rendered['values-gpu.yaml']();
  const cfg = configOf(objs);
  assert.equal(cfg.rlmesh.device, 'cuda');
  assert.equal(cfg.rlmesh.weight_sync.transport, 'nccl');
  const trainer = find(objs, 'StatefulSet', 'trainer')[0].spec.template.spec;
  assert.equal(cfg.trainer.n_gpus_per_node, gpusOf(trainer.containers[0]));
  assert.equal(trainer.containers[0].resources.limits['nvidia.com/gpu'], trainer.containers[0].resources.requests['nvidia.com/gpu']);
  for (const { owner, component, spec } of podSpecs(objs)) {
    assert.match(spec.containers[0].image, /^ghcr\.io\/rlmesh\/rlmesh-cuda:/, owner);
    if (['trainer', 'reference', 'rollout'].includes(component)) {
      assert.equal(gpusOf(spec.containers[0]), 1, owner);
      assert.ok(Object.keys(spec.nodeSelector ?? {}).length > 0, `${owner}: a nodeSelector example`);
    }
  }
  // A trainer pod holds one rank on one device: asking for more GPUs is refused.
  const two = helmTemplate(['-f', VALUE_SETS['values-gpu.yaml'][1], '-f',
    tempValues({ trainer: { resources: { requests: { 'nvidia.com/gpu': 2 }, limits: { 'nvidia.com/gpu': 2 } } } })]);
  assert.equal(two.ok, false);
  assert.match(two.stderr, /trainer\.resources nvidia\.com\/gpu = 2: each trainer pod runs one rank/);
});

test('values the API server would refuse are refused by helm template, naming them', () => {
  const refused = (values, pattern) => {
    const r = helmTemplate(['-f', tempValues(values)]);
    assert.equal(r.ok, false, JSON.stringify(values));
    assert.match(r.stderr, pattern, JSON.stringify(values));
  };
  // Label values: at most 63 of [-A-Za-z0-9_.], starting and ending alphanumeric.
  refused({ rollout: { podLabels: { team: 'rl team' } } }, /\/rollout\/podLabels\/team.*'rl team'/);
  refused({ trainer: { podLabels: { team: '-rl' } } }, /'-rl'/);
  refused({ reward: { podLabels: { team: 'a'.repeat(64) } } }, /\/reward\/podLabels\/team.*maxLength: got 64, want 63/);
  refused({ metrics: { serviceMonitor: { labels: { release: 'kube prometheus' } } } }, /'kube prometheus'/);
  // Label keys (pod labels, nodeSelector): an optional DNS prefix, '/', a name of <= 63.
  refused({ rollout: { podLabels: { 'my team': 'rl' } } }, /'my team'/);
  refused({ trainer: { nodeSelector: { 'gpu type': 'h100' } } }, /'gpu type'/);
  refused({ trainer: { nodeSelector: { 'Example.com/gpu': 'h100' } } }, /'Example\.com\/gpu'/);
  refused({ trainer: { nodeSelector: { [`example.com/${'g'.repeat(64)}`]: 'h100' } } }, new RegExp(`'example\\.com/${'g'.repeat(64)}'`));
  refused({ trainer: { nodeSelector: { 'nvidia.com/gpu.product': 'NVIDIA H100' } } }, /'NVIDIA H100'/);
  // Names: DNS-1123 labels.
  refused({ nameOverride: 'RLMesh' }, /\/nameOverride.*'RLMesh'/);
  refused({ fullnameOverride: 'grpo_run' }, /\/fullnameOverride.*'grpo_run'/);
  refused({ fullnameOverride: 'g'.repeat(64) }, /\/fullnameOverride.*maxLength/);
  // Ports 1-65535, and no port twice.
  refused({ ports: { rollout: { grpc: 0, metrics: 9101 } } }, /\/ports\/rollout\/grpc.*minimum: got 0/);
  refused({ ports: { rollout: { grpc: 65536, metrics: 9101 } } }, /\/ports\/rollout\/grpc.*maximum: got 65,536/);
  refused({ ports: { rollout: { grpc: 50051, metrics: 50051 } } }, /ports\.rollout\.metrics = 50051: port 50051 is already ports\.rollout\.grpc/);
  refused({ ports: { reward: { grpc: 9100, metrics: 9102 } } }, /ports\.reward\.grpc = 9100: port 9100 is already ports\.coordinator\.metrics/);
  // What the API server takes, the chart takes.
  const ok = render(['-f', tempValues({
    nameOverride: 'grpo', fullnameOverride: 'grpo-run-1',
    trainer: { podLabels: { 'example.com/team': 'rl_team.a-1', empty: '', [`k${'x'.repeat(62)}`]: 'v'.repeat(63) },
      nodeSelector: { 'nvidia.com/gpu.product': 'NVIDIA-H100-80GB-HBM3', 'kubernetes.io/hostname': 'node-1' } },
    ports: { rollout: { grpc: 65535, metrics: 1 } },
  })]);
  const sts = find(ok, 'StatefulSet', 'trainer')[0];
  assert.equal(sts.metadata.name, 'grpo-run-1-trainer');
  assert.equal(sts.spec.template.metadata.labels['example.com/team'], 'rl_team.a-1');
  assert.equal(sts.spec.template.spec.nodeSelector['kubernetes.io/hostname'], 'node-1');
});
