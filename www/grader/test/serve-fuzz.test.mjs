// The grading server never goes down (issue 10): serve.mjs --grading, in a child
// process (a crash is an exit), gets a few thousand hostile requests over raw sockets
// on 127.0.0.1: random bytes, NUL and bad percent-encoding in the path, path
// traversal, overlong URLs, 10k repeated headers, headers over the limit, bad
// Content-Length and chunk sizes, bodies that never finish, slowloris headers,
// pipelined garbage, HTTP/0.9, odd methods, foreign Host and Origin, clients that
// leave mid-grade. Each request's outcome is checked exactly (the statuses answered,
// and whether the server closed the connection); after each batch the page still
// answers 200, a good POST /grade still grades, no slot is held, and the process is
// alive. The requests come from a seeded PRNG: SERVE_FUZZ_SEED=N replays a run.
// Only Node's own modules: it needs no build and no npm packages.
// Run: node --test grader/test/serve-fuzz.test.mjs   (about 15 s)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const WWW = fileURLToPath(new URL('../../', import.meta.url));
const SEED = Number(process.env.SERVE_FUZZ_SEED ?? 20250610);
const BATCHES = 5;
const PER_BATCH = 500;
const CONCURRENCY = 64;
// Short limits so that the slow cases end quickly (the defaults are 10 s, 30 s, 10 s),
// yet long enough that a busy machine's pauses do not time out the good requests.
const LIMITS = { headersTimeoutMs: 1000, requestTimeoutMs: 1500, bodyTimeoutMs: 1000, keepAliveTimeoutMs: 2000 };
const DIR = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-serve-fuzz-'));
const ROOT = path.join(DIR, 'root');
const INDEX = '<!doctype html><title>fuzz</title><p>the page</p>\n';

/** mulberry32: small, seeded, good enough to pick cases. */
function prng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)); // lo..hi inclusive
  const pick = (xs) => xs[Math.floor(next() * xs.length)];
  const bytes = (n) => Buffer.from(Array.from({ length: n }, () => int(0, 255)));
  const word = (n = int(1, 12)) => Array.from({ length: n }, () => pick('abcdefghijklmnopqrstuvwxyz0123456789-_.')).join('');
  return { next, int, pick, bytes, word };
}

// ---------------------------------------------------------------------------
// The server under test: serve.mjs's serve() and parseArgs() with a fake grading pool
// that honours grader/pool.mjs's contract (grade({lab, source, seed, format, signal}) →
// the CLI's json line; an aborted job leaves the queue or is stopped at once, and
// its promise rejects with an AbortError), 2 jobs at a time, a source containing
// SLOW taking 400 ms. Written to a temp dir at run time: under test/ the runner
// would take it for a test file. No uncaughtException handler: a throw kills it.

const CHILD = `
import { serve, parseArgs } from ${JSON.stringify(pathToFileURL(path.join(WWW, 'grader', 'serve.mjs')).href)};
const LIMITS = ${JSON.stringify(LIMITS)};
const waiting = [];
const running = new Set();
const counts = { graded: 0, aborted: 0 };
const pump = () => { while (running.size < 2 && waiting.length) waiting.shift().start(); };
const pool = {
  grade({ lab, source, seed, format, signal }) {
    return new Promise((resolve, reject) => {
      const aborted = () => Object.assign(new Error('the client went away'), { name: 'AbortError' });
      if (signal?.aborted) { counts.aborted += 1; return reject(aborted()); }
      const job = {};
      const onAbort = () => {
        const i = waiting.indexOf(job);
        if (i >= 0) waiting.splice(i, 1);
        if (running.delete(job)) clearTimeout(job.timer); // the sandbox, killed
        counts.aborted += 1;
        reject(aborted());
        pump();
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      job.start = () => {
        running.add(job);
        job.timer = setTimeout(() => {
          running.delete(job);
          signal?.removeEventListener('abort', onAbort);
          counts.graded += 1;
          resolve({ file: null, lab, status: 'pass', passed: 1, failed: 0, total: 1, seed: seed ?? 1, format });
          pump();
        }, source.includes('SLOW') ? 400 : 1);
      };
      waiting.push(job);
      pump();
    });
  },
  queued: () => waiting.length + running.size,
  close() {},
};
const opts = parseArgs(process.argv.slice(2));
const { grading } = await serve({
  ...opts, ...LIMITS,
  grading: { pool, jobs: 2, labs: ['deliver-once'], perClient: opts.grading.perClient, bodyTimeoutMs: LIMITS.bodyTimeoutMs },
});
process.on('message', () => process.send({ stats: grading.stats(), pool: { ...counts, queued: pool.queued() } }));
`;

