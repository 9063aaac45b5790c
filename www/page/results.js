// Draws a report (the engine's JSON) as the results view: a summary, each example
// test with its message and timeline, and the hidden tests by name and status.

const ICON = { pass: '✓', fail: '✗', error: '!', timeout: '⏱' };
const STATUS_WORD = { pass: 'passed', fail: 'failed', error: 'error', timeout: 'stopped' };
const TRACE_MARK = '\n\nWhat happened (lab clock):';

/** A tiny element builder: h('div.a.b', {attr}, ...children). */
export function h(tag, attrs, ...children) {
  const [name, ...classes] = tag.split('.');
  const el = document.createElement(name || 'div');
  if (classes.length) el.className = classes.join(' ');
  if (attrs && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
  } else if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'text') el.textContent = v;
      else el.setAttribute(k, v === true ? '' : v);
    }
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/** 0, 0.5, 3600: the lab clock as a person reads it. */
function clock(t) {
  return `t=${Number.isInteger(t) ? t : Number(t.toFixed(3))} s`;
}

function splitArrow(text) {
  const i = text.lastIndexOf(' -> ');
  return i < 0 ? [text, null] : [text.slice(0, i), text.slice(i + 4)];
}

/**
 * The report's trace: each call of a learner function with what it did. The clock
 * stands still during a call, so events show the step's time only. `failedStep`
 * (an index) marks the call where the test stopped.
 */
export function renderTimeline(trace, failedStep = -1) {
  return h('ol.timeline', trace.map((step, i) => h(`li.step${i === failedStep ? '.failed' : ''}`,
    h('div.step-head', h('span.clock', clock(step.t_s)), h('code.call', step.call)),
    step.events.length
      ? h('ol.events', step.events.map((e) => {
        const [call, result] = splitArrow(e.text);
        return h(`li.event.kind-${e.kind}`,
          h('span.kind', e.kind),
          h('code', call, result !== null ? h('span.result', ` → ${result}`) : null));
      }))
      : h('div.no-events', 'no kv call, send or draw'),
    step.returned === null || step.returned === undefined
      ? h('div.outcome.raised', 'raised an exception')
      : h('div.outcome', 'returned ', h('code', step.returned)))));
}

/** The failure text without the trace (drawn as a timeline instead). */
function failureParts(t) {
  const message = t.message || '';
  const head = message.split(TRACE_MARK)[0];
  const m = /^Rule broken \(([^)]+)\): (.*)\n(.*)/.exec(head);
  if (!m) return null;
  // "Step 2 of 3, at t=30.0 s on the lab clock: next_step(...)": the call itself
  // is in the timeline, so only the where and when are kept.
  const colon = m[3].indexOf(': ');
  // What follows the where: the courier lab lists what went wrong there; lab 1's
  // expected and actual are drawn as the diff table instead.
  const rest = head.split('\n').slice(2);
  const details = /^\s+expected:/.test(rest[0] ?? '') ? '' : rest.join('\n').trim();
  return { rule: m[1], ruleText: m[2], where: (colon > 0 ? m[3].slice(0, colon) : m[3]).replace(/:$/, ''), details };
}

const SVG = 'http://www.w3.org/2000/svg';
/** An SVG element: svg('rect', {x: 0, ...}, ...children). */
function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}
const times = (r) => `${r.toFixed(2)}x`;
let figureIds = 0;

/** A system run's rows: each value against what it must be. */
function renderRows(rows) {
  return h('table.figure-rows',
    h('thead', h('tr', h('th', { scope: 'col' }, 'row'), h('th', { scope: 'col' }, 'value'),
      h('th', { scope: 'col' }, 'must be'), h('th', { scope: 'col' }, 'result'))),
    h('tbody', rows.map((r) => h(`tr.${r.ok ? 'ok' : 'bad'}`,
      h('th', { scope: 'row' }, r.label), h('td', r.value), h('td', r.must),
      h('td', h('span.mark', { 'aria-hidden': 'true' }, r.ok ? '✓ ' : '✗ '), r.ok ? 'ok' : 'not ok')))));
}

/**
 * Ratios to a baseline of 1 as horizontal bars, grouped, with the limit as a dashed
 * line; the numbers are in the picture's description for screen readers.
 */
