// The interpreter's memory snapshot, for the grading worker (worker.js).
//
// Restoring a Pyodide memory snapshot skips Python's start and the bridge's
// imports, which are most of a cached visit's wait. The worker makes one after
// its first normal boot (after "ready", before any learner code runs), keeps it
// in the Cache API beside the offline cache, and restores from it on later
// visits; anything missing, stale or broken means a normal boot, which then
// replaces it.
//
// Key: build.mjs hashes the Pyodide version, bridge.py, engine.mjs, this file and
// the lab's own Python side (worker.js gets it as __SNAPSHOT_KEYS__[lab]). A new
// key is a new entry; storing one deletes the lab's other entries.

/** The Cache API cache that holds the snapshots (one entry per lab). */
export const SNAPSHOT_CACHE = 'delivery-lab-snapshots';

/**
 * Imported before the snapshot is taken, beside what the bridge imports at its
 * top: the labs' lazy imports too, so a restored worker imports nothing on its
 * first run.
 */
export const SNAPSHOT_IMPORTS = 'import base64, binascii, json, linecache, marshal, math, random, sqlite3, sys, traceback, types\n'
  + 'import collections.abc';

// Where a snapshot sits in the cache: a URL no server answers (never fetched).
const entryUrl = (base, lab) => new URL(`snapshots/${lab}/`, base).href;

/**
 * The stored snapshot of `lab` under `key`: { bytes: Promise<Uint8Array> } (its
 * body still being read, so the read overlaps Pyodide's own loading), or
 * { missing: why } when there is none for this key.
 */
export async function findSnapshot(base, lab, key) {
  if (!('caches' in globalThis)) return { missing: 'no Cache API here' };
  let cache;
  try {
    if (!(await caches.has(SNAPSHOT_CACHE))) return { missing: 'none stored' };
    cache = await caches.open(SNAPSHOT_CACHE);
  } catch (e) {
    return { missing: `the cache could not be read (${e.message || e})` };
  }
  const hit = await cache.match(entryUrl(base, lab) + key);
  if (!hit) {
    const others = await cache.keys();
    return { missing: others.some((r) => r.url.startsWith(entryUrl(base, lab))) ? 'stale (another key)' : 'none stored' };
  }
  // The length is checked here (a snapshot cut short would otherwise restore into
  // a memory of the wrong size); the contents by the marker after restoring.
  const length = Number(hit.headers.get('x-snapshot-bytes'));
  const bytes = hit.arrayBuffer().then((buf) => {
    if (buf.byteLength !== length) throw new Error(`the stored snapshot has ${buf.byteLength} bytes, not ${length}`);
    return new Uint8Array(buf);
  });
  bytes.catch(() => {}); // reported by the restore that awaits it
  return { bytes };
}

/** Stores `bytes` as `lab`'s snapshot under `key`, deleting its other entries. */
export async function storeSnapshot(base, lab, key, bytes) {
  const cache = await caches.open(SNAPSHOT_CACHE);
  await cache.put(entryUrl(base, lab) + key, new Response(bytes, {
    headers: { 'Content-Type': 'application/octet-stream', 'x-snapshot-bytes': String(bytes.byteLength) },
  }));
  for (const req of await cache.keys()) {
    if (req.url.startsWith(entryUrl(base, lab)) && req.url !== entryUrl(base, lab) + key) await cache.delete(req);
  }
}

/**
 * Written into the interpreter before the snapshot, read back after a restore:
 * a snapshot that restores but was not made for this key (another lab's, a
 * damaged one) is caught before it grades anything.
 */
export const markSnapshot = (pyodide, key) => pyodide.runPython(`import sys; sys._delivery_lab_snapshot = ${JSON.stringify(key)}`);
export function checkMark(pyodide, key) {
  const mark = pyodide.runPython('import sys; getattr(sys, "_delivery_lab_snapshot", None)');
  if (mark !== key) throw new Error(`the snapshot was made for ${JSON.stringify(mark)}, not ${key}`);
}
