// The grading CLI's interpreter snapshot, made once per build (issue 39): by
// `./lab build` (build.mjs) into www/snapshot/, and copied into each platform
// package by `./lab package`, never per run. A pool checks it against the build it
// belongs to (KEY_FILE, written beside it) and copies it into its own folder, where
// its sandboxes read it; no sandbox can write it (read-only to them, in a folder
// they do not see or cannot write: pool.mjs).
//
//   www/snapshot/pyodide.snapshot            Pyodide's memory with the bridge imported
//   www/snapshot/pyodide.snapshot.runs       its index of non-zero pages (python.mjs)
//   www/snapshot/pyodide.snapshot.labs.json  the labs' learner sides (from the grader)
//   www/snapshot/pyodide.code-cache-N[-tiered]  V8's code cache of Pyodide's JS, for
//                                            a sandbox's flags: N jobs' worth (1, 2+), and
//                                            with the optimizing tier (sandbox_command.mjs)
//   www/snapshot/key.json                    what they were made from (snapshotKey)
//
// A snapshot belongs to: the WASM grader (the labs' Python sides come from it),
// Pyodide (its version and binary), the host's Python files and the code that makes
// and restores it. A code cache also to Node's version and a sandbox's flags (V8
// refuses a cache made under other flags). A pool meeting a snapshot that is not
// its build's makes one for its run, as before, and says so (`./lab build` makes it
// once); `./lab` makes it again whenever it is stale (snapshot.mjs check).
//
//   node grader/snapshot.mjs check|make [DIR]   (exit 1 from check: stale or missing)
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { isRoot, jailCommand, PERMISSION_FLAG } from './jail.mjs';
import { labsFileOf, PYODIDE_DIR, runsFileOf } from './python.mjs';
import { SANDBOX, sandboxNodeFlags } from './sandbox_command.mjs';
import { releaseUid, takeUid } from './sandbox_procs.mjs';
import { buildNatives, NATIVES, nativesKey } from './fork_server.mjs';
import { graderFiles } from '../host/node_host.mjs';

const WWW = fileURLToPath(new URL('../', import.meta.url));
/** Where the build keeps it (in a platform package: grader/snapshot/, laid out alike). */
export const SNAPSHOT_DIR = path.join(WWW, 'snapshot');
export const SNAPSHOT_NAME = 'pyodide.snapshot';
export const KEY_FILE = 'key.json';
/** The code cache for a sandbox of a pool of `jobs` (its flags differ with shared
 *  cores), with the optimizing tier or not (`tierUp`). */
export const codeCacheName = (jobs, tierUp = false) => `pyodide.code-cache-${jobs > 1 ? 2 : 1}${tierUp ? '-tiered' : ''}`;
/** Every sandbox's flags a build makes a code cache for. */
export const FLAVOURS = Object.freeze([1, 2].flatMap((jobs) => [false, true].map((tierUp) => ({ jobs, tierUp }))));
/** The snapshot's files, by name, in a folder. */
export const snapshotFiles = () => [SNAPSHOT_NAME, path.basename(runsFileOf(SNAPSHOT_NAME)), path.basename(labsFileOf(SNAPSHOT_NAME))];

// The code that makes or restores the snapshot, and the host's Python it holds (the
// labs' Python sides come from the grader's WASM).
const MAKERS = ['grader/python.mjs', 'grader/sandbox.mjs', 'grader/wasm_memcap.mjs', 'host/engine.mjs', 'host/solution_runner.py'];

const sha = () => crypto.createHash('sha256');
function hashFile(h, file) {
  h.update(`${path.basename(file)}\0`);
  h.update(fs.readFileSync(file));
  h.update('\0');
}

/**
 * What a snapshot made now from the grader in `graderDir` (www/pkg when null) would
 * be made of, as one hash: the grader's WASM and JS, Pyodide's version and the size of
 * its binary, and MAKERS (the host's Python file, the code that makes and restores it).
 */
export function snapshotKey(graderDir = null) {
  const h = sha();
  const { js, wasm } = graderFiles(graderDir);
  hashFile(h, wasm);
  hashFile(h, js);
  const pyodide = JSON.parse(fs.readFileSync(path.join(PYODIDE_DIR, 'package.json'), 'utf8')).version;
  h.update(`pyodide ${pyodide} ${fs.statSync(path.join(PYODIDE_DIR, 'pyodide.asm.wasm')).size}\0`);
  for (const f of MAKERS) hashFile(h, path.join(WWW, f));
  return h.digest('hex');
}

