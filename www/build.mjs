// Builds the page into its mode's own folder, each written into place in one step
// (a folder beside it, then renamed), so that no build of one mode touches another's
// and nothing reads half a build:
//   www/dist/              the page with the hidden tests and the reference solution
//   www/dist-no-hidden/    --no-hidden (never a reference either)
//   www/dist-no-reference/ --no-reference (hidden tests, no reference)
// The folder holds:
//   main.js, worker.js, style.css   bundled by esbuild from src/
//   embed.js                        the <delivery-lab> web component for host pages (page/embed.js)
//   theme.js                        the theme before the first paint, a classic script (page/theme_early.js)
//   index.html                      copied
//   pkg/labs/ID/                    each lab's grader (from www/pkg/labs, built by scripts/build-wasm.sh)
//   pyodide/                        only the Pyodide files that loading needs
//   build.json                      version, its mode (hidden, reference), cache names, file
//                                   lists and sizes (read by the page; serve.mjs checks the mode)
//   sw.js                           the service worker, with its versioned cache manifest
//
// Usage: node build.mjs [--dev] [--no-wasm] [--no-hidden] [--no-reference] [--out DIR] [--allow-origin ORIGIN]...
//   --dev        unminified, with source maps
//   --no-wasm    use www/pkg as it is instead of running scripts/build-wasm.sh first
//   --no-hidden  build the grader without the hidden tests and without the reference
//                solution (cargo --no-default-features, in target/no-hidden, then
//                wasm-bindgen) into target/pkg-no-hidden/, leaving www/pkg alone; the page
//                then offers no comparison with the reference, and offers
//                "Submit for grading" (POST grade, answered by serve.mjs --grading). The build
//                fails if that grader still lists a hidden test. With --no-wasm it reuses
//                target/pkg-no-hidden/ as it is.
//   --no-reference  leave each lab's reference solution out of the page's graders
//                (DELIVERY_LAB_NO_REFERENCE, build.rs), built into target/pkg-no-reference/;
//                the page offers no comparison. The build fails if a served grader still
//                carries a reference.
//   --out DIR    write somewhere other than the mode's folder (the e2e tests build their own copy)
//   --allow-origin ORIGIN   a course page's origin (https://host[:port]) that may embed the lab
//                and drive it by postMessage (www/page/EMBED.md); repeatable, or a comma list.
//                Written into build.json (allowOrigins). Without it the postMessage API is off.
import * as esbuild from 'esbuild';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { parseOrExit, usageExit } from './grader/args.mjs';
import { allowedOrigin, BUILD } from './grader/commands.mjs';
import { moveIntoPlace } from './grader/place.mjs';
import { courseOf, JourneyError } from './page/journey_data.mjs';

const WWW = path.dirname(fileURLToPath(import.meta.url));
const WWW_PKG = path.join(WWW, 'pkg');
const NO_HIDDEN_PKG = path.join(WWW, '..', 'target', 'pkg-no-hidden');
const NO_REFERENCE_PKG = path.join(WWW, '..', 'target', 'pkg-no-reference');
const PYODIDE = path.join(WWW, 'node_modules', 'pyodide');
// The command line, by ./lab build's table (grader/commands.mjs BUILD): a refused one exits 2.
const { values: opts } = parseOrExit(BUILD, process.argv.slice(2), 'build');
const dev = opts.dev;
const allowOrigins = parseAllowOrigins(opts['allow-origin']);
const noHidden = opts['no-hidden'];
// A page without hidden tests carries no reference either: it is what they would check.
const noReference = noHidden || opts['no-reference'];
const DIST = opts.out !== undefined ? path.resolve(opts.out)
  : path.join(WWW, noHidden ? 'dist-no-hidden' : noReference ? 'dist-no-reference' : 'dist');
// The grader this build ships: www/pkg, or the one without hidden tests, or the one
// whose page graders carry no reference.
const PKG = noHidden ? NO_HIDDEN_PKG : noReference ? NO_REFERENCE_PKG : WWW_PKG;

// What loadPyodide() fetches, and nothing else (no console pages, no maps).
const PYODIDE_FILES = ['pyodide.mjs', 'pyodide.asm.mjs', 'pyodide.asm.wasm', 'python_stdlib.zip', 'pyodide-lock.json'];
const PKG_FILES = ['delivery_lab.js', 'delivery_lab_bg.wasm'];

function fail(message) {
  console.error(`build: ${message}`);
  process.exit(1);
}

