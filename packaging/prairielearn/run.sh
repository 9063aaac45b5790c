#!/usr/bin/env bash
# PrairieLearn's external grader runs this (externalGradingOptions.entrypoint,
# /grade/tests/run.sh) in a container of its own for each submission: the
# question's tests/ is /grade/tests, the course's serverFilesCourse/delivery-lab is
# /grade/serverFilesCourse/delivery-lab, the learner's files are in /grade/student,
# and /grade/results/results.json (a folder this creates) is what PrairieLearn reads.
# Lab: @LAB@.
#
# PrairieLearn starts it as root (the image's user), as its own graders are; the
# learner's code never runs as root: platform.mjs gives each sandbox a uid of its
# own, inside bubblewrap when the image has it and the container allows it (it
# says which wall it used in the job's log), else with that uid and rlimits alone.
# Before any learner code runs, it makes the grader (serverFilesCourse/delivery-lab:
# its WASM holds the hidden tests), data/ and results/ root's: the learner's uid can
# read none of the grader but what its sandbox runs, and write none of them.
# --deadline: PrairieLearn stops the job at the question's timeout (@TIMEOUT@ s), so
# the grader stops the run before it.
set -uo pipefail
grade=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$grade/results"
exec node "$grade/serverFilesCourse/delivery-lab/grader/platform.mjs" --format prairielearn --lab '@LAB@' --hidden-statuses '@HIDDEN_STATUSES@' \
  --deadline @TIMEOUT@ --private "$grade/data" "$grade/student" "$grade/results/results.json"
