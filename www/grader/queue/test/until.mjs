// The queue tests' one way to wait for what they need (a row, a log line, an answer)
// rather than for a time: a busy machine makes them slower, not different.

/** Resolves with fn()'s first truthy answer, asked every `everyMs`; fails after `ms` with `what`. */
export async function until(fn, what, ms = 120_000, everyMs = 100) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`not within ${ms / 1000} s: ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