let child;
let port;
let stderr = '';

function startChild(file, args) {
  const c = spawn(process.execPath, [file, ...args], { cwd: WWW, stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
  c.stderr.on('data', (d) => { stderr += d; });
  const ready = new Promise((resolve, reject) => {
    let out = '';
    c.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/^http:\/\/127\.0\.0\.1:(\d+)\//m);
      if (m) resolve(Number(m[1]));
    });
    c.once('exit', (code) => reject(new Error(`the server exited with ${code} before listening: ${stderr}`)));
  });
  return { c, ready };
}

const alive = (c) => c.exitCode === null && c.signalCode === null;

/** The child's grade handler and pool figures, over IPC. */
function childStats() {
  return new Promise((resolve) => {
    child.once('message', resolve);
    child.send('stats');
  });
}

before(async () => {
  fs.mkdirSync(path.join(ROOT, 'sub'), { recursive: true });
  fs.writeFileSync(path.join(ROOT, 'index.html'), INDEX);
  fs.writeFileSync(path.join(ROOT, 'app.js'), `// ${'x'.repeat(3000)}\n`);
  fs.writeFileSync(path.join(ROOT, 'sub', 'index.html'), INDEX);
  fs.writeFileSync(path.join(DIR, 'server.mjs'), CHILD);
  let ready;
  ({ c: child, ready } = startChild(path.join(DIR, 'server.mjs'), [
    '--port', '0', '--root', ROOT, '--grading', '--jobs', '2', '--per-client=3',
    '--host', 'lab.example', '--allow-origin=https://course.example',
  ]));
  port = await ready;
});

after(() => {
  if (child && alive(child)) child.kill();
  fs.rmSync(DIR, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------
// One exchange over a raw socket: write the steps (strings or Buffers; a number is a
// pause in ms), read the answers. The outcome is "<statuses>|<end>": the status of
// each complete response in order, then how it ended: closed (by the server),
// reset, open (a kept-alive response was complete and we hung up), left (we hung up
// on purpose: `leaveAfterMs`) or hung (nothing for `waitMs`).

function exchange(steps, { head = false, leaveAfterMs = 0, waitMs = 4000, keepReading = false } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0); // not yet parsed
    const all = [];
    const statuses = [];
    let done = false;
    const finish = (end) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ outcome: `${statuses.join(',')}|${end}`, text: Buffer.concat(all).toString('latin1') });
    };
    const timer = setTimeout(() => finish(leaveAfterMs ? 'left' : 'hung'), leaveAfterMs || waitMs);
    sock.on('data', (d) => {
      all.push(d);
      buf = Buffer.concat([buf, d]);
      // Take every complete response off the front.
      for (;;) {
        const r = parseResponse(buf, head);
        if (!r) break;
        buf = buf.subarray(r.length);
        statuses.push(r.status);
        if (r.status >= 200 && !r.close && !keepReading) return finish('open');
      }
    });
    sock.on('end', () => finish('closed'));
    sock.on('error', (e) => finish(e.code === 'ECONNRESET' ? 'reset' : e.code));
    sock.on('close', () => finish('closed'));
    (async () => {
      for (const s of steps) {
        if (done || sock.destroyed) return;
        if (typeof s === 'number') await new Promise((r) => setTimeout(r, s));
        else sock.write(s);
      }
    })();
  });
}

