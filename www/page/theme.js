// The page's two themes, for the lab pages and the course map alike: <html
// data-theme="light|dark">, whose colours style.css sets. Without a choice the page
// follows the system's (prefers-color-scheme, and its changes); the switch keeps the
// learner's choice on this device (localStorage `delivery-lab:theme`), which works
// offline like everything the page keeps. Embedded (?embed), where the page has no
// switch, the host page may set it to match its own (`&theme=dark`, EMBED.md).
const KEY = 'delivery-lab:theme';
const dark = () => matchMedia('(prefers-color-scheme: dark)').matches;
const isTheme = (v) => v === 'dark' || v === 'light';

/** The host page's theme for an embedded lab (?embed&theme=), else null. */
function hostTheme() {
  const q = new URLSearchParams(location.search);
  const v = q.get('theme');
  return q.has('embed') && isTheme(v) ? v : null;
}

function chosen() {
  try {
    const v = localStorage.getItem(KEY);
    return isTheme(v) ? v : null;
  } catch { return null; }
}

/** The theme in use: the host page's when embedded with one, else the learner's choice, else the system's. */
export const currentTheme = () => hostTheme() ?? chosen() ?? (dark() ? 'dark' : 'light');

/** Sets <html data-theme>: currentTheme()'s, the system's followed as it changes. */
export function applyTheme() {
  const set = () => { document.documentElement.dataset.theme = currentTheme(); };
  set();
  matchMedia('(prefers-color-scheme: dark)').addEventListener('change', set);
}

/**
 * The switch: a button that says what it does ("Dark theme", pressed while dark is
 * on), so a screen reader hears its state; pressing it stores the other theme.
 */
export function themeSwitch(button) {
  const show = () => {
    const on = currentTheme() === 'dark';
    button.setAttribute('aria-pressed', String(on));
    button.textContent = 'Dark theme';
    button.title = on ? 'Use the light theme' : 'Use the dark theme';
  };
  button.addEventListener('click', () => {
    const next = currentTheme() === 'dark' ? 'light' : 'dark';
    try { localStorage.setItem(KEY, next); } catch { /* kept for this visit only */ }
    document.documentElement.dataset.theme = next;
    show();
  });
  matchMedia('(prefers-color-scheme: dark)').addEventListener('change', show);
  show();
}

/** Scrolling that respects prefers-reduced-motion: 'smooth' only when motion is welcome. */
export const scrollBehavior = () => (matchMedia('(prefers-reduced-motion: reduce)').matches ? 'auto' : 'smooth');
