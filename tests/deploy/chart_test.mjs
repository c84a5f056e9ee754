// Tests of the Helm chart helm/rlmesh: lint and render for the value sets, every rendered
// object valid against the Kubernetes schemas with no unknown fields, misspelled values
// caught, scaling touches only the rollout Deployment, the HPA targets it, the invariants
// the services rely on (config, discovery, checkpoints, TLS, security). What a real API
// server requires is in chart_cluster_test.mjs.
//   node --test tests/deploy/chart_test.mjs
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  CHART, PROMETHEUS_OPERATOR, REPO, VALUE_SETS, YAML, find, helmLint, helmNotes, helmTemplate, inCatalog, loadCatalog,
  configOf, parseManifests, podSpecs, render, selects, tempValues, validateObject,
} from './lib.mjs';

// The value sets rendered for a cluster that has the Prometheus Operator, so that the
// monitoring objects they enable are rendered and checked too.
const rendered = {};
for (const [name, args] of Object.entries(VALUE_SETS)) {
  rendered[name] = () => (rendered[`_${name}`] ??= render([...args, ...PROMETHEUS_OPERATOR]));
}

const COMPONENTS = ['coordinator', 'trainer', 'reference', 'reward', 'rollout'];
const gpusOfPod = (objs, component) => podSpecs(objs).find((p) => p.component === component).spec.containers[0].resources.limits?.['nvidia.com/gpu'];
// Errors only: rendered YAML keeps toYaml's sequence indentation and long lines.
const YAMLLINT = '{extends: relaxed, rules: {line-length: disable}}';

for (const [name, args] of Object.entries(VALUE_SETS)) {
  test(`helm lint --strict passes with ${name} values`, () => {
    const out = helmLint(args);
    assert.match(out, /1 chart\(s\) linted, 0 chart\(s\) failed/);
  });

  test(`every object rendered with ${name} values is valid and has no unknown fields`, () => {
    const objs = rendered[name]();
    assert.ok(objs.length >= 15, `expected at least 15 objects, got ${objs.length}`);
    const errors = objs.flatMap(validateObject);
    assert.deepEqual(errors, []);
  });

  test(`yamllint finds no errors (duplicate keys, trailing spaces, ...) in the ${name} render`, () => {
    const text = helmTemplate([...args, ...PROMETHEUS_OPERATOR]).stdout;
    const r = spawnSync('yamllint', ['-f', 'parsable', '-d', YAMLLINT, '-'], { input: text, encoding: 'utf8' });
    assert.equal(r.error, undefined, 'yamllint not found: run scripts/setup.sh (Debian package yamllint)');
    assert.equal(r.status, 0, r.stdout.split('\n').filter((l) => l.includes('[error]')).join('\n'));
  });

  test(`${name} values: one workload per component, secure pods, gRPC probes (HTTP /readyz under TLS)`, () => {
    const objs = rendered[name]();
    const tls = configOf(objs).rlmesh.tls.enabled;
    const pods = podSpecs(objs);
    assert.deepEqual(pods.map((p) => p.component).sort(), [...COMPONENTS].sort());
    assert.equal(find(objs, 'Job', 'coordinator').length, 1);
    assert.equal(find(objs, 'StatefulSet', 'trainer').length, 1);
    for (const { owner, spec } of pods) {
      assert.equal(spec.securityContext.runAsNonRoot, true, owner);
      const vols = Object.fromEntries(spec.volumes.map((v) => [v.name, v]));
      assert.equal(vols.dshm.emptyDir.medium, 'Memory', owner);
      assert.ok(vols.dshm.emptyDir.sizeLimit, owner);
      for (const c of [...spec.containers, ...(spec.initContainers ?? [])]) {
        assert.equal(c.securityContext.readOnlyRootFilesystem, true, `${owner} ${c.name}`);
        assert.equal(c.securityContext.allowPrivilegeEscalation, false, `${owner} ${c.name}`);
        const tmp = c.volumeMounts.find((m) => m.mountPath === '/tmp');
        assert.ok(tmp && vols[tmp.name].emptyDir, `${owner} ${c.name}: /tmp must be an emptyDir`);
      }
      const main = spec.containers[0];
      assert.equal(main.workingDir, '/tmp', `${owner}: relative run folders must land in the writable /tmp`);
      const grpcPort = main.ports.find((p) => p.name === 'grpc').containerPort;
      const metricsPort = main.ports.find((p) => p.name === 'metrics').containerPort;
      for (const probe of ['startupProbe', 'livenessProbe', 'readinessProbe']) {
        if (!main[probe]) continue;
        // The kubelet's gRPC probe cannot speak TLS; /readyz reports the same SERVING state.
        if (tls) assert.deepEqual(main[probe].httpGet, { path: '/readyz', port: metricsPort }, `${owner} ${probe}`);
        else assert.equal(main[probe].grpc.port, grpcPort, `${owner} ${probe}`);
      }
      assert.ok(main.startupProbe, `${owner}: a startup probe covers model loading`);
    }
  });
}

test('a misspelled values key fails helm template and names the key', () => {
  const r = helmTemplate(['--set', 'rollout.replicaz=3']);
  assert.equal(r.ok, false);
  assert.match(r.stderr, /replicaz/);
  const nested = helmTemplate(['--set', 'metrics.serviceMonitor.intreval=5s']);
  assert.equal(nested.ok, false);
  assert.match(nested.stderr, /intreval/);
  const typed = helmTemplate(['--set', 'rollout.autoscaling.metricType=Resource']);
  assert.equal(typed.ok, false);
});

test('a misspelled field in a pass-through Kubernetes object is caught', () => {
  const file = tempValues({ rollout: { affinity: { podAntiAfinity: { preferredDuringSchedulingIgnoredDuringExecution: [] } } } });
  const objs = render(['-f', file]);
  const errors = objs.flatMap(validateObject);
  assert.equal(errors.length, 1, errors.join('\n'));
  assert.match(errors[0], /Deployment\/rel-rlmesh-rollout: .*affinity\.podAntiAfinity: unknown field/);
});

