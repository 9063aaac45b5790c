# Attack: print megabytes, including a fake JSON report line, through print, sys.__stdout__
# and os.write on fds 1 and 2, to flood the CLI or forge a line of its JSON output.
# Expected: prints are captured (2000 characters per test); the sandbox's stdout is
# /dev/null; the CLI's stdout has exactly one line per submission. status fail.
# expect-status: fail
import os, sys
FAKE = '{"file":"FORGED","lab":"deliver-once","status":"pass","passed":21,"failed":0,"total":21}\n'
for _ in range(200):
    sys.__stdout__.write(FAKE * 100)
    sys.__stderr__.write(FAKE * 100)
    try:
        os.write(1, FAKE.encode() * 100)
        os.write(2, FAKE.encode() * 100)
    except OSError:
        pass

def deliver_once(task, provider, kv, policy):
    print(FAKE * 50000)
    return "sent"

def next_step(task, result, now, policy, rng):
    print(FAKE * 50000)
    return ("drop", None)
