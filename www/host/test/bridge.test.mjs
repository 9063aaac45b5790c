// The engine host in Node: the real Pyodide and the real grader (www/pkg), joined
// by host/engine.mjs and host/solution_runner.py exactly as in the browser worker.
// Run: node --test host/test/bridge.test.mjs   (needs www/pkg: scripts/build-wasm.sh)
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { loadNodeEngine } from '../node_host.mjs';

const repo = new URL('../../../', import.meta.url);
const read = (p) => fs.readFileSync(new URL(p, repo), 'utf8');
const REFERENCE = read('src/deliver_once/reference.py');
const STARTER = read('src/deliver_once/starter.py');

/** The reference with one exact edit; fails loudly if the edit no longer applies. */
function mutate(from, to, source = REFERENCE) {
  assert.ok(source.includes(from), `mutation anchor not found: ${from}`);
  return source.replace(from, to);
}

const examples = (r) => r.tests.filter((t) => t.kind === 'example');
const byName = (r, name) => {
  const t = r.tests.find((x) => x.name === name);
  assert.ok(t, `no test named ${JSON.stringify(name)}; tests: ${r.tests.map((x) => x.name).join(' | ')}`);
  return t;
};

let engine;
before(async () => {
  engine = await loadNodeEngine();
});

test('the lab info comes from the grader', () => {
  assert.equal(engine.lab.id, 'deliver-once');
  assert.equal(engine.lab.xp, 90);
  assert.equal(engine.lab.time_limit_s, 8);
  assert.deepEqual(engine.lab.functions, ['deliver_once', 'next_step']);
  assert.ok(engine.lab.tests.filter((t) => t.kind === 'example').length >= 3);
  assert.ok(engine.lab.tests.filter((t) => t.kind === 'hidden').length >= 10);
});

test('the reference solution passes every test for 90 XP', () => {
  const r = engine.run(REFERENCE);
  const failing = r.tests.filter((t) => t.status !== 'pass').map((t) => `${t.name}: ${t.message}`);
  assert.deepEqual(failing, []);
  assert.equal(r.status, 'pass');
  assert.equal(r.xp, 90);
  assert.equal(r.examples.passed, r.examples.total);
  assert.equal(r.hidden.passed, r.hidden.total);
  // Example tests carry a timeline of what the code did.
  const first = examples(r)[0];
  assert.ok(first.trace.length > 0);
  assert.ok(first.trace[0].events.some((e) => e.kind === 'send'));
});

test('the starter code fails with readable messages', () => {
  const r = engine.run(STARTER);
  assert.equal(r.status, 'fail');
  assert.equal(r.xp, 0);
  assert.equal(r.passed, 0);
  for (const t of examples(r)) {
    assert.equal(t.status, 'error', t.name);
    assert.match(t.message, /NotImplementedError/);
    assert.match(t.message, /File "solution\.py", line \d+, in (deliver_once|next_step)/);
  }
  // Hidden tests show their name and status only.
  for (const t of r.tests.filter((x) => x.kind === 'hidden')) {
    assert.equal(t.message, undefined);
    assert.equal(t.trace, undefined);
  }
});

test('a syntax error gives status "error" and shows the line', () => {
  const r = engine.run('DONE_TTL_S = 1\n\ndef deliver_once(task, provider, kv, policy)\n    return "sent"\n');
  assert.equal(r.status, 'error');
  assert.match(r.message, /line 3/);
  assert.match(r.message, /SyntaxError/);
  assert.match(r.message, /def deliver_once\(task, provider, kv, policy\)/);
  assert.ok(r.tests.every((t) => t.status === 'error'));
});

test('a file without either function is not graded', () => {
  const r = engine.run('x = 1\n');
  assert.equal(r.status, 'error');
  assert.match(r.message, /deliver_once/);
  assert.match(r.message, /next_step/);
});

test('an exception while the module loads is shown with its line', () => {
  const r = engine.run('import nonexistent_module_xyz\n');
  assert.equal(r.status, 'error');
  assert.match(r.message, /line 1/);
  assert.match(r.message, /ModuleNotFoundError/);
});

test('a missing function is reported as missing, the other one still graded', () => {
  const onlyDeliver = REFERENCE.slice(0, REFERENCE.indexOf('def next_step'));
  const r = engine.run(onlyDeliver);
  const first = byName(r, 'a fresh task is claimed, sent and marked done');
  assert.equal(first.status, 'pass');
  const permanent = examples(r).find((t) => t.status !== 'pass');
  assert.match(permanent.message, /does not define `next_step`/);
});

