// The staff's formats the CLI makes from the CLI's json lines (formats.mjs lists
// every format): the text format's roll-up table, `--format csv` (a gradebook row
// per file) and `--format junit` (JUnit XML for CodeGrade, GitLab and Jenkins).
//
// A line is what `./lab grade --format json` prints for a file: file, lab, status,
// score, max_score, seed, duration_ms, tests [{name, kind, status, message?}],
// message (on error). The staff's line carries a failed hidden test's message too;
// csv has no messages and junit withholds a hidden test's (a platform may show it to
// learners), whatever the line holds. What reaches a terminal, a spreadsheet
// or an XML parser is escaped for it: control characters as output.mjs terminalSafe
// writes them, formulas defused, XML's five characters and what XML 1.0 cannot hold.
import { terminalSafe } from './output.mjs';

/** What a platform shows of a hidden test that did not pass (src/report.rs, the same words). */
export const HIDDEN_MESSAGE = 'This is a hidden test: its details are not shown.';

/** The names of the tests of `line` that did not pass, in the lab's order. */
export const failedTests = (line) => (line.tests ?? []).filter((t) => t.status !== 'pass').map((t) => t.name);

// ---------------------------------------------------------------------------
// the roll-up table (text format, after every file's report)

const ROLLUP_NAMES = 3;
const MESSAGE_WIDTH = 80;

const cut = (s, n) => (s.length <= n ? s : `${s.slice(0, n - 1)}…`);

/** The table the text format ends with: file, score, status, failed tests (the first
 *  three, then how many more), or for a file that could not be graded, why. */
export function rollupTable(lines) {
  const rows = lines.map((l) => {
    const failed = failedTests(l);
    let what;
    if (l.status === 'error') what = cut(terminalSafe(String(l.message ?? 'could not be graded').split('\n')[0]), MESSAGE_WIDTH);
    else if (!failed.length) what = '';
    else {
      what = failed.slice(0, ROLLUP_NAMES).map(terminalSafe).join('; ');
      if (failed.length > ROLLUP_NAMES) what += `; +${failed.length - ROLLUP_NAMES} more`;
    }
    // The file as it was named on the command line, whole: it is what staff look for.
    return [terminalSafe(l.file ?? ''), `${l.score}/${l.max_score}`, l.status, what];
  });
  const head = ['file', 'score', 'status', 'failed tests'];
  const width = [0, 1, 2].map((i) => Math.max(head[i].length, ...rows.map((r) => r[i].length)));
  const fmt = (r) => r.map((c, i) => (i < 3 ? c.padEnd(width[i]) : c)).join('  ').trimEnd();
  return `${[fmt(head), fmt(width.map((w) => '─'.repeat(w)).concat('─'.repeat(12))), ...rows.map(fmt)].join('\n')}\n`;
}

// ---------------------------------------------------------------------------
// csv (RFC 4180)

export const CSV_COLUMNS = Object.freeze(['file', 'lab', 'score', 'max', 'status', 'failed_tests']);

// Formula neutralising that holds whatever separator the reader splits at. A reader
// that splits at ';' (Excel in many locales) reads this ','-file's quoted field as
// RFC 4180 says, so a ';' inside quotes splits nothing there either; and a field
// that a reader starts at the start of a line is this file's first, the file's
// name, quoted. So every text field is quoted, and one whose text starts as a
// spreadsheet's formula does ('=', '+', '-', '@', a tab or a carriage return, and
// their full-width forms, which some spreadsheets take for the same) starts with a
// ' instead: the cell shows the text, never runs it. The other fields are the
// lab's (its id, a status, its tests' names joined by '; ', each piece after a
// ';' starting with a space), and the numbers are bare.
const FORMULA_START = /^[=+\-@\t\r\uff1d\uff0b\uff0d\uff20]/;

/** A cell: a number bare; text (control characters escaped as terminalSafe writes
 *  them) quoted, with a leading ' where a spreadsheet would take it for a formula. */
