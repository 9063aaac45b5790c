// The LTI tool's store (issue 41): one interface, two backends.
//
//   createFileStore(dir)              platforms.json (written by `./lab lti`, read by the
//                                     server) and state.json (the server's own: login
//                                     states, used nonces, launches, line items, grades
//                                     sent), each written whole, atomically, mode 0600
//   createPgStore(connectionString)   the same in the queue's PostgreSQL (schema grading,
//                                     tables lti_*), for ./lab serve --grading --queue
//
// Each file has one writer: platforms.json `./lab lti` (the server reads it again when it
// changes), state.json the one server using the folder (several servers: use --queue).
// Times are the caller's clock (ms), so tests inject theirs; what has expired is never
// returned and is pruned as it is written over.
//
// The interface (every method async):
//   addPlatform(p) → 'added' | 'updated'      p: PLATFORM_FIELDS
//   removePlatform(issuer, clientId) → bool
//   listPlatforms() → [p]
//   platformsOf(issuer) → [p]                  (a platform is an issuer and a client id)
//   putState(state, rec, expiresMs, nowMs) → false past MAX_LIVE_STATES
//                                              takeState(state, nowMs) → rec | null (once)
//   useNonce(issuer, nonce, expiresMs, nowMs) → true the first time, false after
//   putLaunch(id, rec, expiresMs, nowMs)       getLaunch(id, nowMs) → rec | null
//   getLineItem(key) → url | null              putLineItem(key, url)
//   addGrade(rec) → id                         updateGrade(id, patch)
//   listGrades({ limit }) → [rec], newest last
//   close()
import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';

/** A registered platform's fields, the one list of them (`./lab lti add` sets each). */
export const PLATFORM_FIELDS = Object.freeze(['issuer', 'clientId', 'deploymentIds', 'authUrl', 'tokenUrl', 'jwksUrl']);

/** How many grade records a file store keeps (the oldest go first); PostgreSQL keeps all. */
export const FILE_GRADES_KEPT = 10_000;

/** Login initiations waiting for their launch, at most: anyone may start one, so a flood
 *  of them is refused (putState false: 429) instead of growing the store. */
export const MAX_LIVE_STATES = 5000;

/** The folder's files. */
export const STORE_FILES = Object.freeze({ platforms: 'platforms.json', state: 'state.json' });

const samePlatform = (a, issuer, clientId) => a.issuer === issuer && a.clientId === clientId;

/** Writes `value` as JSON to `file` atomically (a temporary file renamed over it), mode 0600. */
export function writeJsonAtomic(file, value) {
  const tmp = `${file}.tmp-${process.pid}-${crypto.randomBytes(4).toString('hex')}`;
  fs.writeFileSync(tmp, `${JSON.stringify(value, null, 1)}\n`, { mode: 0o600 });
  fs.renameSync(tmp, file);
}

function readJson(file, empty) {
  let text;
  try { text = fs.readFileSync(file, 'utf8'); } catch (e) {
    if (e.code === 'ENOENT') return empty();
    throw e;
  }
  return JSON.parse(text);
}

/** The folder the store and the keys live in: made mode 0700 when missing. */
export function ensurePrivateDir(dir) {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  return dir;
}

