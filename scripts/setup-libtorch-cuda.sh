#!/usr/bin/env bash
# The CUDA LibTorch that --config=cuda builds against: the `torch` folder
# (include/ and lib/) of PyPI's torch wheel, pinned to the PyTorch of the GPU
# machines Trainyard is checked on (2.11.0+cu130, CUDA 13.0), so a build made
# here runs there against their libraries. The wheel's SHA-256 is checked;
# it is unpacked once into the machine-wide cache (scripts/cache_dir.sh),
# libtorch-cuda-VERSION (about 1 GB), and .bazelrc.cuda points --config=cuda
# at it. Idempotent. Users with their own
# CUDA LibTorch set TRAINYARD_LIBTORCH_CUDA instead (docs/building.md).
set -euo pipefail
cd "$(dirname "$0")/.."
version=2.11.0
sha256=7aa2f9bbc6d4595ba72138026b2074be1233186150e9292865e04b7a63b8c67a  # cp311 manylinux_2_28 x86_64
source scripts/cache_dir.sh
prefix="$TRAINYARD_CACHE/libtorch-cuda-$version"

unpack() {
  [ -f "$prefix/.complete" ] && return 0  # unpacked by another clone meanwhile
  local wheel
  wheel=$(scripts/fetch-wheel.sh "torch==$version" "torch-$version-cp311-cp311-manylinux_2_28_x86_64.whl" \
    "$sha256" "torch $version (530 MB)")
  echo "setup-libtorch-cuda: unpacking into $prefix"
  rm -rf "$prefix" "$prefix.tmp"
  .venv-jax/bin/python - "$wheel" "$prefix.tmp" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        name = info.filename
        if not (name.startswith("torch/include/") or name.startswith("torch/lib/")) or name.endswith("/"):
            continue
        target = os.path.join(out, name[len("torch/"):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(info) as src, open(target, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
PY
  touch "$prefix.tmp/.complete"
  mv "$prefix.tmp" "$prefix"
  rm -f "$wheel"
}
if [ ! -f "$prefix/.complete" ]; then
  scripts/setup.sh >/dev/null  # .venv-jax: a pip and a Python 3.11 to match the wheel's tag
  with_cache_lock unpack
fi

rc="build:cuda --repo_env=TRAINYARD_LIBTORCH_CUDA=$prefix"
[ "$(cat .bazelrc.cuda 2>/dev/null)" = "$rc" ] || echo "$rc" >.bazelrc.cuda
echo "setup-libtorch-cuda: ok ($prefix)"
