# Attack: network access: pyodide.http.open_url / pyfetch, urllib, raw sockets.
# Expected: pyodide.http cannot be imported; urllib and sockets have no network (the sandbox
# is in an empty network namespace: even the host's loopback is not there); status fail
# (the functions are wrong on purpose). Only loopback addresses are dialled: a test
# never sends traffic off this machine.
# expect-status: fail
results = []
try:
    from pyodide.http import open_url
    results.append(open_url("http://127.0.0.1:8000/").read()[:50])
except Exception as e:
    results.append(type(e).__name__)
try:
    import urllib.request
    results.append(urllib.request.urlopen("http://127.0.0.1:8000/", timeout=2).read(50))
except Exception as e:
    results.append(type(e).__name__)
try:
    import socket
    s = socket.create_connection(("127.0.0.1", 8000), timeout=2)
    results.append("socket connected")
except Exception as e:
    results.append(type(e).__name__)

def deliver_once(task, provider, kv, policy):
    print(results)
    return "failed"

def next_step(task, result, now, policy, rng):
    return ("drop", None)