export function createFileStore(dir, { maxLiveStates = MAX_LIVE_STATES } = {}) {
  ensurePrivateDir(dir);
  const platformsFile = path.join(dir, STORE_FILES.platforms);
  const stateFile = path.join(dir, STORE_FILES.state);
  // platforms.json is read again whenever it changed (./lab lti add while serving).
  let platforms = null;
  let platformsStamp = null;
  const loadPlatforms = () => {
    let st = null;
    try { st = fs.statSync(platformsFile); } catch { /* none yet */ }
    const stamp = st ? `${st.mtimeMs}:${st.size}:${st.ino}` : 'none';
    if (stamp !== platformsStamp) {
      platforms = readJson(platformsFile, () => ({ platforms: [] })).platforms;
      platformsStamp = stamp;
    }
    return platforms;
  };
  const savePlatforms = (list) => {
    writeJsonAtomic(platformsFile, { platforms: list });
    platformsStamp = null;
  };
  // state.json: this process's, held in memory and written after each change.
  const s = readJson(stateFile, () => ({}));
  for (const k of ['states', 'nonces', 'launches', 'lineItems']) s[k] ??= {};
  s.grades ??= [];
  s.nextGrade ??= 1;
  let chain = Promise.resolve();
  // One change at a time, each written before the next starts.
  const change = (fn) => {
    const p = chain.then(() => {
      const out = fn(s);
      writeJsonAtomic(stateFile, s);
      return out;
    });
    chain = p.catch(() => {});
    return p;
  };
  const prune = (map, nowMs) => {
    for (const [k, v] of Object.entries(map)) if (v.expiresMs <= nowMs) delete map[k];
  };

  return {
    kind: 'file',
    where: dir,
    async addPlatform(p) {
      const list = loadPlatforms().filter((x) => !samePlatform(x, p.issuer, p.clientId));
      const updated = list.length !== loadPlatforms().length;
      savePlatforms([...list, pick(p)]);
      return updated ? 'updated' : 'added';
    },
    async removePlatform(issuer, clientId) {
      const list = loadPlatforms();
      const left = list.filter((x) => !samePlatform(x, issuer, clientId));
      if (left.length === list.length) return false;
      savePlatforms(left);
      return true;
    },
    async listPlatforms() { return loadPlatforms().map(pick); },
    async platformsOf(issuer) { return loadPlatforms().filter((x) => x.issuer === issuer).map(pick); },
    putState: (state, rec, expiresMs, nowMs) => change((d) => {
      prune(d.states, nowMs);
      if (Object.keys(d.states).length >= maxLiveStates) return false;
      d.states[state] = { rec, expiresMs };
      return true;
    }),
    takeState: (state, nowMs) => change((d) => {
      prune(d.states, nowMs);
      const hit = Object.hasOwn(d.states, state) ? d.states[state] : null;
      if (hit) delete d.states[state];
      return hit ? hit.rec : null;
    }),
    useNonce: (issuer, nonce, expiresMs, nowMs) => change((d) => {
      prune(d.nonces, nowMs);
      const key = `${issuer}\n${nonce}`;
      if (Object.hasOwn(d.nonces, key)) return false;
      d.nonces[key] = { expiresMs };
      return true;
    }),
    putLaunch: (id, rec, expiresMs, nowMs) => change((d) => {
      prune(d.launches, nowMs);
      d.launches[id] = { rec, expiresMs };
    }),
    async getLaunch(id, nowMs) {
      await chain;
      const hit = Object.hasOwn(s.launches, id) ? s.launches[id] : null;
      return hit && hit.expiresMs > nowMs ? hit.rec : null;
    },
    async getLineItem(key) { await chain; return Object.hasOwn(s.lineItems, key) ? s.lineItems[key] : null; },
    putLineItem: (key, url) => change((d) => { d.lineItems[key] = url; }),
    addGrade: (rec) => change((d) => {
      const id = d.nextGrade++;
      d.grades.push({ id, ...rec });
      if (d.grades.length > FILE_GRADES_KEPT) d.grades.splice(0, d.grades.length - FILE_GRADES_KEPT);
      return id;
    }),
    updateGrade: (id, patch) => change((d) => {
      const g = d.grades.find((x) => x.id === id);
      if (g) Object.assign(g, patch);
    }),
    async listGrades({ limit = 100 } = {}) {
      await chain;
      // state.json is the server's: another process (./lab lti grades) reads it from disk.
      const grades = readJson(stateFile, () => ({ grades: [] })).grades ?? [];
      return grades.slice(-limit);
    },
    async close() { await chain; },
  };
}

const pick = (p) => Object.fromEntries(PLATFORM_FIELDS.map((f) => [f, p[f]]));

// ---------------------------------------------------------------------------
// PostgreSQL: the queue's database, schema grading (queue/common.mjs SCHEMA).

export const LTI_SCHEMA_SQL = (schema) => `
CREATE SCHEMA IF NOT EXISTS ${schema};
CREATE TABLE IF NOT EXISTS ${schema}.lti_platforms (
  issuer text NOT NULL, client_id text NOT NULL, deployment_ids text[] NOT NULL,
  auth_url text NOT NULL, token_url text NOT NULL, jwks_url text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (issuer, client_id));
CREATE TABLE IF NOT EXISTS ${schema}.lti_states (state text PRIMARY KEY, rec jsonb NOT NULL, expires_ms bigint NOT NULL);
CREATE TABLE IF NOT EXISTS ${schema}.lti_nonces (issuer text NOT NULL, nonce text NOT NULL, expires_ms bigint NOT NULL, PRIMARY KEY (issuer, nonce));
CREATE TABLE IF NOT EXISTS ${schema}.lti_launches (id text PRIMARY KEY, rec jsonb NOT NULL, expires_ms bigint NOT NULL);
CREATE TABLE IF NOT EXISTS ${schema}.lti_line_items (key text PRIMARY KEY, url text NOT NULL);
CREATE TABLE IF NOT EXISTS ${schema}.lti_grades (id bigserial PRIMARY KEY, rec jsonb NOT NULL);
`;

const rowPlatform = (r) => ({
  issuer: r.issuer, clientId: r.client_id, deploymentIds: r.deployment_ids, authUrl: r.auth_url, tokenUrl: r.token_url, jwksUrl: r.jwks_url,
});

