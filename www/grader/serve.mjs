// A small static server for www/dist on 127.0.0.1.
//   node grader/serve.mjs [options]   the options: commands.mjs SERVE (node grader/serve.mjs --help),
//                                   the same table as ./lab serve's
//
// It serves the build it started with, and only that one: every file of the root is
// read into memory at start, so a build made later in the same checkout (build.mjs
// moves a new folder into place) changes nothing it serves. --hidden / --no-hidden say
// which build it was asked for (build.json's `hidden`): it refuses to start on a build
// of the other mode. --no-hidden without --root serves www/dist-no-hidden.
// It sends COOP/COEP so the page is crossOriginIsolated (SharedArrayBuffer, which
// the 8 s limit's interrupt needs), the MIME types browsers insist on for modules
// and WASM, and gzip for large compressible files. --port 0 picks a free port;
// the first line printed is the URL.
//
// Embedding (www/page/EMBED.md): pages (.html) and embed.js are sent with
// Cross-Origin-Resource-Policy: cross-origin, so a host page on another origin may
// frame the lab even when the host itself is cross-origin isolated (COEP
// require-corp); embed.js, a module script loaded cross-origin, also gets
// Access-Control-Allow-Origin: *. Pages carry CSP frame-ancestors: 'self' and the
// origins the build allows to embed them (build.json allowOrigins) of the build it serves;
// a build made in the root since with other origins is not served: it says so on
// stderr, restart to serve it (watchBuild).
// --no-isolation leaves COOP/COEP out (a plain site, e.g. the example course page).
//
// --grading also answers POST /grade (JSON {lab, source[, seed]} in; the CLI's json
// report out) with the CLI's sandboxed pool (grader/pool.mjs), --jobs N at a time, at
// most 2×N more waiting (429 past that), each client address at most
// --per-client N of those (default max(1, ceil(3×N / 4)); 429 past that), bodies up
// to 64 KB (413) within 10 s (408), UTF-8 (400), JSON of that shape (400), known
// labs only (404). A client that disconnects aborts its submission: it leaves the
// queue, or its sandbox is killed.
//
// --lti (with --grading) also makes it an LTI 1.3 tool under /lti/ (grader/lti/tool.mjs,
// docs/lms.md): launches from the platforms ./lab lti registered, deep linking, and the
// grade this server makes sent back to the LMS.
//
// Whom it serves (DNS rebinding, cross-site posts): only requests whose Host is
// 127.0.0.1, localhost or [::1] (with the port or without) or a --host NAME (421
// otherwise, pages included); POST /grade only without an Origin header (curl, the
// CLI), from the server's own origin, or from an --allow-origin ORIGIN, which also
// gets CORS headers (403 otherwise).
//
// It stays up whatever it is sent: a malformed request gets 400 (431 headers over
// 16 KB, 408 headers not in within 10 s or a request not in within 30 s) or a closed
// connection; nothing a request does can throw out of a handler.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { BodyError, GONE, lingeringClose, LINGER_MS, readBody, utf8Of } from './body.mjs';
import { parseOrigin } from './origin.mjs';
import { command, usageExit, UsageError } from './args.mjs';
import { allowedOrigin, hostName, LTI_DIR_DEFAULT, SERVE } from './commands.mjs';
import Ajv from 'ajv';
import { SEED_MAX } from '../host/engine.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
// www/: the builds (dist/, pkg/) are beside the rooms.
const WWW = path.dirname(HERE);

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

/** The command line's table (grader/commands.mjs SERVE, shared with ./lab serve), as this script's. */
const COMMAND = command({ ...SERVE, prog: 'node grader/serve.mjs' });

/** The command line as serve()'s options; throws an Error with .usage set on a bad one
 *  (.help on --help or -h). */
export function parseArgs(argv) {
  const r = COMMAND.parse(argv);
  if (r.help) throw Object.assign(new UsageError(''), { help: true });
  const v = r.values;
  if (v.hidden && v['no-hidden']) throw new UsageError('--hidden and --no-hidden: give one');
  const opts = {
    port: v.port, root: v.root !== undefined ? path.resolve(v.root) : path.join(WWW, 'dist'), quiet: v.quiet, grading: v.grading,
    jobs: v.jobs, isolate: !v['no-isolation'], hosts: v.host, allowOrigins: v['allow-origin'],
  };
  // The build's mode it was asked for (build.json hidden); serve() refuses another.
  if (v.hidden) opts.hidden = true;
  if (v['no-hidden']) opts.hidden = false;
  // Each mode's build has its own folder (build.mjs).
  if (opts.hidden === false && v.root === undefined) opts.root = path.join(WWW, 'dist-no-hidden');
  // Hidden inputs drawn per submission (grader/hidden.mjs): from this secret (else one
  // of the process's own); aggregate: learners see only how many hidden tests passed.
  if (v['secret-file'] !== undefined) opts.secretFile = v['secret-file'];
  if (argv.some((a) => a === '--hidden-statuses' || a.startsWith('--hidden-statuses='))) opts.hiddenStatuses = v['hidden-statuses'];
  if (v['per-client'] !== undefined && opts.grading) opts.grading = { perClient: v['per-client'] };
  if (v.queue !== undefined) {
    if (!opts.grading) throw new UsageError('--queue goes with --grading');
    opts.queue = v.queue;
  }
  if (v.open) {
    if (!opts.queue) throw new UsageError('--open goes with --grading --queue');
    opts.open = true;
  }
  if (v.lti) {
    if (!opts.grading) throw new UsageError('--lti goes with --grading: the server grades what the LMS\'s learners submit');
    opts.lti = { dir: v['lti-dir'] ?? LTI_DIR_DEFAULT, ...(v['lti-url'] ? { url: v['lti-url'] } : {}) };
  } else if (v['lti-dir'] !== undefined || v['lti-url'] !== undefined) {
    throw new UsageError('--lti-dir and --lti-url go with --lti');
  }
  return opts;
}

