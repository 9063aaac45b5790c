// Runs the tests in the grading worker and stops a run that is stuck or far too slow.
//
// What is limited is progress, not the machine's speed. The worker counts the calls
// of the learner's functions that return (`withProgress`, below) and tells this
// thread every PROGRESS_EVERY_MS while they do, with the time spent inside them. A
// browser gives a worker no CPU time of its own, and wall time alone cannot tell a
// loaded machine from an endless loop; calls that return can: on a slow machine
// they keep returning, only less often, while an endless loop (or a call that
// never ends) returns nothing at all. So, against the lab's limit (`limitS`):
//
// - before the limit nothing is stopped, as before;
// - from the limit on, a run in which no call returned for the last half of it
//   (QUIET_SHARE: 4 s for lab 1, 10 s for the courier) is stuck. It is stopped and
//   the message says to look for a loop that never ends. A run stuck early (every
//   endless loop lab 1's tests write) stops at the limit, exactly as before;
// - calls still returning, but the run at `capFactor` times the limit: the machine
//   (or the code) is too slow to finish. Stopped too, and the message says so, with
//   how far the run got, and never calls it an endless loop.
//
// To stop a run the worker is interrupted: with a SharedArrayBuffer (the page is
// crossOriginIsolated), Pyodide raises KeyboardInterrupt in the learner's code and
// the worker reports the tests it got through. Learner code can catch that, so a
// second deadline (a short grace later) terminates the worker outright, starts a
// fresh one and takes the report from timeoutReport() instead.

/** How often the worker tells the page how far a run got, at most. */
export const PROGRESS_EVERY_MS = 200;
/** A run that keeps progressing may take this many times the lab's limit. */
export const CAP_FACTOR = 4;
/** Past the limit, a run is stuck once no call returned for this share of the limit. */
export const QUIET_SHARE = 0.5;
// A deadline's look this much late: the page's thread was starved (see `look`).
const LATE_MS = 1000;
const RECHECK_MS = 100;

/**
 * `Grader` (a lab's grader class) with its runs counted: each call of the learner's
 * code through `solution.call` (the grader's one way into it) counts once it
 * returns, and `onProgress({calls, busyMs, ms})` hears of it at most every
 * PROGRESS_EVERY_MS (busyMs: the time inside those calls; ms: since the run began).
 * `slowCallMs` (tests only: a number, or a function asked at each run's start) makes
 * each call that much longer, as a slow machine would.
 */
export function withProgress(Grader, onProgress, { now = () => performance.now(), slowCallMs = () => 0 } = {}) {
  const counted = (solution) => {
    const t0 = now();
    const slowMs = typeof slowCallMs === 'function' ? slowCallMs() : slowCallMs;
    let calls = 0;
    let busyMs = 0;
    let said = t0;
    const tell = (t) => {
      said = t;
      onProgress({ calls, busyMs: Math.round(busyMs), ms: Math.round(t - t0) });
    };
    return {
      call(fnName, argsJson, world) {
        const start = now();
        try {
          const out = solution.call(fnName, argsJson, world);
          if (slowMs > 0) while (now() - start < slowMs) { /* a slow machine, for a test */ }
          return out;
        } finally {
          const end = now();
          calls += 1;
          busyMs += end - start;
          if (end - said >= PROGRESS_EVERY_MS) tell(end);
        }
      },
      // The grader's own operations on the lab's database: no call of the learner's code.
      ...(typeof solution.store === 'function' ? { store: (op, argsJson) => solution.store(op, argsJson) } : {}),
      take_output: () => (typeof solution.take_output === 'function' ? solution.take_output() : undefined),
    };
  };
  return class ProgressGrader extends Grader {
    grade(labId, solution, ...rest) {
      return super.grade(labId, counted(solution), ...rest);
    }

    verdict(labId, solution, ...rest) {
      return super.verdict(labId, counted(solution), ...rest);
    }
  };
}

const count = (n) => n.toLocaleString('en');
const seconds = (ms) => `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)} s`;

/**
 * Why a run was stopped, in words: `stop` is the runner's {why: 'stuck'|'slow',
 * limitS, capS, calls, busyMs, afterMs, quietMs}. `restarted`: the worker was
 * thrown away (the interrupt did not end the run).
 */
