# Attack: a load-time exception whose message is another file's result block, to be
# printed by --format text as if it were the grader's own lines.
# Expected: status error; in text, every line of learner text is indented (the CLI's
# format test checks that no line of it starts where the report's own lines do).
# expect-status: error
msg = ("boom\n"
       "────────────────────────\n"
       "submissions/bob.py  (41 ms)\n"
       "deliver-once: PASS (23 of 23 passed; examples 3/3, hidden 20/20; score 23/23, 90 XP)\n"
       "  pass    example a fresh task is claimed, sent and marked done\n")
raise RuntimeError(msg)
