// A throwaway PostgreSQL cluster for the queue's tests, made as www/real/pg.py makes
// `./lab real`'s: Debian's server binaries (/usr/lib/postgresql/N/bin), a temporary
// folder, a Unix socket there and no TCP port, fsync on, password (scram-sha-256)
// authentication for every login, run as Debian's `postgres` user under root.
// restart() stops it as a power cut would (immediate) and starts it again (crash
// recovery); close() leaves no process and no folder.
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';

export function serverBinDir() {
  const found = [];
  let versions = [];
  try { versions = fs.readdirSync('/usr/lib/postgresql'); } catch { /* none */ }
  for (const v of versions) {
    const d = `/usr/lib/postgresql/${v}/bin`;
    if (['initdb', 'pg_ctl', 'postgres'].every((b) => fs.existsSync(path.join(d, b)))) found.push([Number(v), d]);
  }
  found.sort((a, b) => b[0] - a[0]);
  return found[0]?.[1] ?? null;
}

export class Cluster {
  constructor({ maxConnections = 100 } = {}) {
    this.bin = serverBinDir();
    if (!this.bin) throw new Error("PostgreSQL's server binaries are not under /usr/lib/postgresql (Debian's `postgresql`; ./lab installs it)");
    this.root = fs.mkdtempSync(path.join(os.tmpdir(), 'delivery-lab-queue-pg-'));
    this.data = path.join(this.root, 'data');
    this.sockets = path.join(this.root, 'sockets');
    this.log = path.join(this.root, 'server.log');
    fs.mkdirSync(this.sockets);
    this.password = crypto.randomBytes(24).toString('hex');
    this.as = [];
    if (process.getuid() === 0) {
      const ids = (flag) => Number(spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' }).stdout.trim());
      const uid = ids('-u');
      const gid = ids('-g');
      if (!Number.isInteger(uid) || uid <= 0) throw new Error("the OS user `postgres` (Debian's postgresql package) is missing");
      for (const d of [this.root, this.sockets]) fs.chownSync(d, uid, gid);
      this.as = ['setpriv', `--reuid=${uid}`, `--regid=${gid}`, '--clear-groups'];
      this.owner = { uid, gid };
    }
    fs.chmodSync(this.root, 0o755);
    fs.chmodSync(this.sockets, 0o755);
    const pw = path.join(this.root, 'pw');
    fs.writeFileSync(pw, `${this.password}\n`, { mode: 0o600 });
    if (this.owner) fs.chownSync(pw, this.owner.uid, this.owner.gid);
    try {
      this.run('initdb', '-D', this.data, '-U', 'lab', `--pwfile=${pw}`, '--auth=scram-sha-256', '-E', 'UTF8', '--no-instructions', '--no-sync');
    } finally {
      fs.rmSync(pw, { force: true });
    }
    fs.writeFileSync(path.join(this.data, 'pg_hba.conf'), '# the queue tests: every login authenticates\nlocal all all scram-sha-256\n');
    fs.appendFileSync(path.join(this.data, 'postgresql.conf'), `\nlisten_addresses = ''\nunix_socket_directories = '${this.sockets}'\n`
      + `fsync = on\nsynchronous_commit = on\nmax_connections = ${maxConnections}\nshared_buffers = 32MB\nlog_min_messages = warning\n`
      + "password_encryption = 'scram-sha-256'\n");
  }

  run(tool, ...args) {
    const r = spawnSync(this.as.length ? this.as[0] : path.join(this.bin, tool), this.as.length ? [...this.as.slice(1), path.join(this.bin, tool), ...args] : args,
      { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 120_000 });
    if (r.status !== 0) throw new Error(`${tool} failed (${r.status}): ${(r.stdout + r.stderr).slice(-2000)}`);
    return r.stdout;
  }

  start() { this.run('pg_ctl', '-D', this.data, '-l', this.log, '-w', '-t', '60', 'start'); }

  /** A power cut: no checkpoint; the next start replays the write-ahead log. */
  crash() { this.run('pg_ctl', '-D', this.data, '-m', 'immediate', '-w', 'stop'); }

  restart() { this.crash(); this.start(); }

  /** The superuser's URL on the socket (password in it: for this test's processes only). */
  url(db = 'postgres') { return `postgres://lab:${this.password}@/${db}?host=${encodeURIComponent(this.sockets)}`; }

  async createDatabase(name) {
    const c = new pg.Client({ connectionString: this.url() });
    await c.connect();
    try { await c.query(`CREATE DATABASE ${name}`); } finally { await c.end(); }
  }

  close() {
    try {
      if (fs.existsSync(path.join(this.data, 'postmaster.pid'))) {
        try { this.run('pg_ctl', '-D', this.data, '-m', 'fast', '-w', '-t', '30', 'stop'); } catch { this.run('pg_ctl', '-D', this.data, '-m', 'immediate', '-w', 'stop'); }
      }
    } finally {
      fs.rmSync(this.root, { recursive: true, force: true });
    }
  }
}

/** A started cluster with the database `name` made: { cluster, url } (closed again when making it fails). */
export async function clusterWith(name = 'grading', opts = {}) {
  const cluster = new Cluster(opts);
  try {
    cluster.start();
    await cluster.createDatabase(name);
  } catch (e) {
    cluster.close();
    throw e;
  }
  return { cluster, url: cluster.url(name) };
}
