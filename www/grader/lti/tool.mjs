// The LTI 1.3 tool (issue 41): what `./lab serve --grading --lti` answers under /lti/.
//
//   GET|POST /lti/login      OIDC login initiation: a state and a nonce, kept by the
//                            store (once, STATE_TTL_S), then 302 to the platform's auth URL
//   POST     /lti/launch     the platform's id_token (form_post): checked (below), then the
//                            learner's page (LtiResourceLinkRequest) or the instructor's
//                            selection of a lab (LtiDeepLinkingRequest)
//   GET      /lti/jwks       the tool's public keys (keys.mjs: the retired ones too, until
//                            the tokens they signed have expired)
//   POST     /lti/deep-link  the instructor's pick: a signed LtiDeepLinkingResponse,
//                            auto-posted to the platform's deep_link_return_url
//   POST     /lti/submit     {launch, source}: graded by the server's own grader; the
//                            learner's report back, and the server's score sent to the
//                            platform's gradebook by AGS (ags.mjs), retried in the background
//
// A launch is refused with a typed error (LtiError: status, code, and claim when one is
// named) before anything is stored for it: 400 malformed or missing claims, wrong
// message type, version or target; 401 bad signature, unknown issuer, wrong audience or
// azp, expired, not yet valid, a nonce used before, a state not issued (or used, or
// expired) or not the token's; 403 an unregistered deployment, a deep link by a
// non-instructor; 503 the platform's keys cannot be fetched. Every body is bounded
// (LIMITS) and parsed defensively; nothing a request sends can throw out of a handler.
import crypto from 'node:crypto';
import { createRemoteJWKSet, customFetch as customFetchSymbol, decodeJwt, jwtVerify, SignJWT } from 'jose';
import { AGS_SCOPES, agsClient } from './ags.mjs';
import { BodyError, GONE, readBody, utf8Of } from '../body.mjs';
import { CLOCK_SKEW_S, KEY_ALG, TOKEN_LIFETIME_S } from './keys.mjs';

export const LTI = Object.freeze({
  version: '1.3.0',
  messageType: 'https://purl.imsglobal.org/spec/lti/claim/message_type',
  versionClaim: 'https://purl.imsglobal.org/spec/lti/claim/version',
  deploymentId: 'https://purl.imsglobal.org/spec/lti/claim/deployment_id',
  targetLinkUri: 'https://purl.imsglobal.org/spec/lti/claim/target_link_uri',
  resourceLink: 'https://purl.imsglobal.org/spec/lti/claim/resource_link',
  roles: 'https://purl.imsglobal.org/spec/lti/claim/roles',
  custom: 'https://purl.imsglobal.org/spec/lti/claim/custom',
  context: 'https://purl.imsglobal.org/spec/lti/claim/context',
  ags: 'https://purl.imsglobal.org/spec/lti-ags/claim/endpoint',
  dlSettings: 'https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings',
  dlContentItems: 'https://purl.imsglobal.org/spec/lti-dl/claim/content_items',
  dlData: 'https://purl.imsglobal.org/spec/lti-dl/claim/data',
  resourceLinkRequest: 'LtiResourceLinkRequest',
  deepLinkingRequest: 'LtiDeepLinkingRequest',
  deepLinkingResponse: 'LtiDeepLinkingResponse',
});

/** Roles that may pick a lab for a course (LIS v2 context and institution roles). */
export const STAFF_ROLES = Object.freeze([
  'http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor',
  'http://purl.imsglobal.org/vocab/lis/v2/membership#ContentDeveloper',
  'http://purl.imsglobal.org/vocab/lis/v2/membership#Administrator',
  'http://purl.imsglobal.org/vocab/lis/v2/institution/person#Administrator',
  'http://purl.imsglobal.org/vocab/lis/v2/institution/person#Instructor',
  'http://purl.imsglobal.org/vocab/lis/v2/system/person#Administrator',
]);

/** The most hints a submission may say were opened (a lab has a few per task). */
export const MAX_HINTS_OPENED = 1000;

export const LIMITS = Object.freeze({
  maxFormBytes: 256 * 1024, // a launch's form: the id_token and the state
  maxSubmitBytes: 64 * 1024, // POST /lti/submit, as POST /grade's
  bodyTimeoutMs: 10_000,
  stateTtlS: 600, // from login initiation to launch
  launchTtlS: 8 * 3600, // a launch's page may submit for this long
  maxTokenAgeS: 600, // an id_token older than this (its iat) is refused
  submitsInFlight: 4, // submissions graded at once through /lti/submit (429 past it)
  // A grade not sent by its deadline (ags.mjs RETRY: the platform down for longer) is
  // tried again, once per sweep, for this long after it was made; then it stays failed.
  resendEveryMs: 5 * 60_000, // a sweep's period (0: no sweeps but those asked, resendFailed())
  resendForMs: 24 * 3600_000,
  resendPerSweep: 50, // grades tried again in one sweep, oldest first
  resendScan: 2000, // the newest grades a sweep looks at
});

