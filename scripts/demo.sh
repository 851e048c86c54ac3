#!/usr/bin/env bash
# The main job on the bundled example, as far as the project has come:
# sets up, builds the `trainyard` binary, validates the demo job spec
# (examples/tiny_local.textproto) and shows the model it will train.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "==> building //client:trainyard"
log=$(mktemp)
if ! bazel build //client:trainyard >"$log" 2>&1; then
  tail -40 "$log" >&2
  exit 1
fi
rm -f "$log"
trainyard=bazel-bin/client/trainyard

spec=examples/tiny_local.textproto
echo
echo "==> trainyard validate $spec   (the job, normalised: every default made explicit)"
"$trainyard" validate "$spec"
echo
echo "==> trainyard model-info --preset tiny --json"
"$trainyard" model-info --preset tiny --json
echo
echo "==> trainyard model-info   (every preset; counts in closed form, no weights allocated)"
"$trainyard" model-info
echo
cat <<MSG
Done. The job spec above is valid and normalised. Running it (coordinator,
two workers, training) is not built yet: see README.md, "Status".
The binary is $trainyard; try: $trainyard validate --help
MSG