/** A code cache's key: its snapshot's, Node's version and a sandbox's flags. */
export const codeCacheKey = (key, jobs, tierUp = false) => sha()
  .update(`${key}\0${process.version}\0${sandboxNodeFlags(jobs > 1, tierUp).join(' ')}`).digest('hex');

/** What `dir` holds (its KEY_FILE), or null. */
export function builtKey(dir) {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, KEY_FILE), 'utf8'));
  } catch {
    return null;
  }
}

/**
 * Which of a built snapshot's files fit the grader in `graderDir`: { snapshot, codeCache }
 * (booleans; a code cache, for `jobs` and `tierUp`, only with its snapshot), and `why`
 * not, for a message.
 */
export function fits(dir, graderDir, jobs, tierUp = false, key = snapshotKey(graderDir)) {
  const built = builtKey(dir);
  if (!built) return { snapshot: false, codeCache: false, why: `${dir} holds no snapshot` };
  if (built.snapshot !== key || !snapshotFiles().every((f) => fs.existsSync(path.join(dir, f)))) {
    return { snapshot: false, codeCache: false, why: `the snapshot in ${dir} was made for another build` };
  }
  const name = codeCacheName(jobs, tierUp);
  const codeCache = built.codeCaches?.[name] === codeCacheKey(key, jobs, tierUp) && fs.existsSync(path.join(dir, name));
  return { snapshot: true, codeCache, why: codeCache ? '' : `its code cache was made for another Node or other flags (${process.version})` };
}

/**
 * A trusted run of sandbox.mjs (no learner code) that may read www/ and `dir`, and
 * write only `outs`. Under root it runs as a sandbox uid (not in bubblewrap: it
 * writes into `dir`): `outs` are made first, empty and that uid's alone; once it has
 * ended they are root's again and read-only (0444) to every sandbox uid.
 */
export function makeFiles(dir, outs, flags, args, what) {
  const argv = [
    process.execPath, PERMISSION_FLAG, ...flags, '--no-warnings',
    `--allow-fs-read=${WWW}*`, `--allow-fs-read=${dir}/*`, ...outs.map((f) => `--allow-fs-write=${f}`),
    SANDBOX, ...args,
  ];
  let uid = null;
  let cmd = argv[0];
  let cmdArgs = argv.slice(1);
  if (isRoot()) {
    uid = takeUid();
    if (uid === null) return Promise.reject(new Error(`the ${what} could not be made: no sandbox uid is free`));
    for (const f of outs) {
      fs.writeFileSync(f, '', { mode: 0o600 });
      fs.chownSync(f, uid, uid);
    }
    // Its files are written by it: no file-size limit.
    ({ cmd, args: cmdArgs } = jailCommand(argv, [], { uid, bwrap: false, rlimits: { fsize: 'unlimited' } }));
  }
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, cmdArgs, { stdio: ['ignore', 'ignore', 'pipe'], env: {}, cwd: '/' });
    let err = '';
    child.stderr.on('data', (d) => { if (err.length < 8000) err += d; });
    child.on('error', (e) => { err += String(e); });
    child.on('close', (code) => {
      releaseUid(uid);
      const made = code === 0 && outs.every((f) => fs.existsSync(f) && (uid === null || fs.statSync(f).size > 0));
      for (const f of outs) {
        try {
          if (uid !== null) fs.chownSync(f, 0, 0);
          fs.chmodSync(f, 0o444);
        } catch { /* not made */ }
      }
      if (made) resolve();
      else reject(new Error(`the ${what} could not be made: ${err.slice(-2000)}`));
    });
  });
}

/** Whether `dir` holds the fork server's natives made from today's sources and Node. */
export function nativesFit(dir) {
  try {
    const built = JSON.parse(fs.readFileSync(path.join(dir, KEY_FILE), 'utf8'));
    return built.natives === nativesKey() && Object.values(NATIVES).every((f) => fs.existsSync(path.join(dir, f)));
  } catch {
    return false;
  }
}

