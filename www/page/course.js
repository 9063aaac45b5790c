// The course map (course.html): the labs in course order (the engine's list, through
// build.json's `course`, which build.mjs writes from each lab's grader and its
// journey.toml), each with its level, minutes, XP, what it practises and whether it
// is done on this device, and a link to the next. Everything it reads is cached by
// the service worker, so it works offline after one visit.
import { h } from './results.js';
import { themeSwitch } from './theme.js';
import { progressOf } from './progress.js';
import { registerServiceWorker } from './offline.js';

const $ = (id) => document.getElementById(id);
const labUrl = (id) => `index.html?lab=${encodeURIComponent(id)}`;

function status(p) {
  if (p.done) return h('span.state.done', '✓ Done');
  if (p.best) return h('span.state.started', `Started: best run ${p.best.passed} of ${p.best.total} tests`);
  if (p.started) return h('span.state.started', 'Started');
  return h('span.state', 'Not started');
}

function draw(course) {
  let earned = 0;
  const total = course.reduce((n, l) => n + l.xp, 0);
  const items = course.map((lab, i) => {
    const p = progressOf(lab.id);
    earned += p.xp;
    const next = course[i + 1];
    return h(`li.card.course-lab${p.done ? '.done' : ''}`, { 'data-lab': lab.id },
      h('div.course-head',
        h('span.part', `Lab ${i + 1} of ${course.length}`),
        status(p)),
      h('h2', h('a', { href: labUrl(lab.id) }, lab.title)),
      h('ul.facts', { 'aria-label': 'About this lab' },
        h('li.chip', `level: ${lab.level}`), h('li.chip', `about ${lab.minutes} min`), h('li.chip', `${lab.xp} XP`)),
      h('p.practises-head', 'Practises'),
      h('ul.practises', lab.practises.map((x) => h('li', x))),
      h('p.next', next ? ['Next: ', h('a', { href: labUrl(next.id) }, next.title)] : 'The last lab of the course.'));
  });
  $('course-map').replaceChildren(...items);
  $('course-xp').textContent = `${earned} of ${total} XP`;
  $('course-xp').classList.toggle('earned', earned > 0);
  const done = course.filter((l) => progressOf(l.id).done).length;
  $('course-intro').textContent = `${course.length} labs, in order. You have finished ${done} of them on this device`
    + `${done === course.length ? ': the whole course' : ''}. Your code, answers and XP stay in this browser and work offline.`;
}

async function boot() {
  themeSwitch($('theme'));
  const build = await (await fetch('build.json')).json();
  draw(build.course);
  // Another tab that finishes a lab updates this one.
  addEventListener('storage', () => draw(build.course));
  registerServiceWorker();
}

window.deliveryCourse = { loaded: boot().catch((e) => {
  $('course-intro').textContent = `The course could not load: ${e.message || e}`;
  throw e;
}) };
