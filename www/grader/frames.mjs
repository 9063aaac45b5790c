// The wire between the coordinator and one sandbox: two pipes of its own (fds the
// sandbox inherits as 3 and 4), carrying frames of a 4-byte little-endian length
// and that many bytes of UTF-8 JSON. Both sides read and write them with blocking
// calls (fs.readSync / fs.writeSync): a learner call is a synchronous function
// inside the grader, and its world operations must be answered before it goes on.
//
// Everything that comes from a sandbox is hostile input: a frame longer than
// FRAME_CAP_BYTES, a run that sends more than RUN_CAP_BYTES in all, bytes that are
// not JSON, a frame of an unexpected type or with fields of the wrong type: each
// ends that submission as "interfered with the grader", never the coordinator.
import fs from 'node:fs';

// The store's protocol (src/courier/db_store.py's store_* functions): what a sandbox may ask of
// the coordinator's database for a lab whose registry entry says `store`. A
// statement with its parameters as JSON, and the provider's calls, whose committed
// attempts the store reads itself; the store then asks the lab's world.
export const STORE_OPS = {
  sql: ['string', 'string', 'string'],
  send: ['string', 'string', 'string'],
  lookup: ['string'],
};

/**
 * The operations a sandbox may ask of its call's world, with their argument types
 * ('string', 'number', 'number?' for a number or null, 'boolean'), for a lab as
 * the registry describes it (`grader.lab(id)`: `world_ops`, `store`): the lab's
 * world's own operations, or the store's when its calls get a database.
 */
export function sandboxOps(info) {
  if (info.store) return STORE_OPS;
  return Object.fromEntries(info.world_ops.map((op) => [op.name, op.args]));
}

/** How deep a statement's parameters (JSON text, learner_side.py's `_dumps`) may nest:
 *  executemany's list of parameter lists of blobs ({"blob": ...}) is 3. The store
 *  parses them in Python, whose parser recurses: 200,000 brackets would overflow
 *  its stack, so deeper text is refused before it gets there. */
export const PARAMS_DEPTH_CAP = 3;

/** Whether JSON text nests deeper than `cap` (brackets inside strings do not count). */
export function nestsDeeper(text, cap) {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92) i++;              // a backslash: skip what it escapes
      else if (c === 34) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 91 || c === 123) {  // [ {
      if (++depth > cap) return true;
    } else if (c === 93 || c === 125) depth--;
  }
  return false;
}

/** The fds a sandbox reads from and writes to. */
export const SANDBOX_IN_FD = 3;
export const SANDBOX_OUT_FD = 4;
/** The longest frame either side accepts. Honest frames are a few KB at most
 *  (a learner's source is the longest one the coordinator sends). */
export const FRAME_CAP_BYTES = 1 << 20;
/** What one submission's sandbox may send in all; an honest courier run sends
 *  about 8 MB (measured: the reference, 21,077 calls, 75,789 world operations;
 *  each statement's text crosses once, then by its number: src/courier/learner_side.py's
 *  SQL_REF). A wrong solution stays a fail, not a flood: the chaos run stops past
 *  its budget of steps (src/courier/sim.rs STEPS_PER_ACTION_CAP); a lease written
 *  as a duration, which used to send more than this cap, sends about 4 MB. */
export const RUN_CAP_BYTES = 64 << 20;
/** The most world operations one submission may ask for (an honest courier run:
 *  about 76,000; the time limit usually ends a flood long before). */
export const RUN_CAP_OPS = 2_000_000;

/** A job's shared Int32Array (`flag`), between the main thread and the grading
 *  thread: `ended`, why the main thread ended the sandbox (ENDED; the grading
 *  thread reads it when the sandbox's pipe closes). */
export const JOB = { ended: 0, slots: 1 };
export const ENDED = { running: 0, timeout: 1, memory: 2, aborted: 3 };

/** A frame the coordinator refuses; the submission is reported as interfering. */
export class Interference extends Error {}
/** The other side closed its pipe (the sandbox ended or was killed). */
export class Closed extends Error {}

export function encodeFrame(obj) {
  const body = Buffer.from(JSON.stringify(obj), 'utf8');
  if (body.length > FRAME_CAP_BYTES) throw new RangeError(`a frame of ${body.length} bytes is over the cap`);
  const frame = Buffer.allocUnsafe(4 + body.length);
  frame.writeUInt32LE(body.length, 0);
  body.copy(frame, 4);
  return frame;
}

/**
 * One side of a channel, over blocking fds.
 * @param {number} inFd
 * @param {number} outFd
 * @param {object} [o]
 * @param {number} [o.runCapBytes] bytes this side accepts in all (Infinity: trusted peer)
 */
export function channel(inFd, outFd, { runCapBytes = Infinity } = {}) {
  const head = Buffer.alloc(4);
  let received = 0;

  function readFully(buf, n) {
    let off = 0;
    while (off < n) {
      let r;
      try {
        r = fs.readSync(inFd, buf, off, n - off, null);
      } catch (e) {
        if (e.code === 'EAGAIN') continue; // never on a blocking fd; harmless if so
        throw new Closed(`the pipe failed (${e.code || e.message})`);
      }
      if (r === 0) throw new Closed('the other side closed its pipe');
      off += r;
    }
  }

  return {
    /** Writes one frame; Closed when the other side is gone. */
    send(obj) {
      const frame = encodeFrame(obj);
      let off = 0;
      while (off < frame.length) {
        try {
          off += fs.writeSync(outFd, frame, off, frame.length - off);
        } catch (e) {
          if (e.code === 'EAGAIN') continue;
          throw new Closed(`the pipe failed (${e.code || e.message})`);
        }
      }
    },
    /** Reads one frame and parses it; Interference when it is not a frame of JSON
     *  within the caps, Closed when the other side is gone. */
    receive() {
      readFully(head, 4);
      const n = head.readUInt32LE(0);
      if (n > FRAME_CAP_BYTES) throw new Interference(`it sent a frame of ${n} bytes (the cap is ${FRAME_CAP_BYTES})`);
      received += 4 + n;
      if (received > runCapBytes) throw new Interference(`it sent more than ${runCapBytes >> 20} MB to the grader`);
      const body = Buffer.allocUnsafe(n);
      readFully(body, n);
      let obj;
      try {
        obj = JSON.parse(body.toString('utf8'));
      } catch {
        throw new Interference('it sent a frame that is not JSON');
      }
      if (obj === null || typeof obj !== 'object' || Array.isArray(obj) || typeof obj.t !== 'string') {
        throw new Interference('it sent a frame without a type');
      }
      return obj;
    },
    get receivedBytes() { return received; },
  };
}