export function renderBars(fig) {
  const id = `figure-${++figureIds}`;
  const W = 600, LABEL_W = 190, BAR_H = 16, GAP = 6, GROUP_GAP = 14, TOP = 26, RIGHT_TEXT = 120;
  const all = fig.groups.flatMap((g) => g.bars.map((b) => b.ratio));
  const max = Math.max(fig.limit * 1.5, ...all.map((r) => r * 1.05), 2);
  const plotW = W - LABEL_W - RIGHT_TEXT;
  const x = (r) => LABEL_W + (Math.max(0, r) / max) * plotW;
  const parts = [];
  let y = TOP;
  for (const g of fig.groups) {
    parts.push(svg('text', { x: 0, y: y + 11, class: 'group' }, g.label));
    y += 18;
    for (const b of g.bars) {
      const over = b.ratio > fig.limit;
      parts.push(svg('text', { x: 12, y: y + 12, class: 'bar-label' }, b.label));
      parts.push(svg('rect', { x: LABEL_W, y, width: Math.max(1, x(b.ratio) - LABEL_W), height: BAR_H, rx: 2,
        class: `bar ${b.label === 'FIFO' ? 'other' : 'yours'} ${over ? 'over' : 'within'}` }));
      parts.push(svg('text', { x: x(b.ratio) + 6, y: y + 12, class: 'bar-value' }, `${times(b.ratio)} · ${b.value}`));
      y += BAR_H + GAP;
    }
    y += GROUP_GAP;
  }
  // The lines go under the bars and their values.
  const lx = x(fig.limit);
  const x1 = x(1);
  parts.unshift(
    svg('line', { x1, x2: x1, y1: TOP - 8, y2: y - GROUP_GAP, class: 'baseline' }),
    svg('line', { x1: lx, x2: lx, y1: TOP - 8, y2: y - GROUP_GAP, class: 'limit' }),
    svg('text', { x: lx, y: TOP - 12, 'text-anchor': 'middle', class: 'limit-label' }, `limit ${times(fig.limit)}`));
  const desc = fig.groups.map((g) => `${g.label}: ${g.bars.map((b) => `${b.label} ${times(b.ratio)} (${b.value})`).join(', ')}`).join('; ');
  return h('figure.bars',
    svg('svg', { viewBox: `0 0 ${W} ${y}`, role: 'img', 'aria-labelledby': `${id}-t ${id}-d`, width: '100%' },
      svg('title', { id: `${id}-t` }, fig.caption),
      svg('desc', { id: `${id}-d` }, `${desc}. Passes at or under ${times(fig.limit)}.`),
      ...parts),
    h('figcaption', `${fig.caption}: bars at or under the dashed line (${times(fig.limit)}) pass; 1.00x is the all-equal run.`));
}

function renderFigure(fig) {
  if (fig.kind === 'table') return renderRows(fig.rows);
  if (fig.kind === 'bars') return renderBars(fig);
  return null;
}

/** "Jump to the code": a button to the learner's function this test exercises, when the page knows it. */
function jumpButton(t, onJumpToCode, label) {
  if (!onJumpToCode) return null;
  const go = onJumpToCode(t.name);
  return go ? h('button.link.jump', { type: 'button', onclick: go.jump, 'aria-label': `${label}: jump to ${go.fn} in the editor` }, `Jump to ${go.fn}`) : null;
}

/** "Run this test": the test alone, on the code as it is now (engine.run's `only`). */
function runOneButton(t, onRunOne) {
  if (!onRunOne) return null;
  return h('button.link.run-one', { type: 'button', onclick: () => onRunOne(t.name), 'aria-label': `Run this test: “${t.name}”` }, 'Run this test');
}

/**
 * The hidden tests' buttons are one tab stop (a roving tabindex): Tab reaches the list
 * once, the arrow keys move between its buttons (up and down by row, left and right
 * within one), Home and End to the first and last. Without it a long failing list
 * would put two tab stops per test between the learner and the rest of the page.
 */
function rovingButtons(list) {
  const rows = () => [...list.querySelectorAll('li')].map((li) => [...li.querySelectorAll('button')]).filter((b) => b.length);
  const all = () => rows().flat();
  const first = all()[0];
  for (const b of all()) b.tabIndex = b === first ? 0 : -1;
  list.addEventListener('keydown', (e) => {
    const grid = rows();
    const r = grid.findIndex((row) => row.includes(document.activeElement));
    if (r < 0) return;
    const c = grid[r].indexOf(document.activeElement);
    const at = (rr, cc) => grid[rr][Math.min(cc, grid[rr].length - 1)];
    const to = { ArrowDown: () => at(Math.min(r + 1, grid.length - 1), c), ArrowUp: () => at(Math.max(r - 1, 0), c),
      ArrowRight: () => grid[r][Math.min(c + 1, grid[r].length - 1)], ArrowLeft: () => grid[r][Math.max(c - 1, 0)],
      Home: () => grid[0][0], End: () => grid.at(-1)[0] }[e.key];
    if (!to) return;
    e.preventDefault();
    const next = to();
    for (const b of grid.flat()) b.tabIndex = b === next ? 0 : -1;
    next.focus();
  });
  return list;
}

