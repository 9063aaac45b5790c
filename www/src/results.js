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

function renderExample(t, { onGoToLine }) {
  const parts = t.status === 'fail' ? failureParts(t) : null;
  const body = [];
  if (parts) {
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

/**
 * @param {HTMLElement} root
 * @param {object} report the engine's report
 * @param {{stopped?:string|null, ms?:number|null, limitS:number, onGoToLine?:Function,
 *   hiddenOnServer?:boolean, via?:'browser'|'server'}} info
 */
export function renderReport(root, report, info) {
  const examples = report.tests.filter((t) => t.kind === 'example');
  const hidden = report.tests.filter((t) => t.kind === 'hidden');
  const timedOut = report.tests.some((t) => t.status === 'timeout');
  // hiddenOnServer: a page built without hidden tests graded only the examples.
  const onServer = !!info.hiddenOnServer && !hidden.length && report.status !== 'error';
  const allPass = report.status === 'pass';
  const headline = allPass && onServer ? `All ${report.total} examples pass`
    : allPass ? `All ${report.total} tests pass`
    : report.status === 'error' ? 'Your code could not be graded'
      : timedOut ? `Stopped at the ${info.limitS} s limit`
        : `${report.passed} of ${report.total} tests pass`;
  const summary = h(`div.summary.${report.status}`, { role: 'status' },
    h('div.headline', headline),
    h('div.tallies',
      h('span.tally', `examples ${report.examples.passed}/${report.examples.total}`),
      onServer ? h('span.tally', 'hidden: graded on the server')
        : h('span.tally', `hidden ${report.hidden.passed}/${report.hidden.total}`),
      allPass && !onServer ? h('span.xp', `+${report.xp} XP`) : null,
      info.via === 'server' ? h('span.tally.server', 'graded by the server') : null,
      info.ms != null ? h('span.timing', `graded in ${(info.ms / 1000).toFixed(2)} s`) : null));

  const notes = [];
  if (report.status === 'error' && report.message) notes.push(messageBlock(report.message, info.onGoToLine));
  if (timedOut && report.status !== 'error') {
    notes.push(h('p.note.timeout', info.stopped === 'terminated'
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
      h('ul.hidden-tests', hidden.map((t) => h(`li.${t.status}`, { 'data-test': t.name, 'data-status': t.status },
        h('span.icon', { 'aria-hidden': 'true' }, ICON[t.status] || '?'),
        h('span.name', t.name),
        h('span.sr', ` (${STATUS_WORD[t.status] || t.status})`))))),
    h('p.replay', `Seed ${report.seed}.`));
}