/** The labs' learner sides as the grader lists them (a lab's store is never a sandbox's). */
export const labsOf = (grader) => JSON.parse(grader.labs()).map(({ id }) => ({ id, bridge_py: JSON.parse(grader.lab(id)).bridge_py }));

/** Makes the snapshot (its index, its labs' file) in `dir` from `labs` (labsOf). */
export async function makeSnapshotIn(dir, labs) {
  const file = path.join(dir, SNAPSHOT_NAME);
  fs.writeFileSync(labsFileOf(file), JSON.stringify(labs), { mode: 0o444 });
  await makeFiles(dir, [file, runsFileOf(file)], [], ['--make-snapshot', file], 'interpreter snapshot');
}

/** Makes the code cache for `jobs` and `tierUp` in `dir` (a sandbox's own start, with a sandbox's flags). */
export async function makeCodeCacheIn(dir, jobs, tierUp = false) {
  const out = path.join(dir, codeCacheName(jobs, tierUp));
  await makeFiles(dir, [out], sandboxNodeFlags(jobs > 1, tierUp), ['--make-code-cache', path.join(dir, SNAPSHOT_NAME), out], 'code cache');
}

/** Whether `dir` holds the snapshot and every code cache of the grader in `graderDir`. */
export const complete = (dir, graderDir = null) => {
  const key = snapshotKey(graderDir);
  return FLAVOURS.every(({ jobs, tierUp }) => fits(dir, graderDir, jobs, tierUp, key).codeCache) && nativesCurrent(dir);
};

/** Whether the fork server's natives in `dir` are today's, or the build could not make any. */
function nativesCurrent(dir) {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, KEY_FILE), 'utf8')).natives === null || nativesFit(dir);
  } catch {
    return false;
  }
}

/**
 * The build's step: the snapshot and both code caches of the grader in `graderDir`
 * (www/pkg when null), made beside `dir` and moved into place whole.
 */
export async function buildSnapshot(dir = SNAPSHOT_DIR, graderDir = null) {
  const { loadGrader } = await import('../host/node_host.mjs');
  const grader = new (await loadGrader({ dir: graderDir ?? undefined })).Grader();
  const key = snapshotKey(graderDir);
  const tmp = `${dir}.tmp-${process.pid}`;
  fs.rmSync(tmp, { recursive: true, force: true });
  fs.mkdirSync(tmp, { mode: 0o755 });
  try {
    await makeSnapshotIn(tmp, labsOf(grader));
    const codeCaches = {};
    for (const { jobs, tierUp } of FLAVOURS) {
      await makeCodeCacheIn(tmp, jobs, tierUp);
      codeCaches[codeCacheName(jobs, tierUp)] = codeCacheKey(key, jobs, tierUp);
    }
    // The fork server's natives (fork_server.mjs): none when this machine cannot make them.
    const nativesWhy = buildNatives(tmp);
    const natives = nativesWhy ? null : nativesKey();
    if (nativesWhy) console.error(`snapshot: sandboxes will start by spawn, not by fork: ${nativesWhy}`);
    fs.writeFileSync(path.join(tmp, KEY_FILE), `${JSON.stringify({ snapshot: key, codeCaches, natives, node: process.version }, null, 2)}\n`, { mode: 0o444 });
  } catch (e) {
    fs.rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
  const { moveIntoPlace } = await import('./place.mjs');
  moveIntoPlace(tmp, dir);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [what, dir = SNAPSHOT_DIR] = process.argv.slice(2);
  if (what === 'check') {
    if (complete(dir)) process.exit(0);
    const why = FLAVOURS.map(({ jobs, tierUp }) => fits(dir, null, jobs, tierUp).why).find(Boolean)
      || 'the fork server\'s natives are not this build\'s';
    console.error(`snapshot: ${why}`);
    process.exit(1);
  } else if (what === 'make') {
    const t0 = performance.now();
    await buildSnapshot(dir);
    console.log(`snapshot: ${path.relative(process.cwd(), dir) || '.'} made in ${((performance.now() - t0) / 1000).toFixed(1)} s (the grading CLI's interpreter, once per build)`);
  } else {
    console.error('usage: node grader/snapshot.mjs check|make [DIR]');
    process.exit(2);
  }
}
