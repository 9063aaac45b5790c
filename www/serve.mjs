// A small static server for www/dist on 127.0.0.1.
//   node serve.mjs [--port N] [--root DIR] [--quiet]
// It sends COOP/COEP so the page is crossOriginIsolated (SharedArrayBuffer, which
// the 8 s limit's interrupt needs), the MIME types browsers insist on for modules
// and WASM, and gzip for large compressible files. --port 0 picks a free port;
// the first line printed is the URL.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));

const MIME = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.wasm': 'application/wasm',
  '.zip': 'application/zip',
  '.map': 'application/json; charset=utf-8',
  '.py': 'text/x-python; charset=utf-8',
  '.md': 'text/markdown; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.txt': 'text/plain; charset=utf-8',
};
// python_stdlib.zip is stored uncompressed inside, but gzip saves only ~2% on it: not worth the CPU.
const COMPRESSIBLE = new Set(['.html', '.js', '.mjs', '.css', '.json', '.wasm', '.map', '.svg', '.txt', '.py', '.md']);
const GZIP_MIN_BYTES = 1024;

function parseArgs(argv) {
  const opts = { port: 8000, root: path.join(HERE, 'dist'), quiet: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--port') opts.port = Number(argv[++i]);
    else if (a.startsWith('--port=')) opts.port = Number(a.slice(7));
    else if (a === '--root') opts.root = path.resolve(argv[++i]);
    else if (a.startsWith('--root=')) opts.root = path.resolve(a.slice(7));
    else if (a === '--quiet') opts.quiet = true;
    else if (a === '--help' || a === '-h') {
      console.log('usage: node serve.mjs [--port N] [--root DIR] [--quiet]');
      process.exit(0);
    } else {
      console.error(`serve: unknown argument ${a}`);
      process.exit(2);
    }
  }
  if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535) {
    console.error('serve: --port needs a number from 0 to 65535');
    process.exit(2);
  }
  return opts;
}

/**
 * Starts the server; resolves to { server, url }.
 * @param {{port?:number, root?:string, quiet?:boolean}} opts
 */
export function serve({ port = 8000, root = path.join(HERE, 'dist'), quiet = false } = {}) {
  root = path.resolve(root);
  if (!fs.existsSync(path.join(root, 'index.html'))) {
    throw new Error(`${root} has no index.html: run "npm run build" first`);
  }
  const gzipCache = new Map(); // path -> {mtimeMs, buf}: each file is compressed once

  const server = http.createServer((req, res) => {
    const send = (status, body, headers = {}) => {
      res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', ...security(), ...headers });
      res.end(body);
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') return send(405, 'Method not allowed\n', { Allow: 'GET, HEAD' });
    let rel;
    try {
      rel = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    } catch {
      return send(400, 'Bad request\n');
    }
    if (rel.endsWith('/')) rel += 'index.html';
    const file = path.join(root, path.normalize(rel));
    // Nothing outside the root, whatever the URL says.
    if (file !== root && !file.startsWith(root + path.sep)) return send(403, 'Forbidden\n');
    fs.stat(file, (err, st) => {
      if (err || !st.isFile()) return send(404, 'Not found\n');
      const ext = path.extname(file).toLowerCase();
      const etag = `"${st.size.toString(16)}-${Math.floor(st.mtimeMs).toString(16)}"`;
      const headers = {
        'Content-Type': MIME[ext] || 'application/octet-stream',
        // Revalidate every time: files keep their names across builds, and the
        // service worker, not the HTTP cache, is what makes repeat visits fast.
        'Cache-Control': 'no-cache',
        ETag: etag,
        ...security(),
      };
      if (req.headers['if-none-match'] === etag) {
        res.writeHead(304, headers);
        return res.end();
      }
      const accepts = /\bgzip\b/.test(req.headers['accept-encoding'] || '');
      if (accepts && COMPRESSIBLE.has(ext) && st.size >= GZIP_MIN_BYTES) {
        headers.Vary = 'Accept-Encoding';
        let hit = gzipCache.get(file);
        if (!hit || hit.mtimeMs !== st.mtimeMs) {
          hit = { mtimeMs: st.mtimeMs, buf: zlib.gzipSync(fs.readFileSync(file), { level: 6 }) };
          gzipCache.set(file, hit);
        }
        res.writeHead(200, { ...headers, 'Content-Encoding': 'gzip', 'Content-Length': hit.buf.length });
        return res.end(req.method === 'HEAD' ? undefined : hit.buf);
      }
      res.writeHead(200, { ...headers, 'Content-Length': st.size });
      if (req.method === 'HEAD') return res.end();
      fs.createReadStream(file).pipe(res);
    });
  });

  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      const url = `http://127.0.0.1:${server.address().port}/`;
      if (!quiet) console.log(url);
      resolve({ server, url });
    });
  });
}

function security() {
  return {
    // Together these make the page crossOriginIsolated.
    'Cross-Origin-Opener-Policy': 'same-origin',
    'Cross-Origin-Embedder-Policy': 'require-corp',
    'Cross-Origin-Resource-Policy': 'same-origin',
    'X-Content-Type-Options': 'nosniff',
  };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const opts = parseArgs(process.argv.slice(2));
  serve(opts).catch((e) => {
    console.error(`serve: ${e.message}`);
    process.exit(1);
  });
}