/** A --host NAME (grader/commands.mjs hostName), as a usage error. */
function checkHostName(name) {
  return hostName(name);
}

/** An --allow-origin ORIGIN (origin.mjs's rule, shared with build.mjs), as a usage error. */
function checkOrigin(text) {
  return allowedOrigin(text);
}

/** What the server accepts as Host: each name as given and, without a port, with the server's. */
function hostSet(names, port) {
  const set = new Set();
  for (const n of names) {
    const h = n.toLowerCase();
    set.add(h);
    if (!/:\d+$/.test(h)) set.add(`${h}:${port}`);
  }
  return set;
}

export const LOOPBACK_NAMES = Object.freeze(['127.0.0.1', 'localhost', '[::1]']);

// How long and how much a client may take. Each is an option of serve() (tests make
// them short); the body limits of POST /grade are in GRADE_LIMITS.
export const SERVER_LIMITS = Object.freeze({
  headersTimeoutMs: 10_000, // request line and headers (slowloris): 408 past it
  requestTimeoutMs: 30_000, // the whole request, body included: 408, or the connection closed
  keepAliveTimeoutMs: 5_000, // an idle kept-alive connection is closed after this
  maxRequestsPerSocket: 100, // the 100th answer on a connection says Connection: close
  maxHeaderSize: 16 * 1024, // request line and headers: 431 past it
  maxConnections: 512, // more at once are closed as they arrive
});

// ---------------------------------------------------------------------------
// POST /grade

// clientShare: one client address may hold at most 1/clientShare of the room (grading
// plus waiting), at least 1, so a single client cannot fill the queue.
export const GRADE_LIMITS = Object.freeze({ maxBodyBytes: 64 * 1024, waitingPerJob: 2, retryAfterS: 2, bodyTimeoutMs: 10_000, clientShare: 4 });

/** The origins allowed to embed the build (its build.json, from the server's snapshot), [] when none. */
function embedOrigins(files) {
  try {
    const list = JSON.parse(files.get('build.json').buf.toString('utf8')).allowOrigins;
    // Read by the same rule that wrote them: nothing else goes into the header.
    return Array.isArray(list) ? list.filter((o) => typeof o === 'string' && parseOrigin(o).origin === o) : [];
  } catch {
    return [];
  }
}

/** How often a server looks at its root's build.json for a build made since it started. */
export const BUILD_WATCH_MS = 2000;

/**
 * The origins a server frames for are those of the build it serves, the one it read
 * at start: the page reads them from that build's build.json, so the header and the
 * page always agree. A build made in the root since (./lab build --allow-origin, moved
 * into place) is not served; when its origins differ, this says so on stderr, once
 * per change, with what to do: restart the server. Returns { state(), stop() };
 * state() is { served, built, restart } (built: the origins of the build in the root
 * now, null when it has none readable).
 */
function watchBuild(root, served, { intervalMs, quiet }) {
  const file = path.join(root, 'build.json');
  const key = (list) => JSON.stringify(list);
  let built = served;
  let said = key(served);
  const look = () => {
    let buf;
    try { buf = fs.readFileSync(file); } catch { return; } // between two folders of a build.mjs move
    built = embedOrigins(new Map([['build.json', { buf }]]));
    if (key(built) === said) return;
    said = key(built);
    if (key(built) === key(served) || quiet) return;
    const list = (l) => (l.length ? l.join(' ') : 'none');
    console.error(`serve: ${file} now allows embedding by ${list(built)}; this server still serves the build it started with `
      + `(frame-ancestors 'self' ${list(served)}, and its page trusts those): restart it to serve the new build`);
  };
  fs.watchFile(file, { interval: intervalMs, persistent: false }, look);
  return {
    state: () => ({ served: [...served], built: built && [...built], restart: key(built) !== key(served) }),
    stop: () => fs.unwatchFile(file, look),
  };
}

/** The lab ids the page in `root` has (its build.json), else those of `registry` (the
 *  grader serve loaded already, www/pkg's); null when none. */
