#!/usr/bin/env node
// ./lab package: a lab's grader as a grading platform takes it, so that course
// staff write no glue. From the built grader (www/pkg, by ./lab build), Pyodide
// (node_modules) and the scripts in packaging/<platform>/. See docs/platforms.md.
//
//   gradescope   OUT/autograder.zip: setup.sh, run_autograder, README.md, grader/
//   prairielearn OUT/questions/<lab>/ (info.json, question.html, starter.py, tests/run.sh),
//                OUT/serverFilesCourse/delivery-lab/ (the grader), OUT/README.md
//   exercism     OUT/ a test runner: bin/run.sh, Dockerfile, README.md, grader/, and
//                exercises/<lab>/ (.docs/instructions.md with its numbered tasks, the starter)
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { CLI_LIMIT_FACTOR } from './pool.mjs';
import { GRADER_MARKER, newSecret, PACKAGED_SECRET_FILE } from './hidden.mjs';
import { buildSnapshot, complete, SNAPSHOT_DIR } from './snapshot.mjs';
import { loadGrader } from '../host/node_host.mjs';
import { callerDir, parseOrExit } from './args.mjs';
import { DEFAULT_IMAGE, PACKAGE } from './commands.mjs';

const WWW = fileURLToPath(new URL('../', import.meta.url));
const ROOT = path.dirname(path.resolve(WWW));
const TEMPLATES = path.join(ROOT, 'packaging');
/** Written into every output folder: only a folder holding it is ever replaced. */
const MARKER = '.delivery-lab-package';

/** The command line (commands.mjs PACKAGE, the one table of its options), checked. */
function parseArgs(argv) {
  const { values: v, positionals: [platform] } = parseOrExit(PACKAGE, argv, 'package');
  const out = path.resolve(v.out ?? path.join(ROOT, 'packages', platform));
  return { platform, lab: v.lab ?? null, out, untilPublished: v['hidden-until-published'], image: v.image, hiddenStatuses: v['hidden-statuses'] };
}

/** The grader's files under www/ (its runtime and nothing else): the CLI's pool and
 *  sandbox, the host (engine, Node host, solution runner), the built WASM grader, Pyodide. */
const GRADER_FILES = [
  'grader/platform.mjs', 'grader/pool.mjs', 'grader/output.mjs', 'grader/sandbox_command.mjs', 'grader/sandbox_procs.mjs',
  'grader/spawner_client.mjs', 'grader/submissions.mjs', 'grader/frames.mjs', 'grader/jail.mjs', 'grader/procfs.mjs', 'grader/python.mjs',
  'grader/wasm_memcap.mjs', 'grader/sandbox.mjs', 'grader/spawner.mjs', 'grader/grader_thread.mjs', 'grader/hidden.mjs', 'grader/args.mjs', 'grader/formats.mjs',
  'grader/snapshot.mjs', 'grader/place.mjs', 'grader/fork_server.mjs', 'grader/forker/forker.c', 'grader/forker/nsrun.c',
  'host/engine.mjs', 'host/node_host.mjs', 'host/solution_runner.py', 'pkg/delivery_lab.js', 'pkg/delivery_lab_bg.wasm',
];
const PYODIDE = 'node_modules/pyodide';
/** Pyodide's files a grader never reads: source maps, type declarations, its demo pages. */
const PYODIDE_UNUSED = /\.(map|d\.ts|html)$|^README/;