// The Kubernetes objects values.schema.json closes with their API fields (the pass-through
// ones left open are affinity, strategy, autoscaling.behavior and extraVolumes entries).
const CLOSED_TYPOS = [
  // [values, where the schema reports it, the misspelled field]
  [{ securityContext: { readOnlyRootFilesytem: false } }, '/securityContext', 'readOnlyRootFilesytem'],
  [{ securityContext: { capabilities: { dorp: ['ALL'] } } }, '/securityContext/capabilities', 'dorp'],
  [{ securityContext: { seLinuxOptions: { lvl: 's0' } } }, '/securityContext/seLinuxOptions', 'lvl'],
  [{ securityContext: { windowsOptions: { runAsUser: 'x' } } }, '/securityContext/windowsOptions', 'runAsUser'],
  [{ securityContext: { appArmorProfile: { type: 'RuntimeDefault', localhost: 'p' } } }, '/securityContext/appArmorProfile', 'localhost'],
  [{ podSecurityContext: { runAsUsr: 1 } }, '/podSecurityContext', 'runAsUsr'],
  [{ podSecurityContext: { seccompProfile: { typ: 'RuntimeDefault' } } }, '/podSecurityContext/seccompProfile', 'typ'],
  [{ podSecurityContext: { sysctls: [{ name: 'net.core.somaxconn', value: '1024', valeu: '1' }] } }, '/podSecurityContext/sysctls/0', 'valeu'],
  [{ networkPolicy: { prometheus: { podSelector: { matchLabel: { app: 'prometheus' } } } } }, '/networkPolicy/prometheus/podSelector', 'matchLabel'],
  [{ networkPolicy: { prometheus: { namespaceSelector: { matchExpression: [] } } } }, '/networkPolicy/prometheus/namespaceSelector', 'matchExpression'],
  [{ networkPolicy: { prometheus: { podSelector: { matchExpressions: [{ key: 'a', operator: 'Exists', value: ['x'] }] } } } },
    '/networkPolicy/prometheus/podSelector/matchExpressions/0', 'value'],
  [{ networkPolicy: { coordinatorExtraIngress: [{ form: [] }] } }, '/networkPolicy/coordinatorExtraIngress/0', 'form'],
  [{ networkPolicy: { coordinatorExtraIngress: [{ from: [{ podSelecter: {} }] }] } }, '/networkPolicy/coordinatorExtraIngress/0/from/0', 'podSelecter'],
  [{ networkPolicy: { coordinatorExtraIngress: [{ from: [{ ipBlock: { cidr: '10.0.0.0/8', exept: [] } }] }] } },
    '/networkPolicy/coordinatorExtraIngress/0/from/0/ipBlock', 'exept'],
  [{ networkPolicy: { coordinatorExtraIngress: [{ ports: [{ port: 50050, protocl: 'TCP' }] }] } }, '/networkPolicy/coordinatorExtraIngress/0/ports/0', 'protocl'],
  [{ trainer: { extraEnv: [{ name: 'A', valueFrom: { fieldRef: { feildPath: 'x' } } }] } }, '/trainer/extraEnv/0/valueFrom/fieldRef', 'feildPath'],
  [{ reward: { extraEnv: [{ name: 'A', valueFrom: { secretKeyRefs: { key: 'k' } } }] } }, '/reward/extraEnv/0/valueFrom', 'secretKeyRefs'],
  [{ rollout: { extraVolumeMounts: [{ name: 'v', mountPath: '/v', readonly: true }] } }, '/rollout/extraVolumeMounts/0', 'readonly'],
];

test('a misspelled field in a Kubernetes object the schema closes is refused, naming the field and where', () => {
  for (const [values, at, field] of CLOSED_TYPOS) {
    const r = helmTemplate(['-f', tempValues(values)]);
    assert.equal(r.ok, false, JSON.stringify(values));
    assert.match(r.stderr, new RegExp(`at '${at}': additional properties '${field}' not allowed`), JSON.stringify(values));
  }
  // --set, as in the audit: without the schema this rendered beside readOnlyRootFilesystem: true.
  const set = helmTemplate(['--set', 'securityContext.readOnlyRootFilesytem=false']);
  assert.equal(set.ok, false);
  assert.match(set.stderr, /at '\/securityContext': additional properties 'readOnlyRootFilesytem' not allowed/);
  // Wrong JSON types and values outside the API's enums are refused too.
  for (const [values, pattern] of [
    [{ securityContext: { runAsUser: 'root' } }, /at '\/securityContext\/runAsUser': got string, want integer/],
    [{ securityContext: { readOnlyRootFilesystem: 'false' } }, /at '\/securityContext\/readOnlyRootFilesystem': got string, want boolean/],
    [{ podSecurityContext: { supplementalGroups: [1, 'x'] } }, /at '\/podSecurityContext\/supplementalGroups\/1': got string, want integer/],
    [{ podSecurityContext: { fsGroupChangePolicy: 'Sometimes' } }, /at '\/podSecurityContext\/fsGroupChangePolicy'/],
    [{ networkPolicy: { prometheus: { podSelector: { matchExpressions: [{ key: 'a', operator: 'Is' }] } } } },
      /at '\/networkPolicy\/prometheus\/podSelector\/matchExpressions\/0\/operator'/],
    [{ networkPolicy: { coordinatorExtraIngress: [{ ports: [{ port: 70000 }] }] } }, /at '\/networkPolicy\/coordinatorExtraIngress\/0\/ports\/0\/port'/],
  ]) {
    const r = helmTemplate(['-f', tempValues(values)]);
    assert.equal(r.ok, false, JSON.stringify(values));
    assert.match(r.stderr, pattern, JSON.stringify(values));
  }
  // null still removes a default key (Helm drops it before the schema sees it).
  const dropped = render(['--set', 'securityContext.runAsNonRoot=null,podSecurityContext.seccompProfile=null']);
  const pod = podSpecs(dropped)[0].spec;
  assert.equal(pod.containers[0].securityContext.runAsNonRoot, undefined);
  assert.equal(pod.securityContext.seccompProfile, undefined);
});

