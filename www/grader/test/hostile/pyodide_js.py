# Attack: reach JavaScript through pyodide_js / pyodide.ffi / _pyodide.
# Expected: every route is refused; the functions then return wrong values; status fail.
# expect-status: fail
errors = []
for name in ("pyodide_js", "pyodide.ffi", "_pyodide", "pyodide", "micropip", "ctypes"):
    try:
        __import__(name)
        errors.append(name + " imported!")
    except ImportError as e:
        errors.append(str(e))

def deliver_once(task, provider, kv, policy):
    print(errors)
    return "sent"

def next_step(task, result, now, policy, rng):
    return ("drop", None)
