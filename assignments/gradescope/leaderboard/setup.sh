#!/usr/bin/env bash
# Gradescope's setup.sh for the leaderboard autograder (python -m assignments.bundle leaderboard OUT.zip ...): runs
# once when the image is built, as root, with the zip unpacked in /autograder/source. It makes a Python venv in
# /autograder/venv with the exact versions of minbert-reference/assignments/gradescope/requirements-grader.txt
# (torch's CPU build), checks that the grader imports, and ends by verifying every installed version against the
# lock: any failure fails the build, not the first upload. The lock needs Python 3.11 or newer: choose Gradescope's
# Ubuntu 24.04 base image (Python 3.12).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
reference="$here/minbert-reference"
# shellcheck source=../install.sh
source "$reference/assignments/gradescope/install.sh"       # the venv, pinned by the lock
(cd "$reference" && "$venv/bin/python" -c "import assignments.leaderboard")
cd "$reference" && "$venv/bin/python" -m assignments.lockfile verify "$lock"
