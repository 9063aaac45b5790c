// A request's body, read within bounds: the one reader of every body the server
// takes (serve.mjs's POST /grade, lti/tool.mjs's forms and submissions), so that
// each is refused the same way at the same limits.
//
// A body larger than its cap (declared, or counted as it comes) is refused with 413,
// one that has not all arrived within its time with 408. Either way the rest is not
// read: the reader sets "Connection: close" on the response the caller then sends,
// and the connection closes lingering (below), so the client reads that answer
// instead of a reset.

/** A body refused: the HTTP status, a stable code (logs and tests read it), and
 *  `closes`: the connection is closing (cut off; readBody set Connection: close). */
export class BodyError extends Error {
  constructor(status, code, message, { closes = false } = {}) {
    super(message);
    this.name = 'BodyError';
    this.status = status;
    this.code = code;
    this.closes = closes;
  }
}

/** The client went away before its body ended: nobody to answer. */
export const GONE = 'gone';

/**
 * The body of `req`: a Buffer of at most `maxBytes`, all arrived within `timeoutMs`.
 * Rejects with a BodyError: 413 `too_large`, 408 `too_slow` (both `closes`: `res`,
 * its response, then says Connection: close), or `GONE` (status 400) when the
 * request broke off or its connection closed.
 */
export function readBody(req, res, { maxBytes, timeoutMs }) {
  return new Promise((resolve, reject) => {
    let done = false;
    let timer = null;
    const finish = (err, value) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      if (!err) resolve(value);
      else {
        if (err.closes) {
          if (!res.headersSent) res.setHeader('Connection', 'close');
          lingeringClose(req.socket);
        }
        // Whatever still comes is read and dropped, never parsed as a request.
        req.resume();
        reject(err);
      }
    };
    const tooLarge = () => new BodyError(413, 'too_large', `the body is larger than ${maxBytes} bytes`, { closes: true });
    const declared = Number(req.headers['content-length']);
    if (Number.isFinite(declared) && declared > maxBytes) {
      finish(tooLarge());
      return;
    }
    // A body that trickles in or never ends holds a connection, not a slot: cut off.
    timer = setTimeout(() => finish(new BodyError(408, 'too_slow',
      `the body did not arrive within ${timeoutMs / 1000} s`, { closes: true })), timeoutMs);
    timer.unref();
    const chunks = [];
    let size = 0;
    req.on('data', (c) => {
      if (done) return;
      size += c.length;
      if (size > maxBytes) finish(tooLarge());
      else chunks.push(c);
    });
    const gone = () => finish(new BodyError(400, GONE, 'the request broke off before its body ended'));
    req.on('error', gone);
    req.on('close', () => { if (!req.complete) gone(); });
    req.on('end', () => finish(null, Buffer.concat(chunks)));
  });
}

/** `bytes` as text, or a BodyError 400 `bad_body` when they are not UTF-8. */
export function utf8Of(bytes) {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new BodyError(400, 'bad_body', 'the body is not valid UTF-8');
  }
}

// Closing a connection while the client is still sending resets it, and a reset can
// make the client drop the answer it was sent (a 413, a 408) unread. So the answer is
// followed by a FIN, what the client still sends is read and dropped, and the socket
// is closed when the client closes or LINGER_MS later. Node closes a connection after
// a "Connection: close" answer with socket.destroySoon(): that is the hook.
export const LINGER_MS = 2000;
export function lingeringClose(socket) {
  if (!socket) return;
  socket.destroySoon = function destroySoonLingering() {
    if (this.destroyed) return;
    this.end();
    setTimeout(() => this.destroy(), LINGER_MS).unref();
  };
}
