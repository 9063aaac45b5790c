// What the Chromium tests and bench.mjs start alike: Debian's Chromium with the
// flags this machine needs (its own sandbox, GPU and background fetches off), and
// a page built into `root` (build.mjs --no-wasm: www/pkg as it is) served by
// serve.mjs in a child process, as `./lab serve` sends it.
import { execFileSync, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const WWW = fileURLToPath(new URL('../', import.meta.url));

export const LAUNCH = {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
};

/** The page, built into `root` from www/pkg as it is. */
export function buildPage(root) {
  execFileSync(process.execPath, ['build.mjs', '--no-wasm', '--out', root], { cwd: WWW, stdio: 'inherit' });
}

/** serve.mjs over `root` on a free port; resolves to {url, stop}. */
export async function startServer(root) {
  const child = spawn(process.execPath, ['grader/serve.mjs', '--port', '0', '--root', root], { cwd: WWW, stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`serve.mjs exited with ${code}`)));
    child.stdout.once('data', (d) => resolve(d.toString().split('\n')[0].trim()));
  });
  return {
    url,
    stop: () => new Promise((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', resolve);
      child.kill();
    }),
  };
}
