// One courier engine in a worker thread, for courier.test.mjs: a run takes about
// 10 s of one core, so the tests' runs go to two of these at once. Each message is
// a job, `{ id, runs: [{ source, seed }] }`, run in order in this engine (a job
// that checks what one run leaves for the next keeps its runs together); the
// answer is `{ id, reports }` or `{ id, error }`.
import { parentPort } from 'node:worker_threads';
import { loadNodeEngine } from '../../src/node_host.mjs';

const engine = await loadNodeEngine({ labId: 'courier' });
parentPort.on('message', ({ id, runs }) => {
  try {
    parentPort.postMessage({ id, reports: runs.map(({ source, seed }) => engine.run(source, seed === undefined ? {} : { seed })) });
  } catch (e) {
    parentPort.postMessage({ id, error: String((e && e.stack) || e) });
  }
});