test('every field the schema lists for a closed Kubernetes object is taken and is a field of its API type', () => {
  const podSecurityContext = { appArmorProfile: { type: 'RuntimeDefault' }, fsGroup: 10001, fsGroupChangePolicy: 'OnRootMismatch',
    runAsGroup: 10001, runAsNonRoot: true, runAsUser: 10001, seLinuxChangePolicy: 'MountOption',
    seLinuxOptions: { level: 's0:c1,c2', role: 'r', type: 't', user: 'u' }, seccompProfile: { type: 'Localhost', localhostProfile: 'rlmesh.json' },
    supplementalGroups: [10002], supplementalGroupsPolicy: 'Strict', sysctls: [{ name: 'net.core.somaxconn', value: '1024' }],
    windowsOptions: { gmsaCredentialSpec: '{}', gmsaCredentialSpecName: 'g', hostProcess: false, runAsUserName: 'rlmesh' } };
  const securityContext = { allowPrivilegeEscalation: false, appArmorProfile: { type: 'Localhost', localhostProfile: 'rlmesh' },
    capabilities: { add: ['NET_BIND_SERVICE'], drop: ['ALL'] }, privileged: false, procMount: 'Default', readOnlyRootFilesystem: true,
    runAsGroup: 10001, runAsNonRoot: true, runAsUser: 10001, seLinuxOptions: { level: 's0' }, seccompProfile: { type: 'RuntimeDefault' },
    windowsOptions: { runAsUserName: 'rlmesh' } };
  const selector = { matchLabels: { 'app.kubernetes.io/name': 'prometheus' },
    matchExpressions: [{ key: 'team', operator: 'In', values: ['ops'] }, { key: 'tier', operator: 'DoesNotExist' }] };
  const ingress = [{ from: [{ ipBlock: { cidr: '10.0.0.0/8', except: ['10.1.0.0/16'] } }, { namespaceSelector: selector, podSelector: selector }],
    ports: [{ port: 50050, endPort: 50059, protocol: 'TCP' }, { port: 'grpc', protocol: 'SCTP' }] }];
  const extraEnv = [{ name: 'A', valueFrom: { fieldRef: { apiVersion: 'v1', fieldPath: 'spec.nodeName' } } },
    { name: 'B', valueFrom: { resourceFieldRef: { containerName: 'trainer', resource: 'limits.memory', divisor: '1Mi' } } },
    { name: 'C', valueFrom: { configMapKeyRef: { name: 'cm', key: 'k', optional: true } } },
    { name: 'D', valueFrom: { secretKeyRef: { name: 's', key: 'k', optional: false } } }];
  const extraVolumeMounts = [{ name: 'cache', mountPath: '/cache', readOnly: true, recursiveReadOnly: 'Enabled', mountPropagation: 'None', subPath: 'a' },
    { name: 'cache', mountPath: '/cache-b', mountPropagation: 'HostToContainer', subPathExpr: '$(POD_NAME)' }];
  const objs = render(['-f', tempValues({ podSecurityContext, securityContext,
    networkPolicy: { prometheus: { namespaceSelector: selector, podSelector: selector }, coordinatorExtraIngress: ingress },
    trainer: { extraEnv, extraVolumes: [{ name: 'cache', emptyDir: {} }], extraVolumeMounts } })]);
  assert.deepEqual(objs.flatMap(validateObject), []);
  for (const { owner, spec } of podSpecs(objs)) {
    assert.deepEqual(spec.securityContext, podSecurityContext, owner);
    for (const c of [...spec.containers, ...(spec.initContainers ?? [])]) assert.deepEqual(c.securityContext, securityContext, `${owner} ${c.name}`);
  }
  const trainer = find(objs, 'StatefulSet', 'trainer')[0].spec.template.spec.containers[0];
  assert.deepEqual(trainer.env.slice(-4), extraEnv);
  assert.deepEqual(trainer.volumeMounts.slice(-2), extraVolumeMounts);
  const coordinator = find(objs, 'NetworkPolicy', 'coordinator')[0].spec.ingress;
  assert.deepEqual(coordinator.slice(-1), ingress);
  assert.deepEqual(coordinator.find((r) => r.from[0].namespaceSelector).from[0], { namespaceSelector: selector, podSelector: selector });
});

test('a wrongly typed field in a pass-through Kubernetes object is caught', () => {
  const file = tempValues({ coordinator: { affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: 'x' } } } });
  const errors = render(['-f', file]).flatMap(validateObject);
  assert.ok(errors.some((e) => /Job\/rel-rlmesh-coordinator-[0-9a-f]{8}: schema:/.test(e)), errors.join('\n'));
});

test('rollout.replicas=5 changes only the rollout Deployment, and only its replicas', () => {
  const base = rendered.default();
  const scaled = render(['--set', 'rollout.replicas=5']);
  const key = (o) => `${o.kind}/${o.metadata.name}`;
  assert.deepEqual(scaled.map(key), base.map(key));
  const changed = [];
  base.forEach((o, i) => {
    if (JSON.stringify(o) !== JSON.stringify(scaled[i])) changed.push(key(o));
  });
  assert.deepEqual(changed, ['Deployment/rel-rlmesh-rollout']);
  const before = find(base, 'Deployment', 'rollout')[0];
  const after = find(scaled, 'Deployment', 'rollout')[0];
  assert.equal(before.spec.replicas, 2);
  assert.equal(after.spec.replicas, 5);
  assert.deepEqual({ ...after.spec, replicas: 2 }, before.spec);
});

test('with autoscaling on, the HPA targets the rollout Deployment on a catalogued metric', () => {
  for (const set of ['autoscaling', 'all']) {
    const objs = rendered[set]();
    const hpas = find(objs, 'HorizontalPodAutoscaler');
    assert.equal(hpas.length, 1, set);
    const hpa = hpas[0];
    const deploy = find(objs, 'Deployment', 'rollout')[0];
    assert.equal(hpa.apiVersion, 'autoscaling/v2');
    assert.deepEqual(hpa.spec.scaleTargetRef, { apiVersion: 'apps/v1', kind: 'Deployment', name: deploy.metadata.name });
    assert.equal(deploy.spec.replicas, undefined, `${set}: the HPA owns the replica count`);
    const m = hpa.spec.metrics[0];
    const metricName = (m.pods ?? m.external).metric.name;
    assert.ok(inCatalog(loadCatalog(), metricName), `${metricName} is not in docs/metrics.md`);
  }
  assert.equal(find(rendered.default(), 'HorizontalPodAutoscaler').length, 0);
});

test('the rendered config has verl keys, discovery, checkpoints and resume', () => {
  const objs = rendered.default();
  const cfg = configOf(objs);
  assert.equal(cfg.actor_rollout_ref.rollout.n, 5, 'actor_rollout_ref.rollout.n (a bare n is YAML 1.1 false)');
  assert.equal(cfg.algorithm.adv_estimator, 'grpo');
  assert.equal(cfg.trainer.resume_mode, 'auto');
  const svc = find(objs, 'Service', 'rollout')[0];
  assert.equal(svc.spec.clusterIP, 'None', 'the rollout Service is headless');
  assert.equal(cfg.rlmesh.rollout.discovery_dns, `${svc.metadata.name}.ml.svc.cluster.local`);
  const sts = find(objs, 'StatefulSet', 'trainer')[0];
  const mount = sts.spec.template.spec.containers[0].volumeMounts.find((m) => m.name === 'checkpoints');
  assert.equal(sts.spec.volumeClaimTemplates[0].metadata.name, 'checkpoints');
  assert.equal(cfg.trainer.default_local_dir, mount.mountPath);
  assert.equal(cfg.rlmesh.trainer.address, `${sts.metadata.name}-0.${sts.spec.serviceName}.ml.svc.cluster.local:50054`);
  assert.equal(cfg.rlmesh.reward.address, `${find(objs, 'Service', 'reward')[0].metadata.name}.ml.svc.cluster.local:50052`);
  assert.equal(cfg.rlmesh.tls.insecure_plaintext, true, 'plaintext only when the config says so');
  // The config's own defaults, distinct per component (rlmesh dry-run rejects shared ports).
  const ports = { coordinator: [50050, 9100], rollout: [50051, 9101], reward: [50052, 9102], reference: [50053, 9103], trainer: [50054, 9104] };
  for (const c of COMPONENTS) {
    assert.deepEqual([cfg.rlmesh[c].port, cfg.rlmesh[c].metrics_port], ports[c], c);
    const svc = find(objs, 'Service', c)[0];
    assert.deepEqual(svc.spec.ports.map((p) => p.port), ports[c], c);
  }
});

