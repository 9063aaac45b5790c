#!/usr/bin/env node
// ./lab lti (issue 41): the LTI tool's platforms, key and grades. Its table is LTI_CMD in
// www/grader/commands.mjs (./lab lti --help); docs/lms.md says what each LMS asks.
//
//   ./lab lti add --issuer URL --client-id ID --deployment ID... --auth-url URL --token-url URL --jwks-url URL
//   ./lab lti list | remove --issuer URL --client-id ID | rotate-key | keys | grades [--limit N] | urls [--lti-url URL]
//
// Exit code: 0 done, 1 nothing to remove, 2 a usage error or a store that cannot be opened.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseOrExit } from '../args.mjs';
import { LTI_CMD, LTI_DIR_DEFAULT } from '../commands.mjs';
import { keyRing, RETIRED_KEPT_MS } from './keys.mjs';
import { openStore } from './store.mjs';

/** The URLs an LMS asks of the tool, under its public URL `base`. */
export function toolUrls(base) {
  return {
    login: `${base}/lti/login`, launch: `${base}/lti/launch`, redirect: `${base}/lti/launch`, jwks: `${base}/lti/jwks`,
    deepLink: `${base}/lti/launch`,
  };
}

const iso = (ms) => (ms === null || ms === undefined ? '-' : new Date(ms).toISOString());

export async function main(argv, { out = (l) => console.log(l), err = (l) => console.error(l) } = {}) {
  const { values: v, positionals: [action] } = parseOrExit(LTI_CMD, argv, 'lti');
  const dir = v['lti-dir'] ?? LTI_DIR_DEFAULT;
  if (action === 'urls') {
    const base = v['lti-url'] ?? 'http://127.0.0.1:8000';
    for (const [k, u] of Object.entries(toolUrls(base))) out(`${k.padEnd(9)} ${u}`);
    return 0;
  }
  if (action === 'rotate-key' || action === 'keys') {
    const keys = keyRing(dir);
    if (action === 'rotate-key') {
      const before = keys.list().length;
      const kid = await keys.rotate();
      err(`lti: signing key ${kid} made in ${keys.dir}${before ? `; the previous one stays in the JWKS for ${RETIRED_KEPT_MS / 1000} s more` : ''}`);
    }
    for (const k of keys.list()) out(`${k.kid}  made ${iso(k.createdMs)}  ${k.retiredMs === null ? 'signing' : `retired ${iso(k.retiredMs)}, published until ${iso(k.retiredMs + RETIRED_KEPT_MS)}`}`);
    return 0;
  }
  const store = await openStore({ queue: v.queue, dir });
  try {
    if (action === 'add') {
      const p = {
        issuer: v.issuer, clientId: v['client-id'], deploymentIds: [...new Set(v.deployment)], authUrl: v['auth-url'], tokenUrl: v['token-url'], jwksUrl: v['jwks-url'],
      };
      const how = await store.addPlatform(p);
      keyRing(dir); // the folder and its keys' folder, private, before the first launch
      err(`lti: platform ${p.issuer} (client ${p.clientId}) ${how} in ${store.where}`);
      return 0;
    }
    if (action === 'remove') {
      if (await store.removePlatform(v.issuer, v['client-id'])) { err(`lti: platform ${v.issuer} (client ${v['client-id']}) removed`); return 0; }
      err(`lti: no platform ${v.issuer} with client ${v['client-id']}`);
      return 1;
    }
    if (action === 'list') {
      for (const p of await store.listPlatforms()) {
        out(`${p.issuer}  client ${p.clientId}  deployments ${p.deploymentIds.join(',')}\n  auth ${p.authUrl}\n  token ${p.tokenUrl}\n  jwks ${p.jwksUrl}`);
      }
      return 0;
    }
    // grades: newest last, one line each.
    for (const g of await store.listGrades({ limit: v.limit })) {
      out([g.at, g.sent, `${g.scoreGiven}/${g.scoreMaximum}`, g.status, g.lab, `user ${g.userId}`, `link ${g.resourceLinkId}`, g.issuer,
        `attempts ${g.attempts}`, Number.isInteger(g.hintsOpened) ? `hints ${g.hintsOpened}` : '', g.error ? `error: ${g.error}` : '']
        .filter(Boolean).join('  ').trimEnd());
    }
    return 0;
  } finally {
    await store.close();
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main(process.argv.slice(2)).then((code) => process.exit(code), (e) => {
    console.error(`lti: ${e.message}`);
    process.exit(2);
  });
}
