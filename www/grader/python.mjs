// Pyodide as the grading CLI loads it: in a sandbox (sandbox.mjs, the learner's
// interpreter) and in a grading thread (grader_thread.mjs, the courier lab's
// trusted database), restored from the pool's memory snapshot when there is one.
//
// A sandbox lives for one submission, so its start is most of what a submission
// costs. Two files the pool makes once (trusted steps, no learner code) cut it:
// the snapshot's index of pages that are not zero (a sandbox reads only those,
// straight into the interpreter's memory), and V8's code cache of Pyodide's JS.
import fs from 'node:fs';
import vm from 'node:vm';
import { capWasmMemory } from './wasm_memcap.mjs';

const WWW = new URL('../', import.meta.url);
export const PYODIDE_DIR = new URL('node_modules/pyodide/', WWW).pathname;
export const BRIDGE_FILE = new URL('host/solution_runner.py', WWW);
// What the snapshot has imported (the bridge's own imports, and the bridge).
export const SNAPSHOT_IMPORTS = 'import json, linecache, math, sys, traceback, types, random, sqlite3';

const ASM_FILE = `${PYODIDE_DIR}pyodide.asm.mjs`;
const ASM_EXPORT = 'export default _createPyodideModule;\n';
const PAGE = 4096;

let compiledScript = null;
/** V8's code cache of Pyodide's JS as the last loadPython with `codeCache` ran it
 *  (the functions a start runs are compiled by then); empty without one. */
export const pyodideCodeCache = () => (compiledScript ? compiledScript.createCachedData() : new Uint8Array(0));

/** Where the snapshot's index of non-zero pages is kept, beside the snapshot. */
export const runsFileOf = (snapshotFile) => `${snapshotFile}.runs`;
/** The labs' Python sides as the registry gives them ([{id, bridge_py}]: the
 *  sandbox has no grader to ask), written by the pool beside the snapshot. */
export const labsFileOf = (snapshotFile) => `${snapshotFile}.labs.json`;

/**
 * Pyodide's big JS (pyodide.asm.mjs, 1.2 MB) compiled as a classic script instead
 * of the ES module Pyodide's loader imports, because only a script takes a V8 code
 * cache in Node 20. The text is the module's, with its two module-only forms given
 * as parameters: its URL and import() (import() in a script read from a code cache
 * finds no loader in Node 20). vm.Script compiles trusted text from a read-only
 * file; code generation from strings stays disallowed for everything that runs.
 * Returns { create, script }, or null for a Pyodide whose text is not the known
 * shape (its own module is loaded then, with no cache).
 */
