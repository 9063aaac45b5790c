// A small static server for www/dist on 127.0.0.1.
//   node serve.mjs [--port N] [--root DIR] [--quiet] [--grading [--jobs N]] [--no-isolation]
// It sends COOP/COEP so the page is crossOriginIsolated (SharedArrayBuffer, which
// the 8 s limit's interrupt needs), the MIME types browsers insist on for modules
// and WASM, and gzip for large compressible files. --port 0 picks a free port;
// the first line printed is the URL.
//
// Embedding (www/EMBED.md): pages (.html) and embed.js are sent with
// Cross-Origin-Resource-Policy: cross-origin, so a host page on another origin may
// frame the lab even when the host itself is cross-origin isolated (COEP
// require-corp); embed.js, a module script loaded cross-origin, also gets
// Access-Control-Allow-Origin: *. Nothing sends X-Frame-Options or frame-ancestors.
// --no-isolation leaves COOP/COEP out (a plain site, e.g. the example course page).
//
// --grading also answers POST /grade (JSON {lab, source[, seed]} in; the CLI's json
// report out) with the CLI's sandboxed pool (cli/pool.mjs), --jobs N at a time, at
// most 2×N more waiting (429 past that), bodies up to 64 KB (413), UTF-8 (400),
// JSON of that shape (400), known labs only (404).
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));

const MIME = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.zip': 'application/zip',
  '.map': 'application/json; charset=utf-8',
  '.py': 'text/x-python; charset=utf-8',
  '.md': 'text/markdown; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.txt': 'text/plain; charset=utf-8',
};
// python_stdlib.zip is stored uncompressed inside, but gzip saves only ~2% on it: not worth the CPU.
const COMPRESSIBLE = new Set(['.html', '.js', '.mjs', '.css', '.json', '.wasm', '.map', '.svg', '.txt', '.py', '.md']);
const GZIP_MIN_BYTES = 1024;

function parseArgs(argv) {
  const opts = { port: 8000, root: path.join(HERE, 'dist'), quiet: false, grading: false, jobs: 1, isolate: true };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--port') opts.port = Number(argv[++i]);
    else if (a.startsWith('--port=')) opts.port = Number(a.slice(7));
    else if (a === '--root') opts.root = path.resolve(argv[++i]);
    else if (a.startsWith('--root=')) opts.root = path.resolve(a.slice(7));
    else if (a === '--quiet') opts.quiet = true;
    else if (a === '--grading') opts.grading = true;
    else if (a === '--no-isolation') opts.isolate = false;
    else if (a === '--jobs') opts.jobs = Number(argv[++i]);
    else if (a.startsWith('--jobs=')) opts.jobs = Number(a.slice(7));
    else if (a === '--help' || a === '-h') {
      console.log('usage: node serve.mjs [--port N] [--root DIR] [--quiet] [--grading [--jobs N]] [--no-isolation]');
      process.exit(0);
    } else {
      console.error(`serve: unknown argument ${a}`);
      process.exit(2);
    }
  }
  if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535) {
    console.error('serve: --port needs a number from 0 to 65535');
    process.exit(2);
  }
  if (!Number.isInteger(opts.jobs) || opts.jobs < 1 || opts.jobs > 64) {
    console.error('serve: --jobs needs a number from 1 to 64');
    process.exit(2);
  }
  return opts;
}

// ---------------------------------------------------------------------------
// POST /grade

export const GRADE_LIMITS = Object.freeze({ maxBodyBytes: 64 * 1024, waitingPerJob: 2, retryAfterS: 2 });

/** The lab ids the page in `root` has (its build.json), else www/pkg's; null when none. */
async function knownLabs(root) {
  try {
    const labs = JSON.parse(fs.readFileSync(path.join(root, 'build.json'), 'utf8')).labs;
    if (Array.isArray(labs)) return labs;
  } catch { /* no build here: ask the Node grader */ }
  const dir = path.join(HERE, 'pkg');
  const js = path.join(dir, 'delivery_lab.js');
  const wasm = path.join(dir, 'delivery_lab_bg.wasm');
  if (!fs.existsSync(js) || !fs.existsSync(wasm)) return null;
  try {
    const pkg = await import(pathToFileURL(js).href);
    pkg.initSync({ module: fs.readFileSync(wasm) });
    return JSON.parse(new pkg.Grader().labs()).map((l) => l.id);
  } catch {
    return null;
  }
}

/**
 * The handler of POST /grade over a grading pool ({ grade({lab, source, seed}) →
 * Promise<string> }). At most `jobs` run and `jobs × waitingPerJob` wait; past that
 * the answer is 429 with Retry-After. Every refusal is JSON `{error}` with a 4xx.
 * Returns (req, res) => void, with .stats() for tests and logs.
 */
