#!/bin/bash
# The deployment as far as this machine goes: both overlays render and pass
# Kubernetes' schemas (strict); a broken manifest is caught; the image's
# layout (deploy/stage.sh) needs only deploy/runtime-packages.txt's
# libraries and runs a job on its own, away from the source tree.
set -euo pipefail
source tests/require_python.sh
require_python TRAINYARD_JAX_PYTHON kubernetes_validate
validate="$(dirname "$python")/kubernetes-validate"
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "FAIL: $*" >&2; exit 1; }

for overlay in cpu gpu; do
  "$python" deploy/render.py "deploy/overlays/$overlay" >"$tmp/$overlay.yaml"
  "$validate" --strict --quiet -k 1.37.0 "$tmp/$overlay.yaml" || fail "overlay $overlay does not validate"
  echo "ok: overlay $overlay renders and validates ($(grep -c '^kind:' "$tmp/$overlay.yaml") objects)"
done
grep -q 'nvidia.com/gpu' "$tmp/gpu.yaml" || fail "the gpu overlay requests no GPU"
grep -q 'image: registry.example.com/trainyard-cuda:latest' "$tmp/gpu.yaml" || fail "the gpu overlay's image"
grep -q 'nvidia.com/gpu' "$tmp/cpu.yaml" && fail "the cpu overlay requests a GPU"

# The validator catches a misspelt field, and the renderer refuses what it
# does not implement.
sed 's/readOnlyRootFilesystem/readOnlyRootFilesytem/' "$tmp/cpu.yaml" >"$tmp/broken.yaml"
if "$validate" --strict --quiet -k 1.37.0 "$tmp/broken.yaml" >"$tmp/broken.out" 2>&1; then
  fail "a misspelt field passed validation"
fi
grep -q "readOnlyRootFilesytem" "$tmp/broken.out" || fail "the validator did not name the field"
mkdir -p "$tmp/unsupported"
printf 'resources: []\nconfigMapGenerator: []\n' >"$tmp/unsupported/kustomization.yaml"
if "$python" deploy/render.py "$tmp/unsupported" 2>"$tmp/unsupported.err"; then fail "an unsupported field was ignored"; fi
grep -q "configMapGenerator" "$tmp/unsupported.err" || fail "the renderer did not name the field"
echo "ok: broken manifests are caught"

# The image's layout, from this build.
prefix="$tmp/opt/trainyard"
rm -rf "$prefix"
deploy/stage.sh "$prefix" .
missing=()
for lib in $(for f in "$prefix"/bin/*; do readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; done | sort -u); do
  owner=$(dpkg -S "*/$lib" 2>/dev/null | grep -v i386 | head -1 | cut -d: -f1)
  grep -qx "$owner" deploy/runtime-packages.txt || missing+=("$lib (${owner:-no package})")
done
[[ ${#missing[@]} -eq 0 ]] || fail "libraries not provided by deploy/runtime-packages.txt: ${missing[*]}"
echo "ok: every linked library comes from deploy/runtime-packages.txt"

# A job run by the staged binaries alone: no runfiles, another directory.
work="$tmp/elsewhere"
mkdir -p "$work"
cp examples/tiny_local.textproto "$work/job.textproto"
(cd "$work" && env -i HOME="$work" PATH=/usr/bin:/bin "$prefix/bin/trainyard" local --workers 1 job.textproto \
   --set num_workers=1 --set total_steps=4 --set eval_period=0 --set checkpoint_period=4 \
   --set output_dir=runs/staged >"$work/out.txt" 2>&1) || { cat "$work/out.txt"; fail "the staged install could not run a job"; }
[[ -f "$work/runs/staged/checkpoint_4/MANIFEST.json" ]] || { cat "$work/out.txt"; fail "no checkpoint_4"; }
echo "ok: the staged install ran a job (checkpoint_4 written)"