test('tls.enabled mounts the Secret in every pod and points the config at it', () => {
  const objs = rendered.all();
  const cfg = configOf(objs);
  assert.deepEqual(cfg.rlmesh.tls, { enabled: true, insecure_plaintext: false, cert_file: '/etc/rlmesh/tls/tls.crt',
    key_file: '/etc/rlmesh/tls/tls.key', ca_file: '/etc/rlmesh/tls/ca.crt', server_name: 'rlmesh.internal' });
  for (const { owner, spec } of podSpecs(objs)) {
    const vol = spec.volumes.find((v) => v.secret);
    assert.equal(vol?.secret.secretName, 'rlmesh-mtls', owner);
    for (const c of [...spec.containers, ...(spec.initContainers ?? [])]) {
      assert.ok(c.volumeMounts.some((m) => m.name === vol.name && m.mountPath === '/etc/rlmesh/tls'), `${owner} ${c.name}`);
    }
  }
  const job = find(objs, 'Job', 'coordinator')[0].spec.template.spec;
  assert.equal(job.volumes.find((v) => v.name === 'run-dir').persistentVolumeClaim.claimName, 'rlmesh-runs');
  assert.ok(job.containers[0].volumeMounts.some((m) => m.name === 'run-dir' && m.mountPath === '/tmp/runs'));
  const missing = helmTemplate(['--set', 'tls.enabled=true']);
  assert.equal(missing.ok, false);
  assert.match(missing.stderr, /tls.secretName is required/);
});

test('tls.enabled without tls.serverName is refused: replicas and reference pods are dialed by pod IP', () => {
  const r = helmTemplate(['--set', 'tls.enabled=true', '--set', 'tls.secretName=s']);
  assert.equal(r.ok, false);
  assert.match(r.stderr, /tls\.serverName is required when tls\.enabled is true: the coordinator dials rollout replicas and reference pods by pod IP/);
  // Without TLS no name is needed.
  assert.equal(configOf(render(['--set', 'tls.serverName='])).rlmesh.tls.enabled, false);
});

test('reward.files: a verl reward file reaches the reward pods only, read-only, and restarts them', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rlmesh-reward-file-'));
  const file = join(dir, 'my_reward.py');
  const renderWith = (body) => {
    writeFileSync(file, body);
    return render(['--set-file', `reward.files.my_reward\\.py=${file}`,
      '--set', 'config.custom_reward_function.path=/etc/rlmesh/reward/my_reward.py']);
  };
  const body = 'def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n';
  const objs = renderWith(body);
  const files = find(objs, 'ConfigMap', 'reward');
  assert.equal(files.length, 1);
  assert.equal(files[0].data['my_reward.py'], body);
  assert.equal(configOf(objs).custom_reward_function.path, '/etc/rlmesh/reward/my_reward.py');
  for (const { owner, component, spec } of podSpecs(objs)) {
    const vol = spec.volumes.find((v) => v.configMap?.name === files[0].metadata.name);
    const mount = spec.containers[0].volumeMounts.find((m) => m.mountPath === '/etc/rlmesh/reward');
    if (component === 'reward') {
      assert.ok(vol, owner);
      assert.deepEqual(mount, { name: vol.name, mountPath: '/etc/rlmesh/reward', readOnly: true });
    } else {
      assert.equal(vol, undefined, owner);
      assert.equal(mount, undefined, owner);
    }
  }
  const checksum = (o) => find(o, 'Deployment', 'reward')[0].spec.template.metadata.annotations['checksum/reward-files'];
  assert.match(checksum(objs), /^[0-9a-f]{64}$/);
  assert.notEqual(checksum(renderWith(body.replace('1.0', '0.5'))), checksum(objs));
  // Without files: no ConfigMap, no volume, no annotation.
  const plain = render([]);
  assert.equal(find(plain, 'ConfigMap', 'reward').length, 0);
  assert.equal(checksum(plain), undefined);
});

test('tls.serverName reaches rlmesh.tls.server_name; the Secret is mounted read-only', () => {
  const objs = render(['--set', 'tls.enabled=true', '--set', 'tls.secretName=s', '--set', 'tls.serverName=rlmesh.internal']);
  assert.equal(configOf(objs).rlmesh.tls.server_name, 'rlmesh.internal');
  for (const { owner, spec } of podSpecs(objs)) {
    const vol = spec.volumes.find((v) => v.name === 'tls');
    assert.equal(vol.secret.secretName, 's', owner);
    for (const c of [...spec.containers, ...(spec.initContainers ?? [])]) {
      const m = c.volumeMounts.find((x) => x.name === 'tls');
      assert.equal(m?.readOnly, true, `${owner} ${c.name}`);
    }
  }
});

test('tls off: plaintext is allowed explicitly (pods are not loopback), no Secret, gRPC probes', () => {
  const objs = rendered.default();
  assert.deepEqual(configOf(objs).rlmesh.tls, { enabled: false, insecure_plaintext: true });
  assert.equal(configOf(objs).rlmesh.host, '0.0.0.0');
  for (const { owner, spec } of podSpecs(objs)) {
    assert.equal(spec.volumes.find((v) => v.secret), undefined, owner);
    assert.ok(spec.containers[0].readinessProbe.grpc, owner);
  }
});

test('GPU values request nvidia.com/gpu and set NCCL variables on the pods that take weights: trainer, reference, rollout', () => {
  const objs = rendered.gpu();
  for (const { owner, component, spec } of podSpecs(objs)) {
    const c = spec.containers[0];
    const env = Object.fromEntries(c.env.filter((e) => 'value' in e).map((e) => [e.name, e.value]));
    if (['trainer', 'reference', 'rollout'].includes(component)) {
      assert.equal(c.resources.limits['nvidia.com/gpu'], 1, owner);
      assert.equal(env.NCCL_SOCKET_IFNAME, 'eth0', owner);
      assert.equal(env.NCCL_IB_DISABLE, '1', owner);
      assert.equal(env.NCCL_DEBUG, 'WARN', owner);
    } else {
      assert.equal(env.NCCL_SOCKET_IFNAME, undefined, owner);
      assert.equal(env.NCCL_DEBUG, undefined, owner);
    }
  }
});

