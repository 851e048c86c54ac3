#!/usr/bin/env bash
# Installs everything the build and the tests need, from Debian's packages.
# Idempotent: when everything is present it only checks (about a second).
set -euo pipefail
cd "$(dirname "$0")/.."

# The build: Bazel (offline, see docs/building.md), the compiler and every
# C++ dependency of the project.
packages=(
  bazel-bootstrap bazel-rules-java
  g++
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev
  libabsl-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libtorch-dev libgloo-dev
  # LibTorch's matrix products go to libblas.so.3: OpenBLAS takes that name
  # (Debian's alternatives), ~34x the reference BLAS here (bench/blas_bench).
  libopenblas0-pthread
  libsqlite3-dev libsentencepiece-dev sentencepiece
  zlib1g-dev
  python3
)
# The tests: GoogleTest, clang (sanitizer, fuzzer and thread-safety builds),
# Python with Debian's PyTorch (baselines), podman. TRAINYARD_SETUP_BUILD_ONLY=1
# (deploy/Dockerfile's build stage) leaves them out.
if [ "${TRAINYARD_SETUP_BUILD_ONLY:-0}" != 1 ]; then
  packages+=(
    clang libclang-rt-14-dev
    libgtest-dev libgmock-dev
    python3-venv python3-numpy python3-torch
    # deploy/image_test.sh: the image built and run with podman (runc), its
    # base made by debootstrap; containers on a CNI bridge network.
    podman runc debootstrap containernetworking-plugins iptables
  )
fi

missing=()
for p in "${packages[@]}"; do
  # dpkg-query prints "install ok installed" only for a fully installed package.
  if [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Debian's Bazel keeps its rules_java here; WORKSPACE points at it.
if [ ! -f /usr/share/bazel/rules/java/WORKSPACE ]; then
  echo "setup: /usr/share/bazel/rules/java is missing (package bazel-rules-java)" >&2
  exit 1
fi
# TRAINYARD_SETUP_BUILD_ONLY=1 (deploy/Dockerfile's build stage): the build's
# packages only, no test virtualenvs.
if [ "${TRAINYARD_SETUP_BUILD_ONLY:-0}" = 1 ]; then
  echo "setup: ok (build only)"
  exit 0
fi
# Python packages for tests and baselines, in virtualenvs re-created only
# when their requirements change:
#   .venv      over Debian's Python and its python3-torch (transformers)
#   .venv-jax  a plain one (jax, optax, tensorboard need a newer numpy)
make_venv() {  # DIR REQUIREMENTS [VENV-FLAGS]
  local venv="$1" requirements="$2"
  shift 2
  local want
  want=$(sha256sum "$requirements" | cut -c1-64)
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$want" ]; then
    echo "setup: creating $venv ($requirements)"
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$@" "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
    echo "$want" >"$venv/.requirements.sha256"
  fi
}
make_venv .venv scripts/requirements-test.txt --system-site-packages
make_venv .venv-jax scripts/requirements-jax.txt

# kubectl (with Kustomize) for the deployment test.
kubectl=$(scripts/setup-kubectl.sh)

# Tests find the virtualenvs and kubectl through environment variables
# (.bazelrc reads this file).
setup_rc="test --test_env=TRAINYARD_PYTHON=$PWD/.venv/bin/python --test_env=TRAINYARD_JAX_PYTHON=$PWD/.venv-jax/bin/python --test_env=TRAINYARD_KUBECTL=$kubectl"
[ "$(cat .bazelrc.setup 2>/dev/null)" = "$setup_rc" ] || echo "$setup_rc" >.bazelrc.setup
echo "setup: ok"
