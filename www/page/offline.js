// Offline support, page side: registers the service worker (sw.js), reports what
// is stored, and tops the caches up once Python has loaded, in case the service
// worker was not yet in control when the first run fetched Pyodide.

export async function registerServiceWorker() {
  if (!('serviceWorker' in navigator)) return null;
  try {
    return await navigator.serviceWorker.register('sw.js');
  } catch (e) {
    console.warn('service worker not registered:', e);
    return null;
  }
}

/** Which of `files` are in cache `name` (without creating the cache). */
async function present(name, files) {
  if (!(await caches.has(name))) return [];
  const cache = await caches.open(name);
  const hits = await Promise.all(files.map((f) => cache.match(new URL(f, location.href).href, { ignoreSearch: true })));
  return files.filter((_, i) => hits[i]);
}

/**
 * @returns {Promise<{supported:boolean, app:boolean, pyodide:boolean, ready:boolean, bytes:number, usage:number|null}>}
 */
export async function offlineStatus(build) {
  if (!('caches' in globalThis) || !('serviceWorker' in navigator)) {
    return { supported: false, app: false, pyodide: false, ready: false, bytes: 0, usage: null };
  }
  const [app, py] = await Promise.all([
    present(build.caches.app, build.appFiles),
    present(build.caches.pyodide, build.pyodideFiles),
  ]);
  const bytes = [...app, ...py].reduce((n, f) => n + (build.sizes[f]?.raw || 0), 0);
  let usage = null;
  try { usage = (await navigator.storage?.estimate?.())?.usage ?? null; } catch { /* not offered */ }
  const appOk = app.length === build.appFiles.length;
  const pyOk = py.length === build.pyodideFiles.length;
  return { supported: true, app: appOk, pyodide: pyOk, ready: appOk && pyOk && !!navigator.serviceWorker.controller, bytes, usage };
}

/** Whether Pyodide is already stored, so loading it costs no download. */
export async function pyodideStored(build) {
  if (!('caches' in globalThis)) return false;
  return (await present(build.caches.pyodide, build.pyodideFiles)).length === build.pyodideFiles.length;
}

/** Adds any missing file to its cache (each is fetched from the HTTP cache or the server). */
export async function topUp(build) {
  if (!('caches' in globalThis)) return;
  for (const [name, files] of [[build.caches.app, build.appFiles], [build.caches.pyodide, build.pyodideFiles]]) {
    const have = new Set(await present(name, files));
    const missing = files.filter((f) => !have.has(f));
    if (!missing.length) continue;
    const cache = await caches.open(name);
    await Promise.all(missing.map((f) => cache.add(new URL(f, location.href).href).catch((e) => console.warn('not cached:', f, e))));
  }
}

export function formatBytes(n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} MB`;
  if (n >= 1e3) return `${Math.round(n / 1e3)} kB`;
  return `${n} B`;
}