function knownLabs(root, registry) {
  try {
    const labs = JSON.parse(fs.readFileSync(path.join(root, 'build.json'), 'utf8')).labs;
    if (Array.isArray(labs)) return labs;
  } catch { /* no build here: ask the Node grader */ }
  try {
    return JSON.parse(registry.labs()).map((l) => l.id);
  } catch {
    return null;
  }
}

/**
 * The handler of POST /grade over a grading pool ({ grade({lab, source, seed, format,
 * signal}) → Promise<line> }, line: the CLI's json line as an object, output.mjs
 * jsonLine's, which the answer serialises; when `signal` aborts, the job leaves the
 * queue or its sandbox is killed, and the promise rejects). At most `jobs` run and `jobs ×
 * waitingPerJob` wait, each client address (the socket's remote address) at most
 * `perClient` of them; past either the answer is 429 with Retry-After. A client that
 * goes away before its answer aborts its job. Requests with an Origin header other
 * than the server's own (http or https on the request's Host) or one of
 * `allowOrigins` get 403; the allowed ones get CORS headers and a preflight answer.
 * Every refusal is JSON `{error}` with a 4xx; while the pool cannot start sandboxes
 * (its error's code is ESANDBOXSTART) 503 with Retry-After, `{error, retry_after_s}`.
 * Returns (req, res) => void, with .stats() for tests and logs.
 */
/** POST /grade's body, the one statement of its shape: ajv checks every request against it. */
export const GRADE_REQUEST_SCHEMA = Object.freeze({
  type: 'object',
  properties: {
    lab: { type: 'string', minLength: 1 },
    source: { type: 'string' },
    seed: { type: 'integer', minimum: 0, maximum: SEED_MAX },
  },
  required: ['lab', 'source'],
  additionalProperties: false,
});
const validateGradeRequest = new Ajv({ allErrors: true, strict: true }).compile(GRADE_REQUEST_SCHEMA);
/** What each field's errors say, whichever of its rules it broke. */
const FIELD_PROBLEMS = {
  lab: '"lab" must be a lab id, a string',
  source: '"source" must be the Python source, a string',
  seed: `"seed", when given, must be a whole number from 0 to ${SEED_MAX}`,
};

/** Why `body` (parsed JSON) is not a grading request, or null: from ajv's errors, by field and keyword. */
export function gradeRequestProblem(body) {
  if (validateGradeRequest(body)) return null;
  const errors = validateGradeRequest.errors;
  if (errors.some((e) => e.instancePath === '' && e.keyword === 'type')) return 'the body must be a JSON object {"lab": "...", "source": "..."}';
  const fieldOf = (e) => (e.keyword === 'required' ? e.params.missingProperty : e.instancePath.slice(1));
  for (const field of Object.keys(FIELD_PROBLEMS)) if (errors.some((e) => fieldOf(e) === field)) return FIELD_PROBLEMS[field];
  const extra = errors.filter((e) => e.keyword === 'additionalProperties').map((e) => e.params.additionalProperty);
  return `unknown field(s): ${extra.join(', ')}; send lab, source and optionally seed`;
}

