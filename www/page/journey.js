// The learner's journey on a lab page, from the lab's entry in build.json's `course`
// (its journey.toml): Predict (a question before any code, the answer kept, the
// explanation after the first run or on demand), hints per task (one at a time,
// counted for the staff's report, never a penalty), "jump to the code", and the
// courier's "Your turn" (the fairness run's figure, by the noisy store's pattern).
// Nothing here blocks the editor: every part is beside it, none is modal.
import { h, renderBars } from './results.js';

let ids = 0;
const uid = (p) => `${p}-${++ids}`;

/**
 * A multiple-choice question whose answer is kept (`store` key `key`: {answer}) and
 * whose explanation shows once `reveal()` is called or the learner asks for it.
 * Returns {el, reveal, answer()}.
 */
function choiceQuestion({ q, store, key, legend, revealLabel, className, onReveal }) {
  const saved = store.json(key, {});
  const name = uid('answer');
  const explanationId = uid('explanation');
  const explanation = h('div.explanation', { id: explanationId, hidden: true });
  const reveal = () => {
    if (!explanation.hidden) return;
    const answer = store.json(key, {}).answer;
    const verdict = answer === undefined ? 'You have not answered yet. '
      : answer === q.correct ? 'Your answer was right. ' : `You answered ${answer + 1}; the answer is ${q.correct + 1}. `;
    explanation.replaceChildren(h('p', h('strong', verdict), q.explanation));
    explanation.hidden = false;
    button.hidden = true;
    store.set(key, JSON.stringify({ ...store.json(key, {}), revealed: true }));
    onReveal?.();
  };
  const button = h('button.secondary', { type: 'button', onclick: reveal, 'aria-controls': explanationId }, revealLabel);
  const options = q.answers.map((text, i) => h('label.choice',
    h('input', {
      type: 'radio', name, value: String(i), checked: saved.answer === i,
      onchange: () => store.set(key, JSON.stringify({ ...store.json(key, {}), answer: i })),
    }),
    h('span', text)));
  const el = h(`section.${className}`, { 'aria-labelledby': `${name}-legend` },
    h('fieldset',
      h('legend', { id: `${name}-legend` }, legend, h('span.question', q.question)),
      options),
    h('div.question-actions', button),
    explanation);
  if (saved.revealed) reveal();
  return { el, reveal, answer: () => store.json(key, {}).answer ?? null };
}

/**
 * The instructions' section under the heading `title` (up to the next heading of its
 * level or above), folded into a <details> that `open()` opens: it answers Predict.
 */
function foldSection(container, title) {
  const heading = [...container.querySelectorAll('h1, h2, h3, h4, h5, h6')].find((el) => el.textContent.trim() === title);
  if (!heading) return null;
  const level = Number(heading.tagName[1]);
  const body = [];
  for (let n = heading.nextElementSibling; n && !(/^H[1-6]$/.test(n.tagName) && Number(n.tagName[1]) <= level); n = n.nextElementSibling) body.push(n);
  const fold = h('details.answer-section', h('summary', 'The answer to Step 1 (it opens after your first run)'));
  heading.after(fold);
  fold.append(...body);
  return fold;
}

/** "Step 1 · Predict": at the top of the instructions; returns {reveal, answer()}. */
export function renderPredict(container, journey, store) {
  const fold = journey.predict.section ? foldSection(container, journey.predict.section) : null;
  const q = choiceQuestion({
    q: journey.predict, store, key: 'predict', className: 'predict',
    legend: h('span.step-label', 'Step 1 · Predict'),
    revealLabel: 'Show the explanation',
    onReveal: () => { if (fold) fold.open = true; },
  });
  q.el.prepend(h('p.predict-note', 'Answer before you start; the explanation opens after your first run. The editor is yours meanwhile.'));
  container.prepend(q.el);
  return q;
}

