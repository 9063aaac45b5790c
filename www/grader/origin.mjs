// What an --allow-origin value must be, for build.mjs (the origins that may embed
// the lab) and serve.mjs (the origins that may POST /grade): `./lab serve` passes
// the same values to both, so both read them by this one rule. Exactly
// scheme://host[:port], http or https; a trailing slash is the same origin;
// anything else (a path, a query, a user, a wildcard, a default port spelled out,
// capitals) is refused rather than guessed at.

/** { origin } as the browser spells it, or { error } saying what is wrong. */
export function parseOrigin(text) {
  const why = `--allow-origin "${text}" is not an origin: write scheme://host[:port], http or https, with no path, no wildcard`;
  if (!text) return { error: '--allow-origin got an empty origin (a stray comma?)' };
  if (text.includes('*')) return { error: `${why} (list each origin instead of "*")` };
  let u;
  try { u = new URL(text); } catch { return { error: why }; }
  if (!/^https?:$/.test(u.protocol)) return { error: why };
  if (text.replace(/\/$/, '') !== u.origin) return { error: `${why} (did you mean ${u.origin}?)` };
  return { origin: u.origin };
}