test('NetworkPolicies allow only the ARCHITECTURE.md paths', () => {
  const objs = rendered.default();
  const pols = Object.fromEntries(find(objs, 'NetworkPolicy').map((p) => [p.metadata.labels['app.kubernetes.io/component'], p]));
  assert.deepEqual(Object.keys(pols).sort(), [...COMPONENTS].sort());
  const from = (c) => pols[c].spec.ingress.map((r) => r.from[0].podSelector?.matchLabels?.['app.kubernetes.io/component'] ?? 'prometheus').sort();
  assert.deepEqual(from('reward'), ['coordinator', 'prometheus']);
  // The reference takes the KL anchor's weights over gRPC or the weight data plane, where the
  // TCP chain may pass them on from a rollout replica or on to one: any port.
  assert.deepEqual(from('reference'), ['coordinator', 'prometheus', 'rollout', 'trainer']);
  const dataPlane = (c, peer) => pols[c].spec.ingress.find((r) => r.from[0].podSelector?.matchLabels?.['app.kubernetes.io/component'] === peer);
  for (const [c, peer] of [['reference', 'trainer'], ['reference', 'rollout'], ['rollout', 'reference'], ['rollout', 'trainer'],
    ['trainer', 'reference']]) {
    assert.equal(dataPlane(c, peer).ports, undefined, `${peer} -> ${c}: any port`);
  }
  assert.deepEqual(from('rollout'), ['coordinator', 'prometheus', 'reference', 'rollout', 'trainer']);
  assert.deepEqual(from('trainer'), ['coordinator', 'prometheus', 'reference', 'rollout', 'trainer']);
  assert.deepEqual(from('coordinator'), ['prometheus', 'rollout']);
  for (const p of Object.values(pols)) {
    const prom = p.spec.ingress.find((r) => r.from[0].namespaceSelector);
    const metricsPort = find(objs, 'Service', p.metadata.labels['app.kubernetes.io/component'])[0].spec.ports.find((x) => x.name === 'metrics').port;
    assert.deepEqual(prom.ports, [{ port: metricsPort, protocol: 'TCP' }], p.metadata.name);
  }
});

test('monitoring objects: ServiceMonitor labels targets by component, dashboards for the sidecar', () => {
  const objs = rendered.all();
  const sm = find(objs, 'ServiceMonitor')[0];
  assert.ok(sm.spec.endpoints[0].relabelings.some((r) => r.targetLabel === 'component' &&
    r.sourceLabels[0] === '__meta_kubernetes_pod_label_app_kubernetes_io_component'));
  const services = find(objs, 'Service');
  assert.equal(services.length, 5);
  for (const s of services) {
    for (const [k, v] of Object.entries(sm.spec.selector.matchLabels)) assert.equal(s.metadata.labels[k], v, s.metadata.name);
  }
  const rule = find(objs, 'PrometheusRule')[0];
  for (const a of ['RlmeshRolloutReplicaDown', 'RlmeshComponentDown']) {
    assert.ok(rule.spec.groups.flatMap((g) => g.rules).some((r) => r.alert === a), a);
  }
  const dash = find(objs, 'ConfigMap').find((c) => c.metadata.name.endsWith('-dashboards'));
  assert.equal(dash.metadata.labels.grafana_dashboard, '1');
  assert.equal(dash.metadata.namespace, 'monitoring');
  assert.deepEqual(Object.keys(dash.data).sort(), ['rlmesh-fleet.json', 'rlmesh-health.json', 'rlmesh-throughput.json', 'rlmesh-training.json']);
  for (const v of Object.values(dash.data)) JSON.parse(v);
  assert.equal(find(rendered.default(), 'ServiceMonitor').length, 0);
  assert.equal(find(rendered.default(), 'PrometheusRule').length, 0);
});

test('names stay within Kubernetes limits for the longest release name', () => {
  const release = 'r'.repeat(53);  // helm's limit for a release name
  const objs = render(['-f', VALUE_SETS.all[1], ...PROMETHEUS_OPERATOR], release);
  for (const o of objs) assert.ok(o.metadata.name.length <= 63, `${o.kind}/${o.metadata.name} is over 63 characters`);
  const sts = find(objs, 'StatefulSet', 'trainer')[0];
  // The controller-revision-hash label value is "<name>-<10 characters>", at most 63.
  assert.ok(sts.metadata.name.length <= 52, `${sts.metadata.name} is over 52 characters`);
  const names = new Set(objs.map((o) => `${o.kind}/${o.metadata.name}`));
  assert.equal(names.size, objs.length, 'names must stay distinct after truncation');
  const cfg = configOf(objs);
  assert.equal(cfg.rlmesh.trainer.address, `${sts.metadata.name}-0.${sts.spec.serviceName}.ml.svc.cluster.local:50054`);
});

test('GPU Deployments replace pods without needing a spare GPU', () => {
  for (const c of ['reference', 'rollout']) {
    const d = find(rendered.gpu(), 'Deployment', c)[0];
    assert.deepEqual(d.spec.strategy.rollingUpdate, { maxSurge: 0, maxUnavailable: 1 }, c);
  }
});

test('a bare n in the training config (YAML 1.1 false) is refused; --set ...rollout.n works', () => {
  const dir = mkdtempSync(join(tmpdir(), 'rlmesh-chart-'));
  const file = join(dir, 'values.yaml');
  writeFileSync(file, 'config:\n  actor_rollout_ref:\n    rollout:\n      n: 8\n');
  const r = helmTemplate(['-f', file]);
  assert.equal(r.ok, false);
  assert.match(r.stderr, /invalid propertyName 'false'/);
  const cfg = configOf(render(['--set', 'config.actor_rollout_ref.rollout.n=8']));
  assert.equal(cfg.actor_rollout_ref.rollout.n, 8);
});


test('yamllint finds no errors in the values files and the Prometheus files', () => {
  const files = [join(CHART, 'values.yaml'), ...Object.values(VALUE_SETS).flatMap((args) => args.slice(1)),
    join(REPO, 'deploy', 'prometheus', 'prometheus-local.yml'), join(REPO, 'deploy', 'prometheus', 'rules', 'rlmesh-alerts.yml'),
    join(REPO, 'deploy', 'prometheus', 'rules', 'rlmesh-alerts_test.yml')];
  const r = spawnSync('yamllint', ['-f', 'parsable', '-d', YAMLLINT, ...files], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stdout);
});

const escapeRe = (s) => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');