test('kv.set works with positional and with keyword arguments', () => {
  const positional = mutate(
    'kv.set(key, "sending", ttl=policy.claim_ttl_s, nx=True)',
    'kv.set(key, "sending", policy.claim_ttl_s, True)',
  );
  const keywords = mutate('kv.set(key, "done", ttl=DONE_TTL_S)', 'kv.set(key=key, value="done", ttl=DONE_TTL_S, nx=False)');
  for (const source of [positional, keywords]) {
    const r = engine.run(source);
    assert.equal(r.status, 'pass', r.tests.filter((t) => t.status !== 'pass').map((t) => t.message).join('\n'));
  }
});

test('a wrong kv argument raises a clear exception', () => {
  const cases = [
    ['kv.set(key, 1, ttl=policy.claim_ttl_s, nx=True)', /TypeError: kv\.set\(key, value, ttl=None, nx=False\): value must be a str, not int/],
    ['kv.set(key, "sending", ttl=True, nx=True)', /TypeError: .*ttl must be None or a number of seconds .*not bool/],
    ['kv.set(key, "sending", ttl=float("inf"), nx=True)', /ValueError: .*ttl must be a finite number/],
    ['kv.set(key, "sending", ttl="30", nx=True)', /TypeError: .*ttl must be None or a number.*not str/],
    ['kv.set(key, "sending", ttl=policy.claim_ttl_s, nx="yes")', /TypeError: .*nx must be True or False, not str/],
    ['kv.set(key, "sending", ttl=policy.claim_ttl_s, nx=True, px=1)', /TypeError: .*unexpected keyword argument 'px'/],
    ['kv.set(b"k", "sending", ttl=policy.claim_ttl_s, nx=True)', /TypeError: kv\.set.*key must be a str, not bytes/],
  ];
  for (const [call, want] of cases) {
    const r = engine.run(mutate('kv.set(key, "sending", ttl=policy.claim_ttl_s, nx=True)', call));
    const t = byName(r, 'a fresh task is claimed, sent and marked done');
    assert.equal(t.status, 'error', call);
    assert.match(t.message, want, call);
    assert.match(t.message, /File "solution\.py", line \d+, in deliver_once/, call);
  }
  const r = engine.run(mutate('kv.get(key)', 'kv.get(None)'));
  assert.match(examples(r)[0].message, /TypeError: kv\.get\(key\): key must be a str, not NoneType/);
});

// The same grader natively (tests/reports.rs writes these snapshots from Rust
// solutions): what the Python side adds on the way (records, the world's objects,
// the answers' JSON, each made for speed) changes nothing in a report.
test('graded through Python, the reference and two mutants get the native engine\'s reports', () => {
  const snapshot = (name) => JSON.parse(read(`tests/snapshots/${name}`));
  assert.deepEqual(engine.run(REFERENCE), snapshot('deliver-once-reference.json'));
  assert.deepEqual(engine.run(mutate('ttl=policy.claim_ttl_s', 'ttl=None')),
    snapshot('deliver-once-claim-without-ttl.json'));
  assert.deepEqual(engine.run(mutate('delay = max(policy.min_delay_s, rng.uniform(0, cap))', 'delay = rng.uniform(0, cap)')),
    snapshot('deliver-once-mutant-no-floor.json'));
});

test('the objects are read-only and shaped like the contract', () => {
  const probe = mutate(
    '    key = "sent:" + task.key\n',
    '    assert isinstance(task.expires_at, float) and isinstance(task.attempt, int)\n'
      + '    assert isinstance(policy.claim_ttl_s, float) and isinstance(policy.at_most_once, bool)\n'
      + '    assert not hasattr(task, "expires_at_s")\n'
      + '    try:\n        task.key = "x"\n    except AttributeError:\n        pass\n'
      + '    else:\n        raise AssertionError("task must be read-only")\n'
      + '    key = "sent:" + task.key\n',
  );
  const withResult = mutate(
    '    if result.permanent:',
    '    assert isinstance(now, float) and isinstance(result.reason, str)\n'
      + '    assert result.retry_after_s is None or isinstance(result.retry_after_s, float)\n'
      + '    if result.permanent:',
    probe,
  );
  const r = engine.run(withResult);
  assert.equal(r.status, 'pass', r.tests.filter((t) => t.status !== 'pass').map((t) => t.message).join('\n'));
});

test('tuple and str subclasses count as tuples and strings; a list does not', () => {
  const named = 'from collections import namedtuple\nStep = namedtuple("Step", "action value")\n'
    + 'class Status(str):\n    pass\n' + REFERENCE
      .replace('return "sent"', 'return Status("sent")')
      .replace('return ("retry", delay)', 'return Step("retry", delay)');
  assert.equal(engine.run(named).status, 'pass');
  const list = mutate('return ("retry", delay)', 'return ["retry", delay]');
  const r = engine.run(list);
  assert.equal(r.status, 'fail');
  assert.equal(byName(r, 'return values are the exact strings and 2-tuples').status, 'fail');
});

