// The coordinator's grading thread (one per --jobs slot; started by pool.mjs). It
// holds the trusted WASM grader: the tests, the worlds, the reference, and the
// verdict. It drives one sandbox at a time over that sandbox's pipes: the learner's
// source to load, then each learner call the grader makes, answering every world
// operation the call asks for with its own world. Nothing the sandbox says is
// believed beyond what a learner's code could legitimately say (a return value, its
// prints, its error): the grader compares those with the reference as on the page.
//
// The calls are synchronous (the grader calls `solution.call` and waits), so the
// pipes are read with blocking reads, here in a thread of its own: the main thread
// keeps its event loop, its timers (the time limit kills the sandbox, which ends a
// blocked read) and the server.
//
// The courier lab's database lives here too, in an interpreter of this thread's own
// (src/courier/db_store.py's CourierStore, as on the page; the sandbox's interpreter
// never gets that module): the sandbox's `db` and `provider` send
// each statement and provider call, and get rows and answers back. The tables the
// grader reads, the attempts committed before a send, and whether a step left a
// transaction open are read here, never taken from the sandbox. Only our code runs
// in that interpreter; the learner's SQL runs inside its SQLite under the store's
// authorizer and caps (db_store.py). That SQL is hostile input running in C compiled
// to WebAssembly, so a store serves one submission only: a thread whose store was
// used says `retire` with its verdict and the pool replaces it (a fresh isolate, a
// fresh interpreter), as it replaces a sandbox.
import fs from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import {
  channel, Closed, ENDED, Interference, JOB, nestsDeeper, PARAMS_DEPTH_CAP, RUN_CAP_BYTES, RUN_CAP_OPS, sandboxOps,
} from './frames.mjs';
import { bridgeOf } from '../host/engine.mjs';
import { loadGrader } from '../host/node_host.mjs';
import { BRIDGE_FILE, loadPython } from './python.mjs';

// The pool's pinned copy of the grader: a build made while the pool runs changes nothing it grades with.
const grader = new (await loadGrader({ dir: workerData?.graderDir })).Grader();

// The labs, as the registry describes them.
const LABS = JSON.parse(grader.labs()).map(({ id }) => JSON.parse(grader.lab(id)));

// A store for each lab that has one, in one interpreter, loaded when the pool asks
// (`load-stores`, before it hands this thread a submission of such a lab; a thread
// that grades only lab 1 never loads it): restored from the pool's snapshot.
let stores = null;
async function loadStores() {
  // Its memory is capped at the pool's STORE_MEMORY_MB (SQLite's heap has a cap of its own inside).
  const { snapshotFile, storeMemoryMb } = workerData;
  const usable = snapshotFile && fs.existsSync(snapshotFile) && fs.statSync(snapshotFile).size > 0;
  const pyodide = await loadPython({ memoryMb: storeMemoryMb, snapshotFile: usable ? snapshotFile : null, sparse: usable });
  const py = bridgeOf(pyodide, fs.readFileSync(BRIDGE_FILE, 'utf8'), LABS);
  stores = new Map(LABS.filter((l) => l.store).map((l) => [l.id, py.store(l.id)]));
}

// Each lab as the registry describes it (src/lab.rs): its world's operations, and
// whether its calls get a database (its store, once loaded).
const LAB_OF = new Map(LABS.map((info) => [info.id, { hasStore: Boolean(info.store), ops: sandboxOps(info) }]));

// Submissions whose calls reached this thread's store: never more than one (the
// pool retires the thread after it), reported so a test can say so.
let storeSubmissions = 0;

const TYPES = {
  string: (v) => typeof v === 'string',
  number: (v) => typeof v === 'number' && Number.isFinite(v),
  'number?': (v) => v === null || (typeof v === 'number' && Number.isFinite(v)),
  boolean: (v) => typeof v === 'boolean',
};

// Only the grader says when time is up (the pool's limit ends the sandbox): the
// sandbox's bridge never answers "timeout" (no_interrupts: a KeyboardInterrupt is
// reported as the exception it is), so such an answer is a forged frame.
const TIMEOUT_IS_OURS = 'it said the time limit was reached, which only the grader says';
function saysTimeout(text) {
  try {
    const v = JSON.parse(text);
    return v !== null && typeof v === 'object' && v.error?.kind === 'timeout';
  } catch {
    return false; // the grader reads it, and says what is wrong with it
  }
}