/**
 * The --allow-origin values, each an exact origin: http(s), a host, maybe a port,
 * nothing else. Whoever frames the page picks its `host-origin`; only this list,
 * fixed where the lab is deployed, decides whom it may trust, so it must be exact.
 */
function parseAllowOrigins(values) {
  const origins = [];
  for (const value of values.flatMap((v) => v.split(','))) {
    let origin;
    try {
      origin = allowedOrigin(value.trim());
    } catch (e) {
      if (!e.usage) throw e;
      usageExit(BUILD, e.message, 'build');
    }
    if (!origins.includes(origin)) origins.push(origin);
  }
  return origins;
}

function buildWasm() {
  // The engine's own script, so the page always ships the grader of this tree.
  const script = path.join(WWW, '..', 'scripts', 'build-wasm.sh');
  if (!fs.existsSync(script)) fail(`${script} not found`);
  const repo = path.join(WWW, '..');
  // Each mode's graders go to a folder of their own: www/pkg (read by ./lab grade, the
  // CLI and the tests, in parallel under node --test) only ever holds the graders with
  // the hidden tests and the reference. The graders without hidden tests build in a
  // cargo target dir of their own. Built beside the folder, then moved into place.
  const scriptArgs = [
    ...(noHidden ? ['--no-hidden', '--target-dir', path.join(repo, 'target', 'no-hidden')] : []),
    ...(noReference ? ['--no-reference'] : []),
  ];
  console.log(`build: scripts/build-wasm.sh ${scriptArgs.length ? `${scriptArgs.filter((a) => a.startsWith('--') && a !== '--target-dir').join(' ')} ` : ''}into ${path.relative(repo, PKG)}`);
  const tmp = `${PKG}.tmp-${process.pid}`;
  fs.rmSync(tmp, { recursive: true, force: true });
  try {
    execFileSync('bash', [script, ...scriptArgs, '--out', tmp], { cwd: repo, stdio: 'inherit' });
  } catch (e) {
    fs.rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
  moveIntoPlace(tmp, PKG);
}


async function loadPkg(dir) {
  for (const f of PKG_FILES) {
    if (!fs.existsSync(path.join(dir, f))) {
      fail(`${path.relative(path.join(WWW, '..'), dir)}/${f} is missing: `
        + (PKG !== WWW_PKG ? `run node build.mjs ${noHidden ? '--no-hidden' : '--no-reference'} without --no-wasm first` : 'run scripts/build-wasm.sh from the repo root first'));
    }
  }
  const pkg = await import(new URL(`file://${path.join(dir, 'delivery_lab.js')}`).href);
  await pkg.default({ module_or_path: fs.readFileSync(path.join(dir, 'delivery_lab_bg.wasm')) });
  return new pkg.Grader();
}

/** The labs, each with its own grader module (PKG/labs/ID/), checked to load. */
async function checkGrader() {
  // A grader that cannot instantiate would only fail in the browser; find out now.
  try {
    const all = await loadPkg(PKG);
    const labs = JSON.parse(all.labs()).map((l) => l.id);
    let hidden = 0;
    const bridges = {};
    const infos = [];
    for (const id of labs) {
      const grader = await loadPkg(path.join(PKG, 'labs', id));
      const own = JSON.parse(grader.labs()).map((l) => l.id);
      if (own.join() !== id) throw new Error(`labs/${id} holds ${own.join(', ') || 'no lab'}`);
      const lab = JSON.parse(grader.lab(id));
      infos.push(lab);
      hidden += lab.tests.filter((t) => t.kind === 'hidden').length;
      // The page's snapshot holds the lab's Python sides: its learner side and its store.
      bridges[id] = `${lab.bridge_py}\0${lab.store_py ?? ''}`;
      if (noReference && lab.reference_py) throw new Error(`built without the reference, yet labs/${id} carries it`);
    }
    if (noHidden && hidden) throw new Error(`built with --no-hidden, yet it lists ${hidden} hidden tests`);
    if (!hidden) console.warn('build: note: these graders have no hidden tests (built with --no-hidden): the page offers "Submit for grading"');
    return { labs, hidden, bridges, infos };
  } catch (e) {
    fail(`${path.relative(path.join(WWW, '..'), PKG)} does not load or is wrong (${e.message}). Rebuild it with scripts/build-wasm.sh.`);
  }
}

/**
 * The course map's and the lab pages' journey: each lab in the engine's order, its
 * facts from its grader's `lab(id)`, its journey from its own folder's journey.toml
 * (page/journey_data.mjs). A lab's tests, with a --no-hidden build, are its examples
 * only, so a journey names example tests alone.
 */
function course(infos) {
  try {
    return courseOf(infos, path.join(WWW, '..', 'src'));
  } catch (e) {
    if (!(e instanceof JourneyError)) throw e;
    fail(e.message);
  }
  return null;
}

/**
 * Each lab's key for the worker's memory snapshot (page/snapshot.js): whatever
 * decides what the snapshot holds, so a change to any of it makes the next visit
 * boot afresh and store a new one instead of restoring an old interpreter.
 */
function snapshotKeys(labs, bridges, pyodideVersion) {
  const own = ['host/solution_runner.py', 'host/engine.mjs', 'page/snapshot.js', 'page/worker.js'].map((f) => fs.readFileSync(path.join(WWW, f)));
  const keys = {};
  for (const id of labs) {
    const hash = crypto.createHash('sha256').update(`pyodide ${pyodideVersion}\0lab ${id}\0`);
    for (const buf of own) hash.update(buf).update('\0');
    keys[id] = `${pyodideVersion}-${hash.update(bridges[id] ?? '').digest('hex').slice(0, 16)}`;
  }
  return keys;
}

const gzipSize = (buf) => zlib.gzipSync(buf, { level: 6 }).length;

function copy(from, to) {
  fs.mkdirSync(path.dirname(to), { recursive: true });
  fs.copyFileSync(from, to);
}

async function main() {
  const t0 = performance.now();
  if (!opts['no-wasm']) buildWasm();
  const grader = await checkGrader();
  grader.course = course(grader.infos);
  const pyodideVersion = JSON.parse(fs.readFileSync(path.join(PYODIDE, 'package.json'), 'utf8')).version;

  // Built beside the output folder, then moved into place (moveIntoPlace).
  const OUT = DIST;
  const DIST_TMP = `${OUT}.tmp-${process.pid}`;
  fs.rmSync(DIST_TMP, { recursive: true, force: true });
  fs.mkdirSync(DIST_TMP, { recursive: true });
  try {
    await writePage(DIST_TMP, grader, pyodideVersion, { name: path.relative(process.cwd(), OUT) || '.', t0 });
  } catch (e) {
    fs.rmSync(DIST_TMP, { recursive: true, force: true });
    throw e;
  }
  moveIntoPlace(DIST_TMP, OUT);
  // The grading CLI's interpreter snapshot of www/pkg's grader, made once per build
  // (grader/snapshot.mjs; issue 39), and only when the one there is not this build's.
  if (PKG === WWW_PKG) {
    const { buildSnapshot, complete, SNAPSHOT_DIR } = await import('./grader/snapshot.mjs');
    const t1 = performance.now();
    const stale = !complete(SNAPSHOT_DIR);
    if (stale) await buildSnapshot(SNAPSHOT_DIR);
    console.log(`build: ${path.relative(process.cwd(), SNAPSHOT_DIR) || '.'}, the grading CLI's interpreter snapshot: `
      + (stale ? `made in ${((performance.now() - t1) / 1000).toFixed(1)} s` : 'this build\'s already'));
  }
}

/** The page, from the graders in PKG, into DIST (a fresh folder); prints its figures as `name`'s. */
async function writePage(DIST, grader, pyodideVersion, { name, t0 }) {
  await esbuild.build({
    absWorkingDir: WWW,
    entryPoints: {
      main: 'page/main.js', course: 'page/course.js', worker: 'page/worker.js', style: 'page/style.css', embed: 'page/embed.js',
    },
    outdir: DIST,
    bundle: true,
    format: 'esm',
    target: ['es2022'],
    minify: !dev,
    sourcemap: dev ? 'linked' : false,
    loader: { '.py': 'text' },
    // The lab a page opens when none is named: the registry's first (course order).
    define: {
      __DEFAULT_LAB__: JSON.stringify(grader.labs[0]),
      __SNAPSHOT_KEYS__: JSON.stringify(snapshotKeys(grader.labs, grader.bridges, pyodideVersion)),
      // The page checks the Pyodide cache itself before build.json arrives (offline.js).
      __PYODIDE_CACHE__: JSON.stringify({ name: `pyodide-${pyodideVersion}`, files: PYODIDE_FILES.map((f) => `pyodide/${f}`) }),
    },
    legalComments: 'none',
    logLevel: 'warning',
  });
  // The theme before the first paint: a classic script (a module would wait for the
  // parse), loaded in each page's <head> (page/theme_early.js).
  await esbuild.build({
    absWorkingDir: WWW,
    entryPoints: { theme: 'page/theme_early.js' },
    outdir: DIST,
    bundle: true,
    format: 'iife',
    target: ['es2022'],
    minify: !dev,
    legalComments: 'none',
    logLevel: 'warning',
  });
  copy(path.join(WWW, 'page', 'index.html'), path.join(DIST, 'index.html'));
  copy(path.join(WWW, 'page', 'course.html'), path.join(DIST, 'course.html'));
  const labFiles = grader.labs.flatMap((id) => PKG_FILES.map((f) => `pkg/labs/${id}/${f}`));
  for (const f of labFiles) copy(path.join(PKG, f.slice('pkg/'.length)), path.join(DIST, f));
  for (const f of PYODIDE_FILES) copy(path.join(PYODIDE, f), path.join(DIST, 'pyodide', f));

  // The app's files: everything the page fetches besides Pyodide.
  // Every lab's grader is cached, so each lab on this origin works offline.
  const appFiles = ['index.html', 'main.js', 'course.html', 'course.js', 'theme.js', 'style.css', 'worker.js', 'build.json', ...labFiles];
  const pyodideFiles = PYODIDE_FILES.map((f) => `pyodide/${f}`);
  const sizes = {};
  const hash = crypto.createHash('sha256');
  for (const f of [...appFiles.filter((f) => f !== 'build.json'), ...pyodideFiles]) {
    const buf = fs.readFileSync(path.join(DIST, f));
    sizes[f] = { raw: buf.length, gzip: gzipSize(buf) };
    hash.update(f).update(buf);
  }
  // The origins are part of the build: changing them is a new version, so the
  // service worker replaces the cached build.json that holds them.
  hash.update(`allowOrigins:${JSON.stringify(allowOrigins)}`);
  // So is the course (build.json's only copy of it): new hints are a new version.
  hash.update(`course:${JSON.stringify(grader.course)}`);
  const version = hash.digest('hex').slice(0, 12);
  const sum = (files, k) => files.reduce((n, f) => n + (sizes[f]?.[k] || 0), 0);
  const build = {
    version,
    lab: grader.labs[0],
    labs: grader.labs,
    // false: the grader has no hidden tests; the page grades them with POST grade instead.
    hidden: grader.hidden > 0,
    // false: no served file carries the reference solution; the page offers no comparison.
    reference: !noReference,
    // The origins that may embed the page and use its postMessage API (--allow-origin);
    // a page's host-origin can only narrow this. Empty: the API is off.
    allowOrigins,
    // The labs in course order with their journeys (page/journey_data.mjs): the course
    // map and each lab page read it.
    course: grader.course,
    pyodideVersion,
    // One cache per app version; Pyodide's cache is named by its version only,
    // so every lab on this origin shares it and an app update does not re-download it.
    caches: { app: `delivery-lab-app-${version}`, pyodide: `pyodide-${pyodideVersion}` },
    appFiles,
    pyodideFiles,
    sizes,
    totals: {
      app: { raw: sum(appFiles, 'raw'), gzip: sum(appFiles, 'gzip') },
      pyodide: { raw: sum(pyodideFiles, 'raw'), gzip: sum(pyodideFiles, 'gzip') },
    },
    builtAt: new Date().toISOString(),
  };
  fs.writeFileSync(path.join(DIST, 'build.json'), JSON.stringify(build, null, 2));

  // The service worker: its manifest is inlined, so a new build is a new sw.js,
  // which is how the browser learns there is something new to cache.
  const manifest = { version, caches: build.caches, appFiles, pyodideFiles };
  const sw = fs.readFileSync(path.join(WWW, 'page', 'sw.js'), 'utf8')
    .replace('self.__MANIFEST__', JSON.stringify(manifest));
  if (!sw.includes(version)) fail('sw.js has no self.__MANIFEST__ placeholder');
  fs.writeFileSync(path.join(DIST, 'sw.js'), sw);

  const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;
  const mode = noHidden ? 'no hidden tests, no reference' : noReference ? 'hidden tests, no reference' : 'hidden tests and the reference';
  console.log(`build: ${name} version ${version} in ${((performance.now() - t0) / 1000).toFixed(1)} s (${mode})`);
  console.log(`  app     ${mb(build.totals.app.raw)} raw, ${mb(build.totals.app.gzip)} gzip`);
  console.log(`  pyodide ${pyodideVersion}: ${mb(build.totals.pyodide.raw)} raw, ${mb(build.totals.pyodide.gzip)} gzip`);
  console.log(`  embedding: ${allowOrigins.length ? `postMessage API for ${allowOrigins.join(', ')}` : 'postMessage API off (no --allow-origin)'}`);
}

await main();