export function stopMessage(stop, { restarted = false } = {}) {
  const after = restarted ? ', so the grader was restarted' : '';
  if (stop.why === 'slow') {
    return `Stopped after ${seconds(stop.afterMs)}, the most a run may take, while your code was still making progress: `
      + `${count(stop.calls)} calls of your functions had returned, the last ${seconds(stop.quietMs)} before the stop`
      + ` (${seconds(stop.busyMs)} inside them)${after}. This is not an endless loop: the machine is too busy, or your`
      + ' code too slow, to finish in time. Close what else is running (other tabs, programs) and run it again, or'
      + ' make the slow piece faster.';
  }
  return `Stopped: no call of your code returned for ${Math.floor(stop.quietMs / 1000)} s${after}. Look for a loop that never ends`
    + (restarted && stop.interruptible ? ' (or one that catches KeyboardInterrupt).' : '.')
    + (stop.calls > 0 ? ` Before it, ${count(stop.calls)} calls of your functions had returned.` : '');
}

// What the grader writes into a test stopped by the interrupt (src/value.rs).
const GRADER_TIMEOUT = /Stopped: the tests ran longer than the [\d.]+ s limit\. Look for a loop that never ends\./g;

/** The report with the grader's own "ran longer than the limit" sentence replaced by
 *  why the run was stopped (`stopMessage`): a slow run is never called endless. */
export function explainStop(report, stop) {
  if (!report || !Array.isArray(report.tests)) return report;
  const said = stopMessage(stop);
  for (const t of report.tests) {
    if (typeof t.message === 'string') t.message = t.message.replace(GRADER_TIMEOUT, said);
  }
  return report;
}

export class Runner {
  /**
   * @param {object} o
   * @param {URL|string} o.workerUrl
   * @param {number} o.limitS                the lab's time limit: a run that makes no
   *                                         progress is stopped there (or later: see above)
   * @param {(message:string, seed?:number, only?:string[])=>object} o.timeoutReport  a report for a run that was
   *   killed (`only`: the run was of these tests alone, and its report lists them alone)
   * @param {(text:string)=>void} [o.onProgress]
   * @param {number} [o.graceMs]             how long an interrupt may take to land
   * @param {number} [o.capFactor]           a run that progresses stops at limitS times this
   * @param {() => number} [o.now]           the clock, in ms (tests)
   * @param {(url, options) => Worker} [o.createWorker]  (tests: a worker of their own)
   */
  constructor({ workerUrl, labId, limitS, timeoutReport, onProgress = () => {}, graceMs = 1000, capFactor = CAP_FACTOR,
    now = () => performance.now(), createWorker = (url, options) => new Worker(url, options) }) {
    Object.assign(this, { workerUrl, labId, limitS, timeoutReport, onProgress, graceMs, capFactor, now, createWorker });
    this.worker = null;
    this.ready = null;     // Promise<{lab, ms}> for the current worker
    this.pending = new Map(); // run id -> resolve
    this.progress = new Map(); // run id -> ({calls, busyMs, ms}) => void
    this.nextId = 1;
    this.queue = Promise.resolve(); // runs go one at a time
    this.interrupt = null;
    this.loaded = false;   // the current worker has Python and the grader up
    this.restarts = 0;
  }

  get started() {
    return this.worker !== null;
  }

  /** Starts a worker unless one is running; resolves when it can grade. */
  start() {
    if (this.ready) return this.ready;
    const worker = this.createWorker(this.workerUrl, { type: 'module', name: 'delivery-lab grader' });
    this.worker = worker;
    // The interrupt needs memory both threads see: only when crossOriginIsolated.
    this.interrupt = globalThis.crossOriginIsolated ? new Uint8Array(new SharedArrayBuffer(1)) : null;
    this.ready = new Promise((resolve, reject) => {
      worker.onmessage = ({ data }) => {
        if (data.type === 'progress') this.onProgress(data.text);
        else if (data.type === 'run-progress') this.progress.get(data.id)?.(data);
        else if (data.type === 'ready') { this.loaded = true; resolve({ lab: data.lab, ms: data.ms }); }
        else if (data.type === 'failed') reject(new Error(data.text));
        else if (data.type === 'report') {
          const done = this.pending.get(data.id);
          if (done) { this.pending.delete(data.id); done({ report: data.report, ms: data.ms }); }
        }
      };
      worker.onerror = (e) => {
        e.preventDefault?.();
        reject(new Error(`The grading worker failed to start: ${e.message || 'unknown error'}`));
      };
    });
    this.ready.catch(() => { this.stop(); });
    worker.postMessage({ type: 'init', interruptBuffer: this.interrupt, lab: this.labId });
    return this.ready;
  }

