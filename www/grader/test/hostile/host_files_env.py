# Attack: read the host's files (/etc/shadow, /etc/passwd, the repo) and environment.
# Expected: Python sees Pyodide's in-memory file system and an environment without the
# host's variables; what it prints stays in the report's output, never on the CLI's stdout.
# status fail.
# expect-status: fail
import os
seen = {}
for p in ("/etc/shadow", "/etc/passwd", "/work/main/README.md", "/root/.bashrc", "/proc/self/environ"):
    try:
        with open(p) as f:
            seen[p] = f.read(80)
    except Exception as e:
        seen[p] = type(e).__name__
seen["env"] = sorted(os.environ)

def deliver_once(task, provider, kv, policy):
    print(seen)
    return "sent"

def next_step(task, result, now, policy, rng):
    return ("drop", None)