function argsFit(args, signature) {
  return Array.isArray(args) && args.length === signature.length && signature.every((t, i) => TYPES[t](args[i]));
}

/** Waits for a fresh sandbox's `ready`; '' when it came, else why not. */
function awaitReady({ fdIn, fdOut }) {
  try {
    const m = channel(fdIn, fdOut, { runCapBytes: 1024 }).receive();
    return m.t === 'ready' ? '' : `it sent ${String(m.t).slice(0, 40)} before ready`;
  } catch (e) {
    return e.message;
  }
}

// `hidden`: the submission's hidden seed (null: the hidden cases as written) and how
// its reports show hidden tests (`each` or `aggregate`), both the coordinator's.
// `audience`: `staff` for the CLI's own report (json and text carry each hidden
// test's message), else the learner's; a platform's format is always the learner's.
function gradeOne({ lab, seed, formats, source, functions, limitS, fdIn, fdOut, flag, hidden, audience }) {
  const wire = channel(fdIn, fdOut, { runCapBytes: RUN_CAP_BYTES });
  if (!LAB_OF.has(lab)) throw new Error(`unknown lab ${lab}`);
  const { hasStore, ops } = LAB_OF.get(lab);
  if (hasStore && !stores) throw new Error(`lab ${lab}'s store is not loaded (the pool sends load-stores first)`);
  const store = hasStore ? stores.get(lab) : null;
  const shared = new Int32Array(flag);
  const state = { problem: null, closed: false, calls: 0, ops: 0, usedStore: false };
  const stop = (e) => {
    if (e instanceof Interference) state.problem ??= e.message;
    else if (e instanceof Closed) state.closed = true;
    else throw e;
  };
  // What a learner call answers once its sandbox is gone or no longer believed.
  const gone = () => (Atomics.load(shared, JOB.ended) === ENDED.timeout
    ? JSON.stringify({ error: { kind: 'timeout', limit_s: limitS } })
    : JSON.stringify({ error: { kind: 'host', message: 'The grader stopped running your code.' } }));

  // Answers the world operations of one call until it returns; `hasDb`: the call
  // runs on a connection of the store's (store.begin set it).
  function answerOps(world, hasDb) {
    for (;;) {
      const m = wire.receive();
      if (m.t === 'ret') {
        if (typeof m.v !== 'string') throw new Interference('it answered a call with something other than text');
        if (saysTimeout(m.v)) throw new Interference(TIMEOUT_IS_OURS);
        return m.v;
      }
      if (m.t !== 'op') throw new Interference(`it sent "${String(m.t).slice(0, 20)}" during a call`);
      const signature = world && Object.hasOwn(ops, m.op) ? ops[m.op] : null;
      if (!signature) throw new Interference('it asked for a world operation this call does not have');
      if (!argsFit(m.args, signature)) throw new Interference(`it asked for ${m.op} with arguments of the wrong types`);
      if (++state.ops > RUN_CAP_OPS) throw new Interference(`it asked for more than ${RUN_CAP_OPS} world operations`);
      let reply;
      if (hasStore) {
        if (!hasDb) throw new Interference('it used the database in a call that has none');
        if (m.op === 'sql' && nestsDeeper(m.args[2], PARAMS_DEPTH_CAP)) {
          throw new Interference(`it sent statement parameters nested deeper than ${PARAMS_DEPTH_CAP}`);
        }
        reply = { t: 'ans', v: store[m.op](...m.args) };
      } else {
        try {
          const v = world.op(m.op, ...m.args);
          reply = v === undefined ? { t: 'ans' } : { t: 'ans', v };
        } catch (err) {
          reply = { t: 'ans', threw: String((err && err.message) || err) };
        }
      }
      wire.send(reply);
    }
  }

  const solution = {
    call(fnName, argsJson, world) {
      try {
        if (state.problem || state.closed) return gone();
        state.calls++;
        if (world && hasStore) state.usedStore = true;
        const frame = { t: 'call', fn: fnName, args: argsJson, world: Boolean(world) };
        // A call of a store's lab starts its connection there ('' for one that has
        // none, like the courier lab's merge); other labs' calls have no store.
        const db = world && hasStore ? store.begin(argsJson, world) : '';
        if (!db) {
          wire.send(frame);
          return answerOps(world, false);
        }
        let v;
        try {
          wire.send({ ...frame, db });
          v = answerOps(world, true);
        } finally {
          // The store's verdict on the call (a transaction left open, SQL only
          // SQLite takes) fails the step, whatever the sandbox answered.
          const open = store.end(v);
          if (open) v = open;
        }
        return v;
      } catch (e) {
        stop(e);
        return gone();
      }
    },
    // The grader's own operations on the lab's database: answered by the store
    // here, never sent to a sandbox. Once the sandbox is gone, the run is over.
    store(op, argsJson) {
      if (state.problem || state.closed) return gone();
      if (!hasStore) throw new Error(`lab ${lab} keeps no database`);
      state.usedStore = true;
      return store.op(op, argsJson);
    },
    take_output() {
      if (state.problem || state.closed) return undefined;
      try {
        wire.send({ t: 'out' });
        const m = wire.receive();
        if (m.t !== 'out' || (m.v !== null && typeof m.v !== 'string')) throw new Interference('it answered for its output with something else');
        return m.v ?? undefined;
      } catch (e) {
        stop(e);
        return undefined;
      }
    },
  };

  let loaded = null;
  try {
    wire.send({ t: 'load', lab, source, functions, limit_s: limitS, ops: Object.keys(ops) });
    const m = wire.receive();
    if (m.t !== 'loaded' || typeof m.v !== 'string') throw new Interference('it did not answer the load');
    try {
      loaded = JSON.parse(m.v);
    } catch {
      throw new Interference('its answer to the load is not JSON');
    }
    if (!loaded || typeof loaded !== 'object') throw new Interference('its answer to the load is not an object');
  } catch (e) {
    stop(e);
  }
  const result = { outputs: null, loadError: null, problem: null, closed: false, calls: 0, ops: 0, bytes: 0 };
  if (loaded && typeof loaded.error === 'string') result.loadError = loaded.error;
  else if (loaded && loaded.timeout !== undefined) state.problem ??= TIMEOUT_IS_OURS;
  else if (loaded && Array.isArray(loaded.ok)) result.outputs = JSON.parse(grader.grade_formats(lab, solution, seed, formats, hidden?.seed ?? undefined, hidden?.statuses ?? undefined, audience ?? undefined));
  else if (loaded) state.problem ??= 'its answer to the load has neither ok, error nor timeout';
  if (state.usedStore) storeSubmissions++;
  Object.assign(result, {
    problem: state.problem, closed: state.closed, calls: state.calls, ops: state.ops, bytes: wire.receivedBytes,
    storeSubmissions, retire: storeSubmissions > 0,
  });
  return result;
}

