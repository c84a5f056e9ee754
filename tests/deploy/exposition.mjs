// Checks a service's /metrics output against the metric catalog (docs/metrics.md): every
// rlmesh_* family it exports is catalogued with the same type, label names and histogram
// buckets, and every catalogued family of its component (plus rlmesh_process_*) is there.
//
// As a program, for the service owners and the end-to-end tests:
//   node tests/deploy/exposition.mjs COMPONENT URL|FILE [--allow-missing]
// e.g. node tests/deploy/exposition.mjs rollout http://127.0.0.1:9400/metrics
// Exit status 0 when the output conforms; otherwise each problem on its own line.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { loadCatalog } from './lib.mjs';

// Parses Prometheus text format 0.0.4 into families: name -> { type, samples: [{ name, labels, value }] }.
export function parseExposition(text) {
  const families = new Map();
  const familyOf = (sample) => {
    for (const suffix of ['', '_bucket', '_sum', '_count']) {
      const base = suffix ? sample.slice(0, -suffix.length) : sample;
      if (sample.endsWith(suffix) && families.has(base)) return families.get(base);
    }
    return null;
  };
  const errors = [];
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    let m = line.match(/^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$/);
    if (m) { families.set(m[1], { type: m[2], samples: [] }); return; }
    if (line.startsWith('#')) return;
    m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$/);
    if (!m) { errors.push(`line ${i + 1}: not a sample: ${line}`); return; }
    const labels = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    const fam = familyOf(m[1]);
    if (!fam) { errors.push(`line ${i + 1}: sample ${m[1]} has no # TYPE line`); return; }
    fam.samples.push({ name: m[1], labels, value: Number(m[3] === '+Inf' ? Infinity : m[3]) });
  });
  return { families, errors };
}

// Returns { errors, missing } for one component's exposition.
export function checkExposition(text, component, catalog = loadCatalog()) {
  const { families, errors } = parseExposition(text);
  for (const [name, fam] of families) {
    if (!name.startsWith('rlmesh_')) continue;  // e.g. exposer or runtime metrics
    const want = catalog.get(name);
    // The coordinator's verl gauges follow a mapping rule instead of rows (docs/metrics.md).
    const verlGauge = name.startsWith('rlmesh_coordinator_') && fam.type === 'gauge' &&
      fam.samples.every((s) => Object.keys(s.labels).length === 0);
    if (!want && verlGauge) continue;
    if (!want) { errors.push(`${name}: not in docs/metrics.md`); continue; }
    if (want.type !== fam.type) errors.push(`${name}: type ${fam.type}, catalog says ${want.type}`);
    const wantLabels = [...want.labels].sort().join(',');
    for (const s of fam.samples) {
      const got = Object.keys(s.labels).filter((l) => !(l === 'le' && s.name.endsWith('_bucket'))).sort().join(',');
      if (got !== wantLabels) {
        errors.push(`${s.name}: labels {${got}}, catalog says {${wantLabels}}`);
        break;
      }
    }
    if (want.type === 'histogram') {
      const series = new Map();
      for (const s of fam.samples.filter((x) => x.name === `${name}_bucket`)) {
        const key = JSON.stringify({ ...s.labels, le: undefined });
        if (!series.has(key)) series.set(key, []);
        series.get(key).push(s.labels.le === '+Inf' ? Infinity : Number(s.labels.le));
      }
      const expected = [...want.buckets, Infinity].join(',');
      for (const les of series.values()) {
        if (les.join(',') !== expected) {
          errors.push(`${name}: buckets ${les.join(',')}, catalog says ${expected}`);
          break;
        }
      }
    }
  }
  const missing = [...catalog.keys()].filter((n) =>
    (n.startsWith(`rlmesh_${component}_`) || n.startsWith('rlmesh_process_')) && !families.has(n));
  return { errors, missing };
}

async function main(argv) {
  const [component, source, ...flags] = argv;
  if (!component || !source) {
    console.error('usage: node tests/deploy/exposition.mjs COMPONENT URL|FILE [--allow-missing]');
    return 2;
  }
  const text = /^https?:\/\//.test(source) ? await (await fetch(source)).text() : readFileSync(source, 'utf8');
  const { errors, missing } = checkExposition(text, component);
  for (const e of errors) console.log(`error: ${e}`);
  for (const m of missing) console.log(`missing: ${m}`);
  const ok = errors.length === 0 && (missing.length === 0 || flags.includes('--allow-missing'));
  console.log(ok ? `${component}: conforms to docs/metrics.md` : `${component}: does not conform`);
  return ok ? 0 : 1;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then((code) => process.exit(code));
}