/** A refused LTI request: HTTP status, a stable code (tests and logs read it), the claim when one is at fault. */
export class LtiError extends Error {
  constructor(status, code, message, claim) {
    super(message);
    this.name = 'LtiError';
    this.status = status;
    this.code = code;
    if (claim !== undefined) this.claim = claim;
  }
}
const missing = (claim) => new LtiError(400, 'missing_claim', `the id_token has no ${claim} claim, which LTI 1.3 requires`, claim);

const html = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const isString = (v) => typeof v === 'string' && v.length > 0;

/** The origin of an http(s) URL, or null. */
function originOf(url) {
  try {
    const u = new URL(url);
    return u.protocol === 'https:' || u.protocol === 'http:' ? u.origin : null;
  } catch { return null; }
}

// What each POST's body must be sent as: checked before a byte of the body is read.
const BODY_TYPES = {
  form: { type: /^application\/x-www-form-urlencoded\b/i, refusal: 'send the form as application/x-www-form-urlencoded' },
  submission: { type: /^application\/json\b/i, refusal: 'send JSON {"launch": "...", "source": "..."}' },
};

/** An application/x-www-form-urlencoded body as a Map (a name given twice is refused). */
const formOf = (buf) => paramsOf(new URLSearchParams(utf8Of(buf)));
function paramsOf(search) {
  const out = new Map();
  for (const [k, v] of search) {
    if (out.has(k)) throw new LtiError(400, 'bad_request', `the parameter ${k.slice(0, 40)} is given twice`);
    out.set(k, v);
  }
  return out;
}

/** The id_token's claims whose checks jose does not make: each required one, typed. */
function checkClaims(claims, platform, launchUrl) {
  const type = claims[LTI.messageType];
  if (type === undefined) throw missing('message_type');
  if (type !== LTI.resourceLinkRequest && type !== LTI.deepLinkingRequest) {
    throw new LtiError(400, 'wrong_message_type', `message_type ${JSON.stringify(String(type).slice(0, 60))}: this tool takes ${LTI.resourceLinkRequest} and ${LTI.deepLinkingRequest}`);
  }
  if (claims[LTI.versionClaim] === undefined) throw missing('version');
  if (claims[LTI.versionClaim] !== LTI.version) throw new LtiError(400, 'wrong_version', `version ${JSON.stringify(String(claims[LTI.versionClaim]).slice(0, 20))}: this tool speaks LTI ${LTI.version}`);
  const deployment = claims[LTI.deploymentId];
  if (deployment === undefined) throw missing('deployment_id');
  if (!isString(deployment) || !platform.deploymentIds.includes(deployment)) {
    throw new LtiError(403, 'unknown_deployment', `deployment ${JSON.stringify(String(deployment).slice(0, 80))} is not registered for this platform (./lab lti add --deployment ID)`);
  }
  const roles = claims[LTI.roles];
  if (roles === undefined) throw missing('roles');
  if (!Array.isArray(roles) || !roles.every((r) => typeof r === 'string')) throw new LtiError(400, 'bad_claim', 'roles must be a list of role URIs', 'roles');
  if (type === LTI.resourceLinkRequest) {
    if (!isString(claims.sub)) throw missing('sub');
    if (claims[LTI.resourceLink] === undefined) throw missing('resource_link');
    if (!isString(claims[LTI.resourceLink]?.id)) throw new LtiError(400, 'bad_claim', 'resource_link must have an id', 'resource_link');
    if (claims[LTI.targetLinkUri] === undefined) throw missing('target_link_uri');
  } else {
    const s = claims[LTI.dlSettings];
    if (s === undefined) throw missing('deep_linking_settings');
    if (!isString(s?.deep_link_return_url) || !originOf(s.deep_link_return_url)) throw new LtiError(400, 'bad_claim', 'deep_linking_settings must have an http(s) deep_link_return_url', 'deep_linking_settings');
    if (Array.isArray(s.accept_types) && !s.accept_types.includes('ltiResourceLink')) {
      throw new LtiError(400, 'bad_claim', 'the platform accepts no ltiResourceLink here: this tool returns only that', 'deep_linking_settings');
    }
    if (!roles.some((r) => STAFF_ROLES.includes(r))) throw new LtiError(403, 'not_staff', 'only an instructor or an administrator picks the lab');
  }
  const target = claims[LTI.targetLinkUri];
  if (target !== undefined && !sameTarget(target, launchUrl)) {
    throw new LtiError(400, 'wrong_target_link_uri', `target_link_uri ${JSON.stringify(String(target).slice(0, 200))} is not this tool's launch URL ${launchUrl}`);
  }
}

/** Whether `target` is the launch URL (its query, which may name the lab, aside). */
function sameTarget(target, launchUrl) {
  try {
    const t = new URL(target);
    const l = new URL(launchUrl);
    return t.origin === l.origin && t.pathname === l.pathname;
  } catch { return false; }
}