function renderExample(t, { onGoToLine, onJumpToCode, onRunOne }) {
  const parts = t.status === 'fail' ? failureParts(t) : null;
  const body = [];
  const figure = t.figure ? renderFigure(t.figure) : null;
  if (figure) {
    // The picture says what the text says; the text stays, one click away (a failed
    // chaos run's text also tells the stories of the actions that broke a row).
    body.push(figure);
    if (t.message) {
      body.push(h('details.as-text', { open: t.status !== 'pass' && t.figure.kind === 'table' },
        h('summary', 'The run as text'), messageBlock(t.message, onGoToLine)));
    }
  } else if (parts) {
    body.push(h('p.rule', h('span.rule-id', parts.rule), ' ', parts.ruleText));
    body.push(h('p.where', `Where it broke: ${parts.where}.`));
    if (parts.details) body.push(messageBlock(parts.details, onGoToLine));
  } else if (t.message) {
    // "Step 1 of 2, at t=0.0 s on the lab clock: deliver_once(...)\n<what went wrong>"
    const m = /^(Step \d+ of \d+, at t=[^:\n]+): [^\n]*\n([\s\S]*)$/.exec(t.message);
    if (m) body.push(h('p.where', `Where it broke: ${m[1]}.`));
    body.push(messageBlock(m ? m[2] : t.message, onGoToLine));
  }
  if (t.expected !== undefined || t.actual !== undefined) {
    body.push(h('table.diff',
      h('tr.expected', h('th', 'expected'), h('td', h('code', t.expected ?? ''))),
      h('tr.actual', h('th', 'actual'), h('td', h('code', t.actual ?? '')))));
  }
  if (t.trace && t.trace.length) {
    body.push(h('details.trace', { open: t.status !== 'pass' },
      h('summary', `Timeline (${t.trace.length} call${t.trace.length === 1 ? '' : 's'})`),
      renderTimeline(t.trace, t.status === 'pass' ? -1 : t.trace.length - 1)));
  }
  if (t.output) {
    body.push(h('details.output', { open: t.status !== 'pass' }, h('summary', 'Printed'), h('pre', t.output)));
  }
  return h(`article.test.example.${t.status}`, { 'data-test': t.name, 'data-status': t.status },
    h('header',
      h('span.icon', { 'aria-hidden': 'true' }, ICON[t.status] || '?'),
      h('span.name', t.name),
      jumpButton(t, onJumpToCode, t.name),
      runOneButton(t, onRunOne),
      h('span.badge', STATUS_WORD[t.status] || t.status)),
    body.length ? h('div.body', body) : null);
}

/** A message, with a button to jump to the line a traceback points at. */
function messageBlock(message, onGoToLine) {
  const lines = [...message.matchAll(/File "solution\.py", line (\d+)/g)].map((m) => Number(m[1]));
  const line = lines.length ? lines[lines.length - 1] : null;
  return h('div.message',
    h('pre', message),
    line && onGoToLine ? h('button.link', { type: 'button', onclick: () => onGoToLine(line) }, `Go to line ${line}`) : null);
}

/** What the summary says: its headline, and whether the hidden tests are on the server. */
function summaryOf(report, info) {
  const timedOut = report.tests.some((t) => t.status === 'timeout');
  // hiddenOnServer: a page built without hidden tests graded only the examples.
  const onServer = !!info.hiddenOnServer && !report.tests.some((t) => t.kind === 'hidden') && report.status !== 'error';
  const allPass = report.status === 'pass' && !report.partial;
  // A run of one test (or a few) from their rows: what it says is theirs alone.
  if (report.partial && report.status !== 'error') {
    const one = report.tests.length === 1 ? report.tests[0] : null;
    const headline = one ? `“${one.name}” ${one.status === 'pass' ? 'passes' : STATUS_WORD[one.status] ?? one.status}`
      : `${report.passed} of ${report.total} chosen tests pass`;
    return { headline, onServer, timedOut, allPass };
  }
  const headline = allPass && onServer ? `All ${report.total} examples pass`
    : allPass ? `All ${report.total} tests pass`
    : report.status === 'error' ? 'Your code could not be graded'
      : timedOut && info.stop?.why === 'slow' ? `Stopped after ${Math.round(info.stop.afterMs / 1000)} s: still progressing, too slow to finish`
      : timedOut ? `Stopped at the ${info.limitS} s limit`
        : `${report.passed} of ${report.total} tests pass`;
  return { headline, onServer, timedOut, allPass };
}

/**
 * The report in one sentence, for the page's live region (a screen reader hears
 * this once per run; the results view itself is not a live region).
 */
export function summarySentence(report, info) {
  const { headline, onServer } = summaryOf(report, info);
  if (report.status === 'error') return headline;
  if (report.partial) return `${headline} (only ${report.total === 1 ? 'this test' : 'these tests'} ran)`;
  const { examples: e, hidden } = report;
  return `${headline}: examples ${e.passed} of ${e.total}, ${onServer ? 'hidden tests on the server' : `hidden ${hidden.passed} of ${hidden.total}`}`;
}