test('podLabels and podAnnotations cannot repeat a key the chart writes on the pod, naming the value and the key', () => {
  const r = helmTemplate(['--set', 'rollout.podLabels.app\\.kubernetes\\.io/component=x']);
  assert.equal(r.ok, false);
  assert.match(r.stderr, /rollout\.podLabels\.app\.kubernetes\.io\/component: the chart writes the label app\.kubernetes\.io\/component on the rollout pods itself/);
  // Every key of every rendered pod template (reward files add an annotation to the reward pods).
  const withFiles = render(['-f', tempValues({ reward: { files: { 'r.py': 'x = 1\n' } } })]);
  const templates = withFiles.filter((o) => ['Deployment', 'StatefulSet', 'Job'].includes(o.kind))
    .map((o) => [o.metadata.labels['app.kubernetes.io/component'], o.spec.template.metadata]);
  assert.equal(templates.length, COMPONENTS.length);
  assert.ok(templates.find(([c]) => c === 'reward')[1].annotations['checksum/reward-files']);
  for (const [component, meta] of templates) {
    for (const [field, keys, what] of [['podLabels', Object.keys(meta.labels), 'label'], ['podAnnotations', Object.keys(meta.annotations), 'annotation']]) {
      assert.ok(keys.length > 0, `${component} ${field}`);
      for (const key of keys) {
        const values = { [component]: { [field]: { [key]: 'x' } } };
        if (component === 'reward') values.reward.files = { 'r.py': 'x = 1\n' };
        const refused = helmTemplate(['-f', tempValues(values)]);
        assert.equal(refused.ok, false, `${component}.${field}.${key}`);
        assert.match(refused.stderr, new RegExp(`${component}\\.${field}\\.${escapeRe(key)}: the chart writes the ${what} ${escapeRe(key)} on the ${component} pods itself`));
      }
    }
  }
  // Other keys are taken, and a key is refused only on the pods the chart writes it on.
  const ok = render(['-f', tempValues({ rollout: { podLabels: { team: 'rl' } }, trainer: { podAnnotations: { 'checksum/reward-files': 'mine' } },
    reward: { podAnnotations: { 'checksum/reward-files': 'mine' } } })]);
  assert.equal(find(ok, 'Deployment', 'rollout')[0].spec.template.metadata.labels.team, 'rl');
  assert.equal(find(ok, 'StatefulSet', 'trainer')[0].spec.template.metadata.annotations['checksum/reward-files'], 'mine');
  assert.equal(find(ok, 'Deployment', 'reward')[0].spec.template.metadata.annotations['checksum/reward-files'], 'mine', 'no reward.files: not the chart\'s');
});

test('the monitoring objects\' extra labels cannot repeat a label the chart writes, naming the value and the key', () => {
  const ON = ['--set', 'metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true', ...PROMETHEUS_OPERATOR];
  const own = Object.keys(find(render(ON), 'ServiceMonitor')[0].metadata.labels);
  assert.ok(own.includes('app.kubernetes.io/part-of'));
  for (const [path, kind] of [['serviceMonitor', 'ServiceMonitor'], ['prometheusRule', 'PrometheusRule']]) {
    const r = helmTemplate(['-f', tempValues({ metrics: { [path]: { labels: { 'app.kubernetes.io/part-of': 'x' } } } }), ...ON]);
    assert.equal(r.ok, false, path);
    assert.match(r.stderr, new RegExp(`metrics\\.${path}\\.labels\\.app\\.kubernetes\\.io/part-of: the chart writes the label app\\.kubernetes\\.io/part-of on the ${kind} itself`));
  }
  const g = helmTemplate(['--set', 'metrics.grafanaDashboards.label=helm\\.sh/chart']);
  assert.equal(g.ok, false);
  assert.match(g.stderr, /metrics\.grafanaDashboards\.label = helm\.sh\/chart: the chart writes the label helm\.sh\/chart on the dashboards ConfigMap itself/);
  const ok = render(['-f', tempValues({ metrics: { serviceMonitor: { labels: { release: 'kps' } }, prometheusRule: { labels: { release: 'kps' } } } }), ...ON]);
  assert.equal(find(ok, 'ServiceMonitor')[0].metadata.labels.release, 'kps');
  assert.equal(find(ok, 'PrometheusRule')[0].metadata.labels.release, 'kps');
});


for (const [name] of Object.entries(VALUE_SETS)) {
  test(`${name} values: every reference between rendered objects resolves`, () => {
    const objs = rendered[name]();
    const names = (kind) => new Set(find(objs, kind).map((o) => o.metadata.name));
    const workloads = objs.filter((o) => ['Deployment', 'StatefulSet', 'Job'].includes(o.kind));
    for (const w of workloads) {
      const spec = w.spec.template.spec;
      const where = `${w.kind}/${w.metadata.name}`;
      for (const v of spec.volumes.filter((x) => x.configMap)) assert.ok(names('ConfigMap').has(v.configMap.name), `${where}: ConfigMap ${v.configMap.name}`);
      if (find(objs, 'ServiceAccount').length) assert.ok(names('ServiceAccount').has(spec.serviceAccountName), `${where}: ServiceAccount`);
      const mounted = new Set([...spec.volumes.map((v) => v.name), ...(w.spec.volumeClaimTemplates ?? []).map((c) => c.metadata.name)]);
      for (const c of [...spec.containers, ...(spec.initContainers ?? [])]) {
        for (const m of c.volumeMounts) assert.ok(mounted.has(m.name), `${where} ${c.name}: volume ${m.name}`);
      }
      if (w.spec.selector) assert.ok(selects(w.spec.selector.matchLabels, w.spec.template.metadata.labels), `${where}: selector`);
    }
    const sts = find(objs, 'StatefulSet')[0];
    const governing = find(objs, 'Service').find((s) => s.metadata.name === sts.spec.serviceName);
    assert.equal(governing?.spec.clusterIP, 'None', 'the StatefulSet has a headless governing Service');
    // Each Service, PDB and NetworkPolicy selects the pods of exactly one workload.
    const selectors = [
      ...find(objs, 'Service').map((s) => [`Service/${s.metadata.name}`, s.spec.selector]),
      ...find(objs, 'PodDisruptionBudget').map((p) => [`PodDisruptionBudget/${p.metadata.name}`, p.spec.selector.matchLabels]),
      ...find(objs, 'NetworkPolicy').map((p) => [`NetworkPolicy/${p.metadata.name}`, p.spec.podSelector.matchLabels]),
    ];
    for (const [where, sel] of selectors) {
      const hits = workloads.filter((w) => selects(sel, w.spec.template.metadata.labels));
      assert.equal(hits.length, 1, `${where} selects ${hits.length} workloads`);
    }
    // Each Service's named target ports exist on the pods it selects.
    for (const s of find(objs, 'Service')) {
      const w = workloads.find((x) => selects(s.spec.selector, x.spec.template.metadata.labels));
      const ports = new Set(w.spec.template.spec.containers[0].ports.map((p) => p.name));
      for (const p of s.spec.ports) assert.ok(ports.has(p.targetPort), `Service/${s.metadata.name}: targetPort ${p.targetPort}`);
    }
  });
}

