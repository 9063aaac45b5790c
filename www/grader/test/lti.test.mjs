// The LTI 1.3 tool (issue 41), against a platform emulator of the test's own: its keys
// and JWKS served locally, signed launches, a token endpoint that checks the tool's
// signed client assertion against the tool's JWKS, and AGS endpoints that check the
// bearer token and every field of a score.
//  - each IMS certification launch failure refused, with its code and exact HTTP status;
//  - a launch end to end: login -> launch -> the line item made on the first launch ->
//    the learner's submission graded by the server's own pool (sandboxed, as ./lab grade)
//    -> the server's score POSTed to the emulator's AGS; a score the page sends is refused;
//  - retries with back-off until a deadline; deep linking's signed response; key
//    rotation; hostile bodies; key files' modes; ./lab lti's register and grades.
// One server (one grading pool, about 4 s to start) serves every case; the file store.
// Run: node --test --test-force-exit grader/test/lti.test.mjs
import { test, before, after } from 'node:test';
import { execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import vm from 'node:vm';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createLocalJWKSet, exportJWK, generateKeyPair, jwtVerify, SignJWT } from 'jose';
import { serve } from '../serve.mjs';
import { createLtiTool, LTI, STAFF_ROLES } from '../lti/tool.mjs';
import { keyRing, KeyFileError, RETIRED_KEPT_MS } from '../lti/keys.mjs';
import { AGS_SCOPES } from '../lti/ags.mjs';
import { createFileStore } from '../lti/store.mjs';
import { main as ltiCli } from '../lti/cli.mjs';
import { chromium } from 'playwright-core';
import { LAUNCH } from '../../page/browser.mjs';

const WWW = fileURLToPath(new URL('../../', import.meta.url));
const REFERENCE = fs.readFileSync(path.join(WWW, '..', 'src/deliver_once/reference.py'), 'utf8');
// Lab 1's reference without the claim's nx: a partial score, so the score sent is the grade's.
const NO_NX = REFERENCE.replace('ttl=policy.claim_ttl_s, nx=True)', 'ttl=policy.claim_ttl_s)');
assert.notEqual(NO_NX, REFERENCE);

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-lti-'));
const ROOT = path.join(TMP, 'root');
const DIR = path.join(TMP, 'lti');

const LEARNER = 'http://purl.imsglobal.org/vocab/lis/v2/membership#Learner';
const CLIENT_ID = 'tool-client-1';
const DEPLOYMENT = 'deployment-1';

// ---------------------------------------------------------------------------
// The platform emulator.

