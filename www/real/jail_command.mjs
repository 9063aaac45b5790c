// ./lab grade's sandbox (www/cli/jail.mjs) for the real run's processes of learner
// code (www/real/jail.py): prints {problem, prefix, uid} as JSON, `prefix` being the
// command line that goes before a program and its arguments, `problem` why the
// sandbox does not work here ('' when it does), `uid` the run's own sandbox uid
// (under root; null otherwise). Arguments: --owner-pid PID (the run's process,
// whose block of sandbox uids this one comes from), then the paths the sandbox
// sees, read-only, at the same place.
import { jailCommand, jailProblem, sandboxUid } from '../cli/jail.mjs';

const args = process.argv.slice(2);
const owner = args[0] === '--owner-pid' ? Number(args[1]) : process.ppid;
const paths = args[0] === '--owner-pid' ? args.slice(2) : args;
const problem = jailProblem();
const { cmd, args: rest, uid } = jailCommand([], paths, { uid: sandboxUid(owner) });
console.log(JSON.stringify({ problem, prefix: [cmd, ...rest], uid }));
