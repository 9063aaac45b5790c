// Assignment and Grade Services 2.0 (issue 41): the tool's calls to a platform.
//
//  - an access token from the platform's token endpoint, by the client-credentials grant
//    with a JWT assertion signed by the tool's current key (RFC 7523; jose signs it),
//    kept until shortly before it expires;
//  - the line item of a resource link: the launch's own (`lineitem`), else found by its
//    resource link id among `lineitems`, else made there when the platform gave the
//    lineitem scope;
//  - a score POSTed to LINEITEM/scores.
// Every call has a time limit (CALL_TIMEOUT_MS) and reads at most MAX_RESPONSE_BYTES;
// a call that fails for a reason that may pass (the network, 429, 5xx, a time-out) is
// tried again after a back-off doubling from RETRY.firstMs up to RETRY.maxDelayMs, until
// RETRY.deadlineMs after the first try: a bounded wait. 401 once gets a fresh token.
import crypto from 'node:crypto';
import { SignJWT } from 'jose';
import { KEY_ALG, TOKEN_LIFETIME_S } from './keys.mjs';

export const AGS_SCOPES = Object.freeze({
  lineitem: 'https://purl.imsglobal.org/spec/lti-ags/scope/lineitem',
  lineitemReadonly: 'https://purl.imsglobal.org/spec/lti-ags/scope/lineitem.readonly',
  score: 'https://purl.imsglobal.org/spec/lti-ags/scope/score',
});
export const AGS_TYPES = Object.freeze({
  score: 'application/vnd.ims.lis.v1.score+json',
  lineitem: 'application/vnd.ims.lis.v2.lineitem+json',
  lineitems: 'application/vnd.ims.lis.v2.lineitemcontainer+json',
});
export const RETRY = Object.freeze({ firstMs: 1000, maxDelayMs: 30_000, deadlineMs: 10 * 60_000 });
export const CALL_TIMEOUT_MS = 10_000;
export const MAX_RESPONSE_BYTES = 1024 * 1024;
const ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer';

/** A platform's answer or the network failed; `retry` says whether trying again may help. */
export class AgsError extends Error {
  constructor(message, { status = null, retry = false } = {}) {
    super(message);
    this.name = 'AgsError';
    this.status = status;
    this.retry = retry;
  }
}