export function createGradeHandler({ pool, labs = null, hiddenOf = () => undefined, jobs = 1, maxBodyBytes = GRADE_LIMITS.maxBodyBytes,
  maxWaiting = jobs * GRADE_LIMITS.waitingPerJob, perClient, retryAfterS = GRADE_LIMITS.retryAfterS,
  bodyTimeoutMs = GRADE_LIMITS.bodyTimeoutMs, allowOrigins = [], headers = {} }) {
  let inFlight = 0;
  // Loaded with a grading handler, not with serve.mjs: output.mjs reads its list of
  // terminal-unsafe characters from the grader, and a page server without --grading
  // loads no grader.
  const output = import('./output.mjs');
  const counts = { graded: 0, refused: 0, busy: 0, failed: 0, aborted: 0, unavailable: 0, peak: 0 };
  const capacity = jobs + maxWaiting;
  perClient ??= Math.max(1, Math.ceil(capacity / GRADE_LIMITS.clientShare));
  const byClient = new Map(); // remote address -> submissions waiting or grading
  const origins = new Set(allowOrigins);

  const reply = (res, status, body, extra = {}) => {
    // Not when the connection was answered and ended already (a parse error of the body).
    if (res.headersSent || res.destroyed || (res.socket && !res.socket.writable)) return;
    try {
      if (status === 204) {
        res.writeHead(204, { 'Cache-Control': 'no-store', ...headers, ...extra });
        res.end();
        return;
      }
      const text = typeof body === 'string' ? body : JSON.stringify(body);
      res.writeHead(status, {
        'Content-Type': 'application/json; charset=utf-8', 'Cache-Control': 'no-store',
        'Content-Length': Buffer.byteLength(text), ...headers, ...extra,
      });
      res.end(text);
    } catch {
      res.destroy(); // cannot happen with these headers; never let it throw out
    }
  };
  const refuse = (res, status, error, extra) => {
    counts.refused += 1;
    reply(res, status, { error }, extra);
  };
  const busy = (res, error) => {
    counts.busy += 1;
    refuse(res, 429, `${error}; try again in ${retryAfterS} s`, { 'Retry-After': String(retryAfterS) });
  };

  function handle(req, res) {
    const client = req.socket.remoteAddress ?? '?'; // read now: gone once the socket closes
    const host = String(req.headers.host ?? '').toLowerCase();
    const origin = req.headers.origin;
    // No Origin: not a browser's cross-origin request (curl, the CLI). A browser sends
    // Origin on every POST, same-origin ones included.
    const own = origin === undefined || origin === `http://${host}` || origin === `https://${host}`;
    if (!own) {
      if (!origins.has(origin)) {
        req.resume();
        return refuse(res, 403, `this server grades only for its own pages and the origins given with --allow-origin, not ${String(origin).slice(0, 100)}`);
      }
      res.setHeader('Access-Control-Allow-Origin', origin);
      res.setHeader('Access-Control-Expose-Headers', 'Retry-After');
      res.setHeader('Vary', 'Origin');
    }
    if (req.method === 'OPTIONS') {
      req.resume();
      return reply(res, 204, '', {
        Allow: 'POST, OPTIONS',
        ...(own ? {} : { 'Access-Control-Allow-Methods': 'POST', 'Access-Control-Allow-Headers': 'Content-Type', 'Access-Control-Max-Age': '600' }),
      });
    }
    if (req.method !== 'POST') {
      req.resume();
      return refuse(res, 405, 'POST a JSON body {"lab": "...", "source": "..."} to /grade', { Allow: 'POST, OPTIONS' });
    }
    if (!/^application\/json\b/i.test(req.headers['content-type'] || '')) {
      req.resume();
      return refuse(res, 415, 'the body must be JSON, sent with Content-Type: application/json');
    }
    readBody(req, res, { maxBytes: maxBodyBytes, timeoutMs: bodyTimeoutMs }).then((bytes) => {
      try {
        submit(req, res, client, bytes);
      } catch (e) {
        // A bug, not the client's fault; the server stays up and says so.
        console.error(`serve: POST /grade failed: ${e?.stack || e}`);
        counts.failed += 1;
        reply(res, 500, { error: 'the server failed to handle this submission' });
      }
    }, (e) => {
      // Cut off (413, 408): said once, and the connection closes rather than read the
      // rest. A client gone mid-body: nothing to answer.
      if (e instanceof BodyError && e.code !== GONE) refuse(res, e.status, e.message);
    });
  }

  function submit(req, res, client, bytes) {
    let text;
    try {
      text = utf8Of(bytes);
    } catch (e) {
      return refuse(res, e.status, e.message);
    }
    let body;
    try {
      body = JSON.parse(text);
    } catch (e) {
      return refuse(res, 400, `the body is not valid JSON (${e.message})`);
    }
    const problem = gradeRequestProblem(body);
    if (problem) return refuse(res, 400, problem);
    const { lab, source, seed } = body;
    if (labs && !labs.includes(lab)) return refuse(res, 404, `unknown lab "${lab.slice(0, 80)}"; this server grades: ${labs.join(', ')}`);
    if (inFlight >= capacity) return busy(res, `too many submissions at once (${jobs} grading, ${maxWaiting} waiting)`);
    const mine = byClient.get(client) ?? 0;
    if (mine >= perClient) return busy(res, `too many submissions at once from this address (at most ${perClient} waiting or grading)`);
    // The client may be gone already (its 'close' has fired): grade nothing for nobody.
    const socket = req.socket;
    if (res.destroyed || !socket || socket.destroyed) { counts.aborted += 1; return; }

    inFlight += 1;
    byClient.set(client, mine + 1);
    counts.peak = Math.max(counts.peak, inFlight);
    const controller = new AbortController();
    // Gone before the answer: the job leaves the queue, or its sandbox is killed. The
    // socket's 'close' covers a response still queued behind a pipelined one.
    const gone = () => { if (!res.writableEnded) controller.abort(); };
    res.once('close', gone);
    socket.once('close', gone);
    Promise.resolve()
      .then(() => pool.grade({ lab, source, ...(seed !== undefined ? { seed } : {}), hidden: hiddenOf(lab, source), format: 'json', signal: controller.signal }))
      // The pool's line (an object), serialised here, once: output.mjs jsonText.
      .then((line) => output.then(({ jsonText }) => {
        counts.graded += 1;
        reply(res, 200, jsonText(line));
      }), (e) => {
        if (controller.signal.aborted) { counts.aborted += 1; return; }
        if (e?.code === 'ESANDBOXSTART') {
          // The pool's sandboxes fail to start and it retries with backoff (pool.mjs
          // SandboxStartError): not this submission's fault, and not for good.
          counts.unavailable += 1;
          console.error(`serve: POST /grade: ${e.message}`);
          const after = Math.max(1, Math.ceil(Number(e.retryAfterS) || retryAfterS));
          reply(res, 503, { error: `the grader is temporarily unable to start sandboxes; try again in ${after} s`, retry_after_s: after },
            { 'Retry-After': String(after) });
          return;
        }
        counts.failed += 1;
        reply(res, 500, { error: `the grader failed: ${e?.message || e}` });
      })
      .finally(() => {
        inFlight -= 1;
        const n = byClient.get(client) - 1;
        if (n > 0) byClient.set(client, n); else byClient.delete(client);
        res.off('close', gone);
        socket.off('close', gone);
      })
      .catch((e) => console.error(`serve: POST /grade failed: ${e?.stack || e}`));
  }

  handle.stats = () => ({ ...counts, inFlight, capacity, perClient, clients: byClient.size, queued: pool.queued?.() });
  return handle;
}