/** The first complete HTTP response in buf: {status, close, length}, or null. */
function parseResponse(buf, head) {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const lines = buf.subarray(0, end).toString('latin1').split('\r\n');
  const status = Number(lines[0].split(' ')[1]);
  const headers = Object.fromEntries(lines.slice(1).map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
  let length = end + 4;
  if (status >= 200 && status !== 204 && status !== 304 && !head) {
    if (headers['transfer-encoding'] === 'chunked') {
      for (;;) {
        const eol = buf.indexOf('\r\n', length);
        if (eol < 0) return null;
        const size = parseInt(buf.subarray(length, eol).toString('latin1'), 16);
        length = eol + 2 + size + 2;
        if (length > buf.length) return null;
        if (size === 0) break;
      }
    } else {
      length += Number(headers['content-length'] ?? 0);
      if (length > buf.length) return null;
    }
  }
  return { status, close: /close/i.test(headers.connection ?? ''), length };
}

// ---------------------------------------------------------------------------
// The cases. Each: [name, weight, (rng, H) => ({ steps, expect: [outcomes], ...options })].
// H is a good Host header line. Where two outcomes are allowed the reason is said.

const GOOD_BODY = (r) => JSON.stringify({ lab: 'deliver-once', source: `def deliver_once(task, provider, kv, policy):\n    return ${r.int(0, 99)}\n` });
const grade = (H, body, extra = '') => `POST /grade HTTP/1.1\r\n${H}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;
const METHOD_CHARS = new Set([...'ABCDEFGHIJKLMNOPQRSTUVWXYZ\r\n'].map((c) => c.charCodeAt(0)));

const CASES = [
  ['random bytes', 8, (r) => {
    const b = r.bytes(r.int(1, 600));
    // No method starts with anything else: the parser refuses the first byte.
    while (METHOD_CHARS.has(b[0])) b[0] = r.int(0, 255);
    return { steps: [b], expect: ['400|closed'] };
  }],
  ['random printable line', 4, (r) => {
    const line = Array.from({ length: r.int(1, 200) }, () => String.fromCharCode(r.int(0x21, 0x7e))).join('');
    const first = line[0] >= 'A' && line[0] <= 'Z' ? `x${line}` : line;
    return { steps: [`${first}\r\n\r\n`], expect: ['400|closed'] };
  }],
  ['NUL in the raw path', 3, (r, H) => ({ steps: [`GET /${r.word()}\0${r.word()} HTTP/1.1\r\n${H}\r\n`], expect: ['400|closed'] })],
  ['bad percent-encoding', 10, (r, H) => {
    const bad = r.pick(['%', '%zz', '%00', '%c0%af', '%e0%80', '%ff', '%g1', '%2', '%ed%a0%80', '%%', '%0', '%c3', '%00.html']);
    const tail = r.pick(['', '/', '/x', '?a=%zz', `/${r.word()}.html`]);
    return { steps: [`${r.pick(['GET', 'HEAD'])} /${r.word()}${bad}${tail} HTTP/1.1\r\n${H}\r\n`], head: true, expect: ['400|open'] };
  }],
  ['path traversal', 5, (r, H) => {
    const up = r.int(1, 8);
    const p = r.pick([`/${'../'.repeat(up)}etc/passwd`, `/${'%2e%2e/'.repeat(up)}etc/passwd`, `/${'..%2f'.repeat(up)}etc%2fpasswd`,
      `/${'..\\'.repeat(up)}etc\\passwd`, `/sub/${'%2e%2e%2f'.repeat(up)}${path.relative('/', DIR)}/server.mjs`, `/${'.%2e/'.repeat(up)}proc/self/environ`]);
    // Inside the root whatever the dots say, and nothing there by that name.
    return { steps: [`GET ${p} HTTP/1.1\r\n${H}\r\n`], expect: ['404|open'] };
  }],
  ['overlong URL', 2, (r, H) => ({ steps: [`GET /${'a'.repeat(r.int(17, 80) * 1024)} HTTP/1.1\r\n${H}\r\n`], expect: ['431|closed'] })],
  // The limit counts the names' and values' bytes: 4 a header here.
  ['repeated headers', 2, (r, H) => ({ steps: [`GET / HTTP/1.1\r\n${H}${'X-R: v\r\n'.repeat(r.pick([5000, 10_000]))}\r\n`], expect: ['431|closed'] })],
  ['a header over the limit', 2, (r, H) => ({ steps: [`GET / HTTP/1.1\r\n${H}X-Big: ${'b'.repeat(r.int(17, 40) * 1024)}\r\n\r\n`], expect: ['431|closed'] })],
  ['bad Content-Length', 6, (r, H) => {
    const cl = r.pick([['-1'], ['abc'], ['1e3'], ['0x10'], ['99999999999999999999999'], ['1, 2'], [''], ['+5'], ['18446744073709551616'], ['1', '2'], ['5', '50']]);
    const target = r.pick(['/grade', '/']);
    return { steps: [`POST ${target} HTTP/1.1\r\n${H}Content-Type: application/json\r\n${cl.map((c) => `Content-Length: ${c}\r\n`).join('')}\r\n{}`], expect: ['400|closed'] };
  }],
  ['Content-Length and Transfer-Encoding', 2, (r, H) => ({ steps: [`POST /grade HTTP/1.1\r\n${H}Content-Type: application/json\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`], expect: ['400|closed'] })],
  ['declared body over 64 KB', 3, (r, H) => ({ steps: [`POST /grade HTTP/1.1\r\n${H}Content-Type: application/json\r\nContent-Length: ${r.int(65537, 1e12)}\r\n\r\n{"lab"`], expect: ['413|closed'] })],
  ['bad chunk size', 6, (r, H) => {
    const size = r.pick(['zz', '-1', 'fffffffffffffffffff', ' 1', '1 x', '', 'x1', '0x1']);
    return { steps: [`POST /grade HTTP/1.1\r\n${H}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`, r.int(0, 20), `${size}\r\n{"lab"\r\n`], expect: ['400|closed'] };
  }],
  ['chunk extension over the limit', 1, (r, H) => ({ steps: [`POST /grade HTTP/1.1\r\n${H}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1;${'e'.repeat(20_000)}\r\n`], expect: ['413|closed'] })],
  ['a /grade body that never finishes', 2, (r, H) => {
    const chunked = r.next() < 0.5;
    const head = `POST /grade HTTP/1.1\r\n${H}Content-Type: application/json\r\n${chunked ? 'Transfer-Encoding: chunked' : `Content-Length: ${r.int(100, 60_000)}`}\r\n\r\n`;
    // A trickle: 4 bytes every 50 ms, for longer than the body timeout.
    const trickle = Array.from({ length: 50 }, () => [50, chunked ? '1\r\n{\r\n' : '{"a"']).flat();
    return { steps: [head, ...trickle], expect: ['408|closed'] };
  }],
  ['a GET body that never finishes', 1, (r, H) => ({
    // The page is answered at once; the unread body then times the connection out.
    steps: [`GET / HTTP/1.1\r\n${H}Content-Length: ${r.int(10, 1e6)}\r\n\r\nab`], keepReading: true, waitMs: 6000, expect: ['200,408|closed'],
  })],
  ['slowloris headers', 1, (r, H) => ({
    steps: [`GET / HTTP/1.1\r\n${H}`, ...Array.from({ length: 60 }, (_, i) => [40, `X-S${i}: ${r.word(3)}\r\n`]).flat()], expect: ['408|closed'],
  })],
  ['a connection that says nothing', 1, () => ({ steps: [], expect: ['408|closed'] })],
  ['pipelined garbage', 5, (r, H) => {
    const good = r.int(1, 3);
    const junk = Buffer.concat([Buffer.from([r.pick([0, 1, 0x7f, 0x20, 0xff])]), r.bytes(r.int(0, 200))]);
    // The good requests are answered in order, then the connection closes.
    return { steps: [Buffer.concat([Buffer.from(`GET / HTTP/1.1\r\n${H}\r\n`.repeat(good)), junk])], keepReading: true, expect: [`${Array(good).fill(200).join(',')}|closed`] };
  }],
  ['many requests on one connection', 1, (r, H) => ({
    // Kept alive for 100 answers at most; the 100th says Connection: close.
    steps: [`GET / HTTP/1.1\r\n${H}\r\n`.repeat(r.int(100, 160))], keepReading: true, expect: [`${Array(100).fill(200).join(',')}|closed`],
  })],
  ['pipelined good and bad requests', 3, (r, H) => ({
    steps: [`GET / HTTP/1.1\r\n${H}\r\nGET /%zz HTTP/1.1\r\n${H}\r\nGET /none HTTP/1.1\r\n${H}Connection: close\r\n\r\n`], keepReading: true, expect: ['200,400,404|closed'],
  })],
  ['HTTP/0.9', 2, (r) => r.pick([
    { steps: ['GET /\r\n\r\n'], expect: ['421|closed'] }, // no Host, so not ours
    { steps: ['GET /\r\n'], expect: ['408|closed'] }, // still waiting for headers
  ])],
  ['an odd but valid method', 4, (r, H) => ({
    steps: [`${r.pick(['PUT', 'DELETE', 'PATCH', 'PROPFIND', 'TRACE', 'MKCOL', 'PURGE', 'M-SEARCH', 'LINK', 'REPORT', 'SEARCH', 'LOCK'])} ${r.pick(['/', '/grade', '/app.js'])} HTTP/1.1\r\n${H}\r\n`],
    expect: ['405|open'],
  })],
  ['an invalid method', 4, (r, H) => ({
    steps: [`${r.pick(['get', 'FOO', 'GETX', 'G', 'PUTT', 'POS', 'GET\tX', '\x01GET'])} / HTTP/1.1\r\n${H}\r\n`], expect: ['400|closed'],
  })],
  ['CONNECT', 1, (r, H) => ({ steps: [`CONNECT 127.0.0.1:${r.int(1, 65535)} HTTP/1.1\r\n${H}\r\n`], expect: ['|closed'] })],
  ['HTTP/2 preface', 1, () => ({ steps: ['PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'], expect: ['400|closed'] })],
  ['a bad version or line ending', 2, (r, H) => ({
    steps: [r.pick([`GET / HTTP/9.9\r\n${H}\r\n`, `GET / HTTP/1.1\n${H.trim()}\n\n`, `GET / HTTP/1.1\r\n${H}X-\x01: a\r\n\r\n`, `GET / HTTP/1.1\r\n${H}X-A: a\x01b\r\n\r\n`, `GET /a b HTTP/1.1\r\n${H}\r\n`])],
    expect: ['400|closed'],
  })],
  ['not an origin-form target', 2, (r, H) => {
    const line = r.pick(['GET http://127.0.0.1/', 'OPTIONS *', 'GET //evil.example/', 'GET evil']);
    // The parser itself refuses a target that is not a URL at all.
    // "//evil.example/" is a path here (not found), never another host.
    const expect = { 'GET evil': '400|closed', 'GET //evil.example/': '404|open' }[line] ?? '400|open';
    return { steps: [`${line} HTTP/1.1\r\n${H}\r\n`], expect: [expect] };
  }],
  ['a foreign Host', 6, (r) => {
    const host = r.pick([`${r.word()}.example`, `${r.word()}.example:${port}`, `127.0.0.2:${port}`, `localhost:${port + 1}`, `lab.example:1`, '', 'x'.repeat(300), `evil.example\0`]);
    return { steps: [`GET ${r.pick(['/', '/app.js', '/grade'])} HTTP/1.1\r\nHost: ${host}\r\n\r\n`], expect: host.includes('\0') ? ['400|closed'] : ['421|closed'] };
  }],
  ['a foreign Host posting a grade', 2, (r) => ({ steps: [grade(`Host: ${r.word()}.example:${port}\r\n`, GOOD_BODY(r), `Origin: http://${r.word()}.example:${port}\r\n`)], expect: ['421|closed'] })],
  ['no Host', 2, (r) => r.pick([
    { steps: ['GET / HTTP/1.1\r\n\r\n'], expect: ['400|closed'] }, // HTTP/1.1 requires one (node)
    { steps: ['GET / HTTP/1.0\r\n\r\n'], expect: ['421|closed'] },
  ])],
  ['a --host name', 2, (r) => ({ steps: [`GET / HTTP/1.1\r\nHost: ${r.pick(['lab.example', `LAB.example:${port}`])}\r\n\r\n`], expect: ['200|open'] })],
  ['a foreign Origin posting a grade', 4, (r, H) => ({
    steps: [grade(H, GOOD_BODY(r), `Origin: ${r.pick([`http://${r.word()}.example`, 'null', `http://localhost:${port}`, 'https://course.example.evil', `http://127.0.0.1:${port + 1}`])}\r\n`)],
    expect: ['403|open'],
  })],
  ['a preflight', 2, (r, H) => {
    const ok = r.next() < 0.5;
    return {
      steps: [`OPTIONS /grade HTTP/1.1\r\n${H}Origin: ${ok ? 'https://course.example' : 'https://other.example'}\r\nAccess-Control-Request-Method: POST\r\n\r\n`],
      expect: [ok ? '204|open' : '403|open'],
    };
  }],
  ['Expect and Upgrade', 2, (r, H) => r.pick([
    { steps: [`GET / HTTP/1.1\r\n${H}Expect: ${r.word()}\r\n\r\n`], expect: ['417|open'] },
    { steps: [`GET / HTTP/1.1\r\n${H}Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n`], expect: ['200|open'] }, // no upgrade here: a plain GET
  ])],
  ['a good request', 8, (r, H) => r.pick([
    { steps: [`GET / HTTP/1.1\r\n${H}\r\n`], expect: ['200|open'] },
    { steps: [`HEAD /app.js HTTP/1.1\r\n${H}\r\n`], head: true, expect: ['200|open'] },
    { steps: [`GET /app.js HTTP/1.1\r\n${H}Accept-Encoding: gzip\r\n\r\n`], expect: ['200|open'] },
    { steps: [`GET /sub/ HTTP/1.1\r\nHost: localhost:${port}\r\nOrigin: https://anything.example\r\n\r\n`], expect: ['200|open'] },
    // Graded, or this address already has its share (3) waiting or grading.
    { steps: [grade(H, GOOD_BODY(r), r.next() < 0.5 ? `Origin: http://127.0.0.1:${port}\r\n` : '')], expect: ['200|open', '429|open'] },
  ])],
  ['a client that leaves mid-grade', 3, (r, H) => ({
    // A 400 ms job; we hang up after 20 to 60 ms: its slot and its job must go.
    // (Or refused at once: this address already has its share.)
    steps: [grade(H, JSON.stringify({ lab: 'deliver-once', source: `# SLOW ${r.word()}` }))], leaveAfterMs: r.int(20, 60), expect: ['|left', '429|open'],
  })],
  ['bad JSON and bad shapes', 3, (r, H) => r.pick([
    { steps: [grade(H, '{"lab": ')], expect: ['400|open'] },
    { steps: [grade(H, JSON.stringify({ lab: 'deliver-once', source: 'x', file: '/etc/passwd' }))], expect: ['400|open'] },
    { steps: [grade(H, JSON.stringify({ lab: '../../etc', source: 'x' }))], expect: ['404|open'] },
    { steps: [Buffer.concat([Buffer.from(`POST /grade HTTP/1.1\r\n${H}Content-Type: application/json\r\nContent-Length: 4\r\n\r\n`), Buffer.from([0xff, 0xfe, 0, 0x80])])], expect: ['400|open'] },
    { steps: [`POST /grade HTTP/1.1\r\n${H}Content-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}`], expect: ['415|open'] },
  ])],
];
const TOTAL_WEIGHT = CASES.reduce((n, c) => n + c[1], 0);
const SLOW = new Set(['slowloris headers', 'a /grade body that never finishes', 'a GET body that never finishes', 'a connection that says nothing', 'HTTP/0.9']);

function pickCase(r) {
  let x = r.next() * TOTAL_WEIGHT;
  for (const c of CASES) {
    x -= c[1];
    if (x < 0) return c;
  }
  return CASES[CASES.length - 1];
}

/** Runs fn over items, `limit` at a time. */
async function pooled(items, limit, fn) {
  let next = 0;
  await Promise.all(Array.from({ length: limit }, async () => {
    while (next < items.length) {
      const i = next++;
      await fn(items[i], i);
    }
  }));
}

/** The child's figures once nothing is waiting or grading, or after 1 s. */
async function settled() {
  const t0 = Date.now();
  for (;;) {
    const s = await childStats();
    if ((s.stats.inFlight === 0 && s.pool.queued === 0) || Date.now() - t0 > 1000) return s;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The page answers 200 and a good submission is graded (from a fresh connection each). */
async function healthy(label) {
  const H = `Host: 127.0.0.1:${port}\r\n`;
  const page = await exchange([`GET / HTTP/1.1\r\n${H}\r\n`]);
  assert.equal(page.outcome, '200|open', `${label}: GET / (seed ${SEED})`);
  assert.ok(page.text.endsWith(INDEX), `${label}: the page's body`);
  const graded = await exchange([grade(H, JSON.stringify({ lab: 'deliver-once', source: 'def f(): pass\n', seed: 3 }))]);
  assert.equal(graded.outcome, '200|open', `${label}: POST /grade (seed ${SEED}): ${graded.text.slice(0, 300)}`);
  const report = JSON.parse(graded.text.slice(graded.text.indexOf('\r\n\r\n') + 4));
  assert.equal(report.status, 'pass');
  assert.equal(report.seed, 3);
  assert.equal(report.format, 'json'); // what the handler asked the pool for
}

test(`serve.mjs --grading stays up under ${BATCHES * PER_BATCH} hostile requests (seed ${SEED})`, { timeout: 60_000 }, async (t) => {
  const r = prng(SEED);
  const H = `Host: 127.0.0.1:${port}\r\n`;
  const seen = new Map();
  let sent = 0;
  const t0 = Date.now();
  for (let b = 0; b < BATCHES; b++) {
    const batch = Array.from({ length: PER_BATCH }, (_, i) => {
      const [name, , make] = pickCase(r);
      return { name, i, ...make(r, H) };
    });
    // The slow ones (timeouts) first, so that the quick ones run while they wait.
    batch.sort((a, b) => SLOW.has(b.name) - SLOW.has(a.name));
    const wrong = [];
    await pooled(batch, CONCURRENCY, async (c) => {
      const { outcome } = await exchange(c.steps, c);
      sent += 1;
      seen.set(c.name, (seen.get(c.name) ?? 0) + 1);
      if (!c.expect.includes(outcome)) {
        const first = Buffer.concat(c.steps.filter((s) => typeof s !== 'number').map((s) => Buffer.from(s))).subarray(0, 160);
        wrong.push(`${c.name} #${b}.${c.i}: got ${outcome}, want ${c.expect.join(' or ')}; sent ${JSON.stringify(first.toString('latin1'))}`);
      }
    });
    assert.ok(alive(child), `the server exited (seed ${SEED}, batch ${b}): ${stderr}`);
    assert.deepEqual(wrong.slice(0, 10), [], `seed ${SEED}, batch ${b}: ${wrong.length} unexpected outcomes`);
    // Nothing held: every slot and every fake sandbox is free again (the last client
    // to leave did so a moment ago: its abort gets 1 s).
    const { stats, pool } = await settled();
    assert.equal(stats.inFlight, 0, JSON.stringify(stats));
    assert.equal(stats.clients, 0, JSON.stringify(stats));
    assert.equal(pool.queued, 0, JSON.stringify(pool));
    await healthy(`after batch ${b}`);
  }
  const { stats, pool } = await childStats();
  t.diagnostic(`${sent} requests in ${Date.now() - t0} ms; ${CASES.length} kinds; grade handler ${JSON.stringify(stats)}; pool ${JSON.stringify(pool)}`);
  assert.equal(sent, BATCHES * PER_BATCH);
  assert.equal(seen.size, CASES.length, `every kind was sent: missing ${CASES.map((c) => c[0]).filter((n) => !seen.has(n))}`);
  assert.ok(stats.aborted > 0 && pool.aborted > 0, 'some clients left mid-grade and their jobs were aborted');
  assert.ok(alive(child), `the server exited: ${stderr}`);
  // Nothing reached the last-resort 500 path: each handler coped on its own.
  assert.doesNotMatch(stderr, /internal error|failed/, stderr);
});

test('node grader/serve.mjs itself: the requests that crashed it, and bad flags', { timeout: 20_000 }, async () => {
  // The command line as users run it (no grading: the static side is what crashed).
  const { c, ready } = startChild(path.join(WWW, 'grader', 'serve.mjs'), ['--port', '0', '--root', ROOT, '--host=lab.example']);
  const saved = port;
  try {
    port = await ready;
    const H = `Host: 127.0.0.1:${port}\r\n`;
    for (const p of ['/%00', '/%', '/%zz', '/%c0%af', '/a%00.html', '/%ff']) {
      assert.equal((await exchange([`GET ${p} HTTP/1.1\r\n${H}\r\n`])).outcome, '400|open', p);
    }
    assert.equal((await exchange([`GET / HTTP/1.1\r\nHost: evil.example:${port}\r\n\r\n`])).outcome, '421|closed');
    assert.equal((await exchange([`GET / HTTP/1.1\r\nHost: lab.example\r\n\r\n`])).outcome, '200|open');
    assert.equal((await exchange([`POST /grade HTTP/1.1\r\n${H}Content-Length: 2\r\n\r\n{}`])).outcome, '405|open'); // no --grading
    assert.equal((await exchange([`GET / HTTP/1.1\r\n${H}\r\n`])).outcome, '200|open');
    assert.ok(alive(c), stderr);
  } finally {
    c.kill();
    port = saved;
  }
  // Refused at the start, with the usage: exit 2.
  for (const args of [['--host', 'a b'], ['--host', 'evil.example/x'], ['--allow-origin', '*'], ['--allow-origin', 'https://course.example/path'],
    ['--allow-origin'], ['--per-client', '0'], ['--bogus']]) {
    const p = spawn(process.execPath, ['grader/serve.mjs', '--root', ROOT, '--port', '0', ...args], { cwd: WWW, stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d) => { err += d; });
    const code = await new Promise((resolve) => p.once('exit', resolve));
    assert.equal(code, 2, `${args.join(' ')}: ${err}`);
    assert.match(err, /^serve: .*\nusage: node grader\/serve\.mjs/, args.join(' '));
  }
});