test('trainer.replicas = 3 forms one trainer group on a shared claim; without the claim the chart refuses', () => {
  const file = tempValues({ trainer: { replicas: 3, checkpoints: { existingClaim: 'rl-ckpt' } } });
  const objs = render(['-f', file]);
  assert.deepEqual(objs.flatMap(validateObject), []);
  const cfg = configOf(objs);
  const sts = find(objs, 'StatefulSet', 'trainer')[0];
  assert.equal(sts.spec.replicas, 3);
  assert.equal(sts.spec.podManagementPolicy, 'Parallel', 'the ranks must start together to rendezvous');
  // One rank per pod; the rank from the pod's ordinal; pod 0's stable name for the store.
  assert.equal(cfg.trainer.nnodes, 3);
  assert.equal(cfg.trainer.n_gpus_per_node, 1);
  assert.equal(cfg.rlmesh.trainer.rank, -1);
  assert.equal(cfg.rlmesh.trainer.group_host, `${sts.metadata.name}-0.${sts.spec.serviceName}.ml.svc.cluster.local`);
  const pod = sts.spec.template.spec;
  assert.ok(pod.containers[0].env.some((e) => e.name === 'POD_NAME' && e.valueFrom.fieldRef.fieldPath === 'metadata.name'));
  assert.equal(pod.volumes.find((v) => v.name === 'checkpoints').persistentVolumeClaim.claimName, 'rl-ckpt');
  assert.equal(sts.spec.volumeClaimTemplates, undefined, 'every rank mounts the one shared claim');
  const svc = find(objs, 'Service', 'trainer')[0];
  assert.equal(svc.spec.publishNotReadyAddresses, true, 'ranks resolve each other before they are ready');
  // The default: one rank on its own claim.
  const one = rendered.default();
  assert.equal(configOf(one).trainer.nnodes, 1);
  assert.equal(find(one, 'StatefulSet', 'trainer')[0].spec.volumeClaimTemplates[0].metadata.name, 'checkpoints');
  const unshared = helmTemplate(['-f', tempValues({ trainer: { replicas: 2 } })]);
  assert.equal(unshared.ok, false);
  assert.match(unshared.stderr, /trainer\.replicas > 1 needs trainer\.checkpoints\.existingClaim/);
  // With existingClaim the claim's own size, class and access modes hold: values for the
  // claims the chart would create change nothing, so they are refused.
  for (const [key, value, shown] of [['size', '1Ti', '"1Ti"'], ['storageClassName', 'fast', '"fast"'],
    ['accessModes', ['ReadWriteMany'], '\\["ReadWriteMany"\\]']]) {
    const ignored = helmTemplate(['-f', tempValues({ trainer: { checkpoints: { existingClaim: 'rl-ckpt', [key]: value } } })]);
    assert.equal(ignored.ok, false, key);
    assert.match(ignored.stderr, new RegExp(`trainer\\.checkpoints\\.${key} = ${shown}: only the claims the chart creates read it`));
  }
});

test('a reference group in the config is refused by the chart, naming the key', () => {
  const grouped = helmTemplate(['-f', tempValues({ config: { rlmesh: { reference: { world_size: 2 } } } })]);
  assert.equal(grouped.ok, false);
  assert.match(grouped.stderr, /config\.rlmesh\.reference\.world_size = 2: the chart runs the reference as one pod/);
  const one = render(['-f', tempValues({ config: { rlmesh: { reference: { world_size: 1 } } } })]);
  assert.equal(configOf(one).rlmesh.reference.world_size, 1);
});

test('config keys the chart writes are refused when set to another value, naming the value to set instead', () => {
  const refused = (values, pattern, extra = []) => {
    const r = helmTemplate(['-f', tempValues(values), ...extra]);
    assert.equal(r.ok, false, JSON.stringify(values));
    assert.match(r.stderr, pattern, JSON.stringify(values));
  };
  const TLS_ON = ['--set', 'tls.enabled=true,tls.secretName=s,tls.serverName=rlmesh.internal'];
  refused({ config: { rlmesh: { tls: { enabled: true, cert_file: '/c.pem', key_file: '/k.pem', ca_file: '/ca.pem' } } } },
    /config\.rlmesh\.tls\.ca_file = \/ca\.pem: the chart sets rlmesh\.tls\.ca_file itself \(to "" here\); set tls\.enabled, tls\.secretName and tls\.mountPath instead/);
  refused({ config: { rlmesh: { tls: { enabled: true } } } },
    /config\.rlmesh\.tls\.enabled = true: the chart sets rlmesh\.tls\.enabled itself \(to false here\); set tls\.enabled instead/);
  refused({ config: { rlmesh: { tls: { insecure_plaintext: false } } } }, /config\.rlmesh\.tls\.insecure_plaintext = false: .*set tls\.enabled instead/);
  refused({ config: { rlmesh: { tls: { server_name: 'other' } } } }, /config\.rlmesh\.tls\.server_name = other: .*\(to rlmesh\.internal here\); set tls\.serverName instead/, TLS_ON);
  refused({ config: { rlmesh: { tls: { ca_file: '' } } } }, /config\.rlmesh\.tls\.ca_file = "": .*\(to \/etc\/rlmesh\/tls\/ca\.crt here\)/, TLS_ON);
  refused({ config: { rlmesh: { tls: { min_version: '1.3' } } } }, /config\.rlmesh\.tls\.min_version: the chart writes rlmesh\.tls from tls\.\*.* no key min_version/);
  refused({ config: { trainer: { default_local_dir: '/ckpt' } } },
    /config\.trainer\.default_local_dir = \/ckpt: the chart sets trainer\.default_local_dir itself \(to \/checkpoints here\); set trainer\.checkpoints\.mountPath instead/);
  refused({ config: { trainer: { nnodes: 2 } } }, /config\.trainer\.nnodes = 2: .*\(to 1 here\); set trainer\.replicas instead/);
  refused({ config: { trainer: { n_gpus_per_node: 8 } } }, /config\.trainer\.n_gpus_per_node = 8: .*\(to 1 here\)/);
  refused({ config: { rlmesh: { host: '127.0.0.1' } } }, /config\.rlmesh\.host = 127\.0\.0\.1: .*\(to 0\.0\.0\.0 here\)/);
  refused({ config: { rlmesh: { reward: { port: 6000 } } } }, /config\.rlmesh\.reward\.port = 6000: .*\(to 50052 here\); set ports\.reward\.grpc instead/);
  refused({ config: { rlmesh: { rollout: { metrics_port: 9200 } } } }, /config\.rlmesh\.rollout\.metrics_port = 9200: .*set ports\.rollout\.metrics instead/);
  refused({ config: { rlmesh: { reference: { address: 'ref:1' } } } },
    /config\.rlmesh\.reference\.address = ref:1: .*\(to rel-rlmesh-reference\.ml\.svc\.cluster\.local:50053 here\)/);
  refused({ config: { rlmesh: { rollout: { discovery_dns: 'x.example' } } } }, /config\.rlmesh\.rollout\.discovery_dns = x\.example: /);
  refused({ config: { rlmesh: { trainer: { rank: 0 } } } }, /config\.rlmesh\.trainer\.rank = 0: .*\(to -1 here\)/);
  refused({ config: { rlmesh: { trainer: { group_host: 'h' } } } }, /config\.rlmesh\.trainer\.group_host = h: /);
  // The value the chart writes anyway is taken; so is every key the chart does not write.
  const same = render(['-f', tempValues({ trainer: { replicas: 2, checkpoints: { existingClaim: 'c' } }, config: {
    trainer: { default_local_dir: '/checkpoints', nnodes: 2, n_gpus_per_node: 1 },
    rlmesh: { host: '0.0.0.0', reward: { port: 50052, metrics_port: 9102 }, tls: { enabled: false, insecure_plaintext: true },
      trainer: { rank: -1, group_port: 29600 }, rollout: { discovery_interval_s: 2 } } } })]);
  const cfg = configOf(same);
  assert.equal(cfg.trainer.nnodes, 2);
  assert.equal(cfg.rlmesh.trainer.group_port, 29600);
  assert.equal(cfg.rlmesh.rollout.discovery_interval_s, 2);
  assert.deepEqual(cfg.rlmesh.tls, { enabled: false, insecure_plaintext: true });
  const tls = configOf(render(['-f', tempValues({ config: { rlmesh: { tls: { enabled: true, server_name: 'rlmesh.internal' } } } }), ...TLS_ON]));
  assert.equal(tls.rlmesh.tls.server_name, 'rlmesh.internal');
});