export function createGradeHandler({ pool, labs = null, jobs = 1, maxBodyBytes = GRADE_LIMITS.maxBodyBytes,
  maxWaiting = jobs * GRADE_LIMITS.waitingPerJob, retryAfterS = GRADE_LIMITS.retryAfterS, headers = {} }) {
  let inFlight = 0;
  const counts = { graded: 0, refused: 0, busy: 0, failed: 0, peak: 0 };
  const capacity = jobs + maxWaiting;

  const reply = (res, status, body, extra = {}) => {
    if (res.headersSent || res.destroyed) return;
    const text = typeof body === 'string' ? body : JSON.stringify(body);
    res.writeHead(status, {
      'Content-Type': 'application/json; charset=utf-8', 'Cache-Control': 'no-store',
      'Content-Length': Buffer.byteLength(text), ...headers, ...extra,
    });
    res.end(text);
  };
  const refuse = (res, status, error, extra) => {
    counts.refused += 1;
    reply(res, status, { error }, extra);
  };

  function handle(req, res) {
    if (req.method !== 'POST') {
      req.resume();
      return refuse(res, 405, 'POST a JSON body {"lab": "...", "source": "..."} to /grade', { Allow: 'POST' });
    }
    if (!/^application\/json\b/i.test(req.headers['content-type'] || '')) {
      req.resume();
      return refuse(res, 415, 'the body must be JSON, sent with Content-Type: application/json');
    }
    const tooLarge = () => {
      // Say so, then close the connection rather than read a large body to its end.
      refuse(res, 413, `the body is larger than ${maxBodyBytes} bytes`, { Connection: 'close' });
      res.once('finish', () => req.destroy());
    };
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > maxBodyBytes) return tooLarge();
    const chunks = [];
    let size = 0;
    let over = false;
    req.on('data', (c) => {
      if (over) return;
      size += c.length;
      if (size > maxBodyBytes) { over = true; tooLarge(); return; }
      chunks.push(c);
    });
    req.on('error', () => {}); // a client that goes away mid-body: nothing to answer
    req.on('end', () => {
      if (over) return;
      let text;
      try {
        text = new TextDecoder('utf-8', { fatal: true }).decode(Buffer.concat(chunks));
      } catch {
        return refuse(res, 400, 'the body is not valid UTF-8');
      }
      let body;
      try {
        body = JSON.parse(text);
      } catch (e) {
        return refuse(res, 400, `the body is not valid JSON (${e.message})`);
      }
      if (!body || typeof body !== 'object' || Array.isArray(body)) return refuse(res, 400, 'the body must be a JSON object {"lab": "...", "source": "..."}');
      const { lab, source, seed } = body;
      if (typeof lab !== 'string' || !lab) return refuse(res, 400, '"lab" must be a lab id, a string');
      if (typeof source !== 'string') return refuse(res, 400, '"source" must be the Python source, a string');
      if (seed !== undefined && !(Number.isSafeInteger(seed) && seed >= 0)) {
        return refuse(res, 400, '"seed", when given, must be a non-negative integer');
      }
      const extra = Object.keys(body).filter((k) => !['lab', 'source', 'seed'].includes(k));
      if (extra.length) return refuse(res, 400, `unknown field(s): ${extra.join(', ')}; send lab, source and optionally seed`);
      if (labs && !labs.includes(lab)) return refuse(res, 404, `unknown lab "${lab.slice(0, 80)}"; this server grades: ${labs.join(', ')}`);
      if (inFlight >= capacity) {
        counts.busy += 1;
        return refuse(res, 429, `too many submissions at once (${jobs} grading, ${maxWaiting} waiting); try again in ${retryAfterS} s`,
          { 'Retry-After': String(retryAfterS) });
      }
      inFlight += 1;
      counts.peak = Math.max(counts.peak, inFlight);
      Promise.resolve()
        .then(() => pool.grade({ lab, source, ...(seed !== undefined ? { seed } : {}), format: 'json' }))
        .then((json) => {
          counts.graded += 1;
          reply(res, 200, String(json).trim());
        }, (e) => {
          counts.failed += 1;
          reply(res, 500, { error: `the grader failed: ${e?.message || e}` });
        })
        .finally(() => { inFlight -= 1; });
    });
  }
  handle.stats = () => ({ ...counts, inFlight, capacity });
  return handle;
}

/**
 * Starts the server; resolves to { server, url, grading }.
 * @param {{port?:number, root?:string, quiet?:boolean, isolate?:boolean,
 *   grading?: boolean | {pool?:object, jobs?:number, labs?:string[], maxBodyBytes?:number, maxWaiting?:number, timeoutS?:number}}} opts
 * `grading: true` uses cli/pool.mjs; `{pool}` any object with grade() (the tests' fake).
 */