export function csvCell(value) {
  if (typeof value === 'number') return String(value);
  let s = terminalSafe(value ?? '');
  if (FORMULA_START.test(s)) s = `'${s}`;
  return `"${s.replaceAll('"', '""')}"`;
}

export const csvHeader = () => `${CSV_COLUMNS.join(',')}\r\n`;

/** A file's gradebook row; the failed tests' names separated by "; ". */
export function csvRow(line) {
  return `${[line.file, line.lab, line.score, line.max_score, line.status, failedTests(line).join('; ')].map(csvCell).join(',')}\r\n`;
}

// ---------------------------------------------------------------------------
// JUnit XML: one testsuite per file, one testcase per test. fail and timeout are
// <failure>, error is <error> (the learner's code raised, or the file could not be
// graded); the example tests' messages are the learner's report's, the hidden ones'
// withheld. Properties: the lab, the seed and the score, never the hidden seed (a
// platform may show this file to learners).

/** Text XML 1.0 can hold: control characters escaped as terminalSafe writes them, and
 *  lone surrogates, U+FFFE and U+FFFF, which no XML document may contain, as \uXXXX. */
function xmlSafe(value) {
  return terminalSafe(String(value ?? ''))
    .replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]|[\ufffe\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}
const xmlText = (v) => xmlSafe(v).replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;');
const xmlAttr = (v) => xmlText(v).replaceAll('"', '&quot;').replaceAll('\n', '&#10;').replaceAll('\t', '&#9;');

const FAILURE = { fail: 'failure', timeout: 'failure', error: 'error' };

/** The whole document for the run's lines, in the order of the files. */
export function junitXml(lines) {
  let tests = 0;
  let failures = 0;
  let errors = 0;
  let ms = 0;
  const suites = lines.map((l) => {
    const cases = (l.tests ?? []).map((t) => {
      const open = `    <testcase name="${xmlAttr(t.name)}" classname="${xmlAttr(l.file ?? l.lab)}">`;
      const element = FAILURE[t.status];
      if (t.status === 'pass' || !element) return `${open.slice(0, -1)}/>`;
      const text = t.kind === 'hidden' ? HIDDEN_MESSAGE : (t.message ?? l.message ?? t.status);
      return `${open}\n      <${element} type="${xmlAttr(t.status)}" message="${xmlAttr(String(text).split('\n')[0].slice(0, 500))}">${xmlText(text)}</${element}>\n    </testcase>`;
    });
    const f = (l.tests ?? []).filter((t) => FAILURE[t.status] === 'failure').length;
    const e = (l.tests ?? []).filter((t) => FAILURE[t.status] === 'error').length;
    const n = (l.tests ?? []).length;
    tests += n;
    failures += f;
    errors += e;
    ms += l.duration_ms ?? 0;
    const props = [['lab', l.lab], ['status', l.status], ['score', l.score], ['max_score', l.max_score], ['seed', l.seed]]
      .map(([k, v]) => `      <property name="${k}" value="${xmlAttr(v)}"/>`).join('\n');
    const err = l.status === 'error' && l.message ? `\n    <system-err>${xmlText(l.message)}</system-err>` : '';
    return `  <testsuite name="${xmlAttr(l.file ?? l.lab)}" tests="${n}" failures="${f}" errors="${e}" skipped="0" time="${((l.duration_ms ?? 0) / 1000).toFixed(3)}">\n`
      + `    <properties>\n${props}\n    </properties>\n${cases.join('\n')}${err}\n  </testsuite>`;
  });
  return '<?xml version="1.0" encoding="UTF-8"?>\n'
    + `<testsuites name="delivery-lab" tests="${tests}" failures="${failures}" errors="${errors}" time="${(ms / 1000).toFixed(3)}">\n`
    + `${suites.join('\n')}${suites.length ? '\n' : ''}</testsuites>\n`;
}
