// The engine in Node: Pyodide from node_modules, the grader from www/pkg. Used by
// the bridge tests and the benchmark, so they exercise the same engine.mjs and
// bridge.py as the browser worker.
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createEngine } from './engine.mjs';

const WWW = new URL('../', import.meta.url);
export const paths = {
  www: fileURLToPath(WWW),
  pyodide: fileURLToPath(new URL('node_modules/pyodide/', WWW)),
  pkgJs: new URL('pkg/delivery_lab.js', WWW).href,
  pkgWasm: fileURLToPath(new URL('pkg/delivery_lab_bg.wasm', WWW)),
  bridge: fileURLToPath(new URL('src/bridge.py', WWW)),
};

/** Loads the grader (WASM) and returns its module: { Grader, ... }. */
export async function loadGrader() {
  if (!fs.existsSync(paths.pkgWasm)) {
    throw new Error(`${paths.pkgWasm} is missing: build it with scripts/build-wasm.sh from the repo root`);
  }
  const pkg = await import(paths.pkgJs);
  await pkg.default({ module_or_path: fs.readFileSync(paths.pkgWasm) });
  return pkg;
}

/**
 * Pyodide plus the grader, joined by engine.mjs. `interruptBuffer` (an Int32Array on
 * a SharedArrayBuffer): another thread writes 2 (SIGINT) into it at the time limit,
 * as the page's runner does for its worker.
 */
export async function loadNodeEngine({ labId, interruptBuffer } = {}) {
  const { loadPyodide } = await import('pyodide');
  const [pkg, pyodide] = await Promise.all([loadGrader(), loadPyodide({ indexURL: paths.pyodide })]);
  if (interruptBuffer) pyodide.setInterruptBuffer(interruptBuffer);
  const bridgeSource = fs.readFileSync(paths.bridge, 'utf8');
  return createEngine({ pyodide, Grader: pkg.Grader, bridgeSource, ...(labId ? { labId } : {}) });
}