/** jose's typed errors as the tool's answers. */
function joseError(e) {
  switch (e?.code) {
    case 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED':
    case 'ERR_JWKS_NO_MATCHING_KEY':
    case 'ERR_JWKS_MULTIPLE_MATCHING_KEYS':
    case 'ERR_JOSE_ALG_NOT_ALLOWED':
      return new LtiError(401, 'bad_signature', 'the id_token\'s signature is not the platform\'s (its JWKS)');
    case 'ERR_JWT_EXPIRED':
      return new LtiError(401, 'expired', 'the id_token has expired', 'exp');
    case 'ERR_JWT_CLAIM_VALIDATION_FAILED':
      if (e.reason === 'missing') return missing(e.claim);
      if (e.claim === 'iss') return new LtiError(401, 'wrong_issuer', 'the id_token\'s issuer is not the platform\'s', 'iss');
      if (e.claim === 'aud') return new LtiError(401, 'wrong_audience', 'the id_token is not meant for this tool (its aud)', 'aud');
      if (e.claim === 'iat' || e.claim === 'nbf') return new LtiError(401, 'not_yet_valid', `the id_token's ${e.claim} is in the future, or it is too old`, e.claim);
      return new LtiError(401, 'bad_claim', `the id_token's ${e.claim} claim is wrong`, e.claim);
    case 'ERR_JWKS_TIMEOUT':
    case 'ERR_JWKS_INVALID':
      return new LtiError(503, 'platform_keys_unavailable', 'the platform\'s keys (its JWKS) could not be fetched; try again');
    case 'ERR_JWT_INVALID':
    case 'ERR_JWS_INVALID':
    case 'ERR_JOSE_NOT_SUPPORTED':
      return new LtiError(400, 'malformed_token', 'the id_token is not a signed JWT this tool reads');
    default:
      // A fetch of the JWKS that failed (network): not the launch's fault, maybe passing.
      if (e instanceof TypeError || e?.name === 'AbortError') return new LtiError(503, 'platform_keys_unavailable', 'the platform\'s keys (its JWKS) could not be fetched; try again');
      return null;
  }
}

/**
 * The tool. store: store.mjs's; keys: keys.mjs keyRing; baseUrl(): the tool's public
 * URL (no trailing /); labs: [{id, title, maxScore}] (the engine's list); grade({lab,
 * source, platform}) → the server's report line (its pool, or the queue); now(): ms; fetch: for
 * the platforms' JWKS and AGS; retry: ags.mjs RETRY's fields; log(message).
 * Returns { handle(req, res, rel) → bool, pending() → Promise (the grades being sent), resendFailed()
 * → Promise of { tried, replaced } (a sweep now; one runs every limits.resendEveryMs), close() }.
 */
