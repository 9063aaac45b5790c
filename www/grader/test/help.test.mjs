// Every command's --help: exit 0, its options (from its one table, commands.mjs),
// and nothing built or installed; a command line a table refuses: exit 2 with what
// is wrong, and nothing built or installed either.
//
// "Nothing built or installed" is seen twice: the build outputs and install stamps
// keep their inode and mtime, and ./lab runs with a PATH whose cargo, rustup, npm,
// apt-get, sudo, pip and wasm-bindgen are fakes that leave a mark when run (node is
// the real one: the help is made by it).
// Run: cd www && node --test grader/test/help.test.mjs   (no build needed)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { COMMANDS } from '../commands.mjs';
import { FORMAT_NAMES } from '../formats.mjs';
import { noProcessLeftAfterTests } from '../fixtures/leftovers.mjs';

noProcessLeftAfterTests();

const WWW = fileURLToPath(new URL('../../', import.meta.url));
const REPO = path.dirname(path.resolve(WWW));
const LAB = path.join(REPO, 'lab');
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-help-test-'));
const FAKES = path.join(TMP, 'bin');
const MARKS = path.join(TMP, 'marks');
const LIMIT = { timeout: 120_000 };

// What a build or an install writes (or moves into place).
const WATCHED = [
  'www/dist/build.json', 'www/dist-no-hidden/build.json', 'www/dist-no-reference/build.json',
  'www/pkg/delivery_lab_bg.wasm', 'target/pkg-no-hidden/delivery_lab_bg.wasm', 'target/pkg-no-reference/delivery_lab_bg.wasm',
  'www/node_modules/.lab-lock-sha256', '.venv/.lab-requirements-sha256', 'packages',
].map((f) => path.join(REPO, f));
const stamp = () => WATCHED.map((f) => {
  try {
    const st = fs.statSync(f);
    return `${f} ${st.ino} ${st.mtimeMs}`;
  } catch {
    return `${f} missing`;
  }
});

before(() => {
  fs.mkdirSync(FAKES);
  fs.mkdirSync(MARKS);
  for (const tool of ['cargo', 'rustup', 'npm', 'apt-get', 'sudo', 'pip', 'wasm-bindgen', 'chromium', 'initdb']) {
    fs.writeFileSync(path.join(FAKES, tool), `#!/bin/sh\ntouch '${MARKS}/${tool}'\nexit 1\n`, { mode: 0o755 });
  }
});
after(() => fs.rmSync(TMP, { recursive: true, force: true }));

/** ./lab ARGS with the fakes first on PATH. */
function lab(args) {
  const r = spawnSync(LAB, args, {
    cwd: REPO, encoding: 'utf8', timeout: 60_000,
    env: { ...process.env, PATH: `${FAKES}:${path.dirname(process.execPath)}:${process.env.PATH}` },
  });
  return { code: r.status ?? r.signal, stdout: r.stdout, stderr: r.stderr };
}

const marks = () => fs.readdirSync(MARKS);

/** The flags a command's table lists in its help (every option not marked hidden). */
const flagsOf = (c) => Object.entries(c.options).filter(([, o]) => !o.hidden).map(([n]) => `--${n}`);

test('./lab --help, -h and help: every command, exit 0', LIMIT, () => {
  for (const args of [['--help'], ['-h'], ['help']]) {
    const r = lab(args);
    assert.equal(r.code, 0, `./lab ${args.join(' ')}: ${r.stderr}`);
    assert.equal(r.stderr, '');
    assert.match(r.stdout, /^usage: \.\/lab COMMAND \[options\]$/m);
    for (const c of Object.values(COMMANDS)) assert.match(r.stdout, new RegExp(`^  ${c.prog.replace('.', '\\.')}( |$)`, 'm'), `${c.name} listed`);
    assert.doesNotMatch(r.stdout, /\S$/, 'ends with a newline, not mid-sentence');
  }
});

test('./lab COMMAND --help: the command\'s usage and every option of its table, exit 0, nothing built or installed', LIMIT, () => {
  const was = stamp();
  const runs = [];
  for (const name of Object.keys(COMMANDS)) runs.push([name, '--help'], [name, '-h'], ['help', name]);
  // --help wins wherever it is before "--", whatever else is on the line (an unknown option too).
  runs.push(['grade', '-h', 'x.py'], ['grade', '--bogus', '--help'], ['build', '--no-hidden', '-h'], ['serve', '--port', 'x', '--help'],
    ['test', 'extra', '--help'], ['real', 'x.py', '--help']);
  for (const args of runs) {
    const r = lab(args);
    const name = args[0] === 'help' ? args[1] : args[0];
    const c = COMMANDS[name];
    assert.equal(r.code, 0, `./lab ${args.join(' ')}: ${r.code}\n${r.stderr}`);
    assert.ok(r.stdout.startsWith(`usage: ./lab ${name}`), `./lab ${args.join(' ')}:\n${r.stdout}`);
    assert.doesNotMatch(r.stderr, /building|installing|\[lab\]/, `./lab ${args.join(' ')}`);
    if (!c.delegated) {
      for (const flag of [...flagsOf(c), '--help']) assert.match(r.stdout, new RegExp(`^  (-h, )?${flag}( |$)`, 'm'), `./lab ${args.join(' ')} lists ${flag}`);
    }
  }
  // grade's help names every report format, each with what it is.
  const grade = lab(['grade', '--help']).stdout;
  for (const f of FORMAT_NAMES) assert.match(grade, new RegExp(`^ {28}${f} +\\S`, 'm'), `format ${f}`);
  assert.deepEqual(marks(), [], 'a --help ran a build or install tool');
  assert.deepEqual(stamp(), was, 'a --help built or changed something');
});

