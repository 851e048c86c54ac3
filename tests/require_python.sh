# Sourced by the tests that run a reference implementation in Python.
# require_python VAR MODULE: sets $python to the interpreter named by the
# environment variable VAR (set by scripts/setup.sh through .bazelrc.setup),
# or fails the test with the reason if it is missing or lacks MODULE (as a
# case of its own in tests that use tests/testing/cases.sh).
require_python() {
  python="${!1:-}"
  if [ -z "$python" ] || ! "$python" -c "import $2" 2>/dev/null; then
    local why="$1 ('$python') is not a Python with $2; run scripts/setup.sh"
    if declare -F case_fail >/dev/null; then case_fail "require $2" "$why"; else echo "FAIL: $why"; fi
    exit 1
  fi
}