// Per connection: its responses not finished yet, and whether a parse error was answered.
const OPEN = Symbol('open responses');
const ANSWERED = Symbol('client error answered');
const REQUESTS = Symbol('requests on this connection');

/**
 * Starts the server; resolves to { server, url, grading }.
 * @param {{port?:number, root?:string, quiet?:boolean, isolate?:boolean, hosts?:string[], allowOrigins?:string[],
 *   headersTimeoutMs?:number, requestTimeoutMs?:number, keepAliveTimeoutMs?:number, maxRequestsPerSocket?:number,
 *   maxHeaderSize?:number, maxConnections?:number,
 *   grading?: boolean | {pool?:object, jobs?:number, labs?:string[], maxBodyBytes?:number, maxWaiting?:number,
 *     perClient?:number, bodyTimeoutMs?:number, timeoutS?:number}}} opts
 * `grading: true` uses pool.mjs; `{pool}` any object with grade() (the tests' fake).
 * `buildWatchMs`: how often it looks at the root's build.json for a build made since
 * it started (watchBuild). Resolves also to `embedding()`: the origins it frames for
 * and those of the build now in the root.
 * `hosts` are the Host names served besides LOOPBACK_NAMES; `allowOrigins` the origins
 * besides its own that may POST /grade. The limits default to SERVER_LIMITS.
 */
