#!/usr/bin/env bash
# Installs everything the build and the tests need, from Debian's packages.
# Idempotent: when everything is present it only checks (about a second).
set -euo pipefail
cd "$(dirname "$0")/.."

# The build: Bazel (offline, see docs/building.md), the compiler (clang, with
# gcc's C++ library) and every C++ dependency of the project.
packages=(
  bazel-bootstrap bazel-rules-java
  clang g++
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev
  libabsl-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libtorch-dev libgloo-dev
  # LibTorch's matrix products go to libblas.so.3: OpenBLAS takes that name
  # (Debian's alternatives), ~34x the reference BLAS here (bench/blas_bench).
  libopenblas0-pthread
  libsqlite3-dev libsentencepiece-dev sentencepiece
  zlib1g-dev
  # Orbax checkpoints' zstd-compressed chunks and OCDBT files.
  libzstd-dev
  python3
)
# The tests: GoogleTest, clang's sanitizer and libFuzzer runtimes, Python
# with Debian's PyTorch (baselines), podman. TRAINYARD_SETUP_BUILD_ONLY=1
# (scripts/demo.sh, deploy/Dockerfile's build stage) leaves them out.
if [ "${TRAINYARD_SETUP_BUILD_ONLY:-0}" != 1 ]; then
  packages+=(
    libclang-rt-14-dev
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

# The machine-wide cache (scripts/cache_dir.sh): Bazel's disk cache, the
# virtualenvs and the downloaded tools, shared by every clone here.
source scripts/cache_dir.sh

# Bazel's disk cache: a fresh clone reuses every action (compilation, link,
# test run) that any clone on this machine ran with the same inputs and
# flags. TRAINYARD_DISK_CACHE overrides where ("none": no disk cache). Kept
# under TRAINYARD_DISK_CACHE_GB (default 40): at most once an hour, the
# entries read longest ago are removed until it is under three quarters.
disk_cache="${TRAINYARD_DISK_CACHE:-$TRAINYARD_CACHE/bazel-disk}"
prune_disk_cache() {
  local dir="$1" stamp="$1/.pruned" max_kb used_kb
  [ -z "$(find "$stamp" -mmin -60 2>/dev/null)" ] || return 0
  max_kb=$(( ${TRAINYARD_DISK_CACHE_GB:-40} * 1024 * 1024 ))
  used_kb=$(du -sk "$dir" | cut -f1)
  if [ "$used_kb" -gt "$max_kb" ]; then
    echo "setup: the disk cache $dir holds $((used_kb / 1024)) MiB, over ${TRAINYARD_DISK_CACHE_GB:-40} GiB: pruning"
    find "$dir" -type f ! -name .pruned -printf '%A@ %k %p\n' | sort -n \
      | awk -v over=$((used_kb - max_kb * 3 / 4)) '{ if (freed >= over) exit; print $3; freed += $2 }' \
      | xargs -r rm -f
  fi
  touch "$stamp"
}
rc_lines=()
if [ "$disk_cache" != none ]; then
  mkdir -p "$disk_cache"
  with_cache_lock prune_disk_cache "$disk_cache"
  rc_lines+=("build --disk_cache=$disk_cache")
fi
write_bazelrc_setup() {  # .bazelrc reads it: the lines of this machine's set-up
  local want
  want=$(printf '%s\n' "${rc_lines[@]}")
  [ "$(cat .bazelrc.setup 2>/dev/null)" = "$want" ] || printf '%s\n' "$want" >.bazelrc.setup
}

# TRAINYARD_SETUP_BUILD_ONLY=1 (scripts/demo.sh, deploy/Dockerfile's build
# stage): the build's packages only, no test virtualenvs or tools.
if [ "${TRAINYARD_SETUP_BUILD_ONLY:-0}" = 1 ]; then
  # Keep the test lines of an earlier full set-up: they still hold.
  mapfile -t -O "${#rc_lines[@]}" rc_lines < <(grep '^test ' .bazelrc.setup 2>/dev/null)
  write_bazelrc_setup
  echo "setup: ok (build only)"
  exit 0
fi
# Python packages for tests and baselines, in virtualenvs of the machine-wide
# cache named by a hash of their requirements (a changed file makes a new
# one), linked from the checkout as .venv, .venv-jax and .venv-tf:
#   .venv      over Debian's Python and its python3-torch (transformers)
#   .venv-jax  a plain one (jax, optax, tensorboard need a newer numpy)
#   .venv-tf   a plain one (TensorFlow and TFDS, which pin their own numpy
#              and protobuf) for the data tests' TFRecord and TFDS files
build_venv() {  # DIR REQUIREMENTS [VENV-FLAGS]
  local venv="$1" requirements="$2"
  shift 2
  [ -f "$venv/.complete" ] && return 0  # made by another clone while this one waited
  echo "setup: creating $venv ($requirements)"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  /usr/bin/python3 -m venv "$@" "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
  touch "$venv/.complete"
}
make_venv() {  # LINK REQUIREMENTS [VENV-FLAGS]: sets venv_path
  local link="$1" requirements="$2" sha
  shift 2
  sha=$({ cat "$requirements"; echo "venv flags: $*"; } | sha256sum | cut -c1-12)
  venv_path="$TRAINYARD_CACHE/venv/$(basename "$requirements" .txt)-$sha"
  [ -f "$venv_path/.complete" ] || with_cache_lock build_venv "$venv_path" "$requirements" "$@"
  if [ "$(readlink "$link" 2>/dev/null)" != "$venv_path" ]; then
    rm -rf "$link"
    ln -s "$venv_path" "$link"
  fi
}
make_venv .venv scripts/requirements-test.txt --system-site-packages
test_python="$venv_path/bin/python"
make_venv .venv-jax scripts/requirements-jax.txt
jax_python="$venv_path/bin/python"
make_venv .venv-tf scripts/requirements-tf.txt
tf_python="$venv_path/bin/python"

# kubectl (with Kustomize) for the deployment test.
kubectl=$(scripts/setup-kubectl.sh)

# Tests find the virtualenvs and kubectl through environment variables.
# Their paths are the same in every clone, so a test's cache key is too.
rc_lines+=("test --test_env=TRAINYARD_PYTHON=$test_python --test_env=TRAINYARD_JAX_PYTHON=$jax_python --test_env=TRAINYARD_TF_PYTHON=$tf_python --test_env=TRAINYARD_KUBECTL=$kubectl")
write_bazelrc_setup
echo "setup: ok"
