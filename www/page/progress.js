// What the page keeps per lab on this device (localStorage, like the code; it works
// offline): `delivery-lab:<lab>:<key>`. The course map reads the same keys.
export const labKey = (lab, k) => `delivery-lab:${lab}:${k}`;

/** localStorage can throw (storage disabled, quota); the page works without it. */
export function labStore(lab) {
  return {
    get(k) { try { return localStorage.getItem(labKey(lab, k)); } catch { return null; } },
    set(k, v) { try { localStorage.setItem(labKey(lab, k), v); return true; } catch { return false; } },
    json(k, fallback = null) {
      try {
        const v = JSON.parse(this.get(k) ?? 'null');
        return v ?? fallback;
      } catch { return fallback; }
    },
  };
}

/**
 * A lab's progress as the course map shows it: done (XP earned: every test passed
 * once), its best run ({passed, total}), and whether the learner has started it.
 */
export function progressOf(lab) {
  const s = labStore(lab);
  const xp = s.json('xp');
  const best = s.json('best');
  return {
    done: !!(xp && typeof xp.xp === 'number'),
    xp: xp && typeof xp.xp === 'number' ? xp.xp : 0,
    best: best && Number.isInteger(best.passed) && Number.isInteger(best.total) ? best : null,
    started: s.get('code') !== null || !!best,
  };
}