async function listen(handler) {
  const server = http.createServer(handler);
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${server.address().port}` };
}

const readAll = (req) => new Promise((resolve) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
});

async function platformEmulator() {
  const { publicKey, privateKey } = await generateKeyPair('RS256');
  const kid = 'platform-key-1';
  const jwk = { ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' };
  const p = {
    privateKey, kid, tokens: new Map(), lineItems: [], scores: [], tokenRequests: [], failScores: 0, scoreCalls: 0, problems: [],
    toolJwks: null,
  };
  const json = (res, status, body) => { res.writeHead(status, { 'Content-Type': 'application/json' }); res.end(JSON.stringify(body)); };
  const { server, url } = await listen(async (req, res) => {
    const u = new URL(`http://x${req.url}`);
    const body = await readAll(req);
    if (u.pathname === '/jwks') return json(res, 200, { keys: [jwk] });
    if (u.pathname === '/token' && req.method === 'POST') {
      const f = new URLSearchParams(body);
      p.tokenRequests.push(Object.fromEntries(f));
      if (f.get('grant_type') !== 'client_credentials' || f.get('client_assertion_type') !== 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer') {
        return json(res, 400, { error: 'unsupported_grant_type' });
      }
      try {
        // The tool's assertion, checked against the tool's own published keys.
        const { payload } = await jwtVerify(f.get('client_assertion'), createLocalJWKSet(await p.toolJwks()), { issuer: CLIENT_ID, subject: CLIENT_ID, audience: `${url}/token` });
        if (!payload.jti || !payload.exp) throw new Error('no jti or exp');
      } catch (e) {
        p.problems.push(`token: ${e.message}`);
        return json(res, 401, { error: 'invalid_client' });
      }
      const token = crypto.randomBytes(16).toString('hex');
      p.tokens.set(token, f.get('scope').split(' '));
      return json(res, 200, { access_token: token, token_type: 'Bearer', expires_in: 3600, scope: f.get('scope') });
    }
    const scopes = p.tokens.get(/^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1]) ?? null;
    if (u.pathname === '/lineitems') {
      if (!scopes?.includes(AGS_SCOPES.lineitem)) return json(res, 401, { error: 'no lineitem scope' });
      if (req.method === 'GET') return json(res, 200, p.lineItems.filter((li) => !u.searchParams.get('resource_link_id') || li.resourceLinkId === u.searchParams.get('resource_link_id')));
      const li = { ...JSON.parse(body), id: `${url}/lineitems/${p.lineItems.length + 1}?course=7` };
      p.lineItems.push(li);
      return json(res, 201, li);
    }
    const m = /^\/lineitems\/(\d+)\/scores$/.exec(u.pathname);
    if (m && req.method === 'POST') {
      p.scoreCalls += 1;
      if (!scopes?.includes(AGS_SCOPES.score)) return json(res, 401, { error: 'no score scope' });
      if (u.searchParams.get('course') !== '7') return json(res, 404, { error: 'the line item URL lost its query' });
      if (req.headers['content-type'] !== 'application/vnd.ims.lis.v1.score+json') return json(res, 415, { error: 'score media type' });
      if (p.failScores > 0) { p.failScores -= 1; return json(res, 503, { error: 'down for a moment' }); }
      const s = JSON.parse(body);
      const wrong = [];
      if (typeof s.userId !== 'string' || !s.userId) wrong.push('userId');
      if (typeof s.scoreGiven !== 'number' || s.scoreGiven < 0) wrong.push('scoreGiven');
      if (typeof s.scoreMaximum !== 'number' || s.scoreMaximum <= 0) wrong.push('scoreMaximum');
      if (!['Initialized', 'Started', 'InProgress', 'Submitted', 'Completed'].includes(s.activityProgress)) wrong.push('activityProgress');
      if (!['FullyGraded', 'Pending', 'PendingManual', 'Failed', 'NotReady'].includes(s.gradingProgress)) wrong.push('gradingProgress');
      if (typeof s.timestamp !== 'string' || Number.isNaN(Date.parse(s.timestamp)) || !/(Z|[+-]\d\d:\d\d)$/.test(s.timestamp)) wrong.push('timestamp');
      if (wrong.length) return json(res, 400, { error: `bad score fields: ${wrong.join(', ')}` });
      p.scores.push({ lineItem: Number(m[1]), ...s });
      return json(res, 200, {});
    }
    return json(res, 404, { error: 'no such endpoint' });
  });
  p.server = server;
  p.url = url;
  p.issuer = url;
  return p;
}

/** An id_token as the platform signs it: `claims` over a valid resource link launch's; `drop` leaves claims out. */
async function idToken(p, nonce, { claims = {}, drop = [], key = p.privateKey, now = Math.floor(Date.now() / 1000) } = {}) {
  const c = {
    iss: p.issuer, aud: CLIENT_ID, sub: 'learner-42', iat: now, exp: now + 300, nonce,
    [LTI.messageType]: LTI.resourceLinkRequest, [LTI.versionClaim]: '1.3.0', [LTI.deploymentId]: DEPLOYMENT,
    [LTI.targetLinkUri]: `${tool.base}/lti/launch`, [LTI.resourceLink]: { id: 'link-1' }, [LTI.roles]: [LEARNER],
    [LTI.custom]: { lab: 'deliver-once' },
    [LTI.ags]: { scope: [AGS_SCOPES.lineitem, AGS_SCOPES.score], lineitems: `${p.url}/lineitems` },
    ...claims,
  };
  const short = { message_type: LTI.messageType, version: LTI.versionClaim, deployment_id: LTI.deploymentId, target_link_uri: LTI.targetLinkUri, resource_link: LTI.resourceLink, roles: LTI.roles };
  for (const d of drop) delete c[short[d] ?? d];
  return new SignJWT(c).setProtectedHeader({ alg: 'RS256', kid: p.kid, typ: 'JWT' }).sign(key);
}

// ---------------------------------------------------------------------------
// The tool: ./lab serve --grading --lti on a file store, the platform registered by ./lab lti add.

let platform;
let tool;
const quietCli = { out: () => {}, err: () => {} };

