#!/usr/bin/env bash
# Our Adafactor against optax.adafactor (in .venv-jax, made by
# scripts/setup.sh and named by TRAINYARD_JAX_PYTHON). Each step and each of
# the checker's gtest cases is a test case (tests/testing/cases.sh).
set -u
source tests/testing/cases.sh
check="$1"
source tests/require_python.sh
require_python TRAINYARD_JAX_PYTHON optax
work="${TEST_TMPDIR:-$(mktemp -d)}"
JAX_PLATFORMS=cpu case_check "optax reference" "$python" tests/optax/make_reference.py "$work/reference.safetensors" \
  || exit 1
case_gtest "parity" "$check" "$work/reference.safetensors"
