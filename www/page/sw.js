// The service worker: after one visit the lab loads and grades with no network.
// build.mjs copies this file to dist/sw.js with the manifest filled in.
//
// Two caches:
//   delivery-lab-app-<version>  the page, its scripts and the grader; replaced as a
//                               whole by each build (filled at install)
//   pyodide-<version>           Pyodide's runtime, shared by every lab on this origin
//                               and kept across app builds; filled the first time
//                               Python loads (the page also tops it up), so a visit
//                               that never runs code does not download 13 MB
const MANIFEST = self.__MANIFEST__;
const { app: APP_CACHE, pyodide: PYODIDE_CACHE } = MANIFEST.caches;
const scope = new URL(self.registration.scope);
const url = (f) => new URL(f, scope).href;
const APP_URLS = new Set(MANIFEST.appFiles.map(url));
const PYODIDE_URLS = new Set(MANIFEST.pyodideFiles.map(url));
const INDEX = url('index.html');

self.addEventListener('install', (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(APP_CACHE);
    // no-cache: revalidate with the server rather than trust the HTTP cache, so the
    // cache holds exactly this build's files.
    await cache.addAll([...APP_URLS].map((u) => new Request(u, { cache: 'no-cache' })));
    await self.skipWaiting();
  })());
});

self.addEventListener('activate', (event) => {
  event.waitUntil((async () => {
    for (const name of await caches.keys()) {
      // Older builds of this app only; other labs' Pyodide caches are theirs.
      if (name.startsWith('delivery-lab-app-') && name !== APP_CACHE) await caches.delete(name);
    }
    // Control the page that registered us, so its first run's Pyodide download is cached.
    await self.clients.claim();
  })());
});

async function fromCache(cacheName, request, key = request) {
  const cache = await caches.open(cacheName);
  const hit = await cache.match(key, { ignoreSearch: true });
  if (hit) return hit;
  const response = await fetch(request);
  if (response.ok && response.status === 200) await cache.put(key, response.clone());
  return response;
}

self.addEventListener('fetch', (event) => {
  const { request } = event;
  if (request.method !== 'GET') return;
  const u = new URL(request.url);
  if (u.origin !== scope.origin) return;
  const bare = u.origin + u.pathname;
  if (request.mode === 'navigate' && (bare === scope.href || bare === INDEX)) {
    event.respondWith(fromCache(APP_CACHE, request, INDEX));
  } else if (PYODIDE_URLS.has(bare)) {
    event.respondWith(fromCache(PYODIDE_CACHE, request, bare));
  } else if (APP_URLS.has(bare)) {
    event.respondWith(fromCache(APP_CACHE, request, bare));
  }
});

// The page asks which build is active (for its offline status line).
self.addEventListener('message', (event) => {
  if (event.data && event.data.type === 'version') {
    event.source?.postMessage({ type: 'version', version: MANIFEST.version });
  }
});