export async function serve({ port = 8000, root = path.join(HERE, 'dist'), quiet = false, isolate = true, grading = false, jobs = 1 } = {}) {
  root = path.resolve(root);
  if (!fs.existsSync(path.join(root, 'index.html'))) {
    throw new Error(`${root} has no index.html: run "npm run build" first`);
  }
  const gzipCache = new Map(); // path -> {mtimeMs, buf}: each file is compressed once
  const security = (kind) => securityHeaders(isolate, kind);

  let grade = null;
  let pool = null;
  if (grading) {
    const g = grading === true ? {} : grading;
    const poolJobs = g.jobs ?? jobs;
    pool = g.pool;
    if (!pool) {
      const poolFile = path.join(HERE, 'cli', 'pool.mjs');
      if (!fs.existsSync(poolFile)) throw new Error('--grading needs www/cli/pool.mjs (the grading CLI\'s sandboxed pool)');
      const { createGradingPool } = await import(pathToFileURL(poolFile).href);
      pool = createGradingPool({ jobs: poolJobs, ...(g.timeoutS ? { timeoutS: g.timeoutS } : {}) });
      await pool.ready;
    }
    grade = createGradeHandler({
      pool, jobs: poolJobs, labs: g.labs ?? await knownLabs(root),
      ...(g.maxBodyBytes ? { maxBodyBytes: g.maxBodyBytes } : {}),
      ...(g.maxWaiting !== undefined ? { maxWaiting: g.maxWaiting } : {}),
      headers: security('api'),
    });
  }

  const server = http.createServer((req, res) => {
    const send = (status, body, headers = {}) => {
      res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', ...security(), ...headers });
      res.end(body);
    };
    let rel;
    try {
      rel = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    } catch {
      return send(400, 'Bad request\n');
    }
    if (grade && rel === '/grade') return grade(req, res);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      return send(405, 'Method not allowed\n', { Allow: 'GET, HEAD' });
    }
    if (rel.endsWith('/')) rel += 'index.html';
    const file = path.join(root, path.normalize(rel));
    // Nothing outside the root, whatever the URL says.
    if (file !== root && !file.startsWith(root + path.sep)) return send(403, 'Forbidden\n');
    fs.stat(file, (err, st) => {
      if (err || !st.isFile()) return send(404, 'Not found\n');
      const ext = path.extname(file).toLowerCase();
      const kind = ext === '.html' ? 'page' : path.relative(root, file) === 'embed.js' ? 'embed' : 'file';
      const etag = `"${st.size.toString(16)}-${Math.floor(st.mtimeMs).toString(16)}"`;
      const headers = {
        'Content-Type': MIME[ext] || 'application/octet-stream',
        // Revalidate every time: files keep their names across builds, and the
        // service worker, not the HTTP cache, is what makes repeat visits fast.
        'Cache-Control': 'no-cache',
        ETag: etag,
        ...security(kind),
      };
      if (req.headers['if-none-match'] === etag) {
        res.writeHead(304, headers);
        return res.end();
      }
      const accepts = /\bgzip\b/.test(req.headers['accept-encoding'] || '');
      if (accepts && COMPRESSIBLE.has(ext) && st.size >= GZIP_MIN_BYTES) {
        headers.Vary = 'Accept-Encoding';
        let hit = gzipCache.get(file);
        if (!hit || hit.mtimeMs !== st.mtimeMs) {
          hit = { mtimeMs: st.mtimeMs, buf: zlib.gzipSync(fs.readFileSync(file), { level: 6 }) };
          gzipCache.set(file, hit);
        }
        res.writeHead(200, { ...headers, 'Content-Encoding': 'gzip', 'Content-Length': hit.buf.length });
        return res.end(req.method === 'HEAD' ? undefined : hit.buf);
      }
      res.writeHead(200, { ...headers, 'Content-Length': st.size });
      if (req.method === 'HEAD') return res.end();
      fs.createReadStream(file).pipe(res);
    });
  });

  server.on('close', () => { pool?.close?.(); });
  // A client that sends garbage or vanishes must not take the server down.
  server.on('clientError', (err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    else socket.destroy();
  });

  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      const url = `http://127.0.0.1:${server.address().port}/`;
      if (!quiet) console.log(url);
      resolve({ server, url, grading: grade ? { stats: grade.stats, pool } : null });
    });
  });
}

/**
 * kind: 'page' (an .html document: may be framed by a host on another origin,
 * isolated or not), 'embed' (embed.js: a module script hosts load cross-origin, so
 * CORS and CORP cross-origin), 'api' (POST /grade: for this origin's page only), or
 * 'file' (everything else: only this origin's pages and workers load it).
 */
function securityHeaders(isolate, kind = 'file') {
  return {
    // Together these make the page crossOriginIsolated.
    ...(isolate ? { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' } : {}),
    'Cross-Origin-Resource-Policy': kind === 'page' || kind === 'embed' ? 'cross-origin' : 'same-origin',
    ...(kind === 'embed' ? { 'Access-Control-Allow-Origin': '*' } : {}),
    'X-Content-Type-Options': 'nosniff',
  };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const opts = parseArgs(process.argv.slice(2));
  serve(opts).then(({ grading }) => {
    // The grading pool's sandboxes go with the server (at most 1 s to close them).
    const stop = () => {
      setTimeout(() => process.exit(0), 1000).unref();
      Promise.resolve(grading?.pool?.close?.()).finally(() => process.exit(0));
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  }, (e) => {
    console.error(`serve: ${e.message}`);
    process.exit(1);
  });
}
