// Builds do not mix (issue 28, item 5):
//  - each mode builds into its own folder: www/dist/ (hidden tests, the reference),
//    www/dist-no-hidden/ (--no-hidden), and a build of one mode leaves the other's
//    folder as it was;
//  - a server started with --no-hidden keeps serving the build it started with after
//    a build with the hidden tests is made in the same checkout, even one written
//    over the very folder it serves (serve.mjs reads its build into memory at start);
//  - a server refuses to start on a build of the other mode (build.json's `hidden`);
//  - `./lab --help` and `./lab COMMAND --help` print usage, exit 0 and build nothing;
//  - no file of a --no-hidden build carries any lab's reference solution (a line of
//    each lab's reference.py that the page has no other reason to hold), while the
//    build with the hidden tests does (so the search is shown to find it); its page,
//    after a full pass, offers no comparison (Chromium), where the other offers it.
// Fast: the page builds are build.mjs --no-wasm (esbuild and copies, a few seconds);
// cargo runs only when target/pkg-no-hidden is missing or carries a reference.
// Run: node --test page/test/builds.test.mjs   (needs www/pkg: ./lab build)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const WWW = fileURLToPath(new URL('../../', import.meta.url));
const REPO = path.join(WWW, '..');
const DIST = path.join(WWW, 'dist');
const DIST_NO_HIDDEN = path.join(WWW, 'dist-no-hidden');
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-builds-'));
const LIMIT = { timeout: 300_000 };
const children = new Set();

after(() => {
  for (const c of children) c.kill('SIGKILL');
  fs.rmSync(TMP, { recursive: true, force: true });
});

