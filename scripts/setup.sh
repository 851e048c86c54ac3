#!/usr/bin/env bash
# Installs everything the build and the tests need, from Debian's packages.
# Idempotent: when everything is present it only checks (about a second).
set -euo pipefail

# The build: Bazel (offline, see docs/building.md), the compilers' libraries
# and every C++ dependency of the project.
packages=(
  bazel-bootstrap bazel-rules-java
  g++ clang libclang-rt-14-dev
  protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libgrpc++-dev
  libabsl-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev
  libtorch-dev libgloo-dev
  libsqlite3-dev libsentencepiece-dev sentencepiece
  python3
)

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
echo "setup: ok"
