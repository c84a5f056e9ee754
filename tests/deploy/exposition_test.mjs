// Tests of the /metrics conformance checker (exposition.mjs) on hand-written expositions.
//   node --test tests/deploy/exposition_test.mjs
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { checkExposition, parseExposition } from './exposition.mjs';

// What the reward service should print, written by hand from docs/metrics.md.
const REWARD = `# HELP rlmesh_reward_items_total Items scored.
# TYPE rlmesh_reward_items_total counter
rlmesh_reward_items_total{data_source="openai/gsm8k",outcome="ok"} 12
rlmesh_reward_items_total{data_source="openai/gsm8k",outcome="error"} 1
# TYPE rlmesh_reward_errors_total counter
rlmesh_reward_errors_total{kind="timeout"} 1
# TYPE rlmesh_reward_score_sum_total counter
rlmesh_reward_score_sum_total{data_source="openai/gsm8k"} 7.5
# TYPE rlmesh_reward_score_negative_sum_total counter
rlmesh_reward_score_negative_sum_total{data_source="openai/gsm8k"} 0
# TYPE rlmesh_reward_request_duration_seconds histogram
${[0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60].map((b, i) =>
    `rlmesh_reward_request_duration_seconds_bucket{le="${b}"} ${Math.min(i, 3)}`).join('\n')}
rlmesh_reward_request_duration_seconds_bucket{le="+Inf"} 3
rlmesh_reward_request_duration_seconds_sum 0.031
rlmesh_reward_request_duration_seconds_count 3
# TYPE rlmesh_reward_python_workers_replaced_total counter
rlmesh_reward_python_workers_replaced_total 0
`;

test('parses families, samples and labels', () => {
  const { families, errors } = parseExposition(REWARD);
  assert.deepEqual(errors, []);
  assert.equal(families.get('rlmesh_reward_items_total').samples.length, 2);
  assert.deepEqual(families.get('rlmesh_reward_items_total').samples[0].labels, { data_source: 'openai/gsm8k', outcome: 'ok' });
  assert.equal(families.get('rlmesh_reward_request_duration_seconds').samples.length, 17);
  assert.equal(families.get('rlmesh_reward_request_duration_seconds').type, 'histogram');
});

test('a conforming exposition passes; the shared families it lacks are reported missing', () => {
  const { errors, missing } = checkExposition(REWARD, 'reward');
  assert.deepEqual(errors, []);
  const plumbing = ['rlmesh_reward_grpc_requests_total', 'rlmesh_reward_grpc_request_duration_seconds', 'rlmesh_reward_serving'];
  assert.deepEqual(missing.filter((m) => !m.startsWith('rlmesh_process_')).sort(), plumbing.sort());
  assert.ok(missing.includes('rlmesh_process_cpu_seconds_total'));
});

test('unlabelled coordinator gauges pass as verl metrics; other unknown coordinator families do not', () => {
  const text = `# TYPE rlmesh_coordinator_actor_pg_clipfrac_lower gauge
rlmesh_coordinator_actor_pg_clipfrac_lower 0.01
# TYPE rlmesh_coordinator_mystery gauge
rlmesh_coordinator_mystery{kind="x"} 1
# TYPE rlmesh_coordinator_things_total counter
rlmesh_coordinator_things_total 1
`;
  const { errors } = checkExposition(text, 'coordinator');
  assert.deepEqual(errors, ['rlmesh_coordinator_mystery: not in docs/metrics.md', 'rlmesh_coordinator_things_total: not in docs/metrics.md']);
});

test('unknown names, wrong types, wrong labels and wrong buckets are errors', () => {
  const bad = `# TYPE rlmesh_reward_items_total gauge
rlmesh_reward_items_total{data_source="x",outcome="ok"} 1
# TYPE rlmesh_reward_errors_total counter
rlmesh_reward_errors_total{kind="timeout",request_id="42"} 1
# TYPE rlmesh_reward_scored_total counter
rlmesh_reward_scored_total 3
# TYPE rlmesh_reward_request_duration_seconds histogram
rlmesh_reward_request_duration_seconds_bucket{le="1"} 1
rlmesh_reward_request_duration_seconds_bucket{le="+Inf"} 1
rlmesh_reward_request_duration_seconds_sum 0.5
rlmesh_reward_request_duration_seconds_count 1
rlmesh_other 1
`;
  const { errors } = checkExposition(bad, 'reward');
  assert.equal(errors.length, 5, errors.join('\n'));
  assert.match(errors.join('\n'), /rlmesh_reward_items_total: type gauge, catalog says counter/);
  assert.match(errors.join('\n'), /rlmesh_reward_errors_total: labels \{kind,request_id\}, catalog says \{kind\}/);
  assert.match(errors.join('\n'), /rlmesh_reward_scored_total: not in docs\/metrics.md/);
  assert.match(errors.join('\n'), /rlmesh_reward_request_duration_seconds: buckets 1,Infinity/);
  assert.match(errors.join('\n'), /rlmesh_other has no # TYPE line/);
});

test('a family whose label values have not been seen yet still counts as present', () => {
  const text = '# HELP rlmesh_reward_errors_total Errors.\n# TYPE rlmesh_reward_errors_total counter\n';
  const { errors, missing } = checkExposition(text, 'reward');
  assert.deepEqual(errors, []);
  assert.ok(!missing.includes('rlmesh_reward_errors_total'));
  assert.ok(missing.includes('rlmesh_reward_items_total'));
});