/** A heading's text as lab.md writes it (the tasks are named by their Markdown heading). */
const plain = (s) => s.replace(/`/g, '').trim();

/**
 * "Stuck? Hints" under each task's heading in the instructions: one more per press,
 * counted per task in `store` ('hints': {task index: opened}). `onJump(functions)`
 * moves the editor to the task's function. Returns a function giving the counts.
 */
export function renderHints(instructions, journey, lab, store, onJump) {
  const opened = () => store.json('hints', {});
  const headings = [...instructions.querySelectorAll('h1, h2, h3, h4')];
  lab.tasks.forEach((task, i) => {
    const heading = headings.find((el) => el.textContent.trim() === plain(task));
    if (!heading) return;
    const hints = journey.hints.find((x) => x.task === i)?.hints ?? [];
    const functions = lab.task_functions?.[i] ?? [];
    const list = h('ol.hint-list', { 'aria-label': `Hints for ${plain(task)}` });
    const more = h('button.secondary', { type: 'button' });
    const show = (n) => {
      list.replaceChildren(...hints.slice(0, n).map((t) => h('li', t)));
      list.hidden = n === 0;
      more.hidden = n >= hints.length;
      more.textContent = n === 0 ? `Stuck? Show a hint (${hints.length})` : `Show hint ${n + 1} of ${hints.length}`;
    };
    more.addEventListener('click', () => {
      const counts = opened();
      const n = Math.min(hints.length, (counts[i] ?? 0) + 1);
      store.set('hints', JSON.stringify({ ...counts, [i]: n }));
      show(n);
      list.lastElementChild?.setAttribute('tabindex', '-1');
      list.lastElementChild?.focus(); // the new hint is read next; the button may be gone
    });
    const box = h('div.task-tools', { 'data-task': String(i + 1) },
      functions.length ? h('button.link.jump', { type: 'button', onclick: () => onJump(functions) }, `Jump to ${functions[0]} in the editor`) : null,
      hints.length ? more : null,
      hints.length ? list : null);
    heading.after(box);
    show(Math.min(hints.length, opened()[i] ?? 0));
  });
  return () => {
    const counts = opened();
    const byTask = journey.hints.map((x) => ({ task: lab.tasks[x.task], opened: Math.min(x.hints.length, counts[x.task] ?? 0), of: x.hints.length }));
    return { opened: byTask.reduce((n, t) => n + t.opened, 0), byTask };
  };
}

/** The p95 table: per load, your claim's and FIFO's p95 and ratio. */
function p95Table(groups, caption) {
  const cell = (b) => (b ? `${b.value} (${b.ratio.toFixed(2)}x)` : 'not run');
  return h('div.table-wrap', h('table.p95',
    h('caption', caption),
    h('thead', h('tr', h('th', { scope: 'col' }, 'load'),
      ...groups[0].bars.map((b) => h('th', { scope: 'col' }, b.label)))),
    h('tbody', groups.map((g) => h('tr', h('th', { scope: 'row' }, g.label), ...g.bars.map((b) => h('td', cell(b))))))));
}

/**
 * "Your turn" (a journey with `yourTurn`): pick the noisy store's pattern, run the
 * fairness load (your claim and FIFO, as the lab's test runs them), and read the
 * chart and the p95 table; then a question about it. `run()` resolves to a report.
 */
export function renderYourTurn(container, journey, store, { run }) {
  const y = journey.yourTurn;
  const saved = store.json('your-turn', {});
  let pattern = y.patterns.find((p) => p.id === saved.pattern) ?? y.patterns[0];
  let report = null;
  const name = uid('pattern');
  const out = h('div.your-turn-out');
  const runButton = h('button.primary', { type: 'button' }, 'Run the fairness load');
  const draw = () => {
    const test = report?.tests.find((t) => t.name === y.test);
    const fig = test?.figure;
    if (!fig || fig.kind !== 'bars') {
      out.replaceChildren(h('p.note', report ? 'The fairness run did not run this time (see the results); fix what stops it and run again.'
        : 'Run the fairness load to see how your claim and FIFO treat the other stores.'));
      return;
    }
    const groups = [y.baseline, pattern.group].map((label) => fig.groups.find((g) => g.label === label)).filter(Boolean);
    out.replaceChildren(
      renderBars({ ...fig, groups }),
      p95Table(groups, `The other 99 stores' p95 latency, ${pattern.id}: against the run where every store is equal`));
  };
  const radios = y.patterns.map((p) => h('label.choice',
    h('input', {
      type: 'radio', name, value: p.id, checked: p === pattern,
      onchange: () => {
        pattern = p;
        store.set('your-turn', JSON.stringify({ ...store.json('your-turn', {}), pattern: p.id }));
        draw();
      },
    }),
    h('span', p.label)));
  runButton.addEventListener('click', async () => {
    if (runButton.getAttribute('aria-disabled') === 'true') return;
    runButton.setAttribute('aria-disabled', 'true');
    try {
      report = await run();
    } finally {
      runButton.removeAttribute('aria-disabled');
    }
    draw();
  });
  const q = choiceQuestion({
    q: y, store, key: 'your-turn-answer', className: 'your-turn-question',
    legend: h('span.step-label', 'Your question'),
    revealLabel: 'Show the explanation',
  });
  const headingId = uid('your-turn');
  container.replaceChildren(
    h('h2', { id: headingId }, 'Your turn: watch FIFO fail the quiet stores'),
    h('p', 'The fairness run sends one noisy store\'s extra traffic among 100 stores, and measures how long every other store waits (p95, from arrival to the message going out). It runs your claim and a plain FIFO claim on the same arrivals.'),
    h('fieldset.patterns', h('legend', 'The noisy store\'s pattern'), radios),
    h('div.question-actions', runButton),
    out,
    q.el);
  container.setAttribute('aria-labelledby', headingId);
  container.hidden = false;
  return {
    /** Any run's report: its figure is drawn, unless it is a partial run without the fairness test. */
    update(r) {
      if (r.partial && !r.tests.some((t) => t.name === y.test)) return;
      report = r;
      draw();
    },
    answer: q.answer,
  };
}
