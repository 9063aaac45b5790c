// A folder written beside its place, then moved into it whole (build.mjs's page and
// graders, snapshot.mjs's interpreter snapshot).
import fs from 'node:fs';

/**
 * Replaces folder `dir` with `tmp` (a sibling): the old one is moved aside, the new
 * one renamed into place, the old one removed. A reader sees the old folder or the
 * new one, whole (or, between two renames, none). Another build moving its own into
 * place at the same moment makes the rename fail; then it is tried again.
 */
export function moveIntoPlace(tmp, dir) {
  const old = `${dir}.old-${process.pid}`;
  for (let attempt = 0; ; attempt++) {
    fs.rmSync(old, { recursive: true, force: true });
    try { fs.renameSync(dir, old); } catch (e) { if (e.code !== 'ENOENT') throw e; }
    try {
      fs.renameSync(tmp, dir);
      break;
    } catch (e) {
      if (!['ENOTEMPTY', 'EEXIST'].includes(e.code) || attempt >= 5) throw e;
    }
  }
  fs.rmSync(old, { recursive: true, force: true });
}
