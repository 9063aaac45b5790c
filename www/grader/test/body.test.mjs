// The one bounded body reader (grader/body.mjs) that serve.mjs's POST /grade,
// the LTI tool and the real run's provider read every body with. Over raw sockets,
// each case asserts the exact outcome: the status answered, that a cut-off answer
// says "Connection: close" and reaches a client still sending (no reset), and what
// the reader gave the handler (the bytes, or the refusal's code).
// Only Node's own modules: no build, no npm packages.
// Run: node --test grader/test/body.test.mjs   (about 3 s)
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { BodyError, GONE, readBody, utf8Of } from '../body.mjs';

const MAX_BYTES = 1000;
const TIMEOUT_MS = 400;
let server;
let port;
const outcomes = []; // what each request's reader gave: { bytes } or { code }

before(async () => {
  server = http.createServer((req, res) => {
    readBody(req, res, { maxBytes: MAX_BYTES, timeoutMs: TIMEOUT_MS }).then((bytes) => {
      outcomes.push({ bytes: bytes.length });
      const text = `got ${bytes.length}`;
      res.writeHead(200, { 'Content-Type': 'text/plain', 'Content-Length': text.length });
      res.end(text);
    }, (e) => {
      outcomes.push({ code: e.code, isBodyError: e instanceof BodyError, closes: e.closes });
      if (e.code === GONE) return;
      // Connection: close is the reader's to set on a cut-off body, not this handler's.
      res.writeHead(e.status, { 'Content-Type': 'text/plain', 'Content-Length': Buffer.byteLength(e.message) });
      res.end(e.message);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = server.address().port;
});
after(() => { server.close(); server.closeAllConnections(); });

/** Sends `head` then `chunks` (each after `gapMs`) and resolves to what came back and whether the server closed. */
function exchange(head, chunks = [], { gapMs = 0, keepSending = false } = {}) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let got = '';
    let reset = false;
    let sender = null;
    s.on('data', (d) => { got += d; });
    s.on('error', () => { reset = true; });
    let closed = false;
    s.on('close', () => { closed = true; clearInterval(sender); resolve({ got, reset }); });
    s.write(head);
    let i = 0;
    const next = () => {
      if (closed) return;
      if (i < chunks.length) {
        s.write(chunks[i++]);
        setTimeout(next, gapMs);
      } else if (keepSending) {
        // A client that goes on sending after its answer: the answer must still arrive.
        sender = setInterval(() => { if (!s.destroyed) s.write('x'.repeat(4096)); }, 5);
      }
    };
    next();
    setTimeout(() => s.destroy(), 5000).unref();
  });
}
const statusOf = (text) => Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);
const closes = (text) => /\r\nconnection: close\r\n/i.test(text);

test('a body within its bounds is read whole', async () => {
  outcomes.length = 0;
  const body = 'y'.repeat(MAX_BYTES);
  const r = await exchange(`POST / HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
  assert.equal(statusOf(r.got), 200);
  assert.match(r.got, /got 1000$/);
  assert.deepEqual(outcomes, [{ bytes: MAX_BYTES }]);
});

test('a declared length past the cap: 413 before a byte is read, the connection closing, the answer reaching a client still sending', async () => {
  outcomes.length = 0;
  const r = await exchange(`POST / HTTP/1.1\r\nHost: x\r\nContent-Length: ${MAX_BYTES + 1}\r\n\r\n`, [], { keepSending: true });
  assert.equal(statusOf(r.got), 413);
  assert.ok(closes(r.got), r.got);
  assert.match(r.got, /the body is larger than 1000 bytes$/);
  assert.deepEqual(outcomes, [{ code: 'too_large', isBodyError: true, closes: true }]);
});

test('a chunked body that grows past the cap: 413, connection closing', async () => {
  outcomes.length = 0;
  const chunk = (n) => `${n.toString(16)}\r\n${'z'.repeat(n)}\r\n`;
  const r = await exchange('POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n', [chunk(600), chunk(600)], { gapMs: 20, keepSending: true });
  assert.equal(statusOf(r.got), 413);
  assert.ok(closes(r.got), r.got);
  assert.deepEqual(outcomes, [{ code: 'too_large', isBodyError: true, closes: true }]);
});

test('a body that trickles past its time: 408, connection closing', async () => {
  outcomes.length = 0;
  const t0 = Date.now();
  const r = await exchange('POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n', ['a', 'b', 'c', 'd'], { gapMs: 150 });
  assert.equal(statusOf(r.got), 408);
  assert.ok(closes(r.got), r.got);
  assert.match(r.got, /the body did not arrive within 0\.4 s$/);
  assert.ok(Date.now() - t0 >= TIMEOUT_MS, 'not before its time');
  assert.deepEqual(outcomes, [{ code: 'too_slow', isBodyError: true, closes: true }]);
});

test('a client gone mid-body: nothing answered, the reader says so once', async () => {
  outcomes.length = 0;
  await new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => {
      s.write('POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\nhalf');
      setTimeout(() => { s.destroy(); resolve(); }, 50);
    });
  });
  // Past the body's time too: the timer was cleared, nothing more is reported.
  await new Promise((r) => setTimeout(r, TIMEOUT_MS + 200));
  assert.deepEqual(outcomes, [{ code: GONE, isBodyError: true, closes: false }]);
});

test('utf8Of: text, or a typed 400 for bytes that are not UTF-8', () => {
  assert.equal(utf8Of(Buffer.from('héllo', 'utf8')), 'héllo');
  for (const bad of [[0xff], [0xc3], [0xed, 0xa0, 0x80]]) {
    assert.throws(() => utf8Of(Buffer.from(bad)), (e) => e instanceof BodyError && e.status === 400 && e.code === 'bad_body');
  }
});
