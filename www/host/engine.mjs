// The engine host: joins Pyodide (which runs the learner's Python through
// solution_runner.py) to the grader (Rust compiled to WASM, which owns the tests, the
// world and the verdicts). The browser worker and the Node tests both use it, so
// what the tests check is what the page runs.

// Where solution_runner.py lives (as the module delivery_lab_bridge) inside Pyodide's file system; importing it from a file
// (rather than exec'ing a string) gives its frames a name we can recognise.
const BRIDGE_DIR = '/delivery_lab';
const BRIDGE_MODULE = 'delivery_lab_bridge';

/** The Python module name of a lab's side of the bridge (`LabInfo::bridge_py`). */
export const labModule = (labId) => `delivery_lab_${labId.replace(/-/g, '_')}`;
/** The Python module name of a lab's store (`LabInfo::store_py`). */
const storeModule = (labId) => `${labModule(labId)}_store`;

// The world reaches Python through one function per interpreter, bound once, not
// as a JsProxy made (and torn down) per call with `op` looked up per operation:
// measured, that was a large part of a call's crossing. `current` is the world of
// the call under way only, so a reference kept past it reaches nothing. Bound at
// the first call, not before: a memory snapshot (taken before any call) must
// hold no JavaScript reference, and a restored interpreter binds its own.
const worldSlots = new WeakMap();
function worldSlotOf(pyodide) {
  let slot = worldSlots.get(pyodide);
  if (!slot) {
    slot = { current: null };
    // The arguments as given: a world may count them (the CLI sandbox's remote one).
    slot.op = (...args) => {
      if (slot.current === null) {
        throw new Error('This world belongs to a call that has already returned; use the one passed to the current call');
      }
      return slot.current.op(...args);
    };
    worldSlots.set(pyodide, slot);
  }
  return slot;
}

/**
 * The bridge's entry points in `pyodide` (solution_runner.py imported from a file, once,
 * with each lab's own Python side beside it: `labs`, [{id, bridge_py, store_py?}]
 * as the registry gives them): `useLab(id)`, `load(source, functionsJson, limitS)`,
 * `call(fnName, argsJson, world)`, `takeOutput()`, and a lab's store, `store(id)`,
 * when its `store_py` is given (the page and the grading thread give it; a sandbox
 * never has it). The page's engine and the grading CLI's sandbox and grading
 * thread all use it. `bindWorld`: a call's world is the grader's WASM JsWorld (only
 * `op`), reached through the bound function (worldSlotOf); otherwise (the CLI
 * sandbox's remote world, which carries more than `op`) it crosses as a proxy of
 * its own.
 */
export function bridgeOf(pyodide, bridgeSource, labs = [], { bindWorld = false } = {}) {
  if (!bridgeSource) throw new Error('bridgeOf: bridgeSource (the text of solution_runner.py) is required');
  pyodide.FS.mkdirTree(BRIDGE_DIR);
  pyodide.FS.writeFile(`${BRIDGE_DIR}/${BRIDGE_MODULE}.py`, bridgeSource);
  for (const lab of labs) {
    pyodide.FS.writeFile(`${BRIDGE_DIR}/${labModule(lab.id)}.py`, lab.bridge_py);
    if (lab.store_py) pyodide.FS.writeFile(`${BRIDGE_DIR}/${storeModule(lab.id)}.py`, lab.store_py);
  }
  const sys = pyodide.pyimport('sys');
  if (!sys.path.includes(BRIDGE_DIR)) sys.path.insert(0, BRIDGE_DIR);
  sys.destroy();
  const bridge = pyodide.pyimport(BRIDGE_MODULE);
  // Imported now (or found in sys.modules, restored from a snapshot that has them).
  const modules = new Map(labs.map((lab) => [lab.id, pyodide.pyimport(labModule(lab.id))]));
  const moduleOf = (id) => {
    if (!modules.has(id)) throw new Error(`bridgeOf: no Python side was given for lab ${id}`);
    return modules.get(id);
  };
  // Imported when a host asks for it: only the hosts that keep a store do.
  const stores = new Map();
  const storeOf = (id) => {
    if (!stores.has(id)) {
      if (!labs.some((lab) => lab.id === id && lab.store_py)) throw new Error(`bridgeOf: no store was given for lab ${id}`);
      stores.set(id, pyodide.pyimport(storeModule(id)));
    }
    return stores.get(id);
  };
  // Kept for the engine's life: looking a PyProxy up again per call would cost
  // more than the call itself.
  const call = bridge.call;
  const takeOutput = bridge.take_output;
  const storeOp = bridge.store_op;
  const slot = worldSlotOf(pyodide);
  // bridge.call and store_op catch what happens in them; an interrupt that lands
  // just outside their try, or a fault of the host itself, gets here.
  const thrown = (e, limitS) => (e && e.type === 'KeyboardInterrupt'
    ? JSON.stringify({ error: { kind: 'timeout', limit_s: limitS } })
    : JSON.stringify({ error: { kind: 'host', message: `The Python host failed: ${e && e.message || e}` } }));
  let bound = false;
  // Per learner function, its call with the bound world (bridge.bound_caller): the
  // function's name is not converted into Python again at each call.
  const boundCalls = new Map();
  const boundCall = (fnName) => {
    let f = boundCalls.get(fnName);
    if (!f) boundCalls.set(fnName, (f = bridge.bound_caller(fnName)));
    return f;
  };
  return {
    /** The lab whose calls this interpreter runs from now on. */
    useLab(id) {
      moduleOf(id);
      bridge.use_lab(labModule(id));
    },
    load: bridge.load,
    /** The grading CLI's sandbox: no interrupts; a KeyboardInterrupt is the code's own. */
    noInterrupts: () => bridge.no_interrupts(),
    /**
     * Lab `id`'s store, the run's database (its registry entry's `store_py`), for a
     * host that keeps it. `op(op, argsJson)`: the grader's own operations on it
     * (`LearnerHost::store`), never a learner call. The grading thread answers a
     * sandbox's requests with `begin`, `sql`, `send`, `lookup` and `end`. `beside`
     * (the page): the learner's code runs in this interpreter too, and its `db`
     * reaches the store here.
     */
    store(id, { beside = false } = {}) {
      const m = storeOf(id);
      if (beside) moduleOf(id).use_local_store(m);
      return {
        op(name, argsJson) {
          try {
            return storeOp(m, name, argsJson);
          } catch (e) {
            return thrown(e);
          }
        },
        begin: m.store_begin,
        sql: m.store_sql,
        send: m.store_send,
        lookup: m.store_lookup,
        end: m.store_end,
      };
    },
    /** One learner call; always answers the JSON text the grader reads. */
    call(fnName, argsJson, world, limitS) {
      const w = world ?? null;
      const viaSlot = bindWorld && w !== null;
      if (viaSlot) {
        if (!bound) {
          bridge.bind_world_op(slot.op);
          bound = true;
        }
        slot.current = w;
      }
      try {
        return viaSlot ? boundCall(fnName)(argsJson, true) : call(fnName, argsJson, w);
      } catch (e) {
        return thrown(e, limitS);
      } finally {
        slot.current = null;
      }
    },
    takeOutput() {
      const out = takeOutput();
      return typeof out === 'string' ? out : undefined;
    },
  };
}

