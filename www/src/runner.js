// Runs the tests in the grading worker and enforces the time limit.
//
// At the limit the worker is interrupted: with a SharedArrayBuffer (the page is
// crossOriginIsolated), Pyodide raises KeyboardInterrupt in the learner's code and
// the worker reports the tests it got through. Learner code can catch that, so a
// second deadline (a short grace later) terminates the worker outright, starts a
// fresh one and takes the report from timeoutReport() instead.

export class Runner {
  /**
   * @param {object} o
   * @param {URL|string} o.workerUrl
   * @param {number} o.limitS                the lab's time limit per run
   * @param {(message:string)=>object} o.timeoutReport  a report for a run that was killed
   * @param {(text:string)=>void} [o.onProgress]
   * @param {number} [o.graceMs]             how long an interrupt may take to land
   */
  constructor({ workerUrl, labId, limitS, timeoutReport, onProgress = () => {}, graceMs = 1000 }) {
    Object.assign(this, { workerUrl, labId, limitS, timeoutReport, onProgress, graceMs });
    this.worker = null;
    this.ready = null;     // Promise<{lab, ms}> for the current worker
    this.pending = new Map(); // run id -> resolve
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
    const worker = new Worker(this.workerUrl, { type: 'module', name: 'delivery-lab grader' });
    this.worker = worker;
    // The interrupt needs memory both threads see: only when crossOriginIsolated.
    this.interrupt = globalThis.crossOriginIsolated ? new Uint8Array(new SharedArrayBuffer(1)) : null;
    this.ready = new Promise((resolve, reject) => {
      worker.onmessage = ({ data }) => {
        if (data.type === 'progress') this.onProgress(data.text);
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

  /** Ends the worker (used at the time limit and after a failed start). */
  stop() {
    if (this.worker) this.worker.terminate();
    this.worker = null;
    this.ready = null;
    this.interrupt = null;
    this.loaded = false;
  }

  /**
   * Grades `source`. Resolves to {report, ms, stopped} where stopped is null, or
   * 'interrupted' / 'terminated' for a run that hit the limit.
   */
  run(source, { seed } = {}) {
    const result = this.queue.then(() => this.#runNow(source, seed));
    this.queue = result.catch(() => {});
    return result;
  }

  async #runNow(source, seed) {
    await this.start();
    const id = this.nextId++;
    const worker = this.worker;
    const interrupt = this.interrupt;
    const limitMs = this.limitS * 1000;
    const started = performance.now();
    return new Promise((resolve) => {
      let stopped = null;
      const timers = [];
      const finish = (value) => {
        timers.forEach(clearTimeout);
        this.pending.delete(id);
        resolve({ ...value, stopped, wallMs: Math.round(performance.now() - started) });
      };
      this.pending.set(id, (value) => finish(value));
      timers.push(setTimeout(() => {
        stopped = 'interrupted';
        if (interrupt) interrupt[0] = 2; // SIGINT: Pyodide raises KeyboardInterrupt
      }, limitMs));
      timers.push(setTimeout(() => {
        // Still running: the code swallowed the interrupt, or there was none to send.
        stopped = 'terminated';
        if (this.worker === worker) this.stop();
        this.restarts += 1;
        const message = `Stopped: your code was still running after the ${this.limitS} s limit, `
          + 'so the grader was restarted. Look for a loop that never ends'
          + (interrupt ? ' (or one that catches KeyboardInterrupt).' : '.');
        finish({ report: this.timeoutReport(message, seed), ms: null });
        // A fresh worker, so the next run does not wait for Python to load.
        this.start().catch(() => {});
      }, limitMs + (interrupt ? this.graceMs : 0)));
      worker.postMessage({ type: 'run', id, source, seed });
    });
  }
}
