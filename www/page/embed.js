// <delivery-lab>: the lab inside a host page (a course's own page, on its own origin).
//
//   <script type="module" src="https://LAB-ORIGIN/embed.js"></script>
//   <delivery-lab lab="deliver-once"></delivery-lab>
//
// The element creates and manages an iframe of the lab's page (index.html?embed) on
// the origin embed.js came from, tells the lab to trust this page's origin, sizes
// the frame to the lab's content (`resize`), and turns the lab's messages into DOM
// events: `ready`, `run-started`, `result`, `resize`, `error` (event.detail is the
// message). Methods: setCode(code), run() → Promise<result>, submit() →
// Promise<result> (a page whose hidden tests stay on the server), reset().
// Attributes: lab, host-origin (default: this page's origin), instructions="hide",
// theme="light|dark" (default: the learner's, as on the lab's own page).
// The lab answers only if this page's origin is one the lab was built to allow
// (build.mjs --allow-origin); host-origin can narrow that list, never widen it.
// The protocol itself (version 1) is in www/page/EMBED.md.

const LAB_BASE = new URL('./', import.meta.url);
const LAB_ORIGIN = LAB_BASE.origin;
const VERSION = 1;
// A lab that has said nothing this long after its frame loaded is not talking to us.
const SILENT_MS = 10_000;

class DeliveryLabElement extends HTMLElement {
  static observedAttributes = ['lab', 'host-origin', 'instructions', 'theme'];

  #iframe = null;
  #ready = null;
  #resolveReady = null;
  #nextId = 1;
  #pending = new Map(); // request id -> {resolve, reject}
  #heard = false; // a message came from the current frame
  /** The last `result` message. */
  lastResult = null;

  constructor() {
    super();
    const root = this.attachShadow({ mode: 'open' });
    const style = document.createElement('style');
    style.textContent = ':host { display: block; } iframe { display: block; width: 100%; border: 0; height: 640px; transition: height 0.15s; }';
    root.append(style);
    this.#newReady();
  }

  connectedCallback() {
    window.addEventListener('message', this.#onMessage);
    if (!this.#iframe) this.#create();
  }

  disconnectedCallback() {
    window.removeEventListener('message', this.#onMessage);
  }

  attributeChangedCallback(name, before, after) {
    if (this.#iframe && before !== after) this.#create();
  }

  /** The iframe this element manages. */
  get iframe() { return this.#iframe; }

  /** Resolves to the lab's `ready` message. */
  get ready() { return this.#ready; }

  setCode(code) { return this.#send({ type: 'set-code', code }); }

  reset() { return this.#send({ type: 'reset' }); }

  /** Runs the tests in the learner's browser; resolves to the `result` message. */
  run() { return this.#request('run'); }

  /** Grades on the lab's server, hidden tests included; resolves to the `result` message. */
  submit() { return this.#request('submit'); }

  #newReady() {
    this.#ready = new Promise((resolve) => { this.#resolveReady = resolve; });
  }

  #create() {
    const url = new URL('index.html', LAB_BASE);
    url.search = 'embed';
    url.searchParams.set('lab', this.getAttribute('lab') || __DEFAULT_LAB__);
    url.searchParams.set('host-origin', this.getAttribute('host-origin') || location.origin);
    if (this.getAttribute('instructions') === 'hide') url.searchParams.set('instructions', 'hide');
    const theme = this.getAttribute('theme');
    if (theme === 'light' || theme === 'dark') url.searchParams.set('theme', theme);
    const iframe = document.createElement('iframe');
    iframe.title = this.getAttribute('title') || 'Code lab';
    // Lets the lab be cross-origin isolated when this page is (the faster 8 s interrupt).
    iframe.allow = 'cross-origin-isolated';
    iframe.src = url.href;
    // The lab cannot tell a page it does not trust why it stays silent (it posts to
    // trusted origins only), so say here what the likely cause is.
    iframe.addEventListener('load', () => setTimeout(() => {
      if (this.#iframe === iframe && !this.#heard) {
        console.warn(`<delivery-lab>: no message from ${LAB_ORIGIN} after ${SILENT_MS / 1000} s. The lab talks only to the origins `
          + `it was built to allow (build.mjs --allow-origin); is ${location.origin} one of them?`);
      }
    }, SILENT_MS), { once: true });
    this.#heard = false;
    if (this.#iframe) {
      this.#iframe.replaceWith(iframe);
      this.#newReady();
      for (const { reject } of this.#pending.values()) reject(new Error('the lab was reloaded'));
      this.#pending.clear();
    } else {
      this.shadowRoot.append(iframe);
    }
    this.#iframe = iframe;
  }

  async #send(message) {
    await this.#ready;
    this.#iframe.contentWindow.postMessage({ source: 'delivery-lab-host', version: VERSION, ...message }, LAB_ORIGIN);
  }

  #request(type) {
    const id = `${type}-${this.#nextId++}`;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#send({ type, id }).catch(reject);
    });
  }

  #onMessage = (e) => {
    // Only this element's frame, from the lab's origin, speaking the protocol.
    if (!this.#iframe || e.source !== this.#iframe.contentWindow || e.origin !== LAB_ORIGIN) return;
    const m = e.data;
    if (!m || typeof m !== 'object' || m.source !== 'delivery-lab' || m.version !== VERSION) return;
    this.#heard = true;
    if (m.type === 'resize' && Number.isFinite(m.height) && m.height > 0) this.#iframe.style.height = `${Math.ceil(m.height)}px`;
    if (m.type === 'ready') this.#resolveReady(m);
    if (m.type === 'result') this.lastResult = m;
    const waiting = m.requestId !== undefined && this.#pending.get(m.requestId);
    if (waiting && (m.type === 'result' || m.type === 'error')) {
      this.#pending.delete(m.requestId);
      if (m.type === 'result') waiting.resolve(m);
      else waiting.reject(new Error(m.message));
    }
    this.dispatchEvent(new CustomEvent(m.type, { detail: m, bubbles: true, composed: true }));
  };
}

if (!customElements.get('delivery-lab')) customElements.define('delivery-lab', DeliveryLabElement);

export { DeliveryLabElement };
