// The tool's signing keys (issue 41): RS256 key pairs made with jose, each private key a
// file of mode 0600 (DIR/keys/KID.pem, DIR mode 0700), never inside what the server
// serves; DIR/keys/keys.json lists them: { kid, createdMs, retiredMs }.
//
// The newest unretired key signs (the deep linking responses, the client assertions of
// the token requests). `./lab lti rotate-key` makes a new one and retires the old one:
// the old key stays in the tool's JWKS until every token it signed has expired
// (TOKEN_LIFETIME_S after its retirement, plus CLOCK_SKEW_S), then its file is deleted.
// The server reads keys.json again when it changes, so a rotation needs no restart.
import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';
import { exportJWK, exportPKCS8, generateKeyPair, importPKCS8 } from 'jose';
import { ensurePrivateDir, writeJsonAtomic } from './store.mjs';

export const KEY_ALG = 'RS256';
/** The lifetime of every token the tool signs (deep linking responses, client assertions). */
export const TOKEN_LIFETIME_S = 300;
/** How far apart the tool's and a platform's clocks may be. */
export const CLOCK_SKEW_S = 60;
/** How long a retired key stays published: until the last token it signed has expired. */
export const RETIRED_KEPT_MS = (TOKEN_LIFETIME_S + CLOCK_SKEW_S) * 1000;

/** A key file that others may read, or anything the ring cannot trust. */
export class KeyFileError extends Error {
  constructor(message) {
    super(message);
    this.name = 'KeyFileError';
  }
}

/**
 * The key ring in `dir` (made 0700 when missing). `now()` is the clock (ms).
 * { current() → {kid, privateKey}, jwks() → {keys: [public JWK]}, rotate() → kid, list() → [meta] }.
 * current() makes the first key when there is none.
 */
export function keyRing(dir, { now = () => Date.now() } = {}) {
  const keysDir = ensurePrivateDir(path.join(ensurePrivateDir(dir), 'keys'));
  const listFile = path.join(keysDir, 'keys.json');
  const cache = new Map(); // kid -> { privateKey, jwk }
  let making = null;
  const pemOf = (kid) => path.join(keysDir, `${kid}.pem`);

  const readList = () => {
    try { return JSON.parse(fs.readFileSync(listFile, 'utf8')).keys; } catch (e) {
      if (e.code === 'ENOENT') return [];
      throw e;
    }
  };
  const published = (list) => list.filter((k) => k.retiredMs === null || now() < k.retiredMs + RETIRED_KEPT_MS);

  async function load(kid) {
    if (cache.has(kid)) return cache.get(kid);
    if (!/^[A-Za-z0-9_-]{8,64}$/.test(kid)) throw new KeyFileError(`${listFile} names a key ${JSON.stringify(kid)}: not a key id this tool makes`);
    const file = pemOf(kid);
    const st = fs.statSync(file);
    if ((st.mode & 0o077) !== 0) throw new KeyFileError(`${file} may be read by others (mode ${(st.mode & 0o777).toString(8)}): chmod 600 it, or rotate the key`);
    const privateKey = await importPKCS8(fs.readFileSync(file, 'utf8'), KEY_ALG, { extractable: true });
    const { d, p, q, dp, dq, qi, ...pub } = await exportJWK(privateKey); // the public half only
    const entry = { privateKey, jwk: { ...pub, kid, alg: KEY_ALG, use: 'sig' } };
    cache.set(kid, entry);
    return entry;
  }

  async function make() {
    const kid = crypto.randomBytes(12).toString('base64url');
    const { privateKey } = await generateKeyPair(KEY_ALG, { extractable: true, modulusLength: 2048 });
    fs.writeFileSync(pemOf(kid), await exportPKCS8(privateKey), { mode: 0o600, flag: 'wx' });
    return kid;
  }

  /** Retires the signing key and makes a new one; deletes the keys retired long enough ago. */
  async function rotate() {
    const list = readList();
    const kid = await make();
    const t = now();
    for (const k of list) if (k.retiredMs === null) k.retiredMs = t;
    const keep = published(list);
    for (const k of list) if (!keep.includes(k)) fs.rmSync(pemOf(k.kid), { force: true });
    writeJsonAtomic(listFile, { keys: [...keep, { kid, createdMs: t, retiredMs: null }] });
    return kid;
  }

  return {
    dir: keysDir,
    list: () => readList(),
    async current() {
      let k = readList().filter((x) => x.retiredMs === null).at(-1);
      if (!k) {
        // The first key, made once however many ask at the same time.
        making ??= rotate().finally(() => { making = null; });
        await making;
        k = readList().at(-1);
      }
      const { privateKey } = await load(k.kid);
      return { kid: k.kid, privateKey };
    },
    async jwks() {
      const list = published(readList());
      return { keys: await Promise.all(list.map(async (k) => (await load(k.kid)).jwk)) };
    },
    rotate,
  };
}
