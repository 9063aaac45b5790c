#!/usr/bin/env node
// The queue's API tokens (issue 37): one or more per course, stored hashed, made,
// listed and revoked with `./lab token` (this file's command line; its table is TOKEN
// in www/grader/commands.mjs).
//
//   ./lab token make   --queue URL --course NAME   prints the new token, once
//   ./lab token list   --queue URL                 id, course, made, revoked
//   ./lab token revoke --queue URL ID              the token stops working at once
//
// A token is `dlq_<id>_<secret>`: `id` (12 hex digits) names it in the table and in
// logs; `secret` (32 random bytes, base64url) is never stored: only its SHA-256 is
// (a secret of 256 random bits needs no slow hash: nothing can be guessed from it).
// A front reads the table on each request, so a revoked token is refused at the next
// one. Rotation without downtime: make a second token for the course, move its
// clients to it, revoke the first; both work meanwhile, and both are the same client
// (the course): its submissions and idempotency keys stay its own.
import crypto from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseOrExit, usageExit } from '../args.mjs';
import { TOKEN } from '../commands.mjs';
import { DB_TIMEOUTS, SCHEMA, ensureSchema, makePool } from './common.mjs';

const FORMAT = /^dlq_([0-9a-f]{12})_([A-Za-z0-9_-]{43})$/;
const sha256 = (text) => crypto.createHash('sha256').update(text, 'utf8').digest();

/** A new token for `course`: { id, token } (the token is shown once: only its hash is kept). */
export async function makeToken(db, course) {
  const id = crypto.randomBytes(6).toString('hex');
  const secret = crypto.randomBytes(32).toString('base64url');
  await db.query(`INSERT INTO ${SCHEMA}.tokens (id, course, secret_sha256) VALUES ($1, $2, $3)`, [id, course, sha256(secret).toString('hex')]);
  return { id, token: `dlq_${id}_${secret}` };
}

/** Revokes token `id`: true when it was live. */
export async function revokeToken(db, id) {
  const r = await db.query(`UPDATE ${SCHEMA}.tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL`, [id]);
  return r.rowCount === 1;
}

export async function listTokens(db) {
  return (await db.query(`SELECT id, course, created_at, revoked_at FROM ${SCHEMA}.tokens ORDER BY course, created_at`)).rows;
}

/** Whether any token is live (a front that has tokens asks every request for one). */
export async function anyToken(db) {
  return (await db.query(`SELECT EXISTS (SELECT 1 FROM ${SCHEMA}.tokens WHERE revoked_at IS NULL) AS any`)).rows[0].any;
}

/** The course of a live token, or null (malformed, unknown, revoked, wrong secret). */
export async function courseOf(db, token) {
  const m = FORMAT.exec(String(token));
  if (!m) return null;
  const { rows } = await db.query(`SELECT course, secret_sha256 FROM ${SCHEMA}.tokens WHERE id = $1 AND revoked_at IS NULL`, [m[1]]);
  if (!rows.length) return null;
  const ok = crypto.timingSafeEqual(sha256(m[2]), Buffer.from(rows[0].secret_sha256, 'hex'));
  return ok ? rows[0].course : null;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { values: v, positionals: [action, id] } = parseOrExit(TOKEN, process.argv.slice(2), 'token');
  const connectionString = v.queue ?? process.env.GRADING_QUEUE_URL;
  if (!connectionString) usageExit(TOKEN, '--queue (or GRADING_QUEUE_URL) is needed', 'token');
  const db = makePool(connectionString, { max: 1, ...DB_TIMEOUTS.setup });
  let code = 0;
  try {
    await ensureSchema(db);
    if (action === 'make') {
      const t = await makeToken(db, v.course);
      console.log(t.token);
      console.error(`token ${t.id} for course ${v.course}: give it to the course's client (Authorization: Bearer TOKEN); it is not shown again`);
    } else if (action === 'revoke') {
      if (await revokeToken(db, id)) console.error(`token ${id} revoked`);
      else { console.error(`token: no live token ${id}`); code = 1; }
    } else {
      for (const t of await listTokens(db)) {
        console.log(`${t.id}  ${t.course}  made ${t.created_at.toISOString()}${t.revoked_at ? `  revoked ${t.revoked_at.toISOString()}` : ''}`);
      }
    }
  } catch (e) {
    console.error(`token: ${e.message}`);
    code = 2;
  } finally {
    await db.end().catch(() => {});
  }
  process.exit(code);
}
