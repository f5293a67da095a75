# Sourced by both bundles' setup.sh (with $reference set): Python 3.11 or newer, a venv in $venv (default
# /autograder/venv) with the exact versions of the lock, assignments/gradescope/requirements-grader.txt (torch's CPU
# build). Any failure fails the image build (the caller runs with set -euo pipefail).
lock="$reference/assignments/gradescope/requirements-grader.txt"
venv="${venv:-/autograder/venv}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q python3 python3-venv
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "setup.sh: $(python3 --version) is older than 3.11, which the lock needs: choose the Ubuntu 24.04 image" >&2
    exit 1
}
python3 -m venv "$venv"
"$venv/bin/pip" install -q --no-cache-dir --disable-pip-version-check --index-url https://pypi.org/simple \
    --extra-index-url https://download.pytorch.org/whl/cpu -r "$lock"
