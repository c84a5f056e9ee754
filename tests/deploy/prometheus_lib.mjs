// What the Prometheus tests share: a free loopback port, a small client of Prometheus' HTTP
// API, and the PromQL of the dashboards and alert rules with the metrics they use.
import { readFileSync, readdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { CHART, REPO, YAML, metricsInExpr } from './lib.mjs';

export function freePort() {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

// A client of the Prometheus at `url` (http://host:port).
export function prometheusApi(url) {
  return {
    // Instant query; the result vector, or an error naming the expression.
    async query(expr) {
      const r = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(expr)}`);
      const body = await r.json();
      if (body.status !== 'success') throw new Error(`${expr}: ${body.error}`);
      return body.data.result;
    },
    // Every rule of every group, with its health and last error.
    async rules() {
      return (await (await fetch(`${url}/api/v1/rules`)).json()).data.groups.flatMap((g) => g.rules);
    },
  };
}

// Metrics of `names` without a sample in the last hour at the Prometheus of `api`.
export async function missingMetrics(api, names) {
  const missing = [];
  for (const m of names) {
    if ((await api.query(`count(count_over_time({__name__="${m}"}[1h]))`)).length === 0) missing.push(m);
  }
  return missing;
}

// { where, expr } of every dashboard panel target (the chart's copies of deploy/grafana).
export const dashboardExprs = () => readdirSync(join(CHART, 'dashboards')).flatMap((f) => {
  const d = JSON.parse(readFileSync(join(CHART, 'dashboards', f), 'utf8'));
  return d.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ where: `${f} "${p.title}"`, expr: t.expr })));
});

// { where, expr } of every alert rule.
export const ruleExprs = () => YAML.parse(readFileSync(join(REPO, 'deploy', 'prometheus', 'rules', 'rlmesh-alerts.yml'), 'utf8'))
  .groups.flatMap((g) => g.rules).map((r) => ({ where: `alert ${r.alert}`, expr: r.expr }));

// Every metric name a dashboard panel or an alert rule uses, sorted.
export const usedMetrics = () => [...new Set([...dashboardExprs(), ...ruleExprs()].flatMap((e) => metricsInExpr(e.expr)))].sort();

// A query that selects only failed gRPC calls: a healthy run may have none, so such a panel
// is empty rather than zero (a status code of a call that never happened has no series).
const onlyFailures = (expr) => /code!="OK"/.test(expr);

// Dashboard queries, as Grafana would send them, that fail or return no data now. With
// `healthy`, the queries of failures only (onlyFailures) must evaluate but may be empty.
export async function panelProblems(api, { healthy = false } = {}) {
  const problems = [];
  for (const { where, expr } of dashboardExprs()) {
    try {
      const r = await api.query(expr.replaceAll('$__rate_interval', '1m').replaceAll('$namespace', '.*'));
      if (r.length === 0 && !(healthy && onlyFailures(expr))) problems.push(`${where}: no data for ${expr}`);
    } catch (e) {
      problems.push(`${where}: ${e.message}`);
    }
  }
  return problems;
}