before(async () => {
  // The lab's page, which a launch opens (its Submit sends to the launch's endpoint).
  execFileSync(process.execPath, ['build.mjs', '--no-wasm', '--out', ROOT], { cwd: WWW, stdio: 'inherit' });
  platform = await platformEmulator();
  const code = await ltiCli(['add', '--lti-dir', DIR, '--issuer', platform.issuer, '--client-id', CLIENT_ID, '--deployment', DEPLOYMENT,
    '--auth-url', `${platform.url}/auth`, '--token-url', `${platform.url}/token`, '--jwks-url', `${platform.url}/jwks`], quietCli);
  assert.equal(code, 0);
  const started = await serve({
    port: 0, root: ROOT, quiet: true, isolate: false, grading: { jobs: 1 },
    lti: { dir: DIR, retry: { firstMs: 20, maxDelayMs: 80, deadlineMs: 400 } },
  });
  tool = { ...started, base: started.url.replace(/\/$/, '') };
  platform.toolJwks = async () => (await fetch(`${tool.base}/lti/jwks`)).json();
});

after(async () => {
  await tool?.lti.pending();
  await new Promise((r) => tool?.server.close(r));
  await tool?.grading?.pool?.close?.();
  platform?.server.close();
  fs.rmSync(TMP, { recursive: true, force: true });
});

/** OIDC login initiation as the platform starts it: the state and nonce the tool redirects with. */
async function login(params = {}) {
  const q = new URLSearchParams({ iss: platform.issuer, login_hint: 'hint-1', target_link_uri: `${tool.base}/lti/launch`, client_id: CLIENT_ID, ...params });
  const res = await fetch(`${tool.base}/lti/login?${q}`, { redirect: 'manual' });
  assert.equal(res.status, 302, await res.clone().text());
  const to = new URL(res.headers.get('location'));
  assert.equal(`${to.origin}${to.pathname}`, `${platform.url}/auth`);
  for (const [k, v] of [['response_type', 'id_token'], ['response_mode', 'form_post'], ['scope', 'openid'], ['prompt', 'none'],
    ['client_id', CLIENT_ID], ['redirect_uri', `${tool.base}/lti/launch`], ['login_hint', 'hint-1']]) assert.equal(to.searchParams.get(k), v, k);
  return { state: to.searchParams.get('state'), nonce: to.searchParams.get('nonce') };
}

const form = (fields) => ({ method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(fields).toString() });
async function launch(idTokenText, state) {
  const res = await fetch(`${tool.base}/lti/launch`, form({ id_token: idTokenText, state }));
  const text = await res.text();
  return { status: res.status, text, headers: res.headers, body: res.headers.get('content-type').startsWith('application/json') ? JSON.parse(text) : null };
}
const launchIdOf = (page) => /launch:"([A-Za-z0-9_-]+)"/.exec(page)?.[1] ?? /name="launch" value="([A-Za-z0-9_-]+)"/.exec(page)?.[1];

async function refused(result, status, code, claim) {
  assert.equal(result.status, status, result.text);
  assert.equal(result.body.code, code, result.text);
  assert.ok(result.body.error.length > 10, 'a clear error says what is wrong');
  if (claim) assert.equal(result.body.claim, claim);
}

// ---------------------------------------------------------------------------

