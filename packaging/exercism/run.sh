#!/usr/bin/env bash
# Exercism's test-runner interface: bin/run.sh SLUG INPUT_DIR OUTPUT_DIR. SLUG is
# the exercise, which is a lab's id (@LABS@); INPUT_DIR holds the learner's
# solution (the one .py file, or those .meta/config.json names); OUTPUT_DIR gets
# results.json. Exit 0 whatever the tests say: the file tells the learner.
#
# --no-sandbox: Exercism runs each submission in a container of its own, without a
# network, thrown away after it; bubblewrap's walls would be a second layer, and
# containers seldom allow the user namespaces it needs. --deadline 20: Exercism
# stops a runner after 20 seconds, so the grader stops the run before that.
set -uo pipefail
if (( $# != 3 )); then
  echo "usage: bin/run.sh SLUG INPUT_DIR OUTPUT_DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$3"
exec node "$root/grader/cli/platform.mjs" --format exercism --lab "$1" --no-sandbox --deadline 20 \
  "$2" "${3%/}/results.json"