parentPort.on('message', async (m) => {
  if (m.t === 'load-stores') {
    try {
      if (!stores) await loadStores();
    } catch (e) {
      // The pool's 'error' handler keeps what went wrong; the slot gets a new thread.
      throw new Error(`the grading thread's store did not load: ${String((e && e.stack) || e).slice(0, 2000)}`);
    }
    parentPort.postMessage({ t: 'stores-up' });
  } else if (m.t === 'await-ready') {
    parentPort.postMessage({ t: 'ready', sid: m.sid, problem: awaitReady(m) });
  } else if (m.t === 'grade') {
    if (storeSubmissions > 0) {
      // Never sent by the pool, which retires a thread whose store was used.
      parentPort.postMessage({ t: 'graded', id: m.id, failure: 'a retired grading thread was handed a submission' });
      process.exit(1);
    }
    let result;
    try {
      result = gradeOne(m);
    } catch (e) {
      // The grader itself failed (a trap in its WebAssembly, say): this thread is
      // not trusted with another submission; the pool replaces it.
      parentPort.postMessage({ t: 'graded', id: m.id, failure: String((e && e.stack) || e).slice(0, 2000) });
      process.exit(1);
    }
    parentPort.postMessage({ t: 'graded', id: m.id, ...result });
  }
});
// The thread's own entry in /proc (PID/task/TID): the pool's watch reads the CPU
// this thread spends for a submission (its statements run here) from it, without
// this thread's help, which a statement that runs long could not give.
parentPort.postMessage({ t: 'up', task: fs.readlinkSync('/proc/thread-self') });
