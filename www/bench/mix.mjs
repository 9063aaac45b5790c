// The grading benches' mix of lab 1 submissions (bench/cli.mjs, bench/queue.mjs):
// correct ones, wrong ones, mutants, errors, prints and a hostile import, in one
// order, so that the two benches' lines compare.

/** [[kind, source]] from lab 1's registry entry (its reference and starter). */
export function benchMix(lab) {
  const ref = lab.reference_py;
  const mut = (from, to) => (ref.includes(from) ? ref.replace(from, to) : ref);
  return [
    ['correct', ref],
    ['starter', lab.starter_py],
    ['no-nx', mut('ttl=policy.claim_ttl_s, nx=True)', 'ttl=policy.claim_ttl_s)')],
    ['prints', ref.replace('def deliver_once(task, provider, kv, policy):\n', 'def deliver_once(task, provider, kv, policy):\n    print("delivering", task.key)\n')],
    ['raises', 'def deliver_once(task, provider, kv, policy):\n    raise ValueError("no")\n\ndef next_step(task, result, now, policy, rng):\n    return ("drop", None)\n'],
    ['syntax', 'def deliver_once(task, provider, kv, policy)\n    return "sent"\n'],
    ['correct', ref],
    ['no-done-ttl', mut('ttl=DONE_TTL_S', 'ttl=None')],
    ['import-js', 'import js\n'],
    ['correct', ref],
  ];
}