export async function serve({ port = 8000, root = path.join(WWW, 'dist'), hidden, quiet = false, isolate = true, grading = false, jobs = 1,
  hosts = [], allowOrigins = [], secretFile, hiddenStatuses = 'each', buildWatchMs = BUILD_WATCH_MS, queue = null, open = false, lti = null, ...limits } = {}) {
  const lim = { ...SERVER_LIMITS, ...Object.fromEntries(Object.entries(limits).filter(([, v]) => v !== undefined)) };
  root = path.resolve(root);
  if (!fs.existsSync(path.join(root, 'index.html'))) {
    throw new Error(`${root} has no index.html: run "npm run build" first`);
  }
  // The build it serves, pinned: whatever is built later is not served by this server.
  const files = snapshotFiles(root);
  if (hidden !== undefined) checkMode(root, files, hidden);
  const gzipCache = new Map(); // path -> gzipped bytes: each file is compressed once
  // The origins the build lets embed the lab (build.mjs --allow-origin): browsers
  // then refuse to frame its pages anywhere else.
  const frameAncestors = embedOrigins(files);
  const security = (kind) => securityHeaders(isolate, kind, frameAncestors);
  hosts = hosts.map(checkHostName);
  allowOrigins = allowOrigins.map(checkOrigin);

  let grade = null;
  let pool = null;
  let front = null; // with a queue (www/grader/queue/front.mjs): POST /grade stores, ./lab worker grades
  // The grader's registry, loaded once, and each submission's hidden inputs, drawn
  // from the secret and the submission (hidden.mjs); the seed reaches no answer
  // (the learner's report). The queue's front is handed both.
  const graderAndHidden = async () => {
    const { servicePolicy } = await import(pathToFileURL(path.join(HERE, 'hidden.mjs')).href);
    const { loadGrader } = await import(pathToFileURL(path.join(WWW, 'host', 'node_host.mjs')).href);
    const registry = new (await loadGrader()).Grader();
    return { registry, hiddenOf: servicePolicy({ registry, secretFile, statuses: hiddenStatuses }) };
  };
  let graderShared = null; // { registry, hiddenOf }: the grading's, the LTI tool's too
  if (grading && queue) {
    const g = grading === true ? {} : grading;
    const { registry, hiddenOf } = graderShared = await graderAndHidden();
    const { createQueueFront } = await import(pathToFileURL(path.join(HERE, 'queue', 'front.mjs')).href);
    front = await createQueueFront({
      connectionString: queue, registry, hiddenOf, allowOrigins, headers: security('api'),
      ...(g.maxBodyBytes ? { maxBodyBytes: g.maxBodyBytes } : {}), ...(g.bodyTimeoutMs !== undefined ? { bodyTimeoutMs: g.bodyTimeoutMs } : {}),
      ...(g.perClient !== undefined ? { perClient: g.perClient } : {}),
      // Reached by other names (--host, behind a proxy): API tokens, unless --open.
      loopbackOnly: hosts.length === 0, open,
    });
  } else if (grading) {
    const g = grading === true ? {} : grading;
    const poolJobs = g.jobs ?? jobs;
    pool = g.pool;
    if (!pool) {
      const poolFile = path.join(HERE, 'pool.mjs');
      if (!fs.existsSync(poolFile)) throw new Error('--grading needs www/grader/pool.mjs (the grading CLI\'s sandboxed pool)');
      const { createGradingPool } = await import(pathToFileURL(poolFile).href);
      pool = createGradingPool({ jobs: poolJobs, ...(g.timeoutS ? { timeoutS: g.timeoutS } : {}) });
      await pool.ready;
    }
    const { registry, hiddenOf } = graderShared = await graderAndHidden();
    grade = createGradeHandler({
      pool, jobs: poolJobs, labs: g.labs ?? knownLabs(root, registry), allowOrigins, hiddenOf,
      ...(g.maxBodyBytes ? { maxBodyBytes: g.maxBodyBytes } : {}),
      ...(g.maxWaiting !== undefined ? { maxWaiting: g.maxWaiting } : {}),
      ...(g.perClient !== undefined ? { perClient: g.perClient } : {}),
      // Reached by other names (--host, behind a proxy): API tokens, unless --open.
      loopbackOnly: hosts.length === 0, open,
      ...(g.bodyTimeoutMs !== undefined ? { bodyTimeoutMs: g.bodyTimeoutMs } : {}),
      headers: security('api'),
    });
  }
  let allowedHosts = new Set(); // filled once the port is known
  let boundUrl = null; // http://127.0.0.1:PORT, once listening

  // The LTI 1.3 tool (lti/tool.mjs): it grades with the server's own grader (its pool,
  // or the queue), never with a score a page sends.
  let ltiTool = null;
  let ltiStore = null;
  if (lti) {
    if (!grading) throw new Error('lti needs grading: the server grades what the LMS\'s learners submit');
    const dir = path.resolve(lti.dir);
    if (dir === root || dir.startsWith(root + path.sep) || root.startsWith(dir + path.sep)) {
      throw new Error(`the LTI folder ${dir} holds or is inside the folder this server serves (${root}): its private keys must not be served; give --lti-dir elsewhere`);
    }
    const { createLtiTool } = await import('./lti/tool.mjs');
    const { keyRing } = await import('./lti/keys.mjs');
    const { openStore } = await import('./lti/store.mjs');
    ltiStore = lti.store ?? await openStore({ queue, dir });
    const keys = keyRing(dir);
    await keys.current(); // a signing key from the start: the JWKS is never empty
    const { registry, hiddenOf } = graderShared;
    const labs = JSON.parse(registry.labs()).map((l) => ({ id: l.id, title: l.title, maxScore: JSON.parse(registry.lab(l.id)).tests.length }));
    const ltiGrade = front
      ? ({ lab, source, platform }) => front.gradeNow({ lab, source, client: `lti:${platform}` }) // a client per LMS: the fair claim's
      : ({ lab, source }) => pool.grade({ lab, source, hidden: hiddenOf(lab, source), format: 'json' });
    ltiTool = createLtiTool({
      store: ltiStore, keys, labs, grade: ltiGrade, baseUrl: () => lti.url ?? boundUrl,
      ...(lti.fetch ? { fetch: lti.fetch } : {}), ...(lti.now ? { now: lti.now } : {}), ...(lti.retry ? { retry: lti.retry } : {}),
      ...(lti.limits ? { limits: lti.limits } : {}), ...(quiet ? { log: () => {} } : {}),
    });
  }

  const send = (res, status, body, headers = {}) => {
    res.writeHead(status, {
      'Content-Type': 'text/plain; charset=utf-8', 'Content-Length': Buffer.byteLength(body), ...security(), ...headers,
    });
    res.end(body);
  };
  // A throw in a handler is a bug in this file, never the client's doing: log it, answer
  // 500 (or drop that connection) and keep serving. The tests expect none.
  const failed = (res, e) => {
    console.error(`serve: internal error: ${e?.stack || e}`);
    try {
      if (!res.headersSent && !res.destroyed) send(res, 500, 'Internal error\n', { Connection: 'close' });
      else res.destroy();
    } catch {
      res.destroy();
    }
  };
  const guard = (res, fn) => (...args) => {
    try { fn(...args); } catch (e) { failed(res, e); }
  };

  function route(req, res) {
    const n = (req.socket[REQUESTS] = (req.socket[REQUESTS] ?? 0) + 1);
    if (n >= lim.maxRequestsPerSocket) res.setHeader('Connection', 'close');
    // DNS rebinding: a page on any name that resolves here would be same-origin with us.
    const host = typeof req.headers.host === 'string' ? req.headers.host.toLowerCase() : '';
    if (!allowedHosts.has(host)) return send(res, 421, 'Misdirected request: this server does not answer to that Host\n', { Connection: 'close' });
    // Origin-form only ("/path"): no absolute URLs, no "*".
    if (!req.url.startsWith('/')) return send(res, 400, 'Bad request\n');
    let rel;
    try {
      // Prefixed, not resolved against a base: "//name/x" stays a path.
      rel = decodeURIComponent(new URL(`http://x${req.url}`).pathname);
    } catch {
      return send(res, 400, 'Bad request\n');
    }
    if (rel.includes('\0')) return send(res, 400, 'Bad request\n'); // fs throws on a NUL in a path
    if (ltiTool && ltiTool.handle(req, res, rel)) return;
    if (front && front.handle(req, res)) return;
    if (grade && rel === '/grade') return grade(req, res);
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      return send(res, 405, 'Method not allowed\n', { Allow: 'GET, HEAD' });
    }
    if (rel.endsWith('/')) rel += 'index.html';
    const file = path.join(root, path.normalize(rel));
    // Nothing outside the root, whatever the URL says.
    if (file !== root && !file.startsWith(root + path.sep)) return send(res, 403, 'Forbidden\n');
    guard(res, () => {
      const key = path.relative(root, file);
      const st = files.get(key); // the snapshot taken at start, never the folder as it is now
      if (!st) return send(res, 404, 'Not found\n');
      const ext = path.extname(file).toLowerCase();
      const kind = ext === '.html' ? 'page' : key === 'embed.js' ? 'embed' : 'file';
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
        let gz = gzipCache.get(key);
        if (!gz) {
          gz = zlib.gzipSync(st.buf, { level: 6 });
          gzipCache.set(key, gz);
        }
        res.writeHead(200, { ...headers, 'Content-Encoding': 'gzip', 'Content-Length': gz.length });
        return res.end(req.method === 'HEAD' ? undefined : gz);
      }
      res.writeHead(200, { ...headers, 'Content-Length': st.size });
      res.end(req.method === 'HEAD' ? undefined : st.buf);
    })();
  }

  const server = http.createServer({
    maxHeaderSize: lim.maxHeaderSize,
    headersTimeout: lim.headersTimeoutMs,
    requestTimeout: Math.max(lim.requestTimeoutMs, lim.headersTimeoutMs), // node insists on <=
    keepAliveTimeout: lim.keepAliveTimeoutMs,
    // How often node looks for connections past those timeouts (its default is 30 s).
    connectionsCheckingInterval: Math.max(10, Math.min(1000, Math.floor(Math.min(lim.headersTimeoutMs, lim.requestTimeoutMs) / 4))),
  }, (req, res) => {
    res.on('error', () => {}); // a write to a connection that is gone: nothing to do
    let open = req.socket[OPEN];
    if (!open) open = req.socket[OPEN] = new Set();
    open.add(res);
    res.once('close', () => open.delete(res));
    res.once('finish', () => open.delete(res));
    try { route(req, res); } catch (e) { failed(res, e); }
  });
  server.maxConnections = lim.maxConnections;

  const embedding = watchBuild(root, frameAncestors, { intervalMs: buildWatchMs, quiet });
  server.on('close', () => { front?.close(); pool?.close?.(); embedding.stop(); ltiTool?.close(); ltiStore?.close(); });
  // Malformed HTTP, headers over the limit, timeouts, resets. The parser repeats its
  // error for every later chunk on that connection: answer once.
  server.on('clientError', (err, socket) => {
    try {
      answerClientError(err, socket);
    } catch (e) {
      console.error(`serve: internal error: ${e?.stack || e}`);
      socket.destroy();
    }
  });
  function answerClientError(err, socket) {
    if (socket[ANSWERED]) return;
    socket[ANSWERED] = true;
    const open = [...(socket[OPEN] ?? [])];
    // A status line may go out when no answer is under way on this connection, or the
    // one request open is the one whose body broke (its handler waits for that body).
    const clean = open.length === 0 || (open.length === 1 && !open[0].headersSent && !open[0].req.complete);
    if (err.code === 'ECONNRESET' || err.code === 'EPIPE' || !socket.writable) {
      socket.destroy();
    } else if (clean) {
      const status = { HPE_HEADER_OVERFLOW: 431, ERR_HTTP_REQUEST_TIMEOUT: 408, HPE_CHUNK_EXTENSIONS_OVERFLOW: 413 }[err.code] ?? 400;
      socket.end(`HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
      setTimeout(() => socket.destroy(), LINGER_MS).unref(); // see lingeringClose
    } else {
      // Answers under way for good requests (pipelined before the garbage) go out
      // first; then the connection closes.
      const last = open[open.length - 1];
      if (!last.headersSent) last.setHeader('Connection', 'close');
      lingeringClose(socket);
      let left = open.length;
      for (const res of open) res.once('close', () => { if (--left === 0) socket.destroySoon(); });
    }
  }

  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      // After listening, an error (e.g. EMFILE on accept) is logged, not thrown.
      server.on('error', (e) => console.error(`serve: ${e.message}`));
      const bound = server.address().port;
      allowedHosts = hostSet([...LOOPBACK_NAMES, ...hosts], bound);
      const url = `http://127.0.0.1:${bound}/`;
      boundUrl = url.slice(0, -1);
      if (!quiet) console.log(url);
      if (ltiTool && !quiet) console.error(`serve: LTI 1.3 tool at ${lti.url ?? boundUrl}/lti/ (login, launch, jwks): ./lab lti urls says what the LMS asks`);
      resolve({ server, url, grading: grade ? { stats: grade.stats, pool } : front ? { stats: front.stats, pool: null, front } : null, embedding: embedding.state,
        lti: ltiTool });
    });
  });
}

