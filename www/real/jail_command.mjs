// ./lab grade's sandbox (www/grader/jail.mjs) for the real run's processes of learner
// code (www/real/jail.py): prints {problem, prefix, uid} as JSON, `prefix` being the
// command line that goes before a program and its arguments, `problem` why the
// sandbox does not work here ('' when it does), `uid` the run's own sandbox uid
// (under root; null otherwise). Arguments: --owner-pid PID (the run's process,
// whose block of sandbox uids this one comes from), --held UID (may repeat: a uid of
// the run's that no process may be running as at this moment, which this one must
// not be), --as BYTES (the address space of each process, RLIMIT_AS: shared
// mappings count, which ./lab grade's writable-memory limit does not), then the paths
// the sandbox sees, read-only, at the same place.
// With --kill-uid UID instead, it ends every process of that sandbox uid (killUid)
// and prints {killed}: the real run's one way to do so, as it is ./lab grade's.
import { jailCommand, jailProblem, killUid, sandboxUid } from '../grader/jail.mjs';

let args = process.argv.slice(2);
if (args[0] === '--kill-uid') {
  console.log(JSON.stringify({ killed: killUid(Number(args[1])) }));
  process.exit(0);
}
let owner = process.ppid;
const held = new Set();
const rlimits = {};
for (;;) {
  if (args[0] === '--owner-pid') owner = Number(args[1]);
  else if (args[0] === '--held') held.add(Number(args[1]));
  else if (args[0] === '--as') rlimits.as = Number(args[1]);
  else break;
  args = args.slice(2);
}
const problem = jailProblem();
const { cmd, args: rest, uid } = jailCommand([], args, { uid: sandboxUid(owner, { held }), rlimits });
console.log(JSON.stringify({ problem, prefix: [cmd, ...rest], uid }));
