// ./lab's commands and their options: one table each, the one place they are
// written. The scripts parse their command lines with them (grade.mjs, package.mjs,
// serve.mjs, through args.mjs and Node's util.parseArgs), and ./lab prints every
// --help from them and checks a command line against them before it installs or
// builds anything:
//
//   node www/grader/commands.mjs help [COMMAND]      the commands, or one command's options
//   node www/grader/commands.mjs check COMMAND ARG... exit 0, or 2 with what is wrong
//   node www/grader/commands.mjs route COMMAND ARG... (checked) what ./lab does besides
//                                                  running it: NUL-separated pairs,
//                                                  `build ARG` and `need WHAT`
//
// It imports nothing that needs a build or node_modules: the help works on a fresh checkout.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { command, number, orList, usageExit, UsageError, wantsHelp, wrap } from './args.mjs';
import { REPORT_FORMATS } from './formats.mjs';
import { parseOrigin } from './origin.mjs';
import { SEED_MAX } from '../host/engine.mjs';

const SEED = number({ int: true, min: 0, max: SEED_MAX });
const HIDDEN_STATUSES = { type: 'string', value: 'each|aggregate', choices: ['each', 'aggregate'], default: 'each',
  help: 'aggregate: every report shows learners only how many hidden tests passed, not which' };

/** The image PrairieLearn and Exercism run the grader in: the Node project's Node 24 (the current LTS line) on Debian. */
export const DEFAULT_IMAGE = 'node:24-bookworm-slim';
export const PLATFORMS = Object.freeze(['gradescope', 'prairielearn', 'exercism']);