  /** Ends the worker (used when a run is stopped and after a failed start). */
  stop() {
    if (this.worker) this.worker.terminate();
    this.worker = null;
    this.ready = null;
    this.interrupt = null;
    this.loaded = false;
  }

  /**
   * Grades `source`. Resolves to {report, ms, stopped, stop, wallMs, calls}: stopped is
   * null, or 'interrupted' / 'terminated' for a run that was stopped, and then `stop`
   * says why ({why: 'stuck'|'slow', ...}: stopMessage); calls: the learner's calls
   * that returned. `slowCallMs` (tests only): each call made that much slower. `only`:
   * test names to run alone (engine.run's `only`: the report lists them, `partial: true`).
   */
  run(source, { seed, slowCallMs, only } = {}) {
    const result = this.queue.then(() => this.#runNow(source, seed, slowCallMs, only));
    this.queue = result.catch(() => {});
    return result;
  }

  async #runNow(source, seed, slowCallMs, only) {
    await this.start();
    const id = this.nextId++;
    const worker = this.worker;
    const interrupt = this.interrupt;
    const limitMs = this.limitS * 1000;
    const capMs = limitMs * this.capFactor;
    const started = this.now();
    return new Promise((resolve) => {
      let stopped = null;
      let stop = null;
      let seen = { calls: 0, busyMs: 0, ms: 0 };
      let progressAt = started; // when a call was last seen returning (or the run began)
      const quietMs = limitMs * QUIET_SHARE;
      let checkDue = started + limitMs;
      let grace = null;
      let check = null;
      const finish = (value) => {
        clearTimeout(check);
        clearTimeout(grace);
        this.pending.delete(id);
        this.progress.delete(id);
        const report = stop && value.report ? explainStop(value.report, stop) : value.report;
        resolve({ ...value, report, stopped, stop, calls: seen.calls, wallMs: Math.round(this.now() - started) });
      };
      this.pending.set(id, (value) => finish(value));
      this.progress.set(id, (p) => {
        if (p.calls > seen.calls) progressAt = this.now();
        seen = p;
      });
      const halt = (why, t) => {
        stopped = 'interrupted';
        stop = {
          why, limitS: this.limitS, capS: capMs / 1000, calls: seen.calls, busyMs: seen.busyMs,
          afterMs: Math.round(t - started), quietMs: Math.round(t - progressAt), interruptible: !!interrupt,
        };
        if (interrupt) interrupt[0] = 2; // SIGINT: Pyodide raises KeyboardInterrupt
        grace = setTimeout(() => {
          // Still running: the code swallowed the interrupt, or there was none to send.
          stopped = 'terminated';
          if (this.worker === worker) this.stop();
          this.restarts += 1;
          finish({ report: this.timeoutReport(stopMessage(stop, { restarted: true }), seed, only), ms: null });
          // A fresh worker, so the next run does not wait for Python to load.
          this.start().catch(() => {});
        }, interrupt ? this.graceMs : 0);
      };
      // Looked at when a deadline comes: the limit, then each time the last progress
      // seen would be QUIET_SHARE of the limit old, and the cap. A look that comes
      // late means this thread was starved (a loaded machine): progress the worker
      // sent meanwhile may still be queued behind it, so the stall is judged a moment
      // later, once that is read; the cap stays.
      const look = () => {
        const t = this.now();
        const late = t - checkDue > LATE_MS;
        const quiet = t - progressAt >= quietMs;
        if (t - started >= capMs) return halt(quiet ? 'stuck' : 'slow', t);
        if (quiet && !late) return halt('stuck', t);
        checkDue = quiet ? t + RECHECK_MS : Math.min(progressAt + quietMs, started + capMs);
        check = setTimeout(look, Math.max(0, checkDue - t));
      };
      check = setTimeout(look, Math.max(0, checkDue - started));
      worker.postMessage({ type: 'run', id, source, seed, ...(slowCallMs ? { slowCallMs } : {}), ...(only ? { only } : {}) });
    });
  }
}
