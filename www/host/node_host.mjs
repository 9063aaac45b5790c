// The engine in Node: Pyodide from node_modules, the grader from www/pkg. Used by
// the bridge tests and the benchmark, so they exercise the same engine.mjs and
// solution_runner.py as the browser worker.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { createEngine } from './engine.mjs';

const WWW = new URL('../', import.meta.url);
export const paths = {
  www: fileURLToPath(WWW),
  pyodide: fileURLToPath(new URL('node_modules/pyodide/', WWW)),
  pkgJs: new URL('pkg/delivery_lab.js', WWW).href,
  pkgWasm: fileURLToPath(new URL('pkg/delivery_lab_bg.wasm', WWW)),
  bridge: fileURLToPath(new URL('host/solution_runner.py', WWW)),
};

/** The grader's two files (its JS and its WASM) in `dir` (www/pkg by default). */
export const graderFiles = (dir) => (dir
  ? { js: path.join(dir, 'delivery_lab.js'), wasm: path.join(dir, 'delivery_lab_bg.wasm') }
  : { js: fileURLToPath(paths.pkgJs), wasm: paths.pkgWasm });

/** Loads the grader (WASM) from `dir` (www/pkg by default: a grading pool passes its
 *  own pinned copy) and returns its module: { Grader, ... }. */
export function loadGrader({ dir } = {}) {
  const files = graderFiles(dir);
  // One instance per folder and process: the module's JS is cached by import anyway,
  // and its init keeps the first instance, so a second load only read the file again.
  let loading = loaded.get(files.wasm);
  if (!loading) {
    loading = (async () => {
      if (!fs.existsSync(files.wasm)) {
        throw new Error(`${files.wasm} is missing: build it with scripts/build-wasm.sh from the repo root`);
      }
      const pkg = await import(pathToFileURL(files.js).href);
      await pkg.default({ module_or_path: fs.readFileSync(files.wasm) });
      return pkg;
    })();
    loaded.set(files.wasm, loading);
    loading.catch(() => loaded.delete(files.wasm)); // a failed load may be tried again (say, once built)
  }
  return loading;
}
const loaded = new Map();

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
