#!/usr/bin/env bash
# Our Adafactor against optax.adafactor (in .venv-jax, made by
# scripts/setup.sh and named by TRAINYARD_JAX_PYTHON).
set -u
check="$1"
source tests/require_python.sh
require_python TRAINYARD_JAX_PYTHON optax
work="${TEST_TMPDIR:-$(mktemp -d)}"
JAX_PLATFORMS=cpu "$python" tests/optax/make_reference.py "$work/reference.safetensors" || exit 1
"$check" "$work/reference.safetensors"