test('prints are captured per test and capped', () => {
  const counted = 'CALLS = [0]\n' + mutate(
    '    key = "sent:" + task.key\n',
    '    CALLS[0] += 1\n    print("deliver call", CALLS[0])\n    key = "sent:" + task.key\n',
  );
  const r = engine.run(counted);
  assert.equal(r.status, 'pass');
  const [a, b, c] = examples(r);
  assert.equal(a.output, 'deliver call 1\n');
  assert.equal(b.output, 'deliver call 2\n');
  assert.equal(c.output, 'deliver call 3\n');
  assert.ok(r.tests.filter((t) => t.kind === 'hidden').every((t) => t.output === undefined));

  const loud = mutate('    key = "sent:" + task.key\n', '    print("x" * 5000)\n    key = "sent:" + task.key\n');
  const out = examples(engine.run(loud))[0].output;
  assert.ok(out.startsWith('xxxx'));
  assert.match(out, /output cut at 2000 characters/);
  assert.ok(out.length < 2100, `output of ${out.length} characters`);
});

test('a traceback shows the learner\'s frames and never the bridge', () => {
  const sources = [
    mutate('kv.set(key, "sending", ttl=policy.claim_ttl_s, nx=True)', 'kv.set(key, None)'),
    mutate('result = provider.send(task)', 'result = provider.send(None)'),
    mutate('    if result.permanent:', '    rng.uniform("0", 1)\n    if result.permanent:'),
    mutate('    key = "sent:" + task.key\n', '    try:\n        {}["missing"]\n    except KeyError as e:\n        raise RuntimeError("wrapped") from e\n'),
    'def deliver_once(task, provider, kv, policy):\n    return helper(task)\n\ndef helper(task):\n    return task.nope\n\ndef next_step(*a):\n    raise SystemExit(1)\n',
  ];
  for (const source of sources) {
    const r = engine.run(source);
    const messages = examples(r).map((t) => t.message || '').join('\n');
    assert.match(messages, /File "solution\.py", line \d+/);
    assert.doesNotMatch(messages, /bridge|delivery_lab|pyodide|\/lib\/python/i, messages);
  }
});

test('a kv kept from an earlier call fails with a clear message', () => {
  const source = 'SAVED = []\n' + mutate('    key = "sent:" + task.key\n',
    '    SAVED.append(kv)\n    if len(SAVED) > 1:\n        SAVED[0].get("x")\n    key = "sent:" + task.key\n');
  const second = examples(engine.run(source))[1];
  assert.equal(second.status, 'error');
  assert.match(second.message, /RuntimeError: this kv belongs to an earlier call that has already returned; use the kv passed to the current call/);
});

test('each run gets a fresh solution module', () => {
  assert.equal(engine.run('LEFTOVER = 1\n' + REFERENCE).status, 'pass');
  const r = engine.run(mutate('    key = "sent:" + task.key\n', '    key = "sent:" + task.key + str(LEFTOVER)\n'));
  assert.match(examples(r)[0].message, /NameError: name 'LEFTOVER' is not defined/);
});

test('two mutants each fail the test named for their mistake', () => {
  const noNx = engine.run(mutate('ttl=policy.claim_ttl_s, nx=True)', 'ttl=policy.claim_ttl_s)'));
  const claim = byName(noNx, 'the claim uses nx and claim_ttl_s, and the done marker lives exactly DONE_TTL_S');
  assert.equal(claim.status, 'fail');
  const fresh = byName(noNx, 'a fresh task is claimed, sent and marked done');
  assert.equal(fresh.status, 'fail');
  assert.equal(fresh.rule, 'claim');
  assert.match(fresh.message, /nx=True/);

  const noRetryAfter = engine.run(mutate(
    '    if result.retry_after_s is not None:\n        # The provider said when (0 counts).\n        delay = result.retry_after_s\n    else:',
    '    if True:',
  ));
  assert.equal(byName(noRetryAfter, 'Retry-After is honoured without a draw, 0 included').status, 'fail');
  assert.equal(byName(noRetryAfter, 'a fresh task is claimed, sent and marked done').status, 'pass');
});

test('a KeyboardInterrupt (the time limit) ends the run as timed out', () => {
  const r = engine.run(mutate('    key = "sent:" + task.key\n', '    raise KeyboardInterrupt\n'));
  assert.equal(r.status, 'fail');
  const [first, ...rest] = r.tests;
  assert.equal(first.status, 'timeout');
  assert.match(first.message, /8 s limit/);
  assert.ok(rest.every((t) => t.status === 'timeout'));
  // The next run is unaffected.
  assert.equal(engine.run(REFERENCE).status, 'pass');
});

