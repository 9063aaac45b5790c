# Attack: an endless loop while the module loads, before any test runs.
# Expected: stopped at the time limit; status fail (every test a timeout).
# expect-status: fail
# expect-message: longer than
while True:
    pass
