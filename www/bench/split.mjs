// Where a warm run of lab 1 spends its time (issue 13, item 2), in Node with the
// page's own engine (engine.mjs, solution_runner.py, the grader's WASM): the whole run, the
// part inside Python (bridge.call: the learner's code, the lab's objects, JSON),
// and of that the world's operations (Python -> JS -> WASM); what is left is the
// grader in WASM (tests, reference, worlds, report) and the crossings into Python.
// Counts come from the same run. Printed by ./lab bench; `node bench/split.mjs` alone.
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createEngine } from '../host/engine.mjs';
import { loadGrader, paths } from '../host/node_host.mjs';

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];

/** The split, each figure the median of `runs` warm runs of the reference (ms). */
export async function warmRunSplit({ runs = 20 } = {}) {
  const { loadPyodide } = await import('pyodide');
  const [pkg, pyodide] = await Promise.all([loadGrader(), loadPyodide({ indexURL: paths.pyodide })]);
  const bridgeSource = fs.readFileSync(paths.bridge, 'utf8');
  const reference = fs.readFileSync(new URL('../../src/deliver_once/reference.py', import.meta.url), 'utf8');
  // An engine first, so that the bridge module exists to be wrapped; the engine
  // measured is made after, and so holds the wrapped call.
  createEngine({ pyodide, Grader: pkg.Grader, bridgeSource, labId: 'deliver-once' });
  pyodide.runPython(`
import time, delivery_lab_bridge as _b
_split = {"calls": 0, "s": 0.0}
def _timed(fn_name, args_json, world, _call=_b.call, _clock=time.perf_counter):
    t = _clock()
    try:
        return _call(fn_name, args_json, world)
    finally:
        _split["s"] += _clock() - t
        _split["calls"] += 1
_b.call = _timed
`);
  const engine = createEngine({ pyodide, Grader: pkg.Grader, bridgeSource, labId: 'deliver-once' });
  const op = pkg.JsWorld.prototype.op;
  let opMs = 0;
  let ops = 0;
  pkg.JsWorld.prototype.op = function timedOp(...args) {
    const t = performance.now();
    try {
      return op.apply(this, args);
    } finally {
      opMs += performance.now() - t;
      ops += 1;
    }
  };
  const split = pyodide.globals.get('_split');
  const rows = [];
  try {
    for (let i = 0; i < runs + 5; i++) {
      split.set('s', 0);
      split.set('calls', 0);
      opMs = 0;
      ops = 0;
      const t = performance.now();
      const report = engine.run(reference);
      const total = performance.now() - t;
      if (report.status !== 'pass') throw new Error(`the reference did not pass: ${report.status}`);
      if (i >= 5) rows.push({ total, python: split.get('s') * 1000, ops: opMs, calls: split.get('calls'), opCount: ops });
    }
  } finally {
    pkg.JsWorld.prototype.op = op;
    split.destroy();
  }
  const python = median(rows.map((r) => r.python));
  const total = median(rows.map((r) => r.total));
  return {
    total_ms: total,
    python_ms: python,
    world_ops_ms: median(rows.map((r) => r.ops)),
    outside_python_ms: total - python,
    calls: rows[0].calls,
    ops: rows[0].opCount,
  };
}

export function printSplit(s) {
  const f = (x) => `${x.toFixed(1)} ms`;
  console.log(`warm run of lab 1, where the time goes (Node, median of runs; goal: the whole run at or under 20 ms in the worker)`);
  console.log(`  whole run                                  ${f(s.total_ms)}`);
  console.log(`  inside Python (bridge.call, ${s.calls} calls)       ${f(s.python_ms)}`);
  console.log(`    of which world operations (${s.ops}, Python -> JS -> WASM)  ${f(s.world_ops_ms)}`);
  console.log(`  outside Python (the grader in WASM, and the crossings into Python)  ${f(s.outside_python_ms)}`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) printSplit(await warmRunSplit());
