// A sandbox's command line: Node under its permission model, reading only what a
// sandbox needs (SANDBOX_READS), with its flags, inside jail.mjs's walls. Used by the
// pool (pool.mjs) for every sandbox, and by the platform entries and the tests.
import { fileURLToPath } from 'node:url';
import { isRoot, jailCommand, jailProblem, PERMISSION_FLAG, sandboxUid } from './jail.mjs';
import { labsFileOf, runsFileOf } from './python.mjs';

const WWW = fileURLToPath(new URL('../', import.meta.url));
/** The sandbox's program (sandbox.mjs). */
export const SANDBOX = fileURLToPath(new URL('sandbox.mjs', import.meta.url));

// What a sandbox may read: its own code, the bridge, Pyodide, the snapshot. Not the
// grader (www/pkg): the sandbox holds no tests and no reference.
export const SANDBOX_READS = [
  `${WWW}grader/sandbox.mjs`, `${WWW}grader/frames.mjs`, `${WWW}grader/python.mjs`, `${WWW}grader/wasm_memcap.mjs`,
  `${WWW}host/engine.mjs`, `${WWW}host/solution_runner.py`, `${WWW}node_modules/pyodide`,
];

/** A lab whose time limit is at least this many seconds runs long enough for V8's
 *  optimizing tier to pay: its sandboxes start with it (`tierUp`). Measured with the
 *  courier lab's reference (limit 20 s): its sandbox's run about 9-11 -> 6-8 s of CPU;
 *  lab 1's (8 s) is cheaper without it (below). */
export const TIER_UP_FROM_S = 15;
/** Whether a sandbox for a lab of this registry entry starts with the optimizing tier. */
export const tiersUp = (labInfo) => Boolean(labInfo && labInfo.time_limit_s >= TIER_UP_FROM_S);

/**
 * Node's flags of a sandbox, past its permissions. The pool's code-cache step runs
 * with the same ones: V8 takes a code cache only from a process with its own flags.
 */
export function sandboxNodeFlags(sharedCores, tierUp = false) {
  return [
    '--disallow-code-generation-from-strings',
    '--max-old-space-size=768',
    '--no-warnings',
    // A sandbox lives for one submission: optimizing Pyodide's hot functions in the
    // background (V8's TurboFan tier-up) costs more CPU than it saves in one short
    // run (measured with bench.mjs: about 800 -> 260 ms of CPU for lab 1's run), but
    // pays in a long one (tierUp: TIER_UP_FROM_S).
    ...(tierUp ? [] : ['--liftoff-only']),
    // Pyodide's 9.6 MB of wasm compiled, and validated, a function at a time when
    // first called rather than all of it at the start: a submission calls a small
    // part of it (measured, spawn to ready: 60-90 ms less CPU per start, a run's CPU
    // the same within noise). The binary is Pyodide's own, read-only to the sandbox.
    '--wasm-lazy-compilation',
    '--wasm-lazy-validation',
    // A start allocates about 20 MB of short-lived objects: with the young
    // generation at full size from the first allocation V8 scavenges twice instead
    // of seven times (measured: 40-70 ms less CPU per start, 8 MB more memory).
    '--min-semi-space-size=16',
    // Not here, measured: --no-opt (a start about 90 ms cheaper, the courier lab's
    // run 15% dearer), --single-threaded (no gain), --jitless (no WebAssembly).
    // With a sandbox per core, V8's helper threads only take CPU from the other one.
    ...(sharedCores ? ['--single-threaded-gc'] : []),
  ];
}

/**
 * The command line of a sandbox running `script` (sandbox.mjs, or a test's probe):
 * Node under its permission model, reading only SANDBOX_READS, the snapshot (and its
 * index), the code cache and the script; inside jail.mjs's walls: bubblewrap when
 * `jailed`; without it (--no-sandbox), under root still as `uid` with the rlimits,
 * not root as the rlimits alone when prlimit works here, else Node's flags alone.
 * Under root `uid` is the sandbox's own (sandboxUid(); one is taken when not given).
 * Returns { cmd, args, uid }.
 */
export function sandboxCommand({ script = SANDBOX, memoryMb = 512, snapshotFile, codeCacheFile, sharedCores = false, tierUp = false, jailed = true, uid }) {
  const files = snapshotFile ? [snapshotFile, runsFileOf(snapshotFile), labsFileOf(snapshotFile)] : [];
  if (codeCacheFile) files.push(codeCacheFile);
  const reads = [...SANDBOX_READS, ...files, ...(script === SANDBOX ? [] : [script])];
  const argv = [
    process.execPath,
    PERMISSION_FLAG,
    ...reads.map((p) => `--allow-fs-read=${p}${p.endsWith('pyodide') ? '/*' : ''}`),
    ...sandboxNodeFlags(sharedCores, tierUp),
    script, String(memoryMb), snapshotFile ?? '', ...(codeCacheFile ? [codeCacheFile] : []),
  ];
  if (!jailed && !isRoot() && jailProblem({ bwrap: false })) return { cmd: argv[0], args: argv.slice(1), uid: null };
  return jailCommand(argv, reads, { uid: uid ?? (isRoot() ? sandboxUid() : null), bwrap: jailed });
}

/**
 * The command line of a fork server's zygote (fork_server.mjs): a sandbox's, for a
 * lab that does not tier up, plus the addon that forks (forker.c, which it may
 * load: --allow-addons; the only addon it can read) and the folder of its
 * children's FIFO pairs (read-only: it opens each pair, made for it by the
 * coordinator). Under root only: its jail is made in a user namespace mapping the
 * uid block `userBlock` ({ nsrun, root, base, count }; nsrun.c), whose root it is,
 * so that it can give each child a uid of its own. `--single-threaded`: V8 posts no work to
 * helper threads, which a forked child would not have. Returns { cmd, args, uid }.
 */
export function zygoteCommand({ memoryMb = 512, snapshotFile, codeCacheFile, sharedCores = false, forkerFile, pipesDir, userBlock = null }) {
  const files = [snapshotFile, runsFileOf(snapshotFile), labsFileOf(snapshotFile), forkerFile, ...(codeCacheFile ? [codeCacheFile] : [])];
  const reads = [...SANDBOX_READS, ...files];
  const argv = [
    process.execPath,
    PERMISSION_FLAG,
    '--allow-addons',
    ...reads.map((p) => `--allow-fs-read=${p}${p.endsWith('pyodide') ? '/*' : ''}`),
    ...sandboxNodeFlags(sharedCores, false),
    '--single-threaded',
    SANDBOX, '--zygote', forkerFile, String(memoryMb), snapshotFile, ...(codeCacheFile ? [codeCacheFile] : []),
  ];
  // No limit of CPU for the zygote, which lives for many children: each child gets
  // RLIMITS.cpu of its own (forker.c).
  return jailCommand(argv, [...reads, pipesDir], { rlimits: { cpu: 'unlimited' }, userBlock });
}
