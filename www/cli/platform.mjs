#!/usr/bin/env node
// A grading platform's entry into the grader: grades the one .py file a learner
// submitted and writes the platform's results file. The scripts `./lab package`
// writes for Gradescope (run_autograder), PrairieLearn (tests/run.sh) and Exercism
// (bin/run.sh) call it from a copy of the grader; see docs/platforms.md.
//
//   node platform.mjs --format F --lab ID [--no-sandbox] [--deadline S] SUBMISSION_DIR RESULTS_FILE
//   node platform.mjs --self-check --lab ID    (grades the lab's reference: is this machine ready?)
//
// Whatever the submission is (none, two files, not UTF-8, a syntax error), a valid
// results file is written and the exit code is 0: the platform shows the learner
// the report. Exit 1: the grader itself failed (the results file says so when it
// can); 2: a usage error (an unknown lab included), nothing written.
import fs from 'node:fs';
import path from 'node:path';
import { createGradingPool, pyFilesIn, readSubmission, CLI_LIMIT_FACTOR, FORMATS } from './pool.mjs';
import { loadGrader } from '../src/node_host.mjs';

const USAGE = `usage: node platform.mjs --format ${FORMATS.filter((f) => !['json', 'text'].includes(f)).join('|')} --lab ID
                        [--no-sandbox] [--deadline SECONDS] SUBMISSION_DIR RESULTS_FILE
       node platform.mjs --self-check --lab ID [--no-sandbox]`;
/** What a run needs besides grading, within a platform's deadline: start-up, the results file. */
const DEADLINE_RESERVE_S = 8;

function usage(message) {
  process.stderr.write(`platform: ${message}\n${USAGE}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const o = { format: null, lab: null, sandbox: true, deadline: null, selfCheck: false, paths: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    switch (a) {
      case '--format': o.format = argv[++i]; break;
      case '--lab': o.lab = argv[++i]; break;
      case '--no-sandbox': o.sandbox = false; break;
      case '--deadline': o.deadline = Number(argv[++i]); break;
      case '--self-check': o.selfCheck = true; break;
      default:
        if (a.startsWith('--')) usage(`unknown option ${a}`);
        o.paths.push(a);
    }
  }
  if (!o.lab) usage('--lab needs a lab id');
  if (o.selfCheck) return o;
  if (!FORMATS.includes(o.format) || ['json', 'text'].includes(o.format)) usage(`--format must be a platform's format, not ${o.format ?? 'nothing'}`);
  if (o.deadline !== null && !(o.deadline > DEADLINE_RESERVE_S)) usage(`--deadline needs more than ${DEADLINE_RESERVE_S} seconds`);
  if (o.paths.length !== 2) usage('give the submission folder and the results file');
  return o;
}

/**
 * The submitted .py file in `dir` (its top level), or { error } saying why there is
 * not exactly one. Exercism's input folder may hold other exercise files: when its
 * `.meta/config.json` names the solution files, only those count.
 */
function findSubmission(dir) {
  let names;
  try {
    names = pyFilesIn(dir);
  } catch {
    return { error: 'No submission folder was found, so no test ran.' };
  }
  try {
    const solution = JSON.parse(fs.readFileSync(path.join(dir, '.meta', 'config.json'), 'utf8')).files?.solution;
    if (Array.isArray(solution)) names = names.filter((n) => solution.includes(n));
  } catch { /* no config: every .py counts */ }
  if (names.length === 0) return { error: 'No .py file was submitted, so no test ran. Submit your solution as one Python file.' };
  if (names.length > 1) {
    return { error: `${names.length} .py files were submitted (${names.join(', ')}), so no test ran: submit exactly one, your solution.` };
  }
  return { file: path.join(dir, names[0]) };
}

const o = parseArgs(process.argv.slice(2));
const { Grader } = await loadGrader();
const grader = new Grader();
let lab;
try {
  lab = JSON.parse(grader.lab(o.lab));
} catch (e) {
  usage(e.message);
}

// A platform that kills the run at a deadline gets a results file before it: the
// run's CPU limit fits inside, and the clock stops it at the same time.
const limitS = lab.time_limit_s * CLI_LIMIT_FACTOR;
const timeoutS = o.deadline ? Math.min(limitS, o.deadline - DEADLINE_RESERVE_S) : limitS;
const onWarning = (m) => process.stderr.write(`platform: ${m}\n`);
const newPool = () => createGradingPool({ jobs: 1, timeoutS, sandbox: o.sandbox, onWarning, ...(o.deadline ? { wallFactor: 1 } : {}) });

if (o.selfCheck) {
  const pool = newPool();
  let line;
  try {
    await pool.ready;
    line = JSON.parse(await pool.grade({ lab: o.lab, source: lab.reference_py, format: 'json' }));
  } finally {
    await pool.close();
  }
  process.stdout.write(`self-check: ${o.lab}'s reference solution: ${line.status} ${line.passed}/${line.total}\n`);
  process.exit(line.status === 'pass' ? 0 : 1);
}

const [dir, resultsFile] = o.paths;
fs.mkdirSync(path.dirname(path.resolve(resultsFile)), { recursive: true });
const write = (text) => fs.writeFileSync(resultsFile, text);
const errorResults = (message) => grader.error_report(o.lab, undefined, message, o.format);

const found = findSubmission(dir);
const read = found.file ? readSubmission(found.file) : { error: found.error };
if (read.error !== undefined) {
  write(errorResults(read.error));
  process.stdout.write(`${o.lab}: error (${read.error})\n`);
  process.exit(0);
}

const pool = newPool();
let code = 0;
try {
  await pool.ready;
  const out = await pool.gradeMany({ lab: o.lab, source: read.text, formats: ['json', o.format] });
  write(out[o.format]);
  const line = JSON.parse(out.json);
  process.stdout.write(`${o.lab}: ${line.status} ${line.passed}/${line.total} (${path.basename(found.file)})\n`);
} catch (e) {
  // The grader, not the submission: staff read this in the platform's log.
  write(errorResults(`The grader could not grade this submission: ${e.message}. Ask your course staff.`));
  process.stderr.write(`platform: ${e.stack ?? e.message}\n`);
  code = 1;
} finally {
  await pool.close();
}
process.exit(code);