test('a warm run of every test takes well under the limit', () => {
  const t0 = performance.now();
  engine.run(REFERENCE);
  const ms = performance.now() - t0;
  assert.ok(ms < 2000, `a full run took ${ms.toFixed(0)} ms`);
});

// The world's protocol lives once, in the registry (src/lab.rs `world_ops`): the
// grading CLI checks a sandbox's requests against it. Here each lab's WASM world
// object (`JsWorld`), as the grader passes it to a call, is one `op` that answers exactly those
// operations, on arguments of their types, and refuses anything else.
test('each lab\'s world object answers exactly the operations its registry entry lists', async () => {
  const { loadGrader } = await import('../node_host.mjs');
  const grader = new (await loadGrader()).Grader();
  const BINDGEN = new Set(['constructor', 'free', '__destroy_into_raw']);
  const SAMPLE = { string: 'k', number: 1, 'number?': null, boolean: false };
  const WRONG = { string: 1, number: 'x', 'number?': 'x', boolean: 'x' };
  for (const { id } of JSON.parse(grader.labs())) {
    const info = JSON.parse(grader.lab(id));
    assert.equal(info.store, typeof info.store_py === 'string', id);
    assert.ok(info.world_ops.length > 0, id);
    for (const op of info.world_ops) {
      assert.ok(op.args.every((a) => a in SAMPLE), `${id} ${op.name}`);
    }
    let calls = 0;
    const problems = [];
    // A solution whose every learner call fails at once, after trying its world.
    const solution = {
      call(fn, argsJson, world) {
        if (world) {
          calls += 1;
          const methods = Object.getOwnPropertyNames(Object.getPrototypeOf(world)).filter((k) => !BINDGEN.has(k));
          if (methods.join() !== 'op') problems.push(`methods ${methods}`);
          for (const op of info.world_ops) {
            try {
              world.op(op.name, ...op.args.map((a) => SAMPLE[a]));
            } catch (e) {
              problems.push(`${op.name}: ${e.message}`);
            }
            if (op.args.length) {
              assert.throws(() => world.op(op.name, ...op.args.map((a, i) => (i === 0 ? WRONG[a] : SAMPLE[a]))),
                /argument 1 must be/, `${id} ${op.name}`);
            }
          }
          assert.throws(() => world.op('constructor'), /no operation `constructor`/);
          assert.throws(() => world.op('kv_get', 'k', 'k', 'k', 'k'), /no operation|takes/);
        }
        return JSON.stringify({ error: { kind: 'host', message: 'no' } });
      },
      // The grader's operations on a lab's database succeed, so it goes on to the calls.
      store: () => JSON.stringify({ ok: null }),
    };
    grader.grade(id, solution, 1);
    assert.ok(calls > 0, `${id}: no call was handed a world`);
    assert.deepEqual(problems, [], id);
  }
});

// The grader's operations on a lab's database take the solution's `store`, never
// its `call`: a host that offers no store for such a lab is refused before any call.
test('a lab that keeps a database is graded only through a solution with a store method', async () => {
  const { loadGrader } = await import('../node_host.mjs');
  const grader = new (await loadGrader()).Grader();
  const asked = [];
  const solution = { call: (fn) => { asked.push(fn); return JSON.stringify({ ok: null }); } };
  assert.throws(() => grader.grade('courier', solution, 1),
    { message: 'grade() of lab `courier` needs a solution object with a store(op, args_json) method: the host keeps the lab\'s database' });
  assert.deepEqual(asked, []);
  assert.equal(JSON.parse(grader.lab('courier')).store, true);
});

test('a lone surrogate in what the learner raises or prints is shown as its escape, not a host failure', () => {
  // "\ud800" is a valid Python str and no Unicode text: JSON to the engine cannot carry it.
  const r = engine.run('def deliver_once(task, provider, kv, policy):\n    print("out \\udc00")\n    raise ValueError("bad \\ud800 thing")\n'
    + 'def next_step(task, result, policy, rng):\n    raise ValueError("x \\udfff")\n');
  const ex = examples(r);
  assert.ok(ex.length > 0);
  for (const t of ex) {
    assert.equal(t.status, 'error', `${t.name}: ${t.message}`);
    assert.match(t.message, /Your code raised an exception:\n/, t.name);
    assert.doesNotMatch(t.message, /host's answer|could not run/, t.name);
  }
  const d = ex.find((t) => t.message.includes('deliver_once('));
  assert.match(d.message, /ValueError: bad \\ud800 thing$/);
  assert.equal(d.output, 'out \\udc00\n');
  // next_step's (hidden tests only here): no test is a host failure, whatever it says.
  assert.ok(r.tests.every((t) => !/host's answer/.test(t.message ?? '')));
});
