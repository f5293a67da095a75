#!/usr/bin/env bash
# Build the Gradescope autograder zip from this reference tree:
#   assignments/gradescope/build.sh OUT.zip [GRADE_GROUPS] [HIDE_HINTS]      e.g.  build.sh part1.zip core 1
# One Gradescope assignment per group keeps each score out of its own total (part 2: GRADE_GROUPS=multitask).
set -euo pipefail
out="$(realpath -m "$1")"; groups="${2:-core}"; hide="${3:-0}"
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../.." && pwd)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/minbert-reference"
(cd "$root" && git ls-files -z minbert tasks assignments data requirements.txt | xargs -0 cp --parents -t "$tmp/minbert-reference")
sed "s/^GRADE_GROUPS=.*/GRADE_GROUPS=\"\${GRADE_GROUPS:-$groups}\"/; s/^HIDE_HINTS=.*/HIDE_HINTS=\"\${HIDE_HINTS:-$hide}\"/" \
    "$here/run_autograder" > "$tmp/run_autograder"
sed "s/\${GRADE_GROUPS:-core}/\${GRADE_GROUPS:-$groups}/" "$here/setup.sh" > "$tmp/setup.sh"
chmod +x "$tmp/run_autograder" "$tmp/setup.sh"
(cd "$tmp" && zip -qr "$out" setup.sh run_autograder minbert-reference)
echo "wrote $out (groups: $groups; hints hidden until the due date: $([ "$hide" = 1 ] && echo yes || echo no))"
