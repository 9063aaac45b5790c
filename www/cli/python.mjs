// Pyodide as the grading CLI loads it: in a sandbox (sandbox.mjs, the learner's
// interpreter) and in a grading thread (grader_thread.mjs, the courier lab's
// trusted database), restored from the pool's memory snapshot when there is one.
import fs from 'node:fs';
import { capWasmMemory } from './wasm_memcap.mjs';

const WWW = new URL('../', import.meta.url);
export const PYODIDE_DIR = new URL('node_modules/pyodide/', WWW).pathname;
export const BRIDGE_FILE = new URL('src/bridge.py', WWW);
// What the snapshot has imported (the bridge's own imports, and the bridge).
export const SNAPSHOT_IMPORTS = 'import json, linecache, math, sys, traceback, types, random, sqlite3';

/**
 * Pyodide with its memory capped at `memoryMb`, restored from `snapshotFile` when
 * given (a normal boot otherwise, or with `makeSnapshot`).
 */
export async function loadPython({ memoryMb, snapshotFile = null, makeSnapshot = false }) {
  // Pyodide defines its memory inside its module, so the maximum is written into
  // the bytes before they are compiled.
  const pyodideBytes = fs.readFileSync(`${PYODIDE_DIR}pyodide.asm.wasm`);
  const origInstantiate = WebAssembly.instantiate.bind(WebAssembly);
  WebAssembly.instantiate = async function instantiate(src, imports) {
    const isPyodide = src && !(src instanceof WebAssembly.Module) && src.byteLength === pyodideBytes.byteLength;
    if (!isPyodide) return origInstantiate(src, imports);
    const module = await WebAssembly.compile(capWasmMemory(pyodideBytes, memoryMb * 16).bytes);
    return { module, instance: await origInstantiate(module, imports) };
  };
  // Pyodide's loader reads its binary again, for nothing: the capped module above
  // is what gets instantiated. It is handed the bytes already read (9.6 MB less).
  const readFile = fs.promises.readFile;
  fs.promises.readFile = function cachedRead(file, ...rest) {
    if (file === `${PYODIDE_DIR}pyodide.asm.wasm`) return Promise.resolve(pyodideBytes);
    return readFile.call(this, file, ...rest);
  };
  try {
    const { loadPyodide } = await import(new URL('pyodide.mjs', `file://${PYODIDE_DIR}`).href);
    const quiet = () => {};
    const options = {
      indexURL: PYODIDE_DIR,
      lockFileContents: JSON.parse(fs.readFileSync(`${PYODIDE_DIR}pyodide-lock.json`, 'utf8')),
      stdout: quiet,
      stderr: quiet,
      stdin: () => null,
      env: { HOME: '/home/pyodide' },
    };
    if (makeSnapshot) options._makeSnapshot = true;
    else if (snapshotFile) options._loadSnapshot = new Uint8Array(fs.readFileSync(snapshotFile));
    return await loadPyodide(options);
  } finally {
    WebAssembly.instantiate = origInstantiate;
    fs.promises.readFile = readFile;
  }
}
