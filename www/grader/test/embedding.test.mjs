// Embedding as www/page/EMBED.md documents it: the headers serve.mjs sends are the ones
// its table lists (frame-ancestors with the served build's origins included), and a
// running server told of a build with other origins says to restart, while it keeps
// serving, and framing for, the build it started with.
// Run: cd www && node --test grader/test/embedding.test.mjs   (no build needed)
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { serve } from '../serve.mjs';

const WWW = fileURLToPath(new URL('../../', import.meta.url));
const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-embedding-test-'));
after(() => fs.rmSync(TMP, { recursive: true, force: true }));

/** A build folder as build.mjs leaves one (the files the headers depend on). */
function fakeBuild(dir, allowOrigins) {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'index.html'), `<!doctype html><title>lab</title><p>${allowOrigins.join(' ')}`);
  fs.writeFileSync(path.join(dir, 'embed.js'), 'export {};\n');
  fs.writeFileSync(path.join(dir, 'main.js'), 'console.log(1);\n');
  fs.writeFileSync(path.join(dir, 'build.json'), `${JSON.stringify({ version: allowOrigins.join(','), hidden: true, allowOrigins })}\n`);
}

/** The root's folder replaced by another in one rename, as build.mjs moves a build into place. */
function rebuild(root, allowOrigins) {
  const next = `${root}.next`;
  fakeBuild(next, allowOrigins);
  fs.renameSync(root, `${root}.old-${Date.now()}`);
  fs.renameSync(next, root);
}

const SECURITY = ['content-security-policy', 'cross-origin-opener-policy', 'cross-origin-embedder-policy', 'cross-origin-resource-policy',
  'access-control-allow-origin', 'x-content-type-options', 'x-frame-options'];
const canonical = (h) => h.replace(/(^|-)([a-z])/g, (m) => m.toUpperCase());

/** EMBED.md's table "What the lab's server sends": response -> its headers cell. */
function documented() {
  const md = fs.readFileSync(path.join(WWW, 'page', 'EMBED.md'), 'utf8');
  const at = md.indexOf('### What the lab\'s server sends');
  assert.ok(at > 0);
  const lines = md.slice(at).split('\n');
  const start = lines.findIndex((l) => l.startsWith('|'));
  const end = lines.findIndex((l, i) => i > start && !l.startsWith('|'));
  const rows = lines.slice(start + 2, end); // the table's own rows: no header, no rule
  return Object.fromEntries(rows.map((l) => { const c = l.split(' | '); return [c[0].slice(2), c[1]]; }));
}

test('EMBED.md lists every security header serve.mjs sends for pages, embed.js and other files, frame-ancestors included', async () => {
  const root = path.join(TMP, 'headers');
  fakeBuild(root, ['https://course.example', 'http://127.0.0.1:8001']);
  const { server, url } = await serve({ root, port: 0, quiet: true, hidden: true });
  try {
    const doc = documented();
    const cell = (key) => doc[Object.keys(doc).find((k) => k.startsWith(key))];
    for (const [file, key] of [['index.html', '`index.html`'], ['embed.js', '`embed.js`'], ['main.js', 'everything else']]) {
      const res = await fetch(new URL(file, url));
      assert.equal(res.status, 200);
      const text = cell(key);
      assert.ok(text, `EMBED.md has a row for ${file}`);
      for (const h of SECURITY) {
        const v = res.headers.get(h);
        if (v === null) {
          if (h === 'x-frame-options' && file === 'index.html') assert.match(text, /no `X-Frame-Options`/);
          else assert.ok(!text.includes(`\`${canonical(h)}:`), `${file}: EMBED.md says ${h}, the server sends none`);
          continue;
        }
        if (h === 'content-security-policy') {
          // The header is the served build's list; the table gives its form.
          assert.equal(v, "frame-ancestors 'self' https://course.example http://127.0.0.1:8001");
          assert.ok(text.includes('`Content-Security-Policy: frame-ancestors \'self\'` and the served build\'s `allowOrigins`'), text);
        } else if ((h === 'cross-origin-opener-policy' || h === 'cross-origin-embedder-policy') && text.includes('COOP/COEP')) {
          assert.equal(v, h === 'cross-origin-opener-policy' ? 'same-origin' : 'require-corp');
        } else {
          assert.ok(text.includes(`\`${canonical(h)}: ${v}\``), `${file}: EMBED.md's row should say \`${canonical(h)}: ${v}\`: ${text}`);
        }
      }
    }
  } finally {
    server.close();
  }
});

test('a build made while the server runs: it keeps serving and framing for its own, and says to restart when the origins differ', async () => {
  const root = path.join(TMP, 'live', 'dist');
  fakeBuild(root, ['https://a.example']);
  const said = [];
  const error = console.error;
  console.error = (...a) => { said.push(a.join(' ')); };
  const { server, url, embedding } = await serve({ root, port: 0, quiet: false, hidden: true, buildWatchMs: 50 });
  const until = async (pred, what) => {
    for (let i = 0; i < 100 && !pred(); i++) await new Promise((r) => setTimeout(r, 50));
    assert.ok(pred(), what);
  };
  const csp = async () => (await fetch(url)).headers.get('content-security-policy');
  try {
    assert.deepEqual(embedding(), { served: ['https://a.example'], built: ['https://a.example'], restart: false });
    assert.equal(await csp(), "frame-ancestors 'self' https://a.example");

    rebuild(root, ['https://b.example', 'https://c.example']);
    await until(() => said.length === 1, 'the server said nothing of the new build');
    assert.match(said[0], /build\.json now allows embedding by https:\/\/b\.example https:\/\/c\.example; this server still serves the build it started with \(frame-ancestors 'self' https:\/\/a\.example, and its page trusts those\): restart it to serve the new build/);
    assert.deepEqual(embedding(), { served: ['https://a.example'], built: ['https://b.example', 'https://c.example'], restart: true });
    // Still the build it started with: header and page agree.
    assert.equal(await csp(), "frame-ancestors 'self' https://a.example");
    assert.match(await (await fetch(url)).text(), /https:\/\/a\.example/);

    // Said once per change: the same origins again say nothing more; none at all is a change.
    rebuild(root, ['https://b.example', 'https://c.example']);
    await new Promise((r) => setTimeout(r, 400));
    assert.equal(said.length, 1, said.join('\n'));
    rebuild(root, []);
    await until(() => said.length === 2, 'a build without origins went unsaid');
    assert.match(said[1], /now allows embedding by none;.*restart it/);
    // Back to the served origins: nothing to restart for, and nothing said.
    rebuild(root, ['https://a.example']);
    await until(() => !embedding().restart, 'the origins are the served ones again');
    assert.equal(said.length, 2, said.join('\n'));
  } finally {
    console.error = error;
    server.close();
  }
});