/** node build.mjs ARGS; its output shown only when it fails. */
function build(...args) {
  const r = spawnSync(process.execPath, ['build.mjs', ...args], { cwd: WWW, encoding: 'utf8', timeout: 600_000 });
  if (r.status !== 0) throw new Error(`build.mjs ${args.join(' ')} failed (${r.status ?? r.signal}):\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

const readBuild = (root) => JSON.parse(fs.readFileSync(path.join(root, 'build.json'), 'utf8'));

function walk(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory()
    ? walk(path.join(dir, e.name)) : [path.join(dir, e.name)]));
}

/** node grader/serve.mjs ARGS in a child; resolves to {url, child} once it listens, rejects with its stderr if it exits. */
function startServer(args) {
  const child = spawn(process.execPath, ['grader/serve.mjs', '--port', '0', ...args], { cwd: WWW, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  child.once('exit', () => children.delete(child));
  let err = '';
  child.stderr.on('data', (d) => { err += d; });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/^(http:\/\/\S+)\n/);
      if (m) resolve({ url: m[1], child });
    });
    child.once('exit', (code, signal) => reject(Object.assign(new Error(`serve.mjs exited (${code ?? signal}): ${err}`), { code, stderr: err })));
  });
}

function stopServer(child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', resolve);
    child.kill('SIGTERM');
  });
}

async function get(url, headers = {}) {
  const res = await fetch(url, { headers });
  assert.equal(res.status, 200, `GET ${url}`);
  return Buffer.from(await res.arrayBuffer());
}

/** What the server at `url` serves: build.json and each lab's grader module and glue. */
async function served(url, labs) {
  const files = { 'build.json': await get(`${url}build.json`), 'index.html': await get(url) };
  for (const id of labs) {
    for (const f of ['delivery_lab_bg.wasm', 'delivery_lab.js']) {
      const rel = `pkg/labs/${id}/${f}`;
      files[rel] = await get(`${url}${rel}`);
      // Compressed on the fly from the same snapshot (fetch decodes the gzip).
      assert.deepEqual(await get(`${url}${rel}`, { 'accept-encoding': 'gzip' }), files[rel]);
    }
  }
  return files;
}

// ---------------------------------------------------------------------------
// Each lab's reference solution: the lines of its reference.py the page has no other
// reason to carry (not in its starter, its text, its bridge or its rule texts, nor in
// www/page or www/host).

function labModules() {
  const list = fs.readFileSync(path.join(REPO, 'src', 'labs.rs'), 'utf8');
  return [...list.matchAll(/^\s*"([a-z0-9-]+)"\s*=>\s*([a-z0-9_]+)::/gm)].map((m) => ({ id: m[1], module: m[2] }));
}

function referenceNeedles({ module }) {
  const dir = path.join(REPO, 'src', module);
  // The texts every build holds anyway: its starter, instructions and Python sides, and the
  // engine's own Rust (rule texts, the statements its scripted worlds run: a line the
  // reference shares with those is no sign of the reference).
  const rust = fs.readdirSync(dir).filter((f) => f.endsWith('.rs'));
  const open = ['starter.py', 'lab.md', 'bridge.py', 'learner_side.py', 'db_store.py', ...rust].map((f) => path.join(dir, f)).filter((f) => fs.existsSync(f))
    // The page's and the host's own files (their tests aside): every build carries them.
    .concat(['page', 'host'].flatMap((room) => walk(path.join(WWW, room)).filter((f) => !f.includes(`${path.sep}test${path.sep}`))))
    // Rust's string literals as the engine holds them.
    .map((f) => (f.endsWith('.rs') ? fs.readFileSync(f, 'utf8').replace(/\\(["\\])/g, '$1') : fs.readFileSync(f, 'utf8'))).join('\n');
  const lines = fs.readFileSync(path.join(dir, 'reference.py'), 'utf8').split('\n').map((l) => l.trim());
  return [...new Set(lines)].filter((l) => l.length >= 24 && !l.startsWith('#') && !open.includes(l));
}

/** The needles of `needles` found in any file under `root` (but Pyodide's own), as "file: needle". */
function foundIn(root, needles) {
  const hits = [];
  for (const file of walk(root).filter((f) => !path.relative(root, f).startsWith(`pyodide${path.sep}`))) {
    const buf = fs.readFileSync(file);
    for (const n of needles) if (buf.includes(Buffer.from(n, 'utf8'))) hits.push(`${path.relative(root, file)}: ${n}`);
  }
  return hits;
}

// ---------------------------------------------------------------------------

let LABS;

before(() => {
  // The graders without hidden tests as they are (target/pkg-no-hidden), or built with
  // cargo when missing or made before they left the reference out.
  try {
    build('--no-wasm', '--no-hidden');
  } catch {
    build('--no-hidden');
  }
  // And the page with them (www/pkg, built by ./lab build).
  build('--no-wasm');
  LABS = readBuild(DIST).labs;
});

test('each mode builds into its own folder, and a build of one leaves the other\'s alone', LIMIT, () => {
  const hidden = readBuild(DIST);
  const noHidden = readBuild(DIST_NO_HIDDEN);
  assert.equal(hidden.hidden, true);
  assert.equal(hidden.reference, true);
  assert.equal(noHidden.hidden, false);
  assert.equal(noHidden.reference, false);

  const before = fs.statSync(path.join(DIST, 'index.html'));
  build('--no-wasm', '--no-hidden');
  const after = fs.statSync(path.join(DIST, 'index.html'));
  assert.deepEqual(readBuild(DIST), hidden, 'a --no-hidden build changed www/dist');
  assert.equal(after.ino, before.ino);
  assert.equal(after.mtimeMs, before.mtimeMs);
  assert.equal(readBuild(DIST_NO_HIDDEN).hidden, false);

  const nh = fs.statSync(path.join(DIST_NO_HIDDEN, 'index.html'));
  const nhBuild = readBuild(DIST_NO_HIDDEN);
  build('--no-wasm');
  assert.deepEqual(readBuild(DIST_NO_HIDDEN), nhBuild, 'a build with hidden tests changed www/dist-no-hidden');
  assert.equal(fs.statSync(path.join(DIST_NO_HIDDEN, 'index.html')).ino, nh.ino);
  assert.equal(readBuild(DIST).hidden, true);
  // Nothing left half-way beside them.
  assert.deepEqual(fs.readdirSync(WWW).filter((f) => /\.(tmp|old)-\d+$/.test(f)), []);
});

test('a --no-hidden server keeps serving its build after builds with the hidden tests in the same checkout', LIMIT, async () => {
  // Its own copy of www/dist-no-hidden, so that the hidden build below can be written
  // over the very folder it serves (what ./lab build did to www/dist before).
  const root = path.join(TMP, 'served');
  fs.cpSync(DIST_NO_HIDDEN, root, { recursive: true });
  const mine = readBuild(root);
  assert.equal(mine.hidden, false);

  const def = await startServer(['--no-hidden']); // www/dist-no-hidden
  const own = await startServer(['--no-hidden', '--root', root]);
  try {
    const first = await served(def.url, LABS);
    const firstOwn = await served(own.url, LABS);
    assert.equal(JSON.parse(first['build.json']).hidden, false);
    assert.equal(JSON.parse(firstOwn['build.json']).version, mine.version);

    build('--no-wasm'); // www/dist, with the hidden tests
    build('--no-wasm', '--out', root); // with the hidden tests, over the served folder
    assert.equal(readBuild(root).hidden, true, 'the folder now holds a build with the hidden tests');

    for (const [srv, was] of [[def, first], [own, firstOwn]]) {
      const now = await served(srv.url, LABS);
      assert.equal(JSON.parse(now['build.json']).hidden, false);
      for (const f of Object.keys(was)) assert.ok(now[f].equals(was[f]), `${srv.url}${f} changed under the running server`);
    }
  } finally {
    await stopServer(def.child);
    await stopServer(own.child);
  }
});

test('a server refuses to start on a build of the other mode', LIMIT, async () => {
  const refused = async (args, pattern) => {
    const e = await startServer(args).then(({ child }) => {
      child.kill('SIGKILL');
      return null;
    }, (err) => err);
    assert.ok(e, `serve.mjs ${args.join(' ')} started`);
    assert.equal(e.code, 1, e.message);
    assert.match(e.stderr, pattern);
  };
  await refused(['--no-hidden', '--root', DIST], /holds a build with the hidden tests.*refusing to start/);
  await refused(['--hidden', '--root', DIST_NO_HIDDEN], /holds a build without the hidden tests.*refusing to start/);
  const bare = path.join(TMP, 'bare');
  fs.mkdirSync(bare, { recursive: true });
  fs.writeFileSync(path.join(bare, 'index.html'), '<!doctype html><title>lab</title>\n');
  await refused(['--hidden', '--root', bare], /no readable build\.json.*refusing to start/);
  // Asked for its own mode, each starts.
  for (const args of [['--hidden', '--root', DIST], ['--no-hidden', '--root', DIST_NO_HIDDEN]]) {
    const { child } = await startServer(args);
    await stopServer(child);
  }
});

test('--help prints usage, exits 0 and builds nothing', LIMIT, () => {
  const watched = [
    path.join(DIST, 'build.json'), path.join(DIST_NO_HIDDEN, 'build.json'),
    path.join(WWW, 'pkg', 'delivery_lab_bg.wasm'), path.join(REPO, 'target', 'pkg-no-hidden', 'delivery_lab_bg.wasm'),
  ];
  const stamp = () => watched.map((f) => {
    try {
      const st = fs.statSync(f);
      return `${f} ${st.ino} ${st.mtimeMs}`;
    } catch {
      return `${f} missing`;
    }
  }).concat(fs.readdirSync(WWW).sort().join(' '));
  const was = stamp();
  const lab = path.join(REPO, 'lab');
  const runs = [['--help'], ['-h'], ['help'], ['real', '--help'], ['grade', '--help'], ['grade', '-h', 'x.py'],
    ['build', '--help'], ['build', '--no-hidden', '-h'], ['serve', '--help'], ['bench', '--help'], ['mutants', '--help'],
    ['package', '--help'], ['test', '--help']];
  for (const args of runs) {
    const r = spawnSync(lab, args, { cwd: REPO, encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 0, `./lab ${args.join(' ')}: ${r.status ?? r.signal}\n${r.stderr}`);
    const cmd = args[0].startsWith('-') || args[0] === 'help' ? '' : args[0];
    assert.ok(r.stdout.includes(`./lab ${cmd}`), `./lab ${args.join(' ')} printed no usage:\n${r.stdout}`);
    assert.doesNotMatch(r.stderr, /building|installing/, `./lab ${args.join(' ')}`);
  }
  assert.deepEqual(stamp(), was, 'a --help built or changed something');
  // Without a command it is a usage error, still building nothing.
  for (const args of [[], ['no-such-command']]) {
    const r = spawnSync(lab, args, { cwd: REPO, encoding: 'utf8', timeout: 60_000 });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /\.\/lab serve/);
  }
  assert.deepEqual(stamp(), was);
});

test('no file of a --no-hidden build carries a reference solution; the build with hidden tests does', LIMIT, () => {
  const labs = labModules();
  assert.ok(labs.length >= 2);
  const plain = readBuild(DIST);
  for (const lab of labs) {
    const needles = referenceNeedles(lab);
    assert.ok(needles.length >= 5, `${lab.id}: too few distinctive lines in reference.py (${needles.length})`);
    assert.deepEqual(foundIn(DIST_NO_HIDDEN, needles), [], `${lab.id}'s reference in www/dist-no-hidden`);
    // The search finds it where it is: the page with the hidden tests offers the comparison.
    if (plain.reference) {
      const own = path.join(DIST, 'pkg', 'labs', lab.id);
      assert.ok(foundIn(own, needles).length > 0, `${lab.id}'s reference not found in www/dist, so the search proves nothing`);
    }
  }
});

test('after a full pass the page offers the comparison only where the build carries the reference', LIMIT, async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
  });
  try {
    for (const [root, offered] of [[DIST, true], [DIST_NO_HIDDEN, false]]) {
      const { url, child } = await startServer(['--root', root]);
      try {
        const ctx = await browser.newContext();
        // A full pass earned before: what the page shows Compare after.
        await ctx.addInitScript(() => {
          localStorage.setItem('delivery-lab:deliver-once:xp', JSON.stringify({ xp: 90, at: '2026-01-01T00:00:00Z' }));
        });
        const page = await ctx.newPage();
        page.setDefaultTimeout(120_000); // a loaded machine (CI runs beside a CPU hog)
        await page.goto(`${url}?lab=deliver-once`);
        await page.evaluate(() => window.deliveryLab.ready);
        await page.locator('#xp-badge.earned').waitFor();
        assert.equal(await page.locator('#compare').isVisible(), offered, `${path.relative(WWW, root)}: Compare ${offered ? 'missing' : 'offered'}`);
        await ctx.close();
      } finally {
        await stopServer(child);
      }
    }
  } finally {
    await browser.close();
  }
});
