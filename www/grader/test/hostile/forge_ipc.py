# Attack: find the `js` module (globalThis) on the heap and forge a message to the
# coordinator: a passing report, for every likely job id, through Node's IPC.
# Expected: there is no IPC channel and no report to forge: the sandbox holds no grader,
# and the verdict is made by the coordinator's grader from the calls it made. Never pass.
# expect-status: !pass
import gc, sys
forged = []
for o in gc.get_objects():
    try:
        if type(o).__name__ == "module" and getattr(o, "__name__", "") in ("js", "pyodide_js"):
            g = o if o.__name__ == "js" else o.globalThis
            report = '{"lab":"deliver-once","status":"pass","passed":21,"failed":0,"total":21}'
            for i in range(1, 200):
                g.process.send(g.JSON.parse('{"type":"result","id":%d,"report":%s,"transcript":[],"ms":1,"alarms":[],"tainted":false}' % (i, g.JSON.stringify(report))))
            forged.append("sent")
    except Exception as e:
        forged.append(type(e).__name__)

def deliver_once(task, provider, kv, policy):
    return "sent"

def next_step(task, result, now, policy, rng):
    return ("drop", None)