export function createLtiTool({ store, keys, baseUrl, labs, grade, now = () => Date.now(), fetch = globalThis.fetch, retry, sleep,
  log = (m) => console.error(`lti: ${m}`), limits = {} }) {
  const lim = { ...LIMITS, ...limits };
  const base = typeof baseUrl === 'function' ? baseUrl : () => baseUrl;
  const launchUrl = () => `${base()}/lti/launch`;
  const labById = new Map(labs.map((l) => [l.id, l]));
  const ags = agsClient({ keys, now, fetch, retry, ...(sleep ? { sleep } : {}) });
  const jwksSets = new Map(); // jwks URL -> jose's remote set (fetched on need, cached)
  const sending = new Set();
  const resending = new Set(); // ids of the grades being sent now
  let sweeping = null; // the sweep under way (resendFailed)
  let inFlight = 0;
  const inFlightLaunches = new Set();
  const counts = { logins: 0, launches: 0, refused: 0, deepLinks: 0, submitted: 0, sent: 0, sendFailed: 0 };

  const jwksOf = (platform) => {
    let set = jwksSets.get(platform.jwksUrl);
    if (!set) {
      set = createRemoteJWKSet(new URL(platform.jwksUrl), { timeoutDuration: 5000, cooldownDuration: 30_000, cacheMaxAge: 600_000, [customFetchSymbol]: fetch });
      jwksSets.set(platform.jwksUrl, set);
    }
    return set;
  };

  // ---- answers
  const send = (res, status, type, body, headers = {}) => {
    if (res.headersSent || res.destroyed) return;
    res.writeHead(status, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(body), 'Cache-Control': 'no-store', 'X-Content-Type-Options': 'nosniff', ...headers });
    res.end(body);
  };
  const sendJson = (res, status, value, headers) => send(res, status, 'application/json; charset=utf-8', JSON.stringify(value), headers);
  const page = (res, title, body, frameOrigins = []) => send(res, 200, 'text/html; charset=utf-8',
    `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${html(title)}</title>`
    + '<meta name="viewport" content="width=device-width, initial-scale=1">'
    + '<style>body{font:16px system-ui,sans-serif;max-width:48rem;margin:1.5rem auto;padding:0 1rem}textarea{width:100%;font:14px monospace}'
    + 'button{font:inherit;padding:.4rem 1rem}pre{white-space:pre-wrap}</style></head><body>'
    + `${body}</body></html>\n`,
    { 'Content-Security-Policy': `frame-ancestors 'self' ${frameOrigins.join(' ')}`.trim(), 'Referrer-Policy': 'no-referrer' });
  const refuse = (res, e) => {
    counts.refused += 1;
    sendJson(res, e.status, { error: e.message, code: e.code, ...(e.claim ? { claim: e.claim } : {}) });
  };
  const framers = (platform) => [...new Set([originOf(platform.issuer), originOf(platform.authUrl)].filter(Boolean))];

  // ---- login initiation
  async function login(req, res, params) {
    const iss = params.get('iss');
    const loginHint = params.get('login_hint');
    const target = params.get('target_link_uri');
    for (const [name, v] of [['iss', iss], ['login_hint', loginHint], ['target_link_uri', target]]) {
      if (!isString(v)) throw new LtiError(400, 'bad_login', `the login initiation has no ${name}`);
    }
    const clientId = params.get('client_id');
    let platforms = await store.platformsOf(iss);
    if (isString(clientId)) platforms = platforms.filter((p) => p.clientId === clientId);
    if (!platforms.length) throw new LtiError(400, 'unknown_platform', `no platform is registered with issuer ${JSON.stringify(iss.slice(0, 200))}${clientId ? ` and client id ${JSON.stringify(clientId.slice(0, 100))}` : ''} (./lab lti add)`);
    if (platforms.length > 1) throw new LtiError(400, 'ambiguous_platform', 'several client ids are registered for this issuer: the login initiation must name its client_id');
    if (!sameTarget(target, launchUrl())) throw new LtiError(400, 'wrong_target_link_uri', `target_link_uri is not this tool's launch URL ${launchUrl()}`);
    const [platform] = platforms;
    const state = crypto.randomBytes(32).toString('base64url');
    const nonce = crypto.randomBytes(32).toString('base64url');
    if (!await store.putState(state, { issuer: platform.issuer, clientId: platform.clientId, nonce, targetLinkUri: target }, now() + lim.stateTtlS * 1000, now())) {
      throw new LtiError(429, 'busy', 'too many logins are waiting for their launch; try again in a minute');
    }
    const auth = new URL(platform.authUrl);
    const q = {
      scope: 'openid', response_type: 'id_token', response_mode: 'form_post', prompt: 'none', client_id: platform.clientId,
      redirect_uri: launchUrl(), login_hint: loginHint, state, nonce,
    };
    for (const [k, v] of Object.entries(q)) auth.searchParams.set(k, v);
    const hint = params.get('lti_message_hint');
    if (isString(hint)) auth.searchParams.set('lti_message_hint', hint);
    counts.logins += 1;
    send(res, 302, 'text/plain; charset=utf-8', 'to the platform\n', { Location: auth.href });
  }

  // ---- launch
  /** The id_token's checked claims, its platform and (a resource link's) lab: { claims, platform, lab }; throws LtiError. */
  async function verifyLaunch(idToken, stateParam) {
    if (!isString(idToken)) throw new LtiError(400, 'bad_launch', 'the launch has no id_token');
    if (!isString(stateParam)) throw new LtiError(401, 'state_mismatch', 'the launch has no state');
    let unverified;
    try { unverified = decodeJwt(idToken); } catch { throw new LtiError(400, 'malformed_token', 'the id_token is not a JWT'); }
    if (!isString(unverified.iss)) throw missing('iss');
    if (unverified.aud === undefined) throw missing('aud');
    const auds = [].concat(unverified.aud);
    if (!auds.every(isString)) throw new LtiError(400, 'bad_claim', 'aud must be a client id or a list of them', 'aud');
    const candidates = await store.platformsOf(unverified.iss);
    if (!candidates.length) throw new LtiError(401, 'wrong_issuer', `no platform is registered with issuer ${JSON.stringify(unverified.iss.slice(0, 200))}`, 'iss');
    const platform = candidates.find((p) => auds.includes(p.clientId));
    if (!platform) throw new LtiError(401, 'wrong_audience', 'the id_token is not meant for this tool: no client id of its aud is registered for its issuer', 'aud');
    let claims;
    try {
      ({ payload: claims } = await jwtVerify(idToken, jwksOf(platform), {
        issuer: platform.issuer, audience: platform.clientId, algorithms: [KEY_ALG, 'RS384', 'RS512', 'ES256', 'PS256'],
        currentDate: new Date(now()), clockTolerance: CLOCK_SKEW_S, maxTokenAge: lim.maxTokenAgeS, requiredClaims: ['exp', 'iat', 'nonce'],
      }));
    } catch (e) {
      const mapped = joseError(e);
      if (mapped) throw mapped;
      throw e;
    }
    // Several audiences: the authorized party must be this tool; one given must be too.
    if (auds.length > 1 && claims.azp === undefined) throw new LtiError(401, 'wrong_audience', 'the id_token has several audiences and no azp', 'azp');
    if (claims.azp !== undefined && claims.azp !== platform.clientId) throw new LtiError(401, 'wrong_audience', 'the id_token\'s azp is not this tool\'s client id', 'azp');
    if (!isString(claims.nonce)) throw new LtiError(400, 'bad_claim', 'nonce must be a string', 'nonce');
    checkClaims(claims, platform, launchUrl());
    const lab = claims[LTI.messageType] === LTI.resourceLinkRequest ? labOf(claims) : null;
    // Once only: a nonce seen before (a replayed launch) is refused, whatever its state.
    if (!await store.useNonce(platform.issuer, claims.nonce, (claims.exp + CLOCK_SKEW_S) * 1000, now())) {
      throw new LtiError(401, 'nonce_replayed', 'this id_token\'s nonce was used before: a launch is accepted once');
    }
    const state = await store.takeState(stateParam, now());
    if (!state || state.issuer !== platform.issuer || state.clientId !== platform.clientId || state.nonce !== claims.nonce) {
      throw new LtiError(401, 'state_mismatch', 'the state is not the one this tool issued for this login (or it was used, or it expired)');
    }
    const target = claims[LTI.targetLinkUri];
    if (target !== undefined && state.targetLinkUri !== target && !sameTarget(state.targetLinkUri, target)) {
      throw new LtiError(400, 'wrong_target_link_uri', 'target_link_uri differs from the login initiation\'s');
    }
    return { claims, platform, lab };
  }

  /** The lab a resource link launches: its custom lab=ID, else ?lab=ID on its target link. */
  function labOf(claims) {
    let id = claims[LTI.custom]?.lab;
    if (!isString(id)) {
      try { id = new URL(claims[LTI.targetLinkUri]).searchParams.get('lab'); } catch { id = null; }
    }
    if (!isString(id) || !labById.has(id)) {
      throw new LtiError(400, 'unknown_lab', `the link names no lab this server grades (custom lab=ID); the labs: ${[...labById.keys()].join(', ')}`);
    }
    return labById.get(id);
  }

  const lineItemKey = (l) => [l.issuer, l.clientId, l.deploymentId, l.resourceLinkId].join('\n');
  const platformOfLaunch = async (l) => (await store.platformsOf(l.issuer)).find((p) => p.clientId === l.clientId) ?? null;
  const lineItemsMaking = new Map();

  /** The launch's line item URL (stored once found or made), or { why } it has none. */
  function lineItemFor(l) {
    const key = lineItemKey(l);
    if (lineItemsMaking.has(key)) return lineItemsMaking.get(key);
    const p = (async () => {
      const known = await store.getLineItem(key);
      if (known) return { url: known };
      const platform = await platformOfLaunch(l);
      if (!platform) return { url: null, why: 'the platform is no longer registered' };
      const lab = labById.get(l.lab);
      const got = await ags.withRetry(() => ags.lineItem(platform, l.ags, {
        scoreMaximum: lab.maxScore, label: lab.title, resourceId: lab.id, resourceLinkId: l.resourceLinkId,
      }));
      if (got.url) await store.putLineItem(key, got.url);
      return got;
    })().finally(() => lineItemsMaking.delete(key));
    lineItemsMaking.set(key, p);
    return p;
  }
  const background = (p) => {
    sending.add(p);
    p.finally(() => sending.delete(p)).catch(() => {});
  };

  async function launch(req, res, form) {
    const { claims, platform, lab } = await verifyLaunch(form.get('id_token'), form.get('state'));
    counts.launches += 1;
    const common = { issuer: platform.issuer, clientId: platform.clientId, deploymentId: claims[LTI.deploymentId], sub: claims.sub ?? null, roles: claims[LTI.roles] };
    const id = crypto.randomBytes(32).toString('base64url');
    if (claims[LTI.messageType] === LTI.deepLinkingRequest) {
      const s = claims[LTI.dlSettings];
      await store.putLaunch(id, { ...common, type: 'deep-link', returnUrl: s.deep_link_return_url, data: typeof s.data === 'string' ? s.data : null, acceptLineItem: s.accept_lineitem !== false },
        now() + lim.stateTtlS * 1000, now());
      const items = [...labById.values()].map((l) => `<li><button name="lab" value="${html(l.id)}">${html(l.title)}</button> <code>${html(l.id)}</code>, ${l.maxScore} points</li>`).join('');
      return page(res, 'Pick a lab', `<h1>Pick a lab for this course</h1><form method="post" action="${html(`${base()}/lti/deep-link`)}">`
        + `<input type="hidden" name="launch" value="${html(id)}"><ul>${items}</ul></form>`, framers(platform));
    }
    const agsClaim = claims[LTI.ags];
    const rec = {
      ...common, type: 'resource-link', lab: lab.id, resourceLinkId: claims[LTI.resourceLink].id,
      ags: agsClaim && typeof agsClaim === 'object' ? { scope: Array.isArray(agsClaim.scope) ? agsClaim.scope.filter(isString) : [],
        lineitem: isString(agsClaim.lineitem) ? agsClaim.lineitem : null, lineitems: isString(agsClaim.lineitems) ? agsClaim.lineitems : null } : null,
    };
    await store.putLaunch(id, rec, now() + lim.launchTtlS * 1000, now());
    // The line item is made on the first launch, when the platform lets the tool.
    if (rec.ags && !rec.ags.lineitem && rec.ags.lineitems) {
      background(lineItemFor(rec).catch((e) => log(`line item for ${rec.resourceLinkId}: ${e.message}`)));
    }
    const submit = `${base()}/lti/submit`;
    return page(res, lab.title, `<h1>${html(lab.title)}</h1>`
      // The lab's page, told this launch in its fragment (never sent to a server): its
      // Submit sends the code here, and the server grades it (page/main.js ltiLaunch).
      + `<p><a href="${html(`${base()}/index.html?lab=${encodeURIComponent(lab.id)}#lti-launch=${id}`)}" target="_blank" rel="noopener">Open the lab</a>: `
      + 'write and test your code there, then press <b>Submit to the course</b>: the server grades it and sends your score to the course\'s gradebook.</p>'
      + '<p>Or paste your code here:</p>'
      + `<form id="f"><textarea id="src" rows="20" spellcheck="false"></textarea><p><button>Submit for grading</button></p></form><pre id="out"></pre>`
      + `<script>document.getElementById('f').onsubmit=async(e)=>{e.preventDefault();const o=document.getElementById('out');o.textContent='grading...';`
      + `try{const r=await fetch(${JSON.stringify(submit)},{method:'POST',headers:{'Content-Type':'application/json'},body:JSON.stringify({launch:${JSON.stringify(id)},source:document.getElementById('src').value})});`
      + 'const j=await r.json();o.textContent=j.error?j.error:`${j.report.status}: ${j.report.score} of ${j.report.max_score}\\n`+j.report.tests.map((t)=>`${t.status}  ${t.name}`).join(\'\\n\')+`\\n\\ngradebook: ${j.grade.status}`;'
      + '}catch(err){o.textContent=String(err)}};</script>', framers(platform));
  }

  // ---- deep linking response
  async function deepLink(req, res, form) {
    const id = form.get('launch');
    const l = isString(id) ? await store.getLaunch(id, now()) : null;
    if (!l || l.type !== 'deep-link') throw new LtiError(401, 'unknown_launch', 'no deep linking launch of this tool has that id (or it expired): launch again from the course');
    const lab = labById.get(form.get('lab'));
    if (!lab) throw new LtiError(400, 'unknown_lab', `pick one of the labs: ${[...labById.keys()].join(', ')}`);
    const item = {
      type: 'ltiResourceLink', title: lab.title, url: `${launchUrl()}?lab=${encodeURIComponent(lab.id)}`, custom: { lab: lab.id },
      ...(l.acceptLineItem ? { lineItem: { scoreMaximum: lab.maxScore, label: lab.title, resourceId: lab.id } } : {}),
    };
    const { kid, privateKey } = await keys.current();
    const t = Math.floor(now() / 1000);
    const jwt = await new SignJWT({
      [LTI.messageType]: LTI.deepLinkingResponse, [LTI.versionClaim]: LTI.version, [LTI.deploymentId]: l.deploymentId,
      [LTI.dlContentItems]: [item], ...(l.data !== null ? { [LTI.dlData]: l.data } : {}), nonce: crypto.randomBytes(16).toString('base64url'),
    }).setProtectedHeader({ alg: KEY_ALG, kid, typ: 'JWT' }).setIssuer(l.clientId).setAudience(l.issuer)
      .setIssuedAt(t).setExpirationTime(t + TOKEN_LIFETIME_S).sign(privateKey);
    counts.deepLinks += 1;
    const platform = await platformOfLaunch(l);
    return page(res, 'Back to the course', `<form id="f" method="post" action="${html(l.returnUrl)}"><input type="hidden" name="JWT" value="${html(jwt)}">`
      + `<p>Adding <b>${html(lab.title)}</b> to the course...</p><noscript><button>Continue</button></noscript></form>`
      + '<script>document.getElementById(\'f\').submit()</script>', platform ? framers(platform) : []);
  }

  // ---- a learner's submission: graded by the server, its grade sent by the server
  async function submit(req, res, buf) {
    let body;
    try { body = JSON.parse(utf8Of(buf)); } catch (e) {
      if (e instanceof BodyError) throw e;
      throw new LtiError(400, 'bad_body', 'the body is not JSON');
    }
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw new LtiError(400, 'bad_body', 'send JSON {"launch": "...", "source": "..."}');
    const extra = Object.keys(body).filter((k) => k !== 'launch' && k !== 'source' && k !== 'hintsOpened');
    // The score is the server's: a page that sends one (or anything else) is refused.
    if (extra.length) throw new LtiError(400, 'bad_body', `unknown field(s) ${extra.slice(0, 5).join(', ')}: send only launch, source and hintsOpened (the server grades)`);
    // The hints the learner opened on the page (its word, for staff beside the grade; never in it).
    const hints = body.hintsOpened ?? null;
    if (hints !== null && !(Number.isInteger(hints) && hints >= 0 && hints <= MAX_HINTS_OPENED)) {
      throw new LtiError(400, 'bad_body', `hintsOpened must be a whole number from 0 to ${MAX_HINTS_OPENED}`);
    }
    if (!isString(body.launch) || typeof body.source !== 'string') throw new LtiError(400, 'bad_body', 'launch and source must be strings');
    const l = await store.getLaunch(body.launch, now());
    if (!l || l.type !== 'resource-link') throw new LtiError(401, 'unknown_launch', 'no launch of this tool has that id (or it expired): open the lab from the course again');
    if (inFlight >= lim.submitsInFlight) throw new LtiError(429, 'busy', 'too many submissions at once; try again in a few seconds');
    if (inFlightLaunches.has(body.launch)) throw new LtiError(429, 'busy', 'this launch has a submission being graded; wait for its report');
    inFlight += 1;
    inFlightLaunches.add(body.launch);
    let report;
    try {
      report = await grade({ lab: l.lab, source: body.source, platform: l.issuer });
    } finally {
      inFlight -= 1;
      inFlightLaunches.delete(body.launch);
    }
    counts.submitted += 1;
    const gradeInfo = await recordAndSend(l, report, hints);
    sendJson(res, 200, { report, grade: gradeInfo });
  }

  /** The server's report as a score: stored for staff, and sent in the background. */
  async function recordAndSend(l, report, hints = null) {
    const score = {
      userId: l.sub, scoreGiven: Number(report.score) || 0, scoreMaximum: Number(report.max_score) || labById.get(l.lab).maxScore,
      activityProgress: 'Completed', gradingProgress: 'FullyGraded', timestamp: new Date(now()).toISOString(),
      comment: `${report.status}: ${report.passed ?? 0} of ${report.total ?? 0} tests passed`
        + (hints === null ? '' : `; ${hints} hint${hints === 1 ? '' : 's'} opened`),
    };
    const canScore = l.ags?.scope?.includes(AGS_SCOPES.score) && (l.ags.lineitem || l.ags.lineitems);
    const rec = {
      at: score.timestamp, issuer: l.issuer, clientId: l.clientId, deploymentId: l.deploymentId, resourceLinkId: l.resourceLinkId,
      userId: l.sub, lab: l.lab, status: report.status, scoreGiven: score.scoreGiven, scoreMaximum: score.scoreMaximum, hintsOpened: hints,
      sent: canScore ? 'sending' : 'not_sent', attempts: 0, error: canScore ? null : 'the platform gave no score service for this link',
      // What a later sweep needs to send it again: the score as made, and the link's AGS claim.
      ...(canScore ? { score, ags: l.ags } : {}),
    };
    const id = await store.addGrade(rec);
    if (!canScore) return { id, status: 'not_sent', why: rec.error };
    background(sendGrade({ id, ...rec }, { retries: true }));
    return { id, status: 'sending' };
  }

  /** Sends a grade as recorded (its id, score, and the link's fields lineItemFor reads),
   *  with retries until the deadline (`retries`) or once (a sweep's); records what came of it. */
  async function sendGrade({ id, score, ...link }, { retries }) {
    const attemptsBefore = Number(link.attempts) || 0;
    let attempts = attemptsBefore;
    resending.add(id);
    try {
      const item = await lineItemFor(link);
      if (!item.url) {
        await store.updateGrade(id, { sent: 'not_sent', error: item.why });
        return;
      }
      const platform = await platformOfLaunch(link);
      if (!platform) throw new Error('the platform is no longer registered');
      const once = () => ags.sendScore(platform, item.url, score);
      if (retries) await ags.withRetry(once, (n) => { attempts = attemptsBefore + n; });
      else {
        attempts += 1;
        await once();
      }
      counts.sent += 1;
      await store.updateGrade(id, { sent: 'sent', attempts, lineItem: item.url, sentAt: new Date(now()).toISOString(), error: null });
    } catch (e) {
      counts.sendFailed += 1;
      log(`grade ${id} not sent: ${e.message}`);
      await store.updateGrade(id, { sent: 'failed', attempts: retries && e.attempts ? attemptsBefore + e.attempts : attempts, error: String(e.message).slice(0, 500) });
    } finally {
      resending.delete(id);
    }
  }

  /**
   * A sweep: each grade still failed, made within resendForMs, tried once more, oldest
   * first, at most resendPerSweep. One whose learner and link have a newer grade sent
   * already is marked `replaced` instead: the gradebook holds the newer one (AGS 2.0
   * also has a platform keep a score rather than take an older timestamp's). Resolves to
   * { tried, replaced }; a sweep asked while one runs joins it.
   */
  function resendFailed() {
    sweeping ??= (async () => {
      const grades = await store.listGrades({ limit: lim.resendScan });
      const whose = (g) => [g.issuer, g.clientId, g.deploymentId, g.resourceLinkId, g.userId].join('\n');
      const newestSent = new Map();
      for (const g of grades) if (g.sent === 'sent' && !(newestSent.get(whose(g)) >= g.at)) newestSent.set(whose(g), g.at);
      let tried = 0;
      let replaced = 0;
      for (const g of grades) {
        if (g.sent !== 'failed' || !g.score || !g.ags || resending.has(g.id)) continue;
        if (!(now() - Date.parse(g.at) <= lim.resendForMs)) continue;
        if (newestSent.get(whose(g)) > g.at) {
          replaced += 1;
          await store.updateGrade(g.id, { sent: 'replaced', error: 'a newer grade of this learner and link was sent' });
          continue;
        }
        if (tried >= lim.resendPerSweep) break;
        tried += 1;
        await sendGrade(g, { retries: false });
      }
      return { tried, replaced };
    })().finally(() => { sweeping = null; });
    return sweeping;
  }
  const sweeper = lim.resendEveryMs > 0
    ? setInterval(() => { resendFailed().catch((e) => log(`resending grades: ${e.message}`)); }, lim.resendEveryMs)
    : null;
  sweeper?.unref();

  // ---- routing
  /** The body of a POST sent as `kind` (BODY_TYPES), its type checked first, read within its bounds (body.mjs). */
  function bodyOf(req, res, kind) {
    if (!BODY_TYPES[kind].type.test(req.headers['content-type'] ?? '')) throw new LtiError(415, 'bad_content_type', BODY_TYPES[kind].refusal);
    return readBody(req, res, { maxBytes: kind === 'form' ? lim.maxFormBytes : lim.maxSubmitBytes, timeoutMs: lim.bodyTimeoutMs });
  }

  async function route(req, res, rel) {
    if (rel === '/lti/jwks') {
      if (req.method !== 'GET' && req.method !== 'HEAD') throw new LtiError(405, 'method', 'GET the JWKS');
      return sendJson(res, 200, await keys.jwks(), { 'Cache-Control': 'max-age=300', 'Access-Control-Allow-Origin': '*' });
    }
    if (rel === '/lti/login') {
      if (req.method === 'GET') return login(req, res, paramsOf(new URL(`http://x${req.url}`).searchParams));
      if (req.method === 'POST') return login(req, res, formOf(await bodyOf(req, res, 'form')));
      throw new LtiError(405, 'method', 'GET or POST the login initiation');
    }
    if (req.method !== 'POST') throw new LtiError(405, 'method', `POST to ${rel}`);
    if (rel === '/lti/launch') return launch(req, res, formOf(await bodyOf(req, res, 'form')));
    if (rel === '/lti/deep-link') return deepLink(req, res, formOf(await bodyOf(req, res, 'form')));
    if (rel === '/lti/submit') return submit(req, res, await bodyOf(req, res, 'submission'));
    throw new LtiError(404, 'not_found', `no ${rel.slice(0, 80)} here: /lti/login, /lti/launch, /lti/jwks, /lti/deep-link, /lti/submit`);
  }

  /** Answers `req` when `rel` is under /lti/: true; false otherwise (not this tool's). */
  function handle(req, res, rel) {
    if (rel !== '/lti' && !rel.startsWith('/lti/')) return false;
    route(req, res, rel).catch((e) => {
      if (e instanceof BodyError && e.code === GONE) return undefined; // nobody to answer
      if (e instanceof LtiError || e instanceof BodyError) return refuse(res, e);
      log(`internal error on ${rel}: ${e?.stack || e}`);
      try { sendJson(res, 500, { error: 'the LTI tool failed on this request', code: 'internal' }); } catch { res.destroy(); }
    }).catch(() => res.destroy());
    return true;
  }

  return {
    handle,
    verifyLaunch,
    stats: () => ({ ...counts, inFlight, sending: sending.size }),
    /** Resolves once every grade being sent now is sent or given up. */
    pending: async () => { while (sending.size) await Promise.allSettled([...sending]); },
    resendFailed,
    /** Stops the sweeps (a server that closes). */
    close: () => clearInterval(sweeper),
  };
}

