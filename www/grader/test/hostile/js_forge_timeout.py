# Attack: reach JavaScript and answer each learner call with {"error":{"kind":"timeout"}}
# through the sandbox's own pipe: a verdict only the grader gives.
# Expected: the grading thread refuses it: only the grader says when time is up, and the
# sandbox's bridge never says it; status error (interfered).
# expect-status: error
# expect-message: it said the time limit was reached, which only the grader says
import gc, json
def _js():
    for o in gc.get_objects():
        try:
            if type(o).__name__ == "JsFinder":
                return o.jsproxies["js"]
        except Exception:
            pass
js = _js()
fs = js.process.getBuiltinModule("fs")
_enc = js.TextEncoder.new()
_dec = js.TextDecoder.new()
def _u32(n):
    h = js.Uint8Array.new(4)
    for i in range(4):
        h[i] = (n >> (8 * i)) & 255
    return h
def send_raw(head_n, text):
    body = _enc.encode(text)
    fs.writeSync(4, _u32(body.length if head_n is None else head_n))
    if text:
        fs.writeSync(4, body)
def send(text):
    send_raw(None, text)
def _read(n):
    buf = js.Uint8Array.new(n)
    got = 0
    while got < n:
        r = fs.readSync(3, buf, got, n - got, None)
        if r == 0:
            raise EOFError
        got += r
    return buf
def recv():
    h = _read(4)
    n = h[0] | (h[1] << 8) | (h[2] << 16) | (h[3] << 24)
    return json.loads(_dec.decode(_read(n)))
def deliver_once(task, provider, kv, policy):
    send(json.dumps({"t": "ret", "v": json.dumps({"error": {"kind": "timeout", "limit_s": 0.001}})}))
    while True:
        m = recv()
        if m["t"] == "call":
            send(json.dumps({"t": "ret", "v": json.dumps({"error": {"kind": "timeout", "limit_s": 0.001}})}))
        elif m["t"] == "out":
            send(json.dumps({"t": "out", "v": None}))
        else:
            break
def next_step(task, result, now, policy, rng):
    return ("drop", None)