/**
 * @param {HTMLElement} root
 * @param {object} report the engine's report
 * @param {{stopped?:string|null, stop?:object|null, ms?:number|null, limitS:number, onGoToLine?:Function,
 *   onJumpToCode?:(name:string)=>({fn:string, jump:Function}|null), onRunOne?:(name:string)=>void,
 *   hiddenOnServer?:boolean, via?:'browser'|'server'}} info  onJumpToCode: the learner's function a test
 *   exercises (its task's), as a button on its row; onRunOne: "Run this test" on each row  stop: why the runner stopped the
 *   run ({why: 'stuck'|'slow', afterMs, calls, ...}, runner.js), when it did
 */
export function renderReport(root, report, info) {
  const examples = report.tests.filter((t) => t.kind === 'example');
  const hidden = report.tests.filter((t) => t.kind === 'hidden');
  const { headline, onServer, timedOut, allPass } = summaryOf(report, info);
  const summary = h(`div.summary.${report.status}`,
    h('div.headline', headline),
    h('div.tallies',
      h('span.tally', `examples ${report.examples.passed}/${report.examples.total}`),
      onServer ? h('span.tally', 'hidden: graded on the server')
        : h('span.tally', `hidden ${report.hidden.passed}/${report.hidden.total}`),
      allPass && !onServer ? h('span.xp', `+${report.xp} XP`) : null,
      info.via === 'server' ? h('span.tally.server', 'graded by the server') : null,
      info.ms != null ? h('span.timing', `graded in ${(info.ms / 1000).toFixed(2)} s`) : null));

  const notes = [];
  if (report.partial) notes.push(h('p.note.partial', `Only ${report.total === 1 ? 'this test' : 'these tests'} ran, on your code as it is now; Run runs them all (and a full pass earns the XP).`));
  if (report.status === 'error' && report.message) notes.push(messageBlock(report.message, info.onGoToLine));
  if (timedOut && report.status !== 'error') {
    const stop = info.stop;
    const restarted = info.stopped === 'terminated' ? ' It was stopped and Python restarted; your code is untouched.' : '';
    notes.push(h('p.note.timeout', stop?.why === 'slow'
      // Progress went on to the end (runner.js): a slow machine or slow code, not a loop.
      ? `Your code was still making progress when the run reached ${Math.round(stop.afterMs / 1000)} s, the most a run may take `
        + `(${stop.calls.toLocaleString('en')} calls of your functions had returned).${restarted} This is not an endless loop: `
        + 'the machine is too busy, or your code too slow, to finish in time. Close what else is running and run it again, '
        + 'or make the slow piece faster. The tests before it ran normally; the rest did not run.'
      : stop
        ? `No call of your code returned for ${Math.floor(stop.quietMs / 1000)} s, so it was stopped at ${Math.round(stop.afterMs / 1000)} s.${restarted} Look for a loop that never ends`
          + `${info.stopped === 'terminated' ? ' (or one that catches KeyboardInterrupt)' : ''}. The tests before it ran normally; the rest did not run.`
        : info.stopped === 'terminated'
          ? `Your code was still running ${info.limitS} s after the run started, so it was stopped and Python restarted. Your code is untouched; look for a loop that never ends (or one that catches KeyboardInterrupt).`
          : `Your code was interrupted at the ${info.limitS} s limit. The tests before it ran normally; the rest did not run.`));
  }

  root.replaceChildren(
    summary,
    ...notes,
    h('section.examples',
      h('h3', 'Example tests ', h('small', 'full details')),
      examples.map((t) => renderExample(t, info))),
    h('section.hidden',
      h('h3', 'Hidden tests ', h('small', 'names only')),
      onServer ? h('p.hint.on-server', 'The hidden tests stay on the course’s server: press “Submit for grading” to run them.') : null,
      report.hidden.passed < report.hidden.total && report.status !== 'error'
        ? h('p.hint', 'Each name says what it checks; the rules behind them are under “What the tests check” in the lab.')
        : null,
      info.onRunOne && hidden.length ? h('p.hint', { id: 'hidden-keys' }, 'The arrow keys move between the buttons of this list.') : null,
      rovingButtons(h('ul.hidden-tests', info.onRunOne && hidden.length ? { 'aria-describedby': 'hidden-keys' } : null,
        hidden.map((t) => h(`li.${t.status}`, { 'data-test': t.name, 'data-status': t.status },
          h('span.icon', { 'aria-hidden': 'true' }, ICON[t.status] || '?'),
          h('span.name', t.name),
          h('span.sr', ` (${STATUS_WORD[t.status] || t.status})`),
          h('span.row-actions', jumpButton(t, info.onJumpToCode, t.name), runOneButton(t, info.onRunOne))))))),
    h('p.replay', `Seed ${report.seed}.`));
}
