// The benchmark's anchor (bench/anchor/README.md): lab 1 graded by plain CPython +
// pytest, one process per file, on the same sources as the grading CLI's bench.
//
//   import { benchPytest } from './anchor.mjs';
//   const { perS, wallS, cpuS, results } = await benchPytest(sources, { jobs: 2 });
//
// Each source is written to a temp file and graded by one
//   .venv/bin/python -m pytest -q -p no:cacheprovider www/bench/anchor/test_deliver_once.py --solution FILE
// process, `jobs` at a time. The venv is the project's (./lab bench and ./lab test
// make it: need_venv in ./lab).
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(here, '../..');
export const VENV_PYTHON = path.join(REPO, '.venv', 'bin', 'python');
export const ANCHOR_TEST = path.join(here, 'anchor', 'test_deliver_once.py');
export const REFERENCE_PY = path.join(REPO, 'src', 'deliver_once', 'reference.py');

/** Whether the project venv is there (it may still lack pytest: ./lab installs both). */
export const anchorAvailable = () => fs.existsSync(VENV_PYTHON);

let clkTck;
/** CPU seconds of this process's finished (waited-for) children and theirs, from
 *  /proc/self/stat (cutime + cstime); null where there is no /proc. */
function childrenCpuS() {
  try {
    const stat = fs.readFileSync('/proc/self/stat', 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // f[0] is field 3 (state)
    clkTck ??= Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' })) || 100;
    return (Number(f[13]) + Number(f[14])) / clkTck;
  } catch {
    return null;
  }
}

/** pytest's last summary line, e.g. "3 failed, 18 passed in 0.31s", as counts. */
function parseSummary(out) {
  const lines = out.trim().split('\n');
  const summary = [...lines].reverse().find((l) => / in [\d.]+s/.test(l)) ?? lines.at(-1) ?? '';
  const count = (word) => Number(new RegExp(`(\\d+) ${word}`).exec(summary)?.[1] ?? 0);
  return { summary: summary.replace(/=+/g, '').trim(), passed: count('passed'), failed: count('failed'), errors: count('errors?') };
}

function gradeOne(index, file, { timeoutMs, env }) {
  return new Promise((resolve) => {
    const args = ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', ANCHOR_TEST, '--solution', file];
    const child = spawn(VENV_PYTHON, args, { cwd: REPO, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { out += d; });
    let timedOut = false;
    const timer = setTimeout(() => { timedOut = true; child.kill('SIGKILL'); }, timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      const counts = parseSummary(out);
      // Exit 0: every test passed; 1: some failed; anything else: pytest could not grade.
      const status = code === 0 ? 'pass' : code === 1 && !timedOut ? 'fail' : 'error';
      resolve({ index, status, exitCode: code, timedOut, ...counts, output: out });
    });
  });
}

/**
 * Grades `sources` (strings of Python) with the pytest anchor, `jobs` processes at a
 * time. Returns submissions per second, the wall time, the CPU time of every pytest
 * process (null without /proc) and one result per source, in order:
 * { index, status: 'pass' | 'fail' | 'error', exitCode, timedOut, passed, failed, errors, summary, output }.
 */
export async function benchPytest(sources, { jobs = 1, timeoutMs = 60_000 } = {}) {
  if (!anchorAvailable()) throw new Error(`${VENV_PYTHON} is missing: ./lab bench (or ./lab test) makes the venv`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lab-anchor-'));
  try {
    const files = sources.map((source, i) => {
      const file = path.join(dir, `submission-${String(i).padStart(3, '0')}.py`);
      fs.writeFileSync(file, source);
      return file;
    });
    // Bytecode is cached, as on any grading machine, but under .venv/ rather than
    // in the source tree (this machine may set PYTHONDONTWRITEBYTECODE).
    const env = { ...process.env, PYTHONPYCACHEPREFIX: path.join(REPO, '.venv', 'pycache') };
    delete env.PYTHONDONTWRITEBYTECODE;
    // One untimed run of the reference first fills that cache, as the grading CLI's
    // bench starts its pool before timing.
    await gradeOne(-1, REFERENCE_PY, { timeoutMs, env });
    const results = new Array(files.length);
    let next = 0;
    const cpu0 = childrenCpuS();
    const t0 = performance.now();
    const worker = async () => {
      while (next < files.length) {
        const i = next++;
        results[i] = await gradeOne(i, files[i], { timeoutMs, env });
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, Math.min(jobs, files.length)) }, worker));
    const wallS = (performance.now() - t0) / 1000;
    const cpu1 = childrenCpuS();
    return {
      perS: files.length / wallS,
      wallS,
      cpuS: cpu0 === null || cpu1 === null ? null : cpu1 - cpu0,
      results,
    };
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