function compiledPyodide(cachedData) {
  const text = fs.readFileSync(ASM_FILE, 'utf8');
  if (!text.endsWith(ASM_EXPORT)) return null;
  const body = text.slice(0, -ASM_EXPORT.length)
    .replaceAll('import.meta.url', '__moduleUrl')
    .replace(/(?<![\w$.])import\(/g, '__import(');
  const script = new vm.Script(`(function (__moduleUrl, __import) {"use strict";${body}\nreturn _createPyodideModule;})`,
    { filename: ASM_FILE, cachedData });
  return { create: script.runInThisContext()(`file://${ASM_FILE}`, (specifier) => import(specifier)), script };
}

/** The runs [start, end) of a Pyodide snapshot past its header that are not all
 *  zero, in pages; gaps of a few pages are read rather than skipped. */
function nonZeroRuns(snapshot) {
  const heapStart = new Uint32Array(snapshot.buffer, snapshot.byteOffset, 4)[1];
  const words = new BigUint64Array(snapshot.buffer, snapshot.byteOffset, snapshot.length >> 3);
  const runs = [];
  for (let p = heapStart; p < snapshot.length; p += PAGE) {
    const end = Math.min(p + PAGE, snapshot.length);
    let zero = true;
    for (let w = p >> 3; w < end >> 3; w++) if (words[w] !== 0n) { zero = false; break; }
    if (zero) continue;
    const last = runs[runs.length - 1];
    if (last && p - last[1] <= 4 * PAGE) last[1] = end; else runs.push([p, end]);
  }
  return { heapStart, length: snapshot.length, runs };
}

/** Writes a snapshot and its index of non-zero runs (the pool's trusted step). */
export function writeSnapshot(file, snapshot) {
  if (snapshot.length % 8) throw new Error('the snapshot is not a whole number of words');
  fs.writeFileSync(file, snapshot);
  fs.writeFileSync(runsFileOf(file), JSON.stringify(nonZeroRuns(snapshot)));
}

/**
 * A snapshot read by its runs: `header` (what Pyodide's restore reads: its checks
 * and its JS state; given only that, it copies no memory), `length` (the memory's
 * size at the start, as Pyodide would set it) and `restore(HEAP8)`, which reads the
 * runs into the memory and makes sure every other page is zero. About half of the
 * 30 MB are zero pages (measured: a start's restore about 100 -> 15 ms of CPU,
 * mostly page faults, and 45 MB less memory per sandbox).
 */
function sparseSnapshot(file) {
  const { heapStart, length, runs } = JSON.parse(fs.readFileSync(runsFileOf(file), 'utf8'));
  const fd = fs.openSync(file, 'r');
  if (fs.fstatSync(fd).size !== length) throw new Error('the snapshot and its index do not match');
  const header = new Uint8Array(heapStart);
  fs.readSync(fd, header, 0, heapStart, 0);
  const zeros = new Uint8Array(64 * 1024);
  // Pages the snapshot holds as zero may not be zero in the fresh memory (the
  // module's data, what its start wrote): compared (reads, no copies), cleared if not.
  const clear = (heap, from, to) => {
    for (let p = from; p < to; p += zeros.length) {
      const n = Math.min(zeros.length, to - p);
      if (Buffer.compare(heap.subarray(p, p + n), zeros.subarray(0, n)) !== 0) heap.fill(0, p, p + n);
    }
  };
  const restore = (heap8) => {
    const heap = new Uint8Array(heap8.buffer, heap8.byteOffset, heap8.byteLength);
    let done = 0;
    for (const [start, end] of runs) {
      if (start < heapStart + done || end > length) throw new Error('the snapshot\'s index is not its own');
      clear(heap, done, start - heapStart);
      for (let off = start; off < end;) {
        const n = fs.readSync(fd, heap, off - heapStart, end - off, off);
        if (n === 0) throw new Error('the snapshot file is cut short');
        off += n;
      }
      done = end - heapStart;
    }
    clear(heap, done, length - heapStart);
    fs.closeSync(fd);
  };
  return { header, length, restore };
}

/**
 * Pyodide with its memory capped at `memoryMb`. `snapshotFile`: restored from it
 * (whole, or by its runs with `sparse`); `makeSnapshot`: a normal boot that can make
 * one. `codeCache` (bytes, empty for none yet): Pyodide's JS compiled with V8's code
 * cache from `pyodideCodeCache` (null: Pyodide's own module, as the page loads it).
 */
export async function loadPython({ memoryMb, snapshotFile = null, makeSnapshot = false, sparse = false, codeCache = null }) {
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
    const compiled = codeCache ? compiledPyodide(codeCache.length ? codeCache : undefined) : null;
    const quiet = () => {};
    const options = {
      indexURL: PYODIDE_DIR,
      lockFileContents: JSON.parse(fs.readFileSync(`${PYODIDE_DIR}pyodide-lock.json`, 'utf8')),
      stdout: quiet,
      stderr: quiet,
      stdin: () => null,
      env: { HOME: '/home/pyodide' },
      ...(compiled ? { createPyodideModule: compiled.create } : {}),
    };
    if (makeSnapshot) options._makeSnapshot = true;
    else if (snapshotFile && sparse) {
      const snapshot = sparseSnapshot(snapshotFile);
      const create = compiled ? compiled.create : (await import(`file://${ASM_FILE}`)).default;
      options._loadSnapshot = snapshot.header;
      options.createPyodideModule = async (settings) => {
        settings.INITIAL_MEMORY = snapshot.length;
        const module = await create(settings);
        const restoreHeader = module.API.restoreSnapshot;
        module.API.restoreSnapshot = (header) => {
          const state = restoreHeader(header);
          snapshot.restore(module.HEAP8);
          return state;
        };
        return module;
      };
    } else if (snapshotFile) options._loadSnapshot = new Uint8Array(fs.readFileSync(snapshotFile));
    compiledScript = compiled?.script ?? null;
    return await loadPyodide(options);
  } finally {
    WebAssembly.instantiate = origInstantiate;
    fs.promises.readFile = readFile;
  }
}
