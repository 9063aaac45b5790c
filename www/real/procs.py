"""The run's children and their HTTP: one copy for run.py, fairness.py and the tests."""

import json
import subprocess
import urllib.request


def first_line(proc, what):
    """A child's first line of stdout (its URL), or an error saying why not."""
    line = proc.stdout.readline().strip()
    if not line:
        raise RuntimeError(f"{what} did not start: {proc.stderr.read()[-2000:]}")
    return line


def http_json(url, body=None):
    """GET `url`, or POST `body` as JSON; the answer, parsed."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def stop_all(procs):
    """SIGTERM to each child still running, SIGKILL to one that has not ended 5 s
    later; their pipes closed."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        for f in (p.stdout, p.stderr):
            if f:
                f.close()
