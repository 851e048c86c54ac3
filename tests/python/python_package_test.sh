#!/bin/bash
# Runs python_package_test.py with the Python that has grpcio-tools and
# setuptools (scripts/setup.sh): the test pip-installs ./python with them,
# offline.
set -euo pipefail
source tests/require_python.sh
require_python TRAINYARD_JAX_PYTHON grpc_tools
exec "$python" -u tests/python/python_package_test.py --trainyard "$1"
