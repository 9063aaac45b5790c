// Hidden inputs drawn per submission (issue 28), on the trusted side: each
// submission's hidden seed is a keyed hash of the grader's secret and the
// submission, so its hidden tests' task keys, times and names (the engine's
// src/deliver_once/variant.rs) are new for every submission, the same for the same
// file and secret, and unknowable without the secret. The seed is staff-facing only:
// no learner-facing report carries it (the engine prints none; the CLI adds it to
// its own JSON line, its text and its summary lines).
import crypto from 'node:crypto';
import fs from 'node:fs';
import { SEED_MAX } from '../host/engine.mjs';

/** The secret's file in a packaged grader (./lab package writes it, root's alone
 *  once platform.mjs has locked the grader down). */
export const PACKAGED_SECRET_FILE = 'hidden-secret';

/** The file that marks a folder as a grader ./lab package wrote (platform.mjs locks
 *  down only such a folder). */
export const GRADER_MARKER = '.delivery-lab-grader';

/** The fewest bytes a secret file must hold. */
export const SECRET_MIN_BYTES = 16;

/** Why a secret file cannot be used, as a typed error the CLI reports. */
export class SecretError extends Error {
  constructor(message) {
    super(message);
    this.name = 'SecretError';
  }
}

/** A fresh secret for one process's run (a run that gives no --secret-file). */
export const newSecret = () => crypto.randomBytes(32);

/** The secret in `file`: its bytes, at least SECRET_MIN_BYTES of them. */
export function readSecret(file) {
  let bytes;
  try {
    bytes = fs.readFileSync(file);
  } catch (e) {
    throw new SecretError(`${file}: ${e.code === 'ENOENT' ? 'no such file' : e.message}`);
  }
  if (bytes.length < SECRET_MIN_BYTES) throw new SecretError(`${file}: a secret needs at least ${SECRET_MIN_BYTES} bytes, it has ${bytes.length}`);
  return bytes;
}

/** The hidden seed of `source` in lab `lab` under `secret`: HMAC-SHA256 of the lab
 *  and the source, its first 32 bits (the grader takes a 32-bit seed). */
export function hiddenSeedOf(secret, lab, source) {
  const mac = crypto.createHmac('sha256', secret).update(`${lab}\0`).update(source, 'utf8').digest();
  return mac.readUInt32BE(0) % (SEED_MAX + 1);
}

/**
 * What a grading service asks for each submission: `(lab, source) => { seed,
 * statuses }`, the seed drawn from `secret` for a lab among `variantLabs` (the
 * registry's hidden_variants), null for the others (their cases as written).
 */
export function hiddenPolicy({ secret, statuses = 'each', variantLabs }) {
  const labs = new Set(variantLabs);
  return (lab, source) => ({ seed: labs.has(lab) ? hiddenSeedOf(secret, lab, source) : null, statuses });
}

/**
 * A grading service's policy (serve.mjs --grading, the queue's front.mjs): hiddenPolicy
 * over the labs of `registry` (the grader's: labs(), lab(id), as JSON) that have
 * hidden_variants, its secret read from `secretFile` (a SecretError when it cannot be
 * used) or, without one, a secret of this process's own.
 */
export function servicePolicy({ registry, secretFile, statuses = 'each' }) {
  const variantLabs = JSON.parse(registry.labs()).map((l) => l.id).filter((id) => JSON.parse(registry.lab(id)).hidden_variants);
  return hiddenPolicy({ secret: secretFile ? readSecret(secretFile) : newSecret(), statuses, variantLabs });
}

/** The staff's replay command: the report's own, with the hidden seed (and the
 *  aggregate statuses, when asked) that reproduce the same report. */
export function staffReplay(replay, hiddenSeed, hiddenStatuses) {
  const extra = `${hiddenSeed === null ? '' : ` --hidden-seed ${hiddenSeed}`}${hiddenStatuses === 'aggregate' ? ' --hidden-statuses aggregate' : ''}`;
  return extra ? replay.replace(/ solution\.py$/, `${extra} solution.py`) : replay;
}