export async function createPgStore(connectionString, { maxLiveStates = MAX_LIVE_STATES } = {}) {
  const { SCHEMA, DB_TIMEOUTS, makePool, withPool } = await import('../queue/common.mjs');
  await withPool(connectionString, DB_TIMEOUTS.setup, (db) => db.query(LTI_SCHEMA_SQL(SCHEMA)));
  const db = makePool(connectionString, { max: 4, onError: () => {}, ...DB_TIMEOUTS.front });
  const T = (name) => `${SCHEMA}.lti_${name}`;
  const one = async (sql, args) => (await db.query(sql, args)).rows;
  return {
    kind: 'postgresql',
    where: 'the queue\'s PostgreSQL',
    async addPlatform(p) {
      const rows = await one(`INSERT INTO ${T('platforms')} (issuer, client_id, deployment_ids, auth_url, token_url, jwks_url)
        VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (issuer, client_id) DO UPDATE SET deployment_ids = $3, auth_url = $4, token_url = $5, jwks_url = $6
        RETURNING (xmax = 0) AS added`, [p.issuer, p.clientId, p.deploymentIds, p.authUrl, p.tokenUrl, p.jwksUrl]);
      return rows[0].added ? 'added' : 'updated';
    },
    async removePlatform(issuer, clientId) {
      return (await db.query(`DELETE FROM ${T('platforms')} WHERE issuer = $1 AND client_id = $2`, [issuer, clientId])).rowCount === 1;
    },
    async listPlatforms() { return (await one(`SELECT * FROM ${T('platforms')} ORDER BY issuer, client_id`)).map(rowPlatform); },
    async platformsOf(issuer) { return (await one(`SELECT * FROM ${T('platforms')} WHERE issuer = $1 ORDER BY client_id`, [issuer])).map(rowPlatform); },
    async putState(state, rec, expiresMs, nowMs) {
      await db.query(`DELETE FROM ${T('states')} WHERE expires_ms <= $1`, [nowMs]);
      const r = await db.query(`INSERT INTO ${T('states')} (state, rec, expires_ms)
        SELECT $1, $2, $3 WHERE (SELECT count(*) FROM ${T('states')}) < $4`, [state, rec, expiresMs, maxLiveStates]);
      return r.rowCount === 1;
    },
    async takeState(state, nowMs) {
      await db.query(`DELETE FROM ${T('states')} WHERE expires_ms <= $1`, [nowMs]);
      const rows = await one(`DELETE FROM ${T('states')} WHERE state = $1 AND expires_ms > $2 RETURNING rec`, [state, nowMs]);
      return rows[0]?.rec ?? null;
    },
    async useNonce(issuer, nonce, expiresMs, nowMs) {
      await db.query(`DELETE FROM ${T('nonces')} WHERE expires_ms <= $1`, [nowMs]);
      const r = await db.query(`INSERT INTO ${T('nonces')} (issuer, nonce, expires_ms) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, [issuer, nonce, expiresMs]);
      return r.rowCount === 1;
    },
    async putLaunch(id, rec, expiresMs, nowMs) {
      await db.query(`DELETE FROM ${T('launches')} WHERE expires_ms <= $1`, [nowMs]);
      await db.query(`INSERT INTO ${T('launches')} (id, rec, expires_ms) VALUES ($1, $2, $3)`, [id, rec, expiresMs]);
    },
    async getLaunch(id, nowMs) {
      return (await one(`SELECT rec FROM ${T('launches')} WHERE id = $1 AND expires_ms > $2`, [id, nowMs]))[0]?.rec ?? null;
    },
    async getLineItem(key) { return (await one(`SELECT url FROM ${T('line_items')} WHERE key = $1`, [key]))[0]?.url ?? null; },
    async putLineItem(key, url) {
      await db.query(`INSERT INTO ${T('line_items')} (key, url) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET url = $2`, [key, url]);
    },
    async addGrade(rec) { return Number((await one(`INSERT INTO ${T('grades')} (rec) VALUES ($1) RETURNING id`, [rec]))[0].id); },
    async updateGrade(id, patch) { await db.query(`UPDATE ${T('grades')} SET rec = rec || $2::jsonb WHERE id = $1`, [id, patch]); },
    async listGrades({ limit = 100 } = {}) {
      const rows = await one(`SELECT id, rec FROM (SELECT id, rec FROM ${T('grades')} ORDER BY id DESC LIMIT $1) g ORDER BY id`, [limit]);
      return rows.map((r) => ({ id: Number(r.id), ...r.rec }));
    },
    async close() { await db.end().catch(() => {}); },
  };
}

/** The store of a server or of `./lab lti`: PostgreSQL when given a queue, else the folder's files. */
export function openStore({ queue, dir }) {
  return queue ? createPgStore(queue) : createFileStore(dir);
}