/** Copies the grader into `dest`, laid out as under www/ (its modules find each other so). */
export async function copyGrader(dest) {
  for (const f of GRADER_FILES) {
    const from = path.join(WWW, f);
    if (!fs.existsSync(from)) throw new Error(`${from} is missing: build the grader first (./lab build)`);
    fs.mkdirSync(path.dirname(path.join(dest, f)), { recursive: true });
    fs.copyFileSync(from, path.join(dest, f));
  }
  fs.mkdirSync(path.join(dest, PYODIDE), { recursive: true });
  for (const name of fs.readdirSync(path.join(WWW, PYODIDE))) {
    if (!PYODIDE_UNUSED.test(name)) fs.copyFileSync(path.join(WWW, PYODIDE, name), path.join(dest, PYODIDE, name));
  }
  // The interpreter snapshot of this grader, made once (snapshot.mjs: the build's when
  // it is this grader's, else made now), so the package's runs restore it and never
  // make one; its code caches serve a platform whose Node is this one (another Node
  // makes its own at each run's start).
  if (!complete(SNAPSHOT_DIR)) await buildSnapshot(SNAPSHOT_DIR);
  fs.mkdirSync(path.join(dest, 'snapshot'));
  for (const name of fs.readdirSync(SNAPSHOT_DIR)) fs.copyFileSync(path.join(SNAPSHOT_DIR, name), path.join(dest, 'snapshot', name));
  // pkg/delivery_lab.js is an ES module with a .js name.
  fs.writeFileSync(path.join(dest, 'package.json'), `${JSON.stringify({ private: true, type: 'module' }, null, 2)}\n`);
  // The mark of a packaged grader: platform.mjs, run as root, makes only such a
  // folder root's own (never a checkout's www/ it is run from).
  fs.writeFileSync(path.join(dest, GRADER_MARKER), 'A copy of the grader written by ./lab package: platform.mjs sets its owner and modes at start.\n');
  // The package's own secret: each submission's hidden inputs are drawn from it and
  // the submission (hidden.mjs), so the same file gets the same grade on a regrade,
  // and a key learned from one submission tells nothing of the next.
  fs.writeFileSync(path.join(dest, PACKAGED_SECRET_FILE), newSecret(), { mode: 0o600 });
}

/** packaging/<platform>/<name> with each @KEY@ replaced by vars[KEY]; every one must be. */
function fill(platform, name, vars) {
  const text = fs.readFileSync(path.join(TEMPLATES, platform, name), 'utf8')
    .replace(/@([A-Z_]+)@/g, (m, key) => {
      if (!(key in vars)) throw new Error(`packaging/${platform}/${name}: no value for ${m}`);
      return String(vars[key]);
    });
  return text;
}

function writeFile(file, text, { exec = false } = {}) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text, { mode: exec ? 0o755 : 0o644 });
}

/** An empty `out`, after making sure it is new or a package this command wrote. */
function freshOut(out) {
  if (fs.existsSync(out) && fs.readdirSync(out).length && !fs.existsSync(path.join(out, MARKER))) {
    throw new Error(`${out} holds files this command did not write: give another --out`);
  }
  fs.rmSync(out, { recursive: true, force: true });
  fs.mkdirSync(out, { recursive: true });
}

/** A UUID that stays the same for a lab, so that PrairieLearn sees one question
 *  however often it is packaged (its questions are known by their uuid). */
