#!/bin/bash
# The deployment as far as this machine goes: both overlays render with
# kubectl's Kustomize (as `kubectl apply -k` renders them) and pass
# Kubernetes' schemas (strict); a broken manifest is caught; the image's
# layout (deploy/stage.sh) needs only deploy/runtime-packages.txt's
# libraries and runs a job on its own, away from the source tree. Each check
# is a test case (tests/testing/cases.sh).
set -u
source tests/testing/cases.sh
source tests/require_python.sh
require_python TRAINYARD_JAX_PYTHON kubernetes_validate
validate="$(dirname "$python")/kubernetes-validate"
kubectl=${TRAINYARD_KUBECTL:-}
if [[ ! -x "$kubectl" ]]; then
  echo "TRAINYARD_KUBECTL='$kubectl' is not an executable kubectl: run scripts/setup.sh (it installs one)"
  exit 1
fi
tmp=${TEST_TMPDIR:-$(mktemp -d)}
# Kustomize does not take a kustomization.yaml that is a symbolic link (as
# every file in Bazel's runfiles is): render a copy of the files.
mkdir -p "$tmp/deploy"
cp -rL deploy/base deploy/overlays "$tmp/deploy/"

overlay_validates() {  # OVERLAY
  "$kubectl" kustomize "$tmp/deploy/overlays/$1" >"$tmp/$1.yaml" || return 1
  "$validate" --strict --quiet -k 1.37.0 "$tmp/$1.yaml" || { echo "overlay $1 does not validate"; return 1; }
  echo "overlay $1 renders and validates ($(grep -c '^kind:' "$tmp/$1.yaml") objects)"
}
case_check "overlay cpu renders and validates" overlay_validates cpu
case_check "overlay gpu renders and validates" overlay_validates gpu

gpu_overlay_asks_for_gpus() {
  grep -q 'nvidia.com/gpu' "$tmp/gpu.yaml" || { echo "the gpu overlay requests no GPU"; return 1; }
  grep -q 'image: registry.example.com/trainyard-cuda:latest' "$tmp/gpu.yaml" || { echo "the gpu overlay's image"; return 1; }
  if grep -q 'nvidia.com/gpu' "$tmp/cpu.yaml"; then echo "the cpu overlay requests a GPU"; return 1; fi
}
case_check "only the gpu overlay asks for GPUs" gpu_overlay_asks_for_gpus

# The validator catches a misspelt field in a manifest, and Kustomize one in
# a kustomization.
broken_manifests_are_caught() {
  sed 's/readOnlyRootFilesystem/readOnlyRootFilesytem/' "$tmp/cpu.yaml" >"$tmp/broken.yaml"
  if "$validate" --strict --quiet -k 1.37.0 "$tmp/broken.yaml" >"$tmp/broken.out" 2>&1; then
    echo "a misspelt field passed validation"; return 1
  fi
  grep -q "readOnlyRootFilesytem" "$tmp/broken.out" || { echo "the validator did not name the field"; return 1; }
  mkdir -p "$tmp/misspelt"
  cp -rL deploy/base deploy/overlays "$tmp/misspelt/"
  sed -i 's/^patches:/patchez:/' "$tmp/misspelt/overlays/cpu/kustomization.yaml"
  if "$kubectl" kustomize "$tmp/misspelt/overlays/cpu" >/dev/null 2>"$tmp/misspelt.err"; then
    echo "a misspelt kustomization field was ignored"; return 1
  fi
  grep -q "patchez" "$tmp/misspelt.err" || { cat "$tmp/misspelt.err"; echo "kustomize did not name the field"; return 1; }
}
case_check "broken manifests are caught" broken_manifests_are_caught

# The image's layout, from this build.
prefix="$tmp/opt/trainyard"
rm -rf "$prefix"
case_check "deploy/stage.sh stages the install" deploy/stage.sh "$prefix" . || exit 1
libraries_from_runtime_packages() {
  local missing=() lib owner
  for lib in $(for f in "$prefix"/bin/*; do readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; done | sort -u); do
    owner=$(dpkg -S "*/$lib" 2>/dev/null | grep -v i386 | head -1 | cut -d: -f1)
    grep -qx "$owner" deploy/runtime-packages.txt || missing+=("$lib (${owner:-no package})")
  done
  [[ ${#missing[@]} -eq 0 ]] || { echo "libraries not provided by deploy/runtime-packages.txt: ${missing[*]}"; return 1; }
}
case_check "every linked library comes from deploy/runtime-packages.txt" libraries_from_runtime_packages

# A job run by the staged binaries alone: no runfiles, another directory.
staged_install_runs_a_job() {
  local work="$tmp/elsewhere"
  mkdir -p "$work"
  cp examples/tiny_local.textproto "$work/job.textproto"
  (cd "$work" && env -i HOME="$work" PATH=/usr/bin:/bin "$prefix/bin/trainyard" local --workers 1 job.textproto \
     --set num_workers=1 --set total_steps=4 --set eval_period=0 --set checkpoint_period=4 \
     --set output_dir=runs/staged >"$work/out.txt" 2>&1) || { cat "$work/out.txt"; return 1; }
  [[ -f "$work/runs/staged/checkpoint_4/MANIFEST.json" ]] || { cat "$work/out.txt"; echo "no checkpoint_4"; return 1; }
}
case_check "the staged install runs a job on its own" staged_install_runs_a_job