/** A --host NAME: a DNS name, an IPv4 address or a bracketed IPv6 one, optionally with :port; lowercased. */
export function hostName(name) {
  if (!/^(?:[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?|\[[0-9a-f:.]+\])(?::\d{1,5})?$/i.test(name)) {
    throw new UsageError(`--host ${JSON.stringify(name)}: give a host name such as lab.example or lab.example:8443`);
  }
  return name.toLowerCase();
}

/** An --allow-origin ORIGIN, as the browser spells it (origin.mjs's rule, shared with build.mjs). */
export function allowedOrigin(text) {
  const { origin, error } = parseOrigin(text);
  if (error) throw new UsageError(error);
  return origin;
}

export const GRADE = command({
  name: 'grade',
  brief: 'grade learners\' files, each in a sandbox: text, json, csv, junit or a platform\'s results files',
  prog: './lab grade',
  synopsis: '[options] FILE_OR_DIR...',
  summary: 'Grades learners\' files again where they cannot touch the grader: each in a sandbox of its own, with the '
    + 'page\'s engine, so each gets the report the page gives. A directory means every .py file in it (sorted).',
  positionals: { min: 1, files: true, missing: 'no submission given: name .py files or directories' },
  options: {
    lab: { type: 'string', value: 'ID', help: 'the lab: deliver-once or courier', defaultText: 'the course\'s first lab, deliver-once' },
    format: { type: 'string', value: 'F', choices: REPORT_FORMATS, help: 'the report', defaultText: 'text on a terminal, else json' },
    seed: { type: 'string', value: 'N', parse: SEED, help: 'the differential test\'s seed; each report prints the replay command with it', defaultText: 'the lab\'s, 1042' },
    'hidden-seed': {
      type: 'string', value: 'N|none',
      help: 'replay one staff line\'s hidden seed (not with --secret-file); none: the hidden cases as written',
      defaultText: 'drawn per submission',
      parse: (text, flag) => {
        if (text === 'none') return 'none';
        const n = number({ int: true, min: 0 })(text, flag);
        if (n > SEED_MAX) throw new UsageError(`${flag} must be at most ${SEED_MAX}, or none`);
        return n;
      },
    },
    'secret-file': {
      type: 'string', value: 'FILE', path: true, defaultText: 'a random secret for this run',
      help: 'the grader\'s secret (16 bytes or more; keep it from learners): each submission\'s hidden inputs are drawn '
        + 'from it and the file, the same again for the same file',
    },
    'hidden-statuses': HIDDEN_STATUSES,
    timeout: { type: 'string', value: 'S', parse: number({ min: 0.1 }), help: 'CPU seconds per submission', defaultText: 'four times the lab\'s limit: 32, courier 80' },
    jobs: { type: 'string', value: 'N', parse: number({ int: true, min: 1 }), default: 1, help: 'submissions graded at once (one per core is right)' },
    memory: { type: 'string', value: 'MB', parse: number({ int: true, min: 64 }), default: 512, help: 'memory for one submission\'s Python' },
    out: { type: 'string', value: 'DIR', path: true, help: 'where the platforms\' formats write one results.json per file (alice.py -> DIR/alice.json)' },
    'no-sandbox': { type: 'boolean', default: false, help: 'grade without bubblewrap (refused otherwise when bubblewrap does not work)' },
  },
  notes: 'The platforms\' formats need --out DIR. json, csv and junit go to stdout (the summary to stderr); text to '
    + 'stdout. The staff\'s json and text name each file\'s hidden seed; learners\' reports (and csv, junit) never do.\n'
    + 'Paths (files, --out, --secret-file) are taken from the folder the command is run in; a file whose name starts '
    + 'with - goes after --, as in ./lab grade -- -2.py.\n'
    + 'Exit code: 0 every submission passes, 1 any fails or errors, 2 a usage error or a grader that cannot start.\n'
    + 'More: www/grader/README.md.',
});

export const PACKAGE = command({
  name: 'package',
  brief: 'a lab\'s grader as Gradescope, PrairieLearn or Exercism takes it, and where to upload it',
  prog: './lab package',
  synopsis: `${PLATFORMS.join('|')} [options]`,
  summary: 'Writes a lab\'s grader as a grading platform takes it, and says where to upload what (docs/platforms.md).',
  positionals: { min: 1, max: 1, missing: `name a platform: ${PLATFORMS.join(', ')}` },
  check(values, [platform]) {
    if (!PLATFORMS.includes(platform)) throw new UsageError(`name a platform: ${PLATFORMS.join(', ')}, not ${platform}`);
    if (values['hidden-until-published'] && platform !== 'gradescope') throw new UsageError('--hidden-until-published is only for gradescope');
  },
  options: {
    lab: { type: 'string', value: 'ID', help: 'the lab', defaultText: 'the course\'s first; exercism: every lab, each an exercise' },
    out: { type: 'string', value: 'DIR', path: true, help: 'where the package goes; a folder this command did not write is never replaced', defaultText: 'packages/PLATFORM/ in the checkout' },
    'hidden-until-published': { type: 'boolean', default: false, help: 'gradescope only: hidden tests are shown once grades are published (default: after the due date)' },
    'hidden-statuses': HIDDEN_STATUSES,
    image: { type: 'string', value: 'NAME', default: DEFAULT_IMAGE, help: 'the Docker image PrairieLearn runs the grader in' },
  },
});

/** Where the LTI tool keeps its keys (and, without --queue, its platforms and state): outside anything served. */
export const LTI_DIR_DEFAULT = path.join(path.dirname(path.dirname(path.dirname(fileURLToPath(import.meta.url)))), '.lti');
const LTI_DIR = {
  type: 'string', value: 'DIR', path: true, defaultText: '.lti/ in the checkout',
  help: 'the LTI tool\'s folder (mode 0700): its private keys (files of mode 0600), and without --queue its platforms and state',
};
const LTI_URL = {
  type: 'string', value: 'URL', parse: (text, flag) => new URL(httpUrl(text, flag)).href.replace(/\/+$/, ''), defaultText: 'http://127.0.0.1:PORT',
  help: 'the tool\'s public URL, as the LMS reaches it (https://lab.example): its launch, login and JWKS URLs are under it',
};

/** An http(s) URL, as given. */
export function httpUrl(text, flag) {
  let u;
  try { u = new URL(text); } catch { throw new UsageError(`${flag} ${JSON.stringify(text)}: give an http(s) URL`); }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') throw new UsageError(`${flag} ${JSON.stringify(text)}: give an http(s) URL`);
  if (u.username || u.password) throw new UsageError(`${flag}: no user or password in the URL`);
  return text;
}

export const SERVE = command({
  name: 'serve',
  brief: 'build, then serve the lab at http://127.0.0.1:8000/ (with --grading, POST /grade too)',
  prog: './lab serve',
  synopsis: '[options]',
  positionals: { max: 0 },
  summary: 'Serves the page at http://127.0.0.1:PORT/: the build it started with only (read into memory; a build made since '
    + 'is not served, and one with other --allow-origin origins is said on stderr: restart), and only a build of the mode '
    + 'asked for. ./lab serve builds it first (www/dist/, or www/dist-no-hidden/); node www/grader/serve.mjs takes the same '
    + 'options and builds nothing.',
  options: {
    port: { type: 'string', value: 'N', parse: number({ int: true, min: 0, max: 65535 }), default: 8000, help: 'the port (0: a free one; the first line printed is the URL)' },
    'no-hidden': { type: 'boolean', default: false, build: true, help: 'the page without the hidden tests or the reference (www/dist-no-hidden/); with --grading the server grades them' },
    hidden: { type: 'boolean', default: false, help: 'refuse a build without the hidden tests (./lab serve gives it)' },
    root: { type: 'string', value: 'DIR', path: true, help: 'serve another folder', defaultText: 'www/dist/, or www/dist-no-hidden/ with --no-hidden' },
    grading: { type: 'boolean', default: false, needs: 'bwrap', help: 'also answer POST /grade with ./lab grade\'s sandboxed pool (www/page/EMBED.md)' },
    jobs: { type: 'string', value: 'N', parse: number({ int: true, min: 1, max: 64 }), default: 1, help: 'with --grading: submissions graded at once' },
    'per-client': { type: 'string', value: 'N', parse: number({ int: true, min: 1 }), help: 'with --grading: places one client address may hold (with --queue: its submissions waiting or grading; 429 past it)', defaultText: 'max(1, ceil(3 x jobs / 4)); with --queue none' },
    'secret-file': { type: 'string', value: 'FILE', path: true, help: 'with --grading: the secret hidden inputs are drawn from', defaultText: 'one of the process\'s own' },
    'hidden-statuses': HIDDEN_STATUSES,
    queue: {
      type: 'string', value: 'URL', parse: queueUrl,
      help: 'with --grading: store submissions in this PostgreSQL queue (answer 202 and an id; GET /grade/ID) for ./lab worker on any machine to grade (docs/deploy.md)',
      defaultText: 'the in-process pool',
    },
    host: { type: 'string', value: 'NAME', multiple: true, default: [], parse: hostName, help: 'a Host it answers to besides 127.0.0.1, localhost and [::1] (421 otherwise)' },
    open: {
      type: 'boolean', default: false,
      help: 'with --queue and --host: serve POST /grade and GET /grade/ID without API tokens, on purpose (else it refuses to start without a live token: ./lab token)',
    },
    'allow-origin': {
      type: 'string', value: 'ORIGIN', multiple: true, default: [], build: true, parse: allowedOrigin,
      help: 'a course page\'s origin that may embed the lab (written into the build) and POST /grade',
    },
    lti: {
      type: 'boolean', default: false,
      help: 'with --grading: also be an LTI 1.3 tool under /lti/ (login, launch, jwks, deep-link, submit) for the platforms ./lab lti registered; grades go back by AGS (docs/lms.md)',
    },
    'lti-dir': LTI_DIR,
    'lti-url': LTI_URL,
    quiet: { type: 'boolean', default: false, help: 'print nothing but errors' },
    'no-isolation': { type: 'boolean', default: false, help: 'no COOP/COEP (a plain site, such as the example course page)' },
  },
});

export const BUILD = command({
  name: 'build',
  brief: 'build the page, WASM grader included: www/dist/, www/dist-no-hidden/, www/dist-no-reference/',
  prog: './lab build',
  synopsis: '[options]',
  summary: 'Builds the page, WASM grader included, each mode into its own folder: www/dist/, www/dist-no-hidden/ (no hidden '
    + 'tests, no reference), www/dist-no-reference/ (no reference solution in any served file). www/build.mjs reads them.',
  positionals: { max: 0 },
  options: {
    'no-hidden': { type: 'boolean', default: false, help: 'without the hidden tests and the reference, into www/dist-no-hidden/' },
    'no-reference': { type: 'boolean', default: false, help: 'without the reference solution, into www/dist-no-reference/' },
    out: { type: 'string', value: 'DIR', path: true, help: 'another folder' },
    'allow-origin': { type: 'string', value: 'ORIGIN', multiple: true, default: [], help: 'a course page\'s origin that may embed the lab (a comma list too; without any the postMessage API is off)' },
    dev: { type: 'boolean', default: false, help: 'unminified, with source maps' },
    'no-wasm': { type: 'boolean', default: false, help: 'use www/pkg as it is instead of building the grader' },
  },
});

export const TEST = command({
  name: 'test',
  brief: 'fmt, clippy and every test: native, WASM, browser, the real run, CLI (about 25 minutes)',
  prog: './lab test',
  summary: 'fmt, clippy and every test: native, WASM, browser, the real run\'s parts, CLI (about 25 minutes).',
  positionals: { max: 0 },
  options: {},
});

export const BENCH = command({
  name: 'bench',
  brief: 'print the benchmark figures: sizes, load, run, grading, mutation scores',
  prog: './lab bench',
  synopsis: '[options]',
  summary: 'Builds, then prints the benchmark figures, each beside its anchor from the same run: sizes, load, run, grading (the pool, and the queue with one and two workers), the real run\'s phases, each lab\'s mutation score.',
  positionals: { max: 0 },
  options: {
    runs: { type: 'string', value: 'N', parse: number({ int: true, min: 1 }), default: 20, help: 'warm runs timed in the page' },
    visits: { type: 'string', value: 'N', parse: number({ int: true, min: 1 }), default: 5, help: 'repeat visits timed' },
    first: { type: 'string', value: 'N', parse: number({ int: true, min: 1 }), default: 3, help: 'first visits timed' },
    'real-full': { type: 'boolean', default: false, help: 'the courier real run\'s part: a full run (about 3 minutes) instead of a shortened one' },
    'real-json': { type: 'string', value: 'FILE', path: true, help: 'the courier real run\'s part: read a saved run\'s JSON line (./lab real --format json) instead of running one' },
    'real-only': { type: 'boolean', default: false, help: 'only the courier real run\'s part' },
  },
});

export const MUTANTS = command({
  name: 'mutants',
  brief: 'mutation testing of each lab\'s grader (cosmic-ray, SQL-aware and learner-style mutants)',
  prog: './lab mutants',
  synopsis: '[options]',
  summary: 'Mutation testing of each lab\'s grader, by families of mutants of its reference (cosmic-ray\'s operators; SQL-aware ones '
    + 'made with sqlglot; learner-style Python ones): every change of the reference that is not equivalent must fail (tests/mutation/README.md).',
  positionals: { max: 0 },
  options: {
    lab: { type: 'string', value: 'ID', help: 'one lab', defaultText: 'every lab' },
    family: { type: 'string', value: 'NAME', choices: ['cosmic-ray', 'sql', 'learner'], help: 'one family of mutants', defaultText: 'every family' },
    update: { type: 'boolean', default: false, help: 'rewrite tests/mutation/LAB.json for the current reference' },
    bench: { type: 'boolean', default: false, hidden: true, help: './lab bench\'s figures: a lab whose last run took long is not run again, its recorded figures are printed' },
  },
});

export const WORKER = command({
  name: 'worker',
  brief: 'grade from a PostgreSQL queue that ./lab serve --grading --queue fills, on any machine',
  prog: './lab worker',
  synopsis: '--queue URL [options]',
  summary: 'Takes submissions from the queue, grades each in ./lab grade\'s sandbox, and stores its report once. A job is '
    + 'leased while it is graded (a heartbeat renews the lease); a worker killed mid-job loses the lease and another takes '
    + 'the job again. SIGTERM: no new jobs, the ones under way finished within --grace or given back (docs/deploy.md).',
  positionals: { max: 0 },
  options: {
    queue: { type: 'string', value: 'URL', parse: queueUrl, help: 'the queue\'s PostgreSQL', defaultText: 'the environment\'s GRADING_QUEUE_URL' },
    jobs: { type: 'string', value: 'N', parse: number({ int: true, min: 1, max: 64 }), default: 1, help: 'submissions graded at once' },
    lease: { type: 'string', value: 'S', parse: number({ min: 1 }), default: 30, help: 'seconds a job is leased for, renewed every third of it' },
    grace: { type: 'string', value: 'S', parse: number({ min: 0 }), default: 30, help: 'on SIGTERM, seconds to finish the jobs under way before giving them back' },
    timeout: { type: 'string', value: 'S', parse: number({ min: 0.1 }), help: 'CPU seconds per submission', defaultText: 'the lab\'s limit, as ./lab grade' },
    'wall-factor': { type: 'string', value: 'K', parse: number({ min: 1 }), help: 'how many times its CPU limit a run may last on the clock', defaultText: 'as ./lab grade' },
    memory: { type: 'string', value: 'MB', parse: number({ int: true, min: 64 }), help: 'memory for one submission\'s Python', defaultText: 'as ./lab grade' },
    'no-sandbox': { type: 'boolean', default: false, help: 'no bubblewrap, as ./lab grade --no-sandbox (www/grader/README.md)' },
    'health-port': { type: 'string', value: 'N', parse: number({ int: true, min: 0, max: 65535 }), help: 'answer GET /healthz and /metrics on this port' },
    'poll-ms': { type: 'string', value: 'MS', parse: number({ int: true, min: 10 }), default: 500, help: 'how often an idle worker asks the queue', hidden: true },
    claim: {
      type: 'string', value: 'fair|fifo', choices: ['fair', 'fifo'], default: 'fair',
      help: 'fair: the next job is of the client (course or address) served least recently; fifo: the oldest job (for comparison)',
    },
    'client-cap': { type: 'string', value: 'N', parse: number({ int: true, min: 1 }), help: 'at most N submissions of one client graded at once across all workers', defaultText: 'no cap' },
  },
});

export const TOKEN_ACTIONS = Object.freeze(['make', 'list', 'revoke']);
export const TOKEN = command({
  name: 'token',
  brief: 'make, list or revoke a course\'s API token for the grading queue\'s front',
  prog: './lab token',
  synopsis: `${TOKEN_ACTIONS.join('|')} --queue URL [--course NAME] [ID]`,
  summary: 'A course\'s clients send its token (Authorization: Bearer TOKEN) to the queue\'s front: POST /grade, GET /grade/ID. '
    + 'The token is printed once by make; the queue keeps only its SHA-256. A course may have several at once (rotation: make '
    + 'a new one, move the clients, revoke the old). A front reached by other names than the loopback ones refuses to start '
    + 'without a live token unless told --open (docs/deploy.md, "Who may do what").',
  positionals: { min: 1, max: 2, missing: `name an action: ${TOKEN_ACTIONS.join(', ')}` },
  check(values, [action, id]) {
    if (!TOKEN_ACTIONS.includes(action)) throw new UsageError(`name an action: ${TOKEN_ACTIONS.join(', ')}, not ${action}`);
    if (action === 'make' && !values.course) throw new UsageError('make needs --course NAME');
    if (action === 'make' && !/^[\x21-\x7e]{1,64}$/.test(values.course)) throw new UsageError('--course: 1 to 64 printable ASCII characters, no spaces');
    if (action === 'revoke' && !/^[0-9a-f]{12}$/.test(id ?? '')) throw new UsageError('revoke needs the token\'s ID (12 hex digits: ./lab token list)');
    if (action !== 'revoke' && id !== undefined) throw new UsageError(`${action} takes no ID`);
  },
  options: {
    queue: { type: 'string', value: 'URL', parse: queueUrl, help: 'the queue\'s PostgreSQL', defaultText: 'the environment\'s GRADING_QUEUE_URL' },
    course: { type: 'string', value: 'NAME', help: 'make: the course the token is for (its client: its submissions and keys are its own)' },
  },
});

export const LTI_ACTIONS = Object.freeze(['add', 'list', 'remove', 'rotate-key', 'keys', 'grades', 'urls']);
export const LTI_CMD = command({
  name: 'lti',
  brief: 'register LMS platforms for the LTI 1.3 tool, rotate its key, list the grades it sent',
  prog: './lab lti',
  synopsis: `${LTI_ACTIONS.join('|')} [options]`,
  summary: 'The LTI 1.3 tool of ./lab serve --grading --lti (docs/lms.md). add: register a platform (an issuer and a client id, '
    + 'its deployment ids and endpoints; again to change it); list; remove; rotate-key: a new signing key, the old one kept in the '
    + 'JWKS until the tokens it signed have expired; keys; grades: the scores sent to the platforms (or not, and why); urls: '
    + 'what to give the LMS. With --queue the platforms and grades are in the queue\'s PostgreSQL, else in --lti-dir; the keys '
    + 'are always files in --lti-dir.',
  positionals: { min: 1, max: 1, missing: `name an action: ${LTI_ACTIONS.join(', ')}` },
  check(values, [action]) {
    if (!LTI_ACTIONS.includes(action)) throw new UsageError(`name an action: ${LTI_ACTIONS.join(', ')}, not ${action}`);
    if (action === 'add') {
      for (const o of ['issuer', 'client-id', 'auth-url', 'token-url', 'jwks-url']) if (values[o] === undefined) throw new UsageError(`add needs --${o}`);
      if (!values.deployment.length) throw new UsageError('add needs --deployment ID (one or more)');
    }
    if (action === 'remove' && (values.issuer === undefined || values['client-id'] === undefined)) throw new UsageError('remove needs --issuer and --client-id');
  },
  options: {
    issuer: { type: 'string', value: 'URL', parse: httpUrl, help: 'add, remove: the platform\'s issuer (iss), as its id_tokens spell it' },
    'client-id': { type: 'string', value: 'ID', help: 'add, remove: the client id the platform gave this tool' },
    deployment: { type: 'string', value: 'ID', multiple: true, default: [], help: 'add: a deployment id of the tool on that platform' },
    'auth-url': { type: 'string', value: 'URL', parse: httpUrl, help: 'add: the platform\'s OIDC authentication request URL' },
    'token-url': { type: 'string', value: 'URL', parse: httpUrl, help: 'add: the platform\'s OAuth 2 access token URL' },
    'jwks-url': { type: 'string', value: 'URL', parse: httpUrl, help: 'add: the platform\'s public keyset URL (JWKS)' },
    'lti-dir': LTI_DIR,
    queue: { type: 'string', value: 'URL', parse: queueUrl, help: 'the platforms and grades in this PostgreSQL (the one ./lab serve --queue uses)', defaultText: 'the files of --lti-dir' },
    'lti-url': LTI_URL,
    limit: { type: 'string', value: 'N', parse: number({ int: true, min: 1 }), default: 50, help: 'grades: the newest N' },
  },
});

/** A --queue URL: a PostgreSQL connection string. */
export function queueUrl(text) {
  if (!/^postgres(?:ql)?:\/\//.test(text)) throw new UsageError(`--queue ${JSON.stringify(text)}: give a PostgreSQL URL, postgres://USER:PASSWORD@HOST/DB`);
  return text;
}

/** ./lab real's options are its argparse's (www/real/run.py): ./lab prints them with its own --help. */
export const REAL = {
  name: 'real',
  brief: 'the courier lab on real parts: PostgreSQL, worker processes, SIGKILLs',
  prog: './lab real',
  synopsis: '[options] FILE',
  summary: 'The courier lab on real parts: PostgreSQL, worker processes, SIGKILLs, a database crash. FILE\'s code runs as '
    + 'real processes on this machine, in ./lab grade\'s sandbox where it works (www/real/README.md).',
  delegated: 'www/real/run.py',
};

export const COMMANDS = Object.freeze({
  serve: SERVE, test: TEST, build: BUILD, bench: BENCH, mutants: MUTANTS, grade: GRADE, package: PACKAGE, worker: WORKER, token: TOKEN, lti: LTI_CMD, real: REAL,
});

/** ./lab --help: every command, its synopsis and what it does. */
export function overview() {
  const lines = ['usage: ./lab COMMAND [options]', '',
    'delivery-lab\'s front door. Each command installs what it needs when it is missing (saying so), then does its job.', ''];
  for (const c of Object.values(COMMANDS)) {
    lines.push(`  ${c.prog}${c.synopsis ? ` ${c.synopsis}` : ''}`);
    lines.push(`      ${wrap(c.brief, 94, 6)}`);
  }
  lines.push('', './lab COMMAND --help prints the command\'s options; neither builds nor installs anything.');
  return `${lines.join('\n')}\n`;
}

/** A command's help text: its table's, or for a delegated one its summary. */
export function helpOf(name) {
  const c = COMMANDS[name];
  if (!c) return null;
  if (c.delegated) return `usage: ${c.prog} ${c.synopsis}\n\n${wrap(c.summary, 100, 0)}\n\noptions: ${c.delegated}'s (argparse), below when .venv/ exists; ./lab real installs it.\n`;
  return c.help();
}

/**
 * What ./lab does for `name ARGS` besides running it: [['build', arg], ['need', what]],
 * from the options marked `build` (passed to the build too) and `needs`. Throws a
 * UsageError on a bad command line.
 */
export function routeOf(name, argv) {
  const c = COMMANDS[name];
  if (!c || c.delegated) return [];
  const r = c.parse(argv);
  if (r.help) return [];
  const out = [];
  for (const [opt, o] of Object.entries(c.options)) {
    const v = r.values[opt];
    if (o.build && (o.type === 'boolean' ? v : v?.length)) {
      if (o.type === 'boolean') out.push(['build', `--${opt}`]);
      else for (const x of [].concat(v)) out.push(['build', `--${opt}`], ['build', x]);
    }
    if (o.needs && v) out.push(['need', o.needs]);
  }
  return out;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [mode, name, ...args] = process.argv.slice(2);
  if (mode === 'help') {
    const text = name ? helpOf(name) : overview();
    if (text === null) {
      process.stderr.write(`./lab: no command ${name}; the commands: ${orList(Object.keys(COMMANDS))}\n`);
      process.exit(2);
    }
    process.stdout.write(text);
    process.exit(0);
  }
  if ((mode === 'check' || mode === 'route') && COMMANDS[name]) {
    const c = COMMANDS[name];
    if (c.delegated || wantsHelp(args)) process.exit(0);
    try {
      const route = routeOf(name, args);
      if (mode === 'route') process.stdout.write(route.map(([k, v]) => `${k}\0${v}\0`).join(''));
    } catch (e) {
      if (!(e instanceof UsageError)) throw e;
      usageExit(c, e.message, `./lab ${name}`);
    }
    process.exit(0);
  }
  process.stderr.write('usage: node www/grader/commands.mjs help [COMMAND] | check COMMAND ARG... | route COMMAND ARG...\n');
  process.exit(2);
}