test('the IMS launch failure cases are each refused with a clear error and its status', async () => {
  const { state, nonce } = await login();
  const { privateKey: stranger } = await generateKeyPair('RS256');
  // None of these gets as far as taking the state or the nonce: one login serves them all.
  await refused(await launch(await idToken(platform, nonce, { key: stranger }), state), 401, 'bad_signature');
  await refused(await launch(await idToken(platform, nonce, { claims: { aud: 'another-tool' } }), state), 401, 'wrong_audience', 'aud');
  await refused(await launch(await idToken(platform, nonce, { claims: { aud: [CLIENT_ID, 'another-tool'] } }), state), 401, 'wrong_audience', 'azp');
  await refused(await launch(await idToken(platform, nonce, { claims: { aud: [CLIENT_ID, 'x'], azp: 'x' } }), state), 401, 'wrong_audience', 'azp');
  await refused(await launch(await idToken(platform, nonce, { claims: { iss: 'https://evil.example' } }), state), 401, 'wrong_issuer', 'iss');
  const old = Math.floor(Date.now() / 1000) - 400;
  await refused(await launch(await idToken(platform, nonce, { now: old }), state), 401, 'expired', 'exp');
  await refused(await launch(await idToken(platform, nonce, { claims: { iat: Math.floor(Date.now() / 1000) + 3600, exp: Math.floor(Date.now() / 1000) + 3900 } }), state), 401, 'not_yet_valid', 'iat');
  for (const claim of ['iss', 'aud', 'exp', 'iat', 'nonce', 'sub', 'message_type', 'version', 'deployment_id', 'target_link_uri', 'resource_link', 'roles']) {
    await refused(await launch(await idToken(platform, nonce, { drop: [claim] }), state), 400, 'missing_claim', claim);
  }
  await refused(await launch(await idToken(platform, nonce, { claims: { [LTI.deploymentId]: 'deployment-9' } }), state), 403, 'unknown_deployment');
  await refused(await launch(await idToken(platform, nonce, { claims: { [LTI.messageType]: 'LtiSubmissionReviewRequest' } }), state), 400, 'wrong_message_type');
  await refused(await launch(await idToken(platform, nonce, { claims: { [LTI.versionClaim]: '1.1' } }), state), 400, 'wrong_version');
  await refused(await launch(await idToken(platform, nonce, { claims: { [LTI.targetLinkUri]: 'https://evil.example/lti/launch' } }), state), 400, 'wrong_target_link_uri');
  await refused(await launch(await idToken(platform, nonce, { claims: { [LTI.messageType]: LTI.deepLinkingRequest, [LTI.dlSettings]: { deep_link_return_url: `${platform.url}/dl` } } }), state),
    403, 'not_staff');
  await refused(await launch(await idToken(platform, nonce, { claims: { [LTI.messageType]: LTI.deepLinkingRequest, [LTI.roles]: [STAFF_ROLES[0]] } }), state),
    400, 'missing_claim', 'deep_linking_settings');
  await refused(await launch(await idToken(platform, nonce, { claims: { [LTI.custom]: { lab: 'no-such-lab' } } }), state), 400, 'unknown_lab');
  await refused(await launch('not.a.jwt', state), 400, 'malformed_token');
  // State: one this tool never issued. The nonce is taken by then (once only, whatever
  // came of the launch): the same token with its own state is a replay.
  await refused(await launch(await idToken(platform, nonce), 'never-issued'), 401, 'state_mismatch');
  await refused(await launch(await idToken(platform, nonce), state), 401, 'nonce_replayed');
  // Another login's state: not the one issued with this token's nonce.
  const b = await login();
  const c = await login();
  await refused(await launch(await idToken(platform, c.nonce), b.state), 401, 'state_mismatch');
  // A launch accepted, then replayed as it was: the nonce was used.
  const third = await login();
  const token = await idToken(platform, third.nonce);
  assert.equal((await launch(token, third.state)).status, 200);
  await refused(await launch(token, third.state), 401, 'nonce_replayed');
  // A login for a platform not registered.
  const res = await fetch(`${tool.base}/lti/login?${new URLSearchParams({ iss: 'https://evil.example', login_hint: 'x', target_link_uri: `${tool.base}/lti/launch` })}`, { redirect: 'manual' });
  assert.equal(res.status, 400);
  assert.equal((await res.json()).code, 'unknown_platform');
});

