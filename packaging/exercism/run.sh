#!/usr/bin/env bash
# Exercism's test-runner interface: bin/run.sh SLUG INPUT_DIR OUTPUT_DIR. SLUG is
# the exercise, which is a lab's id (@LABS@); INPUT_DIR holds the learner's
# solution (the one .py file, or those .meta/config.json names); OUTPUT_DIR gets
# results.json. Exit 0 whatever the tests say: the file tells the learner.
#
# The container runs it as root (the image sets no other user); the learner's code
# never runs as root: platform.mjs gives each sandbox a uid of its own, inside
# bubblewrap when the container allows it (it says which wall it used on stdout),
# else with that uid and rlimits alone. This runner's folder (the grader: its WASM
# holds the hidden tests) is root's and private but for what a sandbox reads (set
# when the image is built, and checked again here), and OUTPUT_DIR is made root's,
# written by the grader only. --deadline 20: Exercism stops a runner after 20
# seconds, so the grader stops the run before that.
set -uo pipefail
if (( $# != 3 )); then
  echo "usage: bin/run.sh SLUG INPUT_DIR OUTPUT_DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$3"
exec node "$root/grader/grader/platform.mjs" --format exercism --lab "$1" --hidden-statuses '@HIDDEN_STATUSES@' --deadline 20 --private "$root" \
  "$2" "${3%/}/results.json"
