# Attack: sys.exit() while the module loads, to end the grader.
# Expected: SystemExit is caught like any exception; status error (nothing could be graded).
# expect-status: error
# expect-message: SystemExit
import sys
sys.exit(0)
