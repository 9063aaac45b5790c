#!/usr/bin/env bash
# PrairieLearn's external grader runs this (externalGradingOptions.entrypoint,
# /grade/tests/run.sh) in a container of its own for each submission: the
# question's tests/ is /grade/tests, the course's serverFilesCourse/delivery-lab is
# /grade/serverFilesCourse/delivery-lab, the learner's files are in /grade/student,
# and /grade/results/results.json (a folder this creates) is what PrairieLearn reads.
# Lab: @LAB@.
#
# --no-sandbox: the container holds this one submission and is thrown away after
# it; bubblewrap's walls would be a second layer, and containers seldom allow the
# user namespaces it needs. --deadline: PrairieLearn stops the job at the
# question's timeout (@TIMEOUT@ s), so the grader stops the run before it.
set -uo pipefail
grade=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$grade/results"
exec node "$grade/serverFilesCourse/delivery-lab/cli/platform.mjs" --format prairielearn --lab '@LAB@' \
  --no-sandbox --deadline @TIMEOUT@ "$grade/student" "$grade/results/results.json"