/**
 * Every file under `root` (symlinks to files followed, to folders not), read into
 * memory: rel path -> { buf, size, mtimeMs }. What the server serves for its whole
 * life, so a build made while it runs (the same folder moved into place again, or
 * written over) cannot change it: pages, workers and graders always match.
 */
function snapshotFiles(root) {
  // A build moved into place while the files are read would mix two builds: its
  // build.json (written last, with its own builtAt) differs after the walk; read again.
  const buildJson = () => { try { return fs.readFileSync(path.join(root, 'build.json')); } catch { return null; } };
  for (let attempt = 0; ; attempt++) {
    const before = buildJson();
    const files = readAll(root);
    const after = buildJson();
    const same = before === null ? after === null : after !== null && before.equals(after);
    if ((same && (after === null || files.get('build.json')?.buf.equals(after))) || attempt >= 4) return files;
  }
}

function readAll(root) {
  const files = new Map();
  const walk = (dir, depth) => {
    let entries;
    try { entries = fs.readdirSync(dir, { withFileTypes: true }); } catch { return; } // moved away meanwhile
    for (const e of entries) {
      const full = path.join(dir, e.name);
      if (e.isDirectory()) {
        if (depth < 16) walk(full, depth + 1);
        continue;
      }
      let st;
      let buf;
      try {
        st = fs.statSync(full);
        if (!st.isFile()) continue;
        buf = fs.readFileSync(full);
      } catch {
        continue; // gone (a build moved it away), or a dangling link
      }
      files.set(path.relative(root, full), { buf, size: buf.length, mtimeMs: st.mtimeMs });
    }
  };
  walk(root, 0);
  return files;
}