function questionUuid(labId) {
  const h = crypto.createHash('sha256').update(`delivery-lab question ${labId}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-5${h.slice(13, 16)}-${((parseInt(h[16], 16) & 3) | 8).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/** The lab's text with its tasks numbered as Exercism's instructions.md numbers
 *  tasks (`## 1. ...`), task k being the lab's k-th (a test's task_id). */
export function exercismInstructions(lab) {
  const seen = new Set();
  const lines = lab.instructions_md.split('\n').map((line, i) => {
    if (i === 0 && line.startsWith('# ')) return '# Instructions';
    const m = /^#{2,3} (.+)$/.exec(line);
    const k = m ? lab.tasks.indexOf(m[1].trim()) : -1;
    if (k < 0) return line;
    seen.add(k);
    return `## ${k + 1}. ${m[1].trim()}`;
  });
  if (seen.size !== lab.tasks.length) throw new Error(`${lab.id}: a task is no heading of its lab.md`);
  return lines.join('\n');
}

/** The lab's text as HTML for PrairieLearn's question panel (its title is the
 *  question's; braces as entities, since question.html is a Mustache template). */
function questionHtml(lab, marked) {
  const body = marked.parse(lab.instructions_md.replace(/^# .*\n/, ''))
    .replaceAll('{', '&#123;').replaceAll('}', '&#125;');
  return `<pl-question-panel>
<!-- The lab's text (src/${lab.id.replaceAll('-', '_')}/lab.md), written by ./lab package. -->
${body}
<p>Write your solution below; the starter holds the functions to fill in. Each
submission runs the lab's example and hidden tests.</p>
</pl-question-panel>

<pl-file-editor file-name="solution.py" ace-mode="ace/mode/python" source-file-name="starter.py"></pl-file-editor>

<pl-submission-panel>
  <pl-external-grader-results></pl-external-grader-results>
  <pl-file-preview></pl-file-preview>
</pl-submission-panel>
`;
}

/** Every file under `dir` (links followed, as zip does), as paths relative to it, sorted. */
function filesUnder(dir, rel = '') {
  return fs.readdirSync(path.join(dir, rel)).sort().flatMap((n) => {
    const r = rel ? `${rel}/${n}` : n;
    return fs.statSync(path.join(dir, r)).isDirectory() ? filesUnder(dir, r) : [r];
  });
}

/**
 * `folder` zipped into `zipFile` with fflate: each file with its Unix mode
 * (run_autograder and setup.sh stay executable) and one fixed time, so the same
 * folder makes the same bytes.
 */
async function zipFolder(folder, zipFile) {
  const { zipSync } = await import('fflate');
  const mtime = new Date(Date.UTC(2020, 0, 1));
  const entries = {};
  for (const rel of filesUnder(folder)) {
    const file = path.join(folder, rel);
    const mode = fs.statSync(file).mode & 0o777;
    // Unix (os 3): the external attributes are a regular file's st_mode, high 16 bits.
    entries[rel] = [fs.readFileSync(file), { os: 3, attrs: ((0o100000 | mode) << 16) >>> 0, mtime, level: 6 }];
  }
  fs.writeFileSync(zipFile, zipSync(entries));
}

/** Writes the package; returns what was written, for the summary. */
export async function writePackage(o) {
  const { Grader } = await loadGrader();
  const grader = new Grader();
  const labIds = JSON.parse(grader.labs()).map((l) => l.id);
  const labOf = (id) => {
    try { return JSON.parse(grader.lab(id)); } catch (e) { throw new Error(e.message); }
  };
  const labs = (o.lab ? [o.lab] : o.platform === 'exercism' ? labIds : [labIds[0]]).map(labOf);
  const lab = labs[0];
  freshOut(o.out);
  fs.writeFileSync(path.join(o.out, MARKER), `${JSON.stringify({ platform: o.platform, labs: labs.map((l) => l.id) })}\n`);

  if (o.platform === 'gradescope') {
    const stage = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-gradescope-'));
    try {
      const vars = {
        LAB: lab.id,
        TITLE: lab.title,
        FORMAT: o.untilPublished ? 'gradescope-published' : 'gradescope',
        VISIBILITY: o.untilPublished ? 'after_published (shown once the grades are published)' : 'after_due_date (shown after the due date)',
        HIDDEN_STATUSES: o.hiddenStatuses ?? 'each',
      };
      await copyGrader(path.join(stage, 'grader'));
      writeFile(path.join(stage, 'setup.sh'), fill('gradescope', 'setup.sh', vars), { exec: true });
      writeFile(path.join(stage, 'run_autograder'), fill('gradescope', 'run_autograder', vars), { exec: true });
      writeFile(path.join(stage, 'README.md'), fill('gradescope', 'README.md', vars));
      await zipFolder(stage, path.join(o.out, 'autograder.zip'));
    } finally {
      fs.rmSync(stage, { recursive: true, force: true });
    }
    return [path.join(o.out, 'autograder.zip')];
  }

  if (o.platform === 'prairielearn') {
    // PrairieLearn stops a job at its timeout (600 s at most): the lab's CPU limit
    // under the CLI, and room to start.
    const timeout = Math.min(600, Math.ceil(lab.time_limit_s * CLI_LIMIT_FACTOR) + 30);
    const q = path.join(o.out, 'questions', lab.id);
    const info = {
      uuid: questionUuid(lab.id),
      title: lab.title,
      topic: 'delivery-lab',
      tags: ['delivery-lab', lab.id],
      type: 'v3',
      singleVariant: true,
      gradingMethod: 'External',
      externalGradingOptions: {
        enabled: true,
        image: o.image ?? DEFAULT_IMAGE,
        serverFilesCourse: ['delivery-lab/'],
        entrypoint: '/grade/tests/run.sh',
        timeout,
      },
    };
    const vars = { LAB: lab.id, TITLE: lab.title, TIMEOUT: timeout, IMAGE: o.image ?? DEFAULT_IMAGE, HIDDEN_STATUSES: o.hiddenStatuses ?? 'each' };
    writeFile(path.join(q, 'info.json'), `${JSON.stringify(info, null, 2)}\n`);
    // marked (node_modules) only here: ./lab package --help needs nothing installed.
    const { marked } = await import('marked');
    writeFile(path.join(q, 'question.html'), questionHtml(lab, marked));
    writeFile(path.join(q, 'starter.py'), lab.starter_py);
    writeFile(path.join(q, 'tests', 'run.sh'), fill('prairielearn', 'run.sh', vars), { exec: true });
    await copyGrader(path.join(o.out, 'serverFilesCourse', 'delivery-lab'));
    writeFile(path.join(o.out, 'README.md'), fill('prairielearn', 'README.md', vars));
    return [q, path.join(o.out, 'serverFilesCourse', 'delivery-lab')];
  }

  // exercism
  const vars = { LABS: labs.map((l) => l.id).join(', '), FIRST_LAB: lab.id, HIDDEN_STATUSES: o.hiddenStatuses ?? 'each' };
  writeFile(path.join(o.out, 'bin', 'run.sh'), fill('exercism', 'run.sh', vars), { exec: true });
  writeFile(path.join(o.out, 'Dockerfile'), fill('exercism', 'Dockerfile', vars));
  writeFile(path.join(o.out, 'README.md'), fill('exercism', 'README.md', vars));
  await copyGrader(path.join(o.out, 'grader'));
  for (const l of labs) {
    const ex = path.join(o.out, 'exercises', l.id);
    const solution = `${l.id.replaceAll('-', '_')}.py`;
    writeFile(path.join(ex, '.docs', 'instructions.md'), exercismInstructions(l));
    writeFile(path.join(ex, solution), l.starter_py);
    // The part of the exercise's config the runner reads; the track adds the rest.
    writeFile(path.join(ex, '.meta', 'config.json'), `${JSON.stringify({ blurb: l.title, files: { solution: [solution] } }, null, 2)}\n`);
  }
  return [o.out];
}

/**
 * What to upload where, for the staff who ran ./lab package: the written paths (as
 * `rel` shows them) and each platform's steps (docs/platforms.md has them in full).
 */
export function uploadSteps(o, labIds, rel = (p) => p) {
  const out = rel(o.out);
  if (o.platform === 'gradescope') {
    return [
      `gradescope: ${rel(path.join(o.out, 'autograder.zip'))}`,
      '  upload it on Gradescope: your Programming Assignment > Configure Autograder > Zip file upload,',
      '  Ubuntu base image 22.04 or newer, then Update Autograder; Test Autograder with',
      `  src/${labIds[0].replaceAll('-', '_')}/reference.py (every test passes) and starter.py (none do).`,
      '  More: docs/platforms.md, "Gradescope".',
    ].join('\n');
  }
  if (o.platform === 'prairielearn') {
    const [lab] = labIds;
    return [
      'prairielearn:',
      `  ${rel(path.join(o.out, 'questions', lab))}/  ->  your course's questions/${lab}/`,
      `  ${rel(path.join(o.out, 'serverFilesCourse', 'delivery-lab'))}/  ->  your course's serverFilesCourse/delivery-lab/`,
      '  then add the topic delivery-lab to infoCourse.json and the question to an assessment.',
      `  More: ${rel(path.join(o.out, 'README.md'))}, docs/platforms.md, "PrairieLearn".`,
    ].join('\n');
  }
  return [
    'exercism:',
    `  ${out}/ (bin/run.sh, Dockerfile, grader/)  ->  your track's test runner repository (or build its image where you run one)`,
    ...labIds.map((id) => `  ${rel(path.join(o.out, 'exercises', id))}/  ->  your track's exercise with the slug ${id}`),
    `  More: ${rel(path.join(o.out, 'README.md'))}, docs/platforms.md, "Exercism".`,
  ].join('\n');
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const o = parseArgs(process.argv.slice(2));
  try {
    await writePackage(o);
    const labIds = JSON.parse(fs.readFileSync(path.join(o.out, MARKER), 'utf8')).labs;
    // Each path as its user finds it: from the folder the command was run in.
    process.stdout.write(`${uploadSteps(o, labIds, (p) => { const r = path.relative(callerDir(), p); return r.startsWith('..') ? p : r || '.'; })}\n`);
  } catch (e) {
    process.stderr.write(`package: ${e.message}\n`);
    process.exit(1);
  }
}
