// Grades the catalogue's wrong courier solutions (src/courier/mutants.py) with the
// current grader, in Node (Pyodide and www/pkg, as courier.test.mjs does), and prints
// one JSON line per mutant: its name, the test it names, whether that test failed
// (caught), and every test it failed. A mutant that fails nothing passes the grader.
// With --correct, the correct solutions of correct.py instead, each of which must
// fail nothing.
// Run from www/: node host/test/courier/grade-mutants.mjs [--jobs N] [--correct] [NAME...]
// (about 5 s of one core per mutant; needs www/pkg: ./lab build).
import { isMainThread, parentPort, Worker } from 'node:worker_threads';
import { parseArgs } from 'node:util';
import { loadNodeEngine } from '../../node_host.mjs';
import { applyMutant, failing, loadCorrect, loadMutants, names } from './mutants.mjs';

if (!isMainThread) {
  const engine = await loadNodeEngine({ labId: 'courier' });
  parentPort.on('message', ({ name, source }) => {
    try {
      parentPort.postMessage({ name, failed: failing(engine.run(source)) });
    } catch (e) {
      parentPort.postMessage({ name, error: String((e && e.stack) || e) });
    }
  });
} else {
  const { values, positionals } = parseArgs({ allowPositionals: true, options: {
    jobs: { type: 'string', default: '2' }, correct: { type: 'boolean', default: false } } });
  const all = values.correct ? loadCorrect() : loadMutants();
  const unknown = positionals.filter((n) => !all.some((m) => m.name === n));
  if (unknown.length) throw new Error(`no such mutant: ${unknown.join(', ')}`);
  const todo = positionals.length ? all.filter((m) => positionals.includes(m.name)) : all;
  const jobs = [];
  for (const m of todo) {
    const { source, missing } = applyMutant(m);
    if (missing) console.log(JSON.stringify({ name: m.name, error: `anchor not found: ${missing}` }));
    else jobs.push({ m, source });
  }
  const byName = new Map(jobs.map((j) => [j.m.name, j.m]));
  const workers = Array.from({ length: Math.max(1, Math.min(Number(values.jobs), jobs.length)) },
    () => new Worker(new URL(import.meta.url)));
  let done = 0;
  await new Promise((resolve) => {
    if (!jobs.length) resolve();
    const next = (w) => {
      const job = jobs.shift();
      if (job) w.postMessage({ name: job.m.name, source: job.source });
    };
    for (const w of workers) {
      w.on('message', ({ name, failed, error }) => {
        const m = byName.get(name);
        console.log(JSON.stringify(error ? { name, error } : {
          name, ...(m.caught_by ? { caught_by: m.caught_by, caught: failed.some((t) => names(m.caught_by, t)) } : {}),
          passes: failed.length === 0, failed,
        }));
        if (++done === byName.size) resolve();
        else next(w);
      });
      next(w);
    }
  });
  await Promise.all(workers.map((w) => w.terminate()));
}
