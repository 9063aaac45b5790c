// The example course page's script: embeds the lab both ways and shows the score
// that comes back. ?lab=URL says where the lab is served (default http://127.0.0.1:8000/);
// that lab must be built with --allow-origin for this page's origin, or it stays silent.
const LAB = new URL(new URLSearchParams(location.search).get('lab') || 'http://127.0.0.1:8000/');
const LAB_ORIGIN = LAB.origin;
const $ = (id) => document.getElementById(id);

// Every message from either lab ({from: 'component' or 'iframe', ...message}), for the curious (and the tests).
const course = { messages: [], component: null, frame: $('lab-frame') };
window.course = course;

function showScore(el, r) {
  // The learner ran some tests alone ("Run this test"): no score, the last one stands.
  if (r.partial) {
    el.dataset.partial = 'true';
    return;
  }
  delete el.dataset.partial;
  el.dataset.allPassed = String(r.allPassed);
  el.dataset.score = String(r.score);
  el.textContent = `Score ${r.score}/${r.maxScore}: ${r.passed} of ${r.total} tests pass`
    + `${r.allPassed ? ` · all passed, +${r.xp} XP` : ''} (graded ${r.via === 'server' ? 'by the server' : 'in the browser'}).`;
}

// 1. The web component: load embed.js from the lab's origin, then add the element.
await import(new URL('embed.js', LAB).href);
const el = document.createElement('delivery-lab');
el.setAttribute('lab', 'deliver-once');
for (const type of ['ready', 'run-started', 'result', 'resize', 'error']) {
  el.addEventListener(type, (e) => course.messages.push({ from: 'component', ...e.detail }));
}
el.addEventListener('run-started', () => { $('component-score').textContent = 'Running…'; });
el.addEventListener('result', (e) => showScore($('component-score'), e.detail));
$('component-slot').append(el);
course.component = el;
$('component-run').addEventListener('click', () => el.run());
$('component-reset').addEventListener('click', () => el.reset());

// 2. The iframe, driven by postMessage directly.
const frame = course.frame;
const src = new URL('index.html', LAB);
src.search = `embed&lab=deliver-once&host-origin=${encodeURIComponent(location.origin)}`;
let frameReady;
course.frameReady = new Promise((resolve) => { frameReady = resolve; });
window.addEventListener('message', (e) => {
  // Only the lab's frame, from the lab's origin.
  if (e.source !== frame.contentWindow || e.origin !== LAB_ORIGIN) return;
  const m = e.data;
  if (m?.source !== 'delivery-lab' || m.version !== 1) return;
  course.messages.push({ from: 'iframe', ...m });
  if (m.type === 'ready') frameReady(m);
  if (m.type === 'resize') frame.style.height = `${m.height}px`;
  if (m.type === 'run-started') $('iframe-score').textContent = 'Running…';
  if (m.type === 'result') showScore($('iframe-score'), m);
});
frame.src = src.href;
course.send = (message) => frame.contentWindow.postMessage({ source: 'delivery-lab-host', version: 1, ...message }, LAB_ORIGIN);
$('iframe-run').addEventListener('click', () => course.send({ type: 'run' }));
$('iframe-reset').addEventListener('click', () => course.send({ type: 'reset' }));
