// What the CLI prints and serves of a report: text fit for a terminal, and the
// report's JSON line, bounded.
import { loadGrader } from '../host/node_host.mjs';

/** The longest JSON line of one submission (the report's fields are capped in the engine). */
export const LINE_CAP_BYTES = 64 * 1024;

// Characters that move a terminal's cursor, recolour, erase or reorder text: C0
// (but newline and tab), DEL, C1, and the bidirectional and zero-width marks. The
// engine's list (report.rs TERMINAL_UNSAFE, which its text reports escape), read
// from the grader when this module loads. Without a built grader (a usage error,
// --help) the module still loads; escaping then throws, since nothing is graded.
const u = (cp) => `\\u{${cp.toString(16)}}`;
let UNSAFE = null;
let noGrader = null;
try {
  const ranges = JSON.parse(new (await loadGrader()).Grader().terminal_unsafe());
  UNSAFE = new RegExp(`[${ranges.map(([lo, hi]) => (lo === hi ? u(lo) : `${u(lo)}-${u(hi)}`)).join('')}]`, 'gu');
} catch (e) {
  noGrader = e;
}
const unsafe = () => {
  if (!UNSAFE) throw new Error(`the grader is needed for the terminal's escapes: ${noGrader?.message}`);
  return UNSAFE;
};
const hex = (c, n) => c.charCodeAt(0).toString(16).padStart(n, '0');
/** Text fit for a terminal: each of those characters as an escape (`\x1b`, `\u202e`). */
export const terminalSafe = (s) => String(s).replace(unsafe(), (c) => (c.charCodeAt(0) < 0x100 ? `\\x${hex(c, 2)}` : `\\u${hex(c, 4)}`));
/** A value as one line of JSON with each of those characters as a \u escape (the
 *  same JSON to a parser; JSON.stringify escapes only C0): what the CLI prints and
 *  serves, and what LINE_CAP_BYTES is measured on. */
export const jsonText = (value) => JSON.stringify(value).replace(unsafe(), (c) => `\\u${hex(c, 4)}`);

/** The longest a message stays when a line would be over LINE_CAP_BYTES: each is cut
 *  to the first of these that fits (hidden tests' first, then every test's). */
const LINE_CUTS = [2000, 1000, 500, 200];

/** The CLI's JSON line for one report (the engine's JSON, parsed), within LINE_CAP_BYTES.
 *  `staff`: the line is the staff's (./lab grade's own), and a hidden test's message,
 *  which only a staff report from the engine carries, is kept; a learner's line never
 *  has one, whatever the report holds. */
export function jsonLine(report, { file = null, durationMs = null, staff = false } = {}) {
  const line = {
    file,
    lab: report.lab,
    status: report.status,
    passed: report.passed,
    failed: report.failed,
    total: report.total,
    score: report.score,
    max_score: report.max_score,
    seed: report.seed,
    duration_ms: durationMs,
    tests: report.tests.map((t) => {
      const o = { name: t.name, kind: t.kind, status: t.status };
      if ((t.kind === 'example' || staff) && t.message != null) o.message = t.message;
      return o;
    }),
    replay: report.replay,
  };
  if (report.status === 'error' && report.message != null) line.message = report.message;
  // The engine caps every field, so this holds already; kept as the last word,
  // since a file name or a future field could still make a line long.
  // A staff line carries every hidden test's message too: those are cut first.
  const over = () => Buffer.byteLength(jsonText(line)) > LINE_CAP_BYTES;
  const cut = (tests, n) => {
    for (const t of tests) if (t.message && t.message.length > n) t.message = `${t.message.slice(0, n)}\n[cut: the report was over 64 KB]`;
  };
  for (const n of LINE_CUTS) {
    if (!over()) break;
    cut(line.tests.filter((t) => t.kind === 'hidden'), n);
  }
  for (const n of LINE_CUTS) {
    if (!over()) break;
    cut(line.tests, n);
  }
  if (over() && line.message) line.message = line.message.slice(0, 2000);
  return line;
}