/**
 * Refuses (throws) a build whose mode is not the one asked for: build.json's `hidden`
 * (build.mjs) must equal `hidden`. A --no-hidden server never serves the hidden tests.
 */
function checkMode(root, files, hidden) {
  const want = hidden ? 'with the hidden tests' : 'without the hidden tests (--no-hidden)';
  let build;
  try {
    build = JSON.parse(files.get('build.json').buf.toString('utf8'));
  } catch {
    throw new Error(`${root} has no readable build.json, so its mode is unknown; asked for a build ${want}: refusing to start`);
  }
  if (build.hidden !== hidden) {
    throw new Error(`${root} holds a build ${build.hidden ? 'with the hidden tests' : 'without the hidden tests'}, `
      + `but this server was asked for one ${want}: refusing to start `
      + `(./lab build${hidden ? '' : ' --no-hidden'} makes it, in www/${hidden ? 'dist' : 'dist-no-hidden'}/)`);
  }
}

/**
 * kind: 'page' (an .html document: may be framed by a host on another origin,
 * isolated or not), 'embed' (embed.js: a module script hosts load cross-origin, so
 * CORS and CORP cross-origin), 'api' (POST /grade: for this origin's page only), or
 * 'file' (everything else: only this origin's pages and workers load it).
 */
function securityHeaders(isolate, kind = 'file', frameAncestors = []) {
  return {
    ...(kind === 'page' ? { 'Content-Security-Policy': ['frame-ancestors', "'self'", ...frameAncestors].join(' ') } : {}),
    // Together these make the page crossOriginIsolated.
    ...(isolate ? { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' } : {}),
    'Cross-Origin-Resource-Policy': kind === 'page' || kind === 'embed' ? 'cross-origin' : 'same-origin',
    ...(kind === 'embed' ? { 'Access-Control-Allow-Origin': '*' } : {}),
    'X-Content-Type-Options': 'nosniff',
  };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (e) {
    if (e.help) { process.stdout.write(COMMAND.help()); process.exit(0); }
    if (!e.usage) throw e;
    usageExit(COMMAND, e.message, 'serve');
  }
  serve(opts).then(({ grading }) => {
    // The grading pool's sandboxes go with the server (at most 1 s to close them).
    const stop = () => {
      setTimeout(() => process.exit(0), 1000).unref();
      Promise.all([grading?.pool?.close?.(), grading?.front?.close?.()]).finally(() => process.exit(0));
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  }, (e) => {
    console.error(`serve: ${e.message}`);
    process.exit(1);
  });
}
