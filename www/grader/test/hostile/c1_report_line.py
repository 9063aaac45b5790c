# Attack: raise a message of C1 characters, which a JSON line prints as \u0085 (6 bytes
# each) while they are 2 bytes in UTF-8: a cap measured before that escaping is broken.
# Expected: status error, and the line stays under 64 KB (the batch checks every line).
# expect-status: error
raise RuntimeError("\u0085" * 3950)