test('the Node scripts\' own --help: the same tables, exit 0', LIMIT, () => {
  for (const [script, name, prog] of [['grader/grade.mjs', 'grade', './lab grade'], ['grader/package.mjs', 'package', './lab package'],
    ['grader/serve.mjs', 'serve', 'node grader/serve.mjs'], ['grader/platform.mjs', null, 'node platform.mjs'], ['build.mjs', 'build', './lab build'],
    ['grader/mutation.mjs', 'mutants', './lab mutants'], ['bench/page.mjs', 'bench', './lab bench']]) {
    const r = spawnSync(process.execPath, [script, '--help'], { cwd: WWW, encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 0, `${script}: ${r.stderr}`);
    assert.ok(r.stdout.startsWith(`usage: ${prog} `), `${script}:\n${r.stdout}`);
    if (name) for (const flag of flagsOf(COMMANDS[name])) assert.match(r.stdout, new RegExp(`^  (-h, )?${flag}( |$)`, 'm'), `${script} lists ${flag}`);
    // The same text ./lab prints, but for the program's name.
    if (name) assert.equal(r.stdout.replace(prog, `./lab ${name}`).replace(/^usage: .*\n/, ''), lab([name, '--help']).stdout.replace(/^usage: .*\n/, ''));
  }
});

test('a command line the table refuses: exit 2, what is wrong and where the options are, nothing built or installed', LIMIT, () => {
  const was = stamp();
  const cases = [
    [['grade', '--no-such-option', 'x.py'], /^\.\/lab grade: unknown option --no-such-option$/m],
    [['grade', '--format', 'yaml', 'x.py'], /--format must be json, text, csv, junit, exercism, gradescope, gradescope-published, gradescope-hidden or prairielearn, not yaml/],
    [['grade', '--jobs', '0', 'x.py'], /--jobs needs a whole number of at least 1, not 0/],
    [['grade', '--no-sandbox=yes', 'x.py'], /--no-sandbox takes no value/],
    [['grade', '--lab'], /--lab needs a value/],
    [['grade'], /no submission given/],
    [['package', 'moodle'], /name a platform: gradescope, prairielearn, exercism, not moodle/],
    [['package', 'gradescope', '--no-such-option'], /unknown option --no-such-option/],
    [['serve', '--allow-origin', '*'], /--allow-origin "\*" is not an origin/],
    [['serve', '--host', 'a b'], /give a host name/],
    [['serve', '--port', '70000'], /--port needs a whole number from 0 to 65535, not 70000/],
    [['serve', 'extra'], /too many arguments: extra|takes no argument/],
    [['build', '--no-such-option'], /unknown option --no-such-option/],
    [['test', '--no-such-option'], /unknown option --no-such-option/],
    [['test', 'extra'], /takes no argument, not extra/],
    [['bench', '--runs', 'x'], /--runs needs a whole number/],
    [['mutants', '--no-such-option'], /unknown option --no-such-option/],
  ];
  for (const [args, message] of cases) {
    const r = lab(args);
    assert.equal(r.code, 2, `./lab ${args.join(' ')}: ${r.code}\n${r.stdout}\n${r.stderr}`);
    assert.match(r.stderr, message, `./lab ${args.join(' ')}`);
    assert.match(r.stderr, new RegExp(`^usage: \\./lab ${args[0]}`, 'm'), `./lab ${args.join(' ')}`);
    assert.match(r.stderr, new RegExp(`\\(\\./lab ${args[0]} --help lists every option\\)`), `./lab ${args.join(' ')}`);
    assert.doesNotMatch(r.stderr, /building|installing/, `./lab ${args.join(' ')}`);
  }
  // No command, or an unknown one: the list of commands on stderr, exit 2.
  for (const args of [[], ['no-such-command']]) {
    const r = lab(args);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^ {2}\.\/lab serve/m);
  }
  assert.deepEqual(marks(), [], 'a refused command line ran a build or install tool');
  assert.deepEqual(stamp(), was, 'a refused command line built or changed something');
});

test('the serve command line routes its build options to the build, and --grading to bubblewrap', () => {
  const route = (args) => {
    const r = spawnSync(process.execPath, ['grader/commands.mjs', 'route', 'serve', ...args], { cwd: WWW, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const out = r.stdout.split('\0').slice(0, -1);
    return Array.from({ length: out.length / 2 }, (_, i) => `${out[2 * i]} ${out[2 * i + 1]}`);
  };
  assert.deepEqual(route([]), []);
  assert.deepEqual(route(['--port', '9000', '--jobs', '2']), []);
  assert.deepEqual(route(['--no-hidden', '--grading', '--allow-origin', 'https://a.example/', '--allow-origin=http://b.example:8001']),
    ['build --no-hidden', 'need bwrap', 'build --allow-origin', 'build https://a.example', 'build --allow-origin', 'build http://b.example:8001']);
});