/** The response's body as text, at most `max` bytes (more is an AgsError). */
async function boundedText(res, max = MAX_RESPONSE_BYTES) {
  const reader = res.body?.getReader();
  if (!reader) return '';
  const chunks = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > max) {
      await reader.cancel().catch(() => {});
      throw new AgsError(`the platform's answer is larger than ${max} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** LINEITEM/scores, with the line item URL's query kept after the path. */
export function scoresUrl(lineitem) {
  const u = new URL(lineitem);
  u.pathname = `${u.pathname.replace(/\/+$/, '')}/scores`;
  return u.href;
}

/**
 * A client of platforms' AGS. keys: keyRing; now(): ms; fetch: the HTTP client;
 * sleep(ms): the back-off's wait; retry: RETRY's fields.
 */
export function agsClient({ keys, now = () => Date.now(), fetch = globalThis.fetch, sleep = (ms) => new Promise((r) => setTimeout(r, ms)),
  retry = RETRY, callTimeoutMs = CALL_TIMEOUT_MS }) {
  const tokens = new Map(); // issuer \n clientId \n scopes -> { token, untilMs }

  async function call(url, init) {
    let res;
    try {
      res = await fetch(url, { ...init, redirect: 'error', signal: AbortSignal.timeout(callTimeoutMs) });
    } catch (e) {
      throw new AgsError(`${init.method ?? 'GET'} ${url}: ${e.name === 'TimeoutError' ? `no answer within ${callTimeoutMs} ms` : e.message}`, { retry: true });
    }
    const text = await boundedText(res).catch((e) => { throw e instanceof AgsError ? e : new AgsError(e.message, { retry: true }); });
    if (!res.ok) {
      throw new AgsError(`${init.method ?? 'GET'} ${url}: ${res.status} ${text.slice(0, 200)}`,
        { status: res.status, retry: res.status === 429 || res.status >= 500 });
    }
    return text;
  }
  const json = (text, what) => {
    try { return JSON.parse(text); } catch { throw new AgsError(`${what}: the platform's answer is not JSON`); }
  };

  async function token(platform, scopes) {
    const key = `${platform.issuer}\n${platform.clientId}\n${scopes.join(' ')}`;
    const held = tokens.get(key);
    if (held && held.untilMs > now()) return held.token;
    const { kid, privateKey } = await keys.current();
    const t = Math.floor(now() / 1000);
    const assertion = await new SignJWT({})
      .setProtectedHeader({ alg: KEY_ALG, kid, typ: 'JWT' })
      .setIssuer(platform.clientId).setSubject(platform.clientId).setAudience(platform.tokenUrl)
      .setIssuedAt(t).setExpirationTime(t + TOKEN_LIFETIME_S).setJti(crypto.randomUUID())
      .sign(privateKey);
    const body = new URLSearchParams({ grant_type: 'client_credentials', client_assertion_type: ASSERTION_TYPE, client_assertion: assertion, scope: scopes.join(' ') });
    const answer = json(await call(platform.tokenUrl, {
      method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded', Accept: 'application/json' }, body,
    }), 'the token endpoint');
    if (typeof answer?.access_token !== 'string' || !answer.access_token) throw new AgsError('the token endpoint gave no access_token');
    const lifeS = Number.isFinite(answer.expires_in) && answer.expires_in > 0 ? answer.expires_in : 300;
    tokens.set(key, { token: answer.access_token, untilMs: now() + Math.max(0, lifeS - 30) * 1000 });
    return answer.access_token;
  }

  /** An AGS call with a bearer token: a 401 drops the token and tries once more with a new one. */
  async function authed(platform, scopes, url, init) {
    for (let fresh = 0; ; fresh++) {
      const bearer = await token(platform, scopes);
      try {
        return await call(url, { ...init, headers: { ...init.headers, Authorization: `Bearer ${bearer}` } });
      } catch (e) {
        if (e.status !== 401 || fresh > 0) throw e;
        tokens.delete(`${platform.issuer}\n${platform.clientId}\n${scopes.join(' ')}`);
      }
    }
  }

  /** fn(), tried again while it fails with a retry-able AgsError, until `deadlineMs` after the first try. */
  async function withRetry(fn, onAttempt = () => {}) {
    const start = now();
    let delay = retry.firstMs;
    for (let attempt = 1; ; attempt++) {
      onAttempt(attempt);
      try {
        return await fn();
      } catch (e) {
        const left = start + retry.deadlineMs - now();
        if (!(e instanceof AgsError) || !e.retry || left <= delay) throw Object.assign(e, { attempts: attempt });
        await sleep(delay);
        delay = Math.min(delay * 2, retry.maxDelayMs);
      }
    }
  }

  /**
   * The line item for a launch's resource link: { url } or { url: null, why }.
   * ags: the launch's AGS claim; item: { label, resourceId, resourceLinkId, scoreMaximum }.
   */
  async function lineItem(platform, ags, item) {
    if (typeof ags?.lineitem === 'string') return { url: ags.lineitem };
    const scopes = Array.isArray(ags?.scope) ? ags.scope : [];
    if (typeof ags?.lineitems !== 'string') return { url: null, why: 'the launch names no line item and no line items endpoint' };
    const canRead = scopes.includes(AGS_SCOPES.lineitem) || scopes.includes(AGS_SCOPES.lineitemReadonly);
    if (!canRead) return { url: null, why: 'the platform gave the tool no line item scope' };
    const scope = [scopes.includes(AGS_SCOPES.lineitem) ? AGS_SCOPES.lineitem : AGS_SCOPES.lineitemReadonly];
    const list = new URL(ags.lineitems);
    list.searchParams.set('resource_link_id', item.resourceLinkId);
    const found = json(await authed(platform, scope, list.href, { method: 'GET', headers: { Accept: AGS_TYPES.lineitems } }), 'the line items');
    const mine = Array.isArray(found) ? found.find((x) => x?.resourceLinkId === item.resourceLinkId && typeof x.id === 'string') : null;
    if (mine) return { url: mine.id };
    if (!scopes.includes(AGS_SCOPES.lineitem)) return { url: null, why: 'the platform lets the tool read line items, not make them' };
    const made = json(await authed(platform, scope, ags.lineitems, {
      method: 'POST', headers: { 'Content-Type': AGS_TYPES.lineitem, Accept: AGS_TYPES.lineitem }, body: JSON.stringify(item),
    }), 'the new line item');
    if (typeof made?.id !== 'string') throw new AgsError('the platform made a line item without an id');
    return { url: made.id };
  }

  /** POSTs `score` (the AGS score's fields) to the line item. */
  async function sendScore(platform, lineitem, score) {
    await authed(platform, [AGS_SCOPES.score], scoresUrl(lineitem), {
      method: 'POST', headers: { 'Content-Type': AGS_TYPES.score }, body: JSON.stringify(score),
    });
  }

  return { token, lineItem, sendScore, withRetry };
}