test('terminationGracePeriodSeconds is taken for every component, 0 included; unset leaves Kubernetes\' default', () => {
  const file = tempValues(Object.fromEntries(COMPONENTS.map((c, i) => [c, { terminationGracePeriodSeconds: i === 2 ? 0 : 100 + i }])));
  const objs = render(['-f', file]);
  assert.deepEqual(objs.flatMap(validateObject), []);
  const grace = Object.fromEntries(podSpecs(objs).map((p) => [p.component, p.spec.terminationGracePeriodSeconds]));
  assert.deepEqual(grace, { coordinator: 100, trainer: 101, reference: 0, reward: 103, rollout: 104 });
  const dflt = Object.fromEntries(podSpecs(rendered.default()).map((p) => [p.component, p.spec.terminationGracePeriodSeconds]));
  assert.deepEqual(dflt, { coordinator: undefined, trainer: undefined, reference: undefined, reward: undefined, rollout: 60 });
  const negative = helmTemplate(['--set', 'coordinator.terminationGracePeriodSeconds=-1']);
  assert.equal(negative.ok, false);
  assert.match(negative.stderr, /coordinator\/terminationGracePeriodSeconds/);
});

test('a ServiceMonitor scrape timeout longer than its interval is refused, naming both keys', () => {
  const sm = (interval, scrapeTimeout) => helmTemplate(['--set', `metrics.serviceMonitor.enabled=true,metrics.serviceMonitor.interval=${interval},metrics.serviceMonitor.scrapeTimeout=${scrapeTimeout}`, ...PROMETHEUS_OPERATOR]);
  for (const [interval, timeout] of [['5s', '10s'], ['1m', '1m30s'], ['500ms', '1s'], ['1h', '1h1ms']]) {
    const r = sm(interval, timeout);
    assert.equal(r.ok, false, `${interval} ${timeout}`);
    assert.match(r.stderr, new RegExp(`metrics\\.serviceMonitor\\.scrapeTimeout = ${timeout} is longer than metrics\\.serviceMonitor\\.interval = ${interval}`));
  }
  for (const [interval, timeout] of [['10s', '10s'], ['1m30s', '1m'], ['2m', '90s'], ['1h', '59m59s999ms'], ['1d', '1h']]) {
    const r = sm(interval, timeout);
    assert.equal(r.ok, true, `${interval} ${timeout}: ${r.stderr}`);
    const ep = find(parseManifests(r.stdout), 'ServiceMonitor')[0].spec.endpoints[0];
    assert.deepEqual([ep.interval, ep.scrapeTimeout], [interval, timeout]);
  }
  const zero = sm('0s', '0s');
  assert.equal(zero.ok, false);
  assert.match(zero.stderr, /metrics\.serviceMonitor\.interval = 0s, metrics\.serviceMonitor\.scrapeTimeout = 0s: both must be above 0/);
  for (const bad of ['10', '1.5s', 's', '30s1m', '']) {
    const r = sm(bad, '1s');
    assert.equal(r.ok, false, `interval "${bad}"`);
    assert.match(r.stderr, /\/metrics\/serviceMonitor\/interval/, `interval "${bad}"`);
  }
});

test('a rollout or reference pod asking for more than one GPU is refused, naming the key', () => {
  for (const c of ['rollout', 'reference']) {
    const limits = helmTemplate(['-f', tempValues({ [c]: { resources: { requests: { 'nvidia.com/gpu': 2 }, limits: { 'nvidia.com/gpu': 2 } } } })]);
    assert.equal(limits.ok, false, c);
    assert.match(limits.stderr, new RegExp(`${c}\\.resources nvidia\\.com/gpu = 2: each ${c} pod runs on one device \\(tensor parallelism is not built\\)`));
    const requests = helmTemplate(['-f', tempValues({ [c]: { resources: { requests: { 'nvidia.com/gpu': 4 }, limits: { 'nvidia.com/gpu': null } } } })]);
    assert.equal(requests.ok, false, c);
    assert.match(requests.stderr, new RegExp(`${c}\\.resources nvidia\\.com/gpu = 4`));
  }
  // One GPU, or none (values-cpu.yaml), is taken.
  assert.equal(gpusOfPod(rendered.default(), 'rollout'), 1);
  assert.equal(gpusOfPod(rendered['values-cpu.yaml'](), 'reference'), undefined);
});
