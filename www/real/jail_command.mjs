// ./lab grade's sandbox (www/cli/jail.mjs) for the real run's processes of learner
// code (www/real/jail.py): prints {problem, prefix} as JSON, `prefix` being the
// command line that goes before a program and its arguments, `problem` why the
// sandbox does not work here ('' when it does). Arguments: the paths the sandbox
// sees, read-only, at the same place.
import { jailCommand, jailProblem } from '../cli/jail.mjs';

const { cmd, args } = jailCommand([], process.argv.slice(2));
console.log(JSON.stringify({ problem: jailProblem(), prefix: [cmd, ...args] }));