test('a launch end to end: the line item made on first launch, the server grades, the server\'s score reaches the AGS', async () => {
  const { state, nonce } = await login();
  const page = await launch(await idToken(platform, nonce), state);
  assert.equal(page.status, 200, page.text);
  assert.match(page.text, /Deliver once, retry right/);
  const launchId = launchIdOf(page.text);
  assert.ok(launchId, 'the page carries its launch');
  new vm.Script(/<script>([\s\S]*?)<\/script>/.exec(page.text)[1]); // the page's script parses
  // Framed by the LMS: its origin (and no other) may frame the page.
  assert.equal(page.headers.get('content-security-policy'), `frame-ancestors 'self' ${platform.url}`);
  await tool.lti.pending();
  assert.equal(platform.lineItems.length, 1, 'the line item is made on the first launch');
  assert.deepEqual(platform.lineItems[0].resourceLinkId, 'link-1');
  assert.equal(platform.lineItems[0].resourceId, 'deliver-once');
  // A page that sends a score is refused, and nothing is sent.
  const post = (body) => fetch(`${tool.base}/lti/submit`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const cheat = await post({ launch: launchId, source: NO_NX, score: 23 });
  assert.equal(cheat.status, 400);
  assert.match((await cheat.json()).error, /score/);
  assert.equal((await post({ launch: 'no-such-launch', source: NO_NX })).status, 401);
  const res = await post({ launch: launchId, source: NO_NX });
  assert.equal(res.status, 200);
  const { report, grade } = await res.json();
  assert.equal(report.lab, 'deliver-once');
  assert.ok(report.score > 0 && report.score < report.max_score, `a partial score: ${report.score}/${report.max_score}`);
  assert.equal(report.hidden_seed, undefined, 'the learner\'s report, not the staff\'s');
  assert.equal(platform.lineItems[0].scoreMaximum, report.max_score, 'the line item\'s maximum is the lab\'s');
  assert.equal(grade.status, 'sending');
  await tool.lti.pending();
  assert.deepEqual(platform.problems, []);
  assert.equal(platform.scores.length, 1);
  const s = platform.scores[0];
  assert.equal(s.lineItem, 1);
  assert.equal(s.userId, 'learner-42');
  assert.equal(s.scoreGiven, report.score);
  assert.equal(s.scoreMaximum, report.max_score);
  assert.equal(s.activityProgress, 'Completed');
  assert.equal(s.gradingProgress, 'FullyGraded');
  // The token: client credentials with the tool's signed assertion, the score scope asked.
  assert.ok(platform.tokenRequests.some((t) => t.scope === AGS_SCOPES.score));
  // Staff see it: ./lab lti grades.
  const lines = [];
  assert.equal(await ltiCli(['grades', '--lti-dir', DIR], { out: (l) => lines.push(l), err: () => {} }), 0);
  const mine = lines.filter((l) => l.includes('user learner-42'));
  assert.equal(mine.length, 1, lines.join('\n'));
  assert.match(mine[0], new RegExp(`\\bsent  ${report.score}/${report.max_score}  fail  deliver-once`));

  // A second launch of the same link finds its line item: none made again.
  const again = await login();
  const page2 = await launch(await idToken(platform, again.nonce, { claims: { sub: 'learner-43' } }), again.state);
  assert.equal(page2.status, 200);
  await tool.lti.pending();
  assert.equal(platform.lineItems.length, 1);

  // The platform fails twice (503): tried again with back-off, sent the third time.
  platform.failScores = 2;
  const before2 = platform.scoreCalls;
  const r2 = await post({ launch: launchIdOf(page2.text), source: REFERENCE });
  const b2 = await r2.json();
  assert.equal(b2.report.score, b2.report.max_score);
  await tool.lti.pending();
  assert.equal(platform.scoreCalls - before2, 3);
  assert.equal(platform.scores.at(-1).userId, 'learner-43');
  assert.equal(platform.scores.at(-1).scoreGiven, b2.report.max_score);
  // Always failing: given up at the deadline (400 ms here), recorded as failed with its attempts.
  platform.failScores = 1000;
  const t0 = Date.now();
  const r3 = await post({ launch: launchIdOf(page2.text), source: NO_NX });
  assert.equal(r3.status, 200);
  await r3.json();
  const t1 = Date.now();
  await tool.lti.pending();
  assert.ok(Date.now() - t1 < 2000, `a bounded wait: ${Date.now() - t1} ms`);
  platform.failScores = 0;
  const failed = [];
  await ltiCli(['grades', '--lti-dir', DIR, '--limit', '1'], { out: (l) => failed.push(l), err: () => {} });
  assert.equal(failed.length, 1);
  assert.match(failed[0], /failed .*attempts [3-9]/);
  assert.ok(t0 > 0);

  // The platform is back: a sweep sends the failed grade once more, as it was made
  // (its own timestamp and score), and records it sent with one attempt more.
  const attemptsBefore = Number(/attempts (\d+)/.exec(failed[0])[1]);
  const callsBefore = platform.scoreCalls;
  assert.deepEqual(await tool.lti.resendFailed(), { tried: 1, replaced: 0 });
  assert.equal(platform.scoreCalls - callsBefore, 1);
  const resent = platform.scores.at(-1);
  assert.equal(resent.userId, 'learner-43');
  assert.equal(resent.timestamp, failed[0].split('  ')[0], 'the score as it was made, with its own timestamp');
  assert.notEqual(resent.scoreGiven, b2.report.max_score);
  const after = [];
  await ltiCli(['grades', '--lti-dir', DIR, '--limit', '1'], { out: (l) => after.push(l), err: () => {} });
  assert.match(after[0], new RegExp(`\\bsent .*attempts ${attemptsBefore + 1}\\b`));
  // Nothing left to send: the next sweep tries nothing.
  assert.deepEqual(await tool.lti.resendFailed(), { tried: 0, replaced: 0 });

  // A grade that failed, then a newer one of the same learner and link that was sent:
  // the sweep marks the older one replaced and sends nothing (the gradebook has the newer).
  platform.failScores = 1000;
  await (await post({ launch: launchIdOf(page2.text), source: NO_NX })).json();
  await tool.lti.pending();
  platform.failScores = 0;
  await (await post({ launch: launchIdOf(page2.text), source: REFERENCE })).json();
  await tool.lti.pending();
  const callsThen = platform.scoreCalls;
  assert.deepEqual(await tool.lti.resendFailed(), { tried: 0, replaced: 1 });
  assert.equal(platform.scoreCalls, callsThen);
  const last = [];
  await ltiCli(['grades', '--lti-dir', DIR, '--limit', '2'], { out: (l) => last.push(l), err: () => {} });
  assert.match(last[0], /\breplaced\b.*a newer grade of this learner and link was sent/);
  assert.match(last[1], /\bsent\b/);
});

test('the lab page the launch opens: its Submit to the course grades on the server, and that grade reaches the AGS', async () => {
  const { state, nonce } = await login();
  const page = await launch(await idToken(platform, nonce, { claims: { sub: 'learner-44' } }), state);
  assert.equal(page.status, 200, page.text);
  const href = /<a href="([^"]*#lti-launch=[A-Za-z0-9_-]+)"/.exec(page.text)?.[1]?.replaceAll('&amp;', '&');
  assert.ok(href, page.text);
  assert.equal(new URL(href).hash, `#lti-launch=${launchIdOf(page.text)}`);
  platform.failScores = 0;
  const browser = await chromium.launch(LAUNCH);
  try {
    const p = await browser.newPage();
    await p.goto(href);
    await p.waitForFunction(() => window.deliveryLab);
    await p.evaluate(() => window.deliveryLab.loaded);
    // The launch's id leaves the address bar (and so the history) at once.
    assert.equal(new URL(p.url()).hash, '');
    assert.equal(await p.locator('#submit').innerText(), 'Submit to the course');
    await p.evaluate((source) => window.deliveryLab.setCode(source), NO_NX);
    // One hint opened: staff see it beside the grade (the score's comment, ./lab lti grades).
    await p.locator('.task-tools[data-task="1"] button.secondary').click();
    const before = platform.scoreCalls;
    await p.locator('#submit').click();
    await p.waitForFunction(() => /Graded by the server/.test(document.getElementById('status').textContent), null, { timeout: 60_000 });
    assert.match(await p.locator('#status').innerText(), /on its way to your course's gradebook/);
    const shown = await p.evaluate(() => window.deliveryLab.lastReport);
    await tool.lti.pending();
    assert.equal(platform.scoreCalls - before, 1);
    const sent = platform.scores.at(-1);
    assert.equal(sent.userId, 'learner-44');
    assert.equal(sent.scoreGiven, shown.score);
    assert.match(sent.comment, /; 1 hint opened$/);
    const listed = [];
    await ltiCli(['grades', '--lti-dir', DIR, '--limit', '1'], { out: (l) => listed.push(l), err: () => {} });
    assert.match(listed[0], /user learner-44 .*\bhints 1\b/);
    assert.ok(shown.score < shown.max_score, 'the partial score of the code in the editor');
    // A reload keeps this tab's launch; a new tab of the same page has none.
    await p.reload();
    await p.evaluate(() => window.deliveryLab.loaded);
    assert.equal(await p.locator('#submit').innerText(), 'Submit to the course');
    const other = await (await browser.newContext()).newPage();
    await other.goto(href.replace(/#.*$/, ''));
    await other.evaluate(() => window.deliveryLab?.loaded);
    assert.equal(await other.locator('#submit').isVisible(), false);
    // Framed (here by a page of its own origin), the page takes no launch from its URL.
    await other.evaluate((src) => {
      const f = document.createElement('iframe');
      f.id = 'framed';
      f.src = src;
      document.body.append(f);
    }, href);
    const framed = await (await other.waitForSelector('#framed')).contentFrame();
    await framed.waitForFunction(() => window.deliveryLab);
    await framed.evaluate(() => window.deliveryLab.loaded);
    assert.equal(await framed.locator('#submit').isVisible(), false);
    assert.match(framed.url(), /#lti-launch=/);
  } finally {
    await browser.close();
  }
});

test('deep linking: an instructor picks one of the engine\'s labs; the tool answers a signed LtiDeepLinkingResponse', async () => {
  const { state, nonce } = await login();
  const claims = {
    [LTI.messageType]: LTI.deepLinkingRequest, [LTI.roles]: [STAFF_ROLES[0]],
    [LTI.dlSettings]: { deep_link_return_url: `${platform.url}/dl-return`, accept_types: ['ltiResourceLink'], data: 'opaque-42' },
  };
  const page = await launch(await idToken(platform, nonce, { claims, drop: ['resource_link', 'target_link_uri'] }), state);
  assert.equal(page.status, 200, page.text);
  // The labs come from the engine's list (the grader's registry), not from this test.
  const { loadGrader } = await import('../../host/node_host.mjs');
  const labs = JSON.parse(new (await loadGrader()).Grader().labs());
  for (const l of labs) assert.match(page.text, new RegExp(`value="${l.id}"`));
  const launchId = launchIdOf(page.text);
  const bad = await fetch(`${tool.base}/lti/deep-link`, form({ launch: launchId, lab: 'no-such-lab' }));
  assert.equal(bad.status, 400);
  const res = await fetch(`${tool.base}/lti/deep-link`, form({ launch: launchId, lab: 'courier' }));
  assert.equal(res.status, 200);
  const text = await res.text();
  assert.match(text, new RegExp(`action="${platform.url}/dl-return"`));
  const jwt = /name="JWT" value="([^"]+)"/.exec(text)[1];
  const { payload, protectedHeader } = await jwtVerify(jwt, createLocalJWKSet(await platform.toolJwks()), { issuer: CLIENT_ID, audience: platform.issuer });
  assert.equal(protectedHeader.alg, 'RS256');
  assert.equal(payload[LTI.messageType], LTI.deepLinkingResponse);
  assert.equal(payload[LTI.versionClaim], '1.3.0');
  assert.equal(payload[LTI.deploymentId], DEPLOYMENT);
  assert.equal(payload[LTI.dlData], 'opaque-42');
  const [item] = payload[LTI.dlContentItems];
  assert.equal(item.type, 'ltiResourceLink');
  assert.deepEqual(item.custom, { lab: 'courier' });
  assert.equal(item.url, `${tool.base}/lti/launch?lab=courier`);
  assert.equal(item.lineItem.resourceId, 'courier');
  assert.equal(item.lineItem.scoreMaximum, JSON.parse(new (await loadGrader()).Grader().lab('courier')).tests.length);
});

test('hostile bodies: bounded, refused with 4xx, the server stays up', async () => {
  const big = await fetch(`${tool.base}/lti/launch`, form({ id_token: 'x'.repeat(300 * 1024), state: 's' }));
  assert.equal(big.status, 413);
  const type = await fetch(`${tool.base}/lti/launch`, { method: 'POST', headers: { 'Content-Type': 'text/plain' }, body: 'id_token=x' });
  assert.equal(type.status, 415);
  const twice = await fetch(`${tool.base}/lti/launch`, { method: 'POST', headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: 'state=a&state=b' });
  assert.equal(twice.status, 400);
  const notUtf8 = await fetch(`${tool.base}/lti/submit`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: Buffer.from([0xff, 0xfe]) });
  assert.equal(notUtf8.status, 400);
  for (const body of ['[]', 'null', '"x"', '{"launch": 1, "source": "x"}', '{']) {
    const r = await fetch(`${tool.base}/lti/submit`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
    assert.equal(r.status, 400, body);
  }
  // hintsOpened, the page's word for staff: a whole number within bounds, else refused.
  for (const hintsOpened of [-1, 1.5, '2', 1001, null, true]) {
    const r = await fetch(`${tool.base}/lti/submit`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ launch: 'x', source: 'x', hintsOpened }) });
    if (hintsOpened === null) assert.equal(r.status, 401, 'null is no hint count: the launch is looked at next');
    else {
      assert.equal(r.status, 400, String(hintsOpened));
      assert.match((await r.json()).error, /hintsOpened must be a whole number from 0 to 1000/);
    }
  }
  const overSubmit = await fetch(`${tool.base}/lti/submit`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ launch: 'x', source: 'x'.repeat(70 * 1024) }) });
  assert.equal(overSubmit.status, 413);
  // Seeded garbage at every endpoint: always a 4xx, never a 500, never a crash.
  const seed = Number(process.env.LTI_FUZZ_SEED ?? 41);
  let x = seed;
  const rand = () => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) / 2 ** 32);
  const pieces = ['id_token=', 'state=', '&', '=', '%', '%zz', 'eyJ', '.', 'launch=', 'lab=', '{', '"', 'source', '\u0000', '\uffff', 'a'.repeat(50)];
  for (let i = 0; i < 120; i++) {
    const body = Array.from({ length: 1 + Math.floor(rand() * 12) }, () => pieces[Math.floor(rand() * pieces.length)]).join('');
    const where = ['/lti/launch', '/lti/login', '/lti/deep-link', '/lti/submit'][i % 4];
    const type = rand() < 0.5 ? 'application/x-www-form-urlencoded' : 'application/json';
    const r = await fetch(`${tool.base}${where}`, { method: 'POST', headers: { 'Content-Type': type }, body });
    assert.ok(r.status >= 400 && r.status < 500, `seed ${seed}: ${where} ${type} ${JSON.stringify(body)} -> ${r.status}`);
    assert.ok(typeof (await r.json()).code === 'string');
  }
  assert.equal((await fetch(`${tool.base}/lti/launch`)).status, 405);
  assert.equal((await fetch(`${tool.base}/lti/nothing`, { method: 'POST' })).status, 404);
  assert.equal((await fetch(`${tool.base}/lti/jwks`)).status, 200, 'still up');

  // Anyone may start a login: past the store's cap of logins waiting for a launch, 429.
  const store = createFileStore(path.join(TMP, 'capped'), { maxLiveStates: 1 });
  await store.addPlatform({ issuer: platform.issuer, clientId: CLIENT_ID, deploymentIds: [DEPLOYMENT], authUrl: `${platform.url}/auth`, tokenUrl: `${platform.url}/token`, jwksUrl: `${platform.url}/jwks` });
  let base = null;
  const capped = createLtiTool({ store, keys: keyRing(path.join(TMP, 'capped')), baseUrl: () => base, labs: [], grade: () => { throw new Error('not here'); }, log: () => {} });
  const { server, url } = await listen((req, res) => { if (!capped.handle(req, res, new URL(`http://x${req.url}`).pathname)) { res.writeHead(404); res.end(); } });
  base = url;
  try {
    const start = () => fetch(`${url}/lti/login?${new URLSearchParams({ iss: platform.issuer, login_hint: 'h', target_link_uri: `${url}/lti/launch` })}`, { redirect: 'manual' });
    assert.equal((await start()).status, 302);
    const flood = await start();
    assert.equal(flood.status, 429);
    assert.equal((await flood.json()).code, 'busy');
  } finally {
    server.close();
  }
});