/** The largest seed: the grader takes a seed as a 32-bit number (src/wasm.rs). */
export const SEED_MAX = 0xffffffff;

/** The labs' registry lists them in course order; with no lab named, the first. */
export const firstLab = (grader) => JSON.parse(grader.labs())[0].id;

/**
 * @param {object} o
 * @param {object} o.pyodide       a loaded Pyodide instance
 * @param {Function} o.Grader      the Grader class from pkg/delivery_lab.js (already init'ed)
 * @param {string} o.bridgeSource  the text of host/solution_runner.py
 * @param {string} [o.labId]
 */
export function createEngine({ pyodide, Grader, bridgeSource, labId }) {
  // One long-lived Grader: it parses and checks the lab's cases once.
  const grader = new Grader();
  labId ??= firstLab(grader);
  const lab = JSON.parse(grader.lab(labId));
  const py = bridgeOf(pyodide, bridgeSource, [lab], { bindWorld: true });
  py.useLab(labId);
  const functionsJson = JSON.stringify(lab.functions);
  // A lab whose calls get a database: its store lives here, beside the learner's code.
  const store = lab.store ? py.store(labId, { beside: true }) : null;

  // The object the grader calls into. It runs each learner function with the
  // world the grader passes, and hands back the captured prints per test; the
  // grader's operations on the lab's database go to `store`.
  const solution = {
    // `world` is the run's one JsWorld (src/wasm.rs): it answers only while this
    // call runs, and is not freed here.
    call: (fnName, argsJson, world) => py.call(fnName, argsJson, world, lab.time_limit_s),
    ...(store ? { store: store.op } : {}),
    take_output: () => py.takeOutput(),
  };

  const seedOf = (seed) => (seed === undefined || seed === null ? lab.default_seed : seed);

  function errorReport(message, seed, hiddenStatuses) {
    return JSON.parse(grader.error_report(labId, seedOf(seed), message, undefined, hiddenStatuses));
  }

  /** The report of a run stopped at the limit; `only`: a run of these tests alone (run()'s). */
  function timeoutReport(message, seed, hiddenStatuses, only) {
    return JSON.parse(grader.timeout_report(labId, seedOf(seed), message, undefined, hiddenStatuses, only));
  }

  /**
   * Grades `source`; returns the report object (the engine's JSON, parsed).
   * `verdict`: stop at the first failed test (mutation testing asks only whether
   * it fails); never for a learner. `hiddenSeed`: the hidden tests' variant (a
   * 32-bit number, for a lab whose `hidden_variants` is true; absent, the hidden
   * cases as written); no report shows it. `hiddenStatuses`: `each` (the default) or
   * `aggregate` (only how many hidden tests passed). `only`: test names, run alone
   * (the report lists them alone and says `partial: true`; none hidden when
   * `hiddenStatuses` is `aggregate`); not with `verdict`.
   */
  function run(source, { seed, verdict = false, hiddenSeed, hiddenStatuses, only } = {}) {
    if (verdict && only) throw new Error('run(): `only` and `verdict` do not go together');
    seed = seedOf(seed);
    const loaded = JSON.parse(py.load(String(source), functionsJson, lab.time_limit_s));
    if (loaded.error) return errorReport(loaded.error, seed, hiddenStatuses);
    if (loaded.timeout) return timeoutReport(loaded.timeout, seed, hiddenStatuses, only);
    return JSON.parse(verdict
      ? grader.verdict(labId, solution, seed, hiddenSeed)
      : grader.grade(labId, solution, seed, undefined, hiddenSeed, hiddenStatuses, only));
  }

  return { lab, grader, run, errorReport, timeoutReport };
}
