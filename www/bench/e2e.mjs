// The grading CLI end to end, each figure beside its anchor from the same run
// (issue 39): what a staff member waits for, start-up included.
//
//   one lab-1 file        `node grader/grade.mjs FILE` (goal 1.0 s wall) | the pytest anchor on it
//   one courier file      `node grader/grade.mjs --lab courier FILE` (goal 5 s wall)
//   35 lab-1 files        `node grader/grade.mjs --jobs 2 DIR` | the anchor with 2 jobs (goal 1.0x)
//   each platform package its entry (platform.mjs, from a package ./lab package wrote) on one lab-1 file
//
// A wall time is spoiled by whatever else the machine runs, so each CLI figure that
// is compared with the anchor is measured between two anchor runs: when the two
// differ by more than SPREAD, the machine's pace moved during the figure and it is
// printed as inconclusive (never as a verdict). The courier and platform figures
// have no anchor: beside each, the anchor's single file, timed just before and
// after, says whether the machine held still.
//
// Run: node bench/e2e.mjs [--n 35]   (./lab bench runs it; needs the venv's pytest)
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { anchorAvailable, benchPytest } from './anchor.mjs';
import { benchMix } from './mix.mjs';
import { loadGrader } from '../host/node_host.mjs';

const WWW = fileURLToPath(new URL('../', import.meta.url));
const GRADE = path.join(WWW, 'grader', 'grade.mjs');
const nAt = process.argv.indexOf('--n');
const N = nAt > 0 ? Number(process.argv[nAt + 1]) : 35;
/** Two anchor runs around a figure further apart than this: the machine's pace moved. */
export const SPREAD = 0.25;

const grader = new (await loadGrader()).Grader();
const lab1 = JSON.parse(grader.lab('deliver-once'));
const courier = JSON.parse(grader.lab('courier'));
const mix = benchMix(lab1);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lab-e2e-'));
const write = (dir, name, text) => {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, name), text);
  return path.join(dir, name);
};
const one = write(path.join(tmp, 'one'), 'alice.py', lab1.reference_py);
const courierFile = write(path.join(tmp, 'courier'), 'alice.py', courier.reference_py);
const batch = path.join(tmp, 'batch');
for (let i = 0; i < N; i++) write(batch, `s${String(i).padStart(3, '0')}.py`, mix[i % mix.length][1]);

/** Wall seconds of a command run to its end (its exit code kept). */
function timed(cmd, args, opts = {}) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'], ...opts });
    let err = '';
    child.stderr.on('data', (d) => { if (err.length < 4000) err += d; });
    child.on('close', (code) => resolve({ s: (performance.now() - t0) / 1000, code, err }));
  });
}
const cli = (args) => timed(process.execPath, [GRADE, '--format', 'json', ...args]);
const anchor = async (sources, jobs) => (await benchPytest(sources, { jobs })).wallS;

/** The anchor before and after `figure`: { before, after, steady } (steady: within SPREAD). */
async function between(anchorRun, figure) {
  const before = await anchorRun();
  const got = await figure();
  const after = await anchorRun();
  const steady = Math.abs(before - after) / Math.min(before, after) <= SPREAD;
  return { got, before, after, mean: (before + after) / 2, steady };
}
/** `text`, or, when the anchor moved around it, `text` said to be inconclusive. */
const verdict = (steady, text) => (steady ? text : `${text}; inconclusive: the anchor moved (the machine's load changed during it)`);
const f = (s) => `${s.toFixed(2)} s`;

if (!anchorAvailable()) {
  console.log('end to end: skipped, .venv/bin/python is missing (./lab bench installs it)');
  process.exit(0);
}
console.log(`grading CLI end to end (start-up included), ${os.cpus().length} cores, load average ${os.loadavg()[0].toFixed(1)}:`);
// Warm the page cache and the anchor's bytecode: every figure after is a second run.
await cli([one]);
const anchorOne = () => anchor([lab1.reference_py], 1);
{
  const r = await between(anchorOne, () => cli([one]));
  console.log(`  one lab-1 file: ${f(r.got.s)} wall (goal 1.0 s: ${r.got.s <= 1 ? 'met' : 'not met'}) | `
    + `${verdict(r.steady, `anchor ${f(r.mean)} (${f(r.before)} before, ${f(r.after)} after): ${(r.got.s / r.mean).toFixed(1)}x its time`)}`);
}
{
  const r = await between(anchorOne, () => cli(['--lab', 'courier', courierFile]));
  console.log(`  one courier file: ${f(r.got.s)} wall (goal 5 s: ${r.got.s <= 5 ? 'met' : 'not met'}), exit ${r.got.code} | `
    + `${verdict(r.steady, `the anchor's one lab-1 file ${f(r.before)} before, ${f(r.after)} after`)}`);
}
{
  const sources = fs.readdirSync(batch).sort().map((n) => fs.readFileSync(path.join(batch, n), 'utf8'));
  const r = await between(() => anchor(sources, 2), () => cli(['--jobs', '2', batch]));
  const pace = r.mean / r.got.s;
  console.log(`  ${N} lab-1 files, --jobs 2: ${f(r.got.s)} wall, ${(N / r.got.s).toFixed(1)} files/s | `
    + `${verdict(r.steady, `anchor ${f(r.mean)} (${f(r.before)} before, ${f(r.after)} after), ${(N / r.mean).toFixed(1)} files/s: `
      + `${pace.toFixed(2)}x the anchor's pace (goal 1.0x: ${pace >= 1 ? 'met' : 'not met'})`)}`);
}
// Each platform's package (./lab package), its entry on one lab-1 file as the platform runs it.
{
  const { writePackage } = await import('../grader/package.mjs');
  const entries = {};
  for (const platform of ['exercism', 'prairielearn', 'gradescope']) {
    const out = path.join(tmp, `pkg-${platform}`);
    await writePackage({ platform, lab: 'deliver-once', out });
    if (platform === 'exercism') entries[platform] = ['exercism', path.join(out, 'grader')];
    else if (platform === 'prairielearn') entries[platform] = ['prairielearn', path.join(out, 'serverFilesCourse', 'delivery-lab')];
    else {
      const unzipped = path.join(out, 'unzipped');
      const u = await timed('unzip', ['-q', path.join(out, 'autograder.zip'), '-d', unzipped]);
      if (u.code !== 0) { console.log(`  gradescope's package: not run (unzip: ${u.err.trim() || 'missing'})`); continue; }
      entries[platform] = ['gradescope', path.join(unzipped, 'grader')];
    }
  }
  for (const [platform, [format, root]] of Object.entries(entries)) {
    const results = path.join(tmp, `results-${platform}`);
    fs.mkdirSync(results);
    const run = () => timed(process.execPath, [path.join(root, 'grader', 'platform.mjs'), '--format', format, '--lab', 'deliver-once', path.dirname(one), path.join(results, 'results.json')]);
    await run(); // its first run: the package's files made root's (platform.mjs walls)
    const r = await between(anchorOne, run);
    console.log(`  ${platform}'s package, one lab-1 file: ${f(r.got.s)} wall, exit ${r.got.code} | `
      + `${verdict(r.steady, `anchor ${f(r.mean)}: ${(r.got.s / r.mean).toFixed(1)}x its time`)}`);
  }
}
fs.rmSync(tmp, { recursive: true, force: true });