test('keys: the JWKS keeps a retired key until its tokens expire; key files are 0600 and refused when readable by others', async () => {
  let clock = Date.parse('2026-01-01T00:00:00Z');
  const dir = path.join(TMP, 'keys-test');
  const ring = keyRing(dir, { now: () => clock });
  const first = await ring.current();
  assert.equal((await ring.jwks()).keys.length, 1);
  assert.equal(fs.statSync(path.join(dir, 'keys', `${first.kid}.pem`)).mode & 0o777, 0o600);
  assert.equal(fs.statSync(dir).mode & 0o777, 0o700);
  const second = await ring.rotate();
  assert.notEqual(second, first.kid);
  assert.equal((await ring.current()).kid, second, 'the new key signs');
  assert.deepEqual((await ring.jwks()).keys.map((k) => k.kid).sort(), [first.kid, second].sort(), 'the old one is still published');
  assert.ok((await ring.jwks()).keys.every((k) => k.d === undefined && k.p === undefined), 'no private part is published');
  clock += RETIRED_KEPT_MS - 1;
  assert.equal((await ring.jwks()).keys.length, 2);
  clock += 1;
  assert.deepEqual((await ring.jwks()).keys.map((k) => k.kid), [second], 'gone once its tokens have expired');
  await ring.rotate(); // deletes the long-retired key's file
  assert.ok(!fs.existsSync(path.join(dir, 'keys', `${first.kid}.pem`)));
  // A key file others may read is refused.
  const loose = keyRing(path.join(TMP, 'keys-loose'));
  const k = await loose.current();
  fs.chmodSync(path.join(TMP, 'keys-loose', 'keys', `${k.kid}.pem`), 0o644);
  await assert.rejects(keyRing(path.join(TMP, 'keys-loose')).current(), KeyFileError);
  // The tool's folder may not be inside what the server serves.
  await assert.rejects(serve({ port: 0, root: ROOT, quiet: true, isolate: false, grading: { pool: { grade: async () => ({}) }, labs: ['deliver-once'] }, lti: { dir: path.join(ROOT, 'lti') } }),
    /must not be served/);
});
