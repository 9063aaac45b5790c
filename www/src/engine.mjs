// The engine host: joins Pyodide (which runs the learner's Python through
// bridge.py) to the grader (Rust compiled to WASM, which owns the tests, the
// world and the verdicts). The browser worker and the Node tests both use it, so
// what the tests check is what the page runs.

export const LAB_ID = 'deliver-once';

// Where bridge.py lives inside Pyodide's file system; importing it from a file
// (rather than exec'ing a string) gives its frames a name we can recognise.
const BRIDGE_DIR = '/delivery_lab';
const BRIDGE_MODULE = 'delivery_lab_bridge';

/**
 * @param {object} o
 * @param {object} o.pyodide       a loaded Pyodide instance
 * @param {Function} o.Grader      the Grader class from pkg/delivery_lab.js (already init'ed)
 * @param {string} o.bridgeSource  the text of src/bridge.py
 * @param {string} [o.labId]
 */
// The world's operations a learner call can reach (src/wasm.rs `World`).
export const WORLD_OPS = ['now_s', 'kv_get', 'kv_set', 'kv_delete', 'send', 'uniform'];
// The courier lab's world (src/wasm.rs `CourierWorld`).
export const COURIER_OPS = ['statement', 'send', 'lookup'];

// A stand-in for the world of one call that forwards each operation to it and
// records the operation, its arguments and its answer (or what it threw).
function recordingWorld(world, ops) {
  if (!world) return world; // the host's own operations have no world
  const recorder = {};
  for (const op of ('statement' in world ? COURIER_OPS : WORLD_OPS)) {
    recorder[op] = (...args) => {
      const rec = { op, args: args.map((a) => (a === undefined ? null : a)) };
      ops.push(rec);
      try {
        const result = world[op](...args);
        rec.result = result === undefined ? null : result;
        return result;
      } catch (e) {
        rec.threw = String((e && e.message) || e);
        throw e;
      }
    };
  }
  return recorder;
}

export function createEngine({ pyodide, Grader, bridgeSource, labId = LAB_ID }) {
  if (!bridgeSource) throw new Error('createEngine: bridgeSource (the text of bridge.py) is required');
  // One long-lived Grader: it parses and checks the lab's cases once.
  const grader = new Grader();
  const lab = JSON.parse(grader.lab(labId));

  pyodide.FS.mkdirTree(BRIDGE_DIR);
  pyodide.FS.writeFile(`${BRIDGE_DIR}/${BRIDGE_MODULE}.py`, bridgeSource);
  const sys = pyodide.pyimport('sys');
  if (!sys.path.includes(BRIDGE_DIR)) sys.path.insert(0, BRIDGE_DIR);
  sys.destroy();
  const bridge = pyodide.pyimport(BRIDGE_MODULE);
  // Kept for the engine's life: looking a PyProxy up again per call would cost
  // more than the call itself.
  const pyLoad = bridge.load;
  const pyCall = bridge.call;
  const pyTakeOutput = bridge.take_output;
  const functionsJson = JSON.stringify(lab.functions);

  // When a run records a transcript (the grading CLI does: its coordinator
  // replays it against its own grader, outside the sandbox), every learner call,
  // every world operation with its arguments and answer, and every captured
  // output are appended here, in the order the grader saw them.
  let transcript = null;

  // The object the grader calls into. It runs each learner function with the
  // world the grader passes, and hands back the captured prints per test.
  const solution = {
    call(fnName, argsJson, world) {
      let entry = null;
      try {
        if (transcript) {
          entry = { t: 'call', fn: fnName, args: argsJson, ops: [], ret: null };
          transcript.push(entry);
          entry.ret = pyCall(fnName, argsJson, recordingWorld(world, entry.ops));
          return entry.ret;
        }
        return pyCall(fnName, argsJson, world);
      } catch (e) {
        // bridge.call catches the learner's errors; an interrupt that lands just
        // outside its try, or a fault of the host itself, gets here.
        const answer = e && e.type === 'KeyboardInterrupt'
          ? JSON.stringify({ error: { kind: 'timeout', limit_s: lab.time_limit_s } })
          : JSON.stringify({ error: { kind: 'host', message: `The Python host failed: ${e && e.message || e}` } });
        if (entry) entry.ret = answer;
        return answer;
      } finally {
        // The world is valid for this call only; freeing its small JS-owned
        // wrapper now spares the GC thousands of them per run.
        if (world && typeof world.free === 'function') world.free();
      }
    },
    take_output() {
      let text;
      try {
        const out = pyTakeOutput();
        text = typeof out === 'string' ? out : undefined;
      } finally {
        // Recorded even when it throws (an interpreter that exited): the grader
        // then goes on without the output, and so must the replay.
        if (transcript) transcript.push({ t: 'out', out: text ?? null });
      }
      return text;
    },
  };

  const seedOf = (seed) => (seed === undefined || seed === null ? lab.default_seed : seed);

  function errorReport(message, seed) {
    return JSON.parse(grader.error_report(labId, seedOf(seed), message));
  }

  function timeoutReport(message, seed) {
    return JSON.parse(grader.timeout_report(labId, seedOf(seed), message));
  }

  /**
   * Grades `source`; returns the report object (the engine's JSON, parsed).
   * With `transcript` (an array), the run's learner calls are recorded into it
   * (see above); the report is the same either way.
   */
  function run(source, { seed, transcript: record } = {}) {
    seed = seedOf(seed);
    const loaded = JSON.parse(pyLoad(String(source), functionsJson, lab.time_limit_s));
    if (loaded.error) return errorReport(loaded.error, seed);
    if (loaded.timeout) return timeoutReport(loaded.timeout, seed);
    transcript = Array.isArray(record) ? record : null;
    try {
      return JSON.parse(grader.grade(labId, solution, seed));
    } finally {
      transcript = null;
    }
  }

  return { lab, grader, run, errorReport, timeoutReport };
}
