// The deployment files of docs/deploy.md, checked as far as this machine allows:
// - deploy/compose.yaml parses (the `yaml` package) into the services expected, each
//   worker and front command a real entry of www/grader/queue with options it accepts;
// - deploy/k8s.yaml: every document validated against the Kubernetes OpenAPI schema
//   by `kubernetes-models` (its JSON schemas, ajv), then the structural promises
//   (worker resource limits, the HPA on the workers scaled by the queue depth);
// - deploy/Dockerfile: its instructions read, each COPY source present in the
//   repository, its commands real entries. Not built: this machine has no Docker daemon
//   (`docker build` is the check where one runs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse, parseAllDocuments } from 'yaml';
import { Deployment } from 'kubernetes-models/apps/v1';
import { Service } from 'kubernetes-models/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const DEPLOY = path.resolve(HERE, '..', 'deploy');
const ROOT = path.resolve(HERE, '..', '..', '..', '..');

/** A worker/front command line is accepted by its entry (--help after the options would
 *  exit 0; an unknown option exits 2): run the entry's argument parser on it. */
function acceptsOptions(cmd) {
  const script = cmd.find((a) => a.endsWith('.mjs'));
  assert.ok(script, `a node entry in ${cmd.join(' ')}`);
  assert.ok(fs.existsSync(path.join(ROOT, script)), `${script} exists`);
  const args = cmd.slice(cmd.indexOf(script) + 1);
  const r = spawnSync(process.execPath, [path.join(ROOT, script), ...args, '--help'], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.status, 0, `${script} ${args.join(' ')}: ${r.stderr}`);
}

test('compose.yaml parses: postgres, one front, workers that scale', () => {
  const doc = parse(fs.readFileSync(path.join(DEPLOY, 'compose.yaml'), 'utf8'));
  assert.deepEqual(Object.keys(doc.services).sort(), ['front', 'postgres', 'worker']);
  const { postgres, front, worker } = doc.services;
  assert.match(postgres.image, /^postgres:15/);
  assert.ok(postgres.healthcheck, 'postgres has a health check the others wait on');
  for (const s of [front, worker]) {
    assert.equal(s.depends_on.postgres.condition, 'service_healthy');
    assert.ok(s.secrets.includes('db_password'));
    acceptsOptions(s.command);
  }
  assert.ok(front.ports.some((p) => String(p).endsWith(':8000')));
  assert.match(front.healthcheck.test.join(' '), /readyz/);
  assert.ok(worker.deploy.replicas >= 1 && worker.deploy.resources.limits.cpus && worker.deploy.resources.limits.memory);
  assert.ok(!('ports' in worker), 'workers take no traffic');
  // The worker's grace (--grace) fits inside the stop period compose gives it.
  const grace = Number(worker.command[worker.command.indexOf('--grace') + 1]);
  assert.ok(Number.parseInt(worker.stop_grace_period, 10) > grace);
  // No password in the file: secrets from files.
  assert.doesNotMatch(fs.readFileSync(path.join(DEPLOY, 'compose.yaml'), 'utf8'), /PASSWORD:\s*[^\s/]/);
});

test('k8s.yaml validates against the Kubernetes schema; workers have limits and scale by queue depth', () => {
  const docs = parseAllDocuments(fs.readFileSync(path.join(DEPLOY, 'k8s.yaml'), 'utf8')).map((d) => d.toJSON());
  const kinds = { Deployment, Service, HorizontalPodAutoscaler };
  for (const d of docs) {
    const Model = kinds[d.kind];
    assert.ok(Model, `a model for ${d.kind}`);
    new Model(d).validate(); // throws with the schema's errors
  }
  // The validator does refuse what is wrong: a quantity that is none.
  const broken = structuredClone(docs.find((d) => d.kind === 'Deployment'));
  broken.spec.template.spec.containers[0].resources.limits.cpu = 'two';
  assert.throws(() => new Deployment(broken).validate(), /quantity/);

  const worker = docs.find((d) => d.kind === 'Deployment' && d.metadata.name === 'grading-worker');
  const c = worker.spec.template.spec.containers[0];
  assert.ok(c.resources.limits.cpu && c.resources.limits.memory, 'worker resource limits');
  acceptsOptions(c.command);
  const grace = Number(c.command[c.command.indexOf('--grace') + 1]);
  assert.ok(worker.spec.template.spec.terminationGracePeriodSeconds > grace, 'the pod is given the time its worker finishes in');
  const hpa = docs.find((d) => d.kind === 'HorizontalPodAutoscaler');
  assert.equal(hpa.spec.scaleTargetRef.name, 'grading-worker');
  assert.equal(hpa.spec.metrics[0].external.metric.name, 'grading_queue_depth');
  const front = docs.find((d) => d.kind === 'Deployment' && d.metadata.name === 'grading-front');
  const fc = front.spec.template.spec.containers[0];
  acceptsOptions(fc.command);
  assert.equal(fc.readinessProbe.httpGet.path, '/readyz');
  assert.equal(fc.livenessProbe.httpGet.path, '/healthz');
});

test('Dockerfile: every COPY source is in the repository, its commands are real entries', () => {
  const text = fs.readFileSync(path.join(DEPLOY, 'Dockerfile'), 'utf8');
  const lines = text.replace(/\\\n/g, ' ').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
  assert.match(lines[0], /^FROM node:24-/);
  for (const l of lines.filter((x) => x.startsWith('COPY '))) {
    const parts = l.split(/\s+/).slice(1);
    for (const src of parts.slice(0, -1)) assert.ok(fs.existsSync(path.join(ROOT, src)), `COPY ${src}: in the repository`);
  }
  assert.match(text, /apt-get install[^\n]*bubblewrap/);
  const cmd = JSON.parse(lines.find((l) => l.startsWith('CMD ')).slice(4));
  acceptsOptions(cmd);
});
