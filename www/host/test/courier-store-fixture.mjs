// The courier lab's two Python sides in one Pyodide, for the tests of its store
// (courier-store.test.mjs, courier-sql.test.mjs; not a test file itself, the glob
// is host/test/*.test.mjs). Imported through bridgeOf as the page's engine imports them,
// the store kept beside the learner's code as on the page: the learner side
// (src/courier/learner_side.py) as `b`, the store (src/courier/db_store.py) as `s`,
// the lab's tables as `SCHEMA`, and the helpers both files use.
import fs from 'node:fs';
import { bridgeOf } from '../engine.mjs';
import { loadGrader, paths } from '../node_host.mjs';

const HELPERS = `
import json, sqlite3
import delivery_lab_bridge as core
import delivery_lab_courier as b
import delivery_lab_courier_store as s

class World:
    """A scripted world: statement verdicts in turn ('go' once they run out),
    and the provider calls it saw."""
    def __init__(self, verdicts=()):
        self.verdicts, self.sends = list(verdicts), []
    def op(self, name, *args):
        return getattr(self, name)(*args)
    def statement(self, in_tx):
        return self.verdicts.pop(0) if self.verdicts else "go"
    def send(self, key, phone, body, committed):
        self.sends.append(committed)
        return '{"answer": "accepted", "message_id": "m1"}'
    def lookup(self, key):
        return '{"answer": "not-found"}'

def fresh_store():
    """A reset, as the grader asks for it: on the store's own path."""
    answer = core.store_op(s, "reset", json.dumps({"cfg": {"lease_ms": 1000, "in_flight_cap": 2, "recheck_ms": 500},
                                                   "stores": ["s1"], "schema": SCHEMA}))
    assert answer == '{"ok":null}', answer

class Loopback:
    """The remote port's world, answered by the store in this interpreter: the
    same JSON text a sandbox and the grading thread exchange."""
    def __init__(self, worker, world, piece="claim"):
        self.db = s.store_begin(json.dumps({"piece": piece, "worker": worker}), world)
    def op(self, name, *args):
        return getattr(self, name)(*args)
    def sql(self, kind, sql, params):
        return s.store_sql(kind, sql, params)
    def send(self, key, phone, body):
        return s.store_send(key, phone, body)
    def lookup(self, key):
        return s.store_lookup(key)

def learner_db(remote=False, world=None, worker="w1", piece="claim"):
    """The learner's db and provider on a port: the store's here (the page's), or
    the remote one (the grading CLI's sandbox's) through a Loopback."""
    world = world or World()
    if remote:
        loop = Loopback(worker, world, piece)
        port = b._RemotePort(lambda name: loop)
    else:
        port = s.local_port(worker, lambda name: world)
    return b.DB(port, worker), b.CourierProvider(port), world
`;

/**
 * A fresh Pyodide with the courier lab's sides and HELPERS run. Returns
 * { pyodide, py, bridge, store }: `py(code)` runs Python and parses the JSON text
 * it ends with; `bridge` is bridgeOf's, `store` its courier store.
 */
export async function courierStore() {
  const { loadPyodide } = await import('pyodide');
  const pyodide = await loadPyodide({ indexURL: paths.pyodide });
  const courier = JSON.parse(new (await loadGrader()).Grader().lab('courier'));
  const bridge = bridgeOf(pyodide, fs.readFileSync(paths.bridge, 'utf8'), [courier]);
  bridge.useLab('courier');
  const store = bridge.store('courier', { beside: true });
  // The lab's tables as the grader sends them at a reset.
  pyodide.globals.set('SCHEMA', fs.readFileSync(new URL('../../../src/courier/schema.sql', import.meta.url), 'utf8'));
  pyodide.runPython(HELPERS);
  return { pyodide, py: (code) => JSON.parse(pyodide.runPython(code)), bridge, store };
}
