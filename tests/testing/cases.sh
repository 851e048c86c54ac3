# Sourced by shell tests that make several checks. Each check becomes a test
# case in the JUnit XML that Bazel reads ($XML_OUTPUT_FILE), so that
# scripts/test.sh counts every check, and the test exits 1 if any check
# failed, whatever happens after it:
#
#   case_check NAME COMMAND...   passes if COMMAND exits 0 (its output is
#                                shown, and kept in the failure's message)
#   case_pass NAME | case_fail NAME MESSAGE | case_skip NAME REASON
#   case_gtest NAME BINARY ARGS...  runs a gtest binary; each of its cases
#                                becomes NAME/Suite.Case (it fails NAME itself
#                                if it exits non-zero with no failed case)
#
# The XML is written when the script exits, however it exits: a script that
# ends early (an `exit 1`, a command under `set -e`) gets a failed case
# saying so. Scripts should not use `set -e`: a failed check returns non-zero
# and the next checks should still run. Needs python3 (tests/testing/junit.py
# writes the XML).

_cases_dir="${TEST_TMPDIR:-$(mktemp -d)}/cases.$$"
mkdir -p "$_cases_dir"
_cases_tsv="$_cases_dir/cases.tsv"
: >"$_cases_tsv"
_cases_failed=0
_cases_count=0
_cases_lib="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

_case_escape() {  # one line, tabs and newlines escaped
  local s="${1//\\/\\\\}"
  s="${s//$'\t'/\\t}"
  printf '%s' "${s//$'\n'/\\n}"
}

_case_record() {  # STATUS NAME SECONDS MESSAGE
  _cases_count=$((_cases_count + 1))
  printf '%s\t%s\t%s\t%s\n' "$1" "$(_case_escape "$2")" "$3" "$(_case_escape "$4")" >>"$_cases_tsv"
}

case_pass() {
  echo "PASS: $1"
  _case_record passed "$1" 0 ""
}

case_fail() {
  echo "FAIL: $1: $2"
  _cases_failed=$((_cases_failed + 1))
  _case_record failed "$1" 0 "$2"
}

case_skip() {
  echo "SKIPPED: $1: $2"
  _case_record skipped "$1" 0 "$2"
}

case_check() {  # NAME COMMAND...
  local name="$1"; shift
  local log="$_cases_dir/check.log" began=$SECONDS rc
  "$@" >"$log" 2>&1
  rc=$?
  cat "$log"
  if [ "$rc" -eq 0 ]; then
    echo "PASS: $name"
    _case_record passed "$name" $((SECONDS - began)) ""
  else
    echo "FAIL: $name (exit $rc)"
    _cases_failed=$((_cases_failed + 1))
    _case_record failed "$name" $((SECONDS - began)) "exit $rc; last output:
$(tail -n 30 "$log")"
  fi
  return "$rc"
}

case_gtest() {  # NAME BINARY ARGS...
  local name="$1"; shift
  local xml="$_cases_dir/gtest.$_cases_count.xml" rc
  _cases_count=$((_cases_count + 1))
  # gtest also reads XML_OUTPUT_FILE: keep it off this script's own file.
  XML_OUTPUT_FILE="" "$@" --gtest_output="xml:$xml"
  rc=$?
  if [ -s "$xml" ]; then
    printf 'gtest\t%s/\t%s\n' "$(_case_escape "$name")" "$xml" >>"$_cases_tsv"
    if grep -q '<failure' "$xml"; then
      _cases_failed=$((_cases_failed + 1))
    elif [ "$rc" -ne 0 ]; then
      case_fail "$name" "exited $rc after its cases passed (a crash at exit, a sanitizer report?)"
    fi
  else
    case_fail "$name" "exited $rc without writing its results"
  fi
  return "$rc"
}

_cases_finish() {
  local rc=$?
  trap - EXIT
  if [ "$rc" -ne 0 ] && [ "$_cases_failed" -eq 0 ]; then
    case_fail "script" "the test script exited with status $rc after its last check"
  fi
  if [ "$_cases_count" -eq 0 ]; then
    case_fail "script" "the test script recorded no check"
  fi
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    if ! python3 "$_cases_lib/junit.py" write "$XML_OUTPUT_FILE" "$_cases_tsv"; then
      echo "FAIL: could not write $XML_OUTPUT_FILE"
      exit 1
    fi
  fi
  echo "checks: $(grep -c '^passed' "$_cases_tsv") passed, $_cases_failed failed, $(grep -c '^skipped' "$_cases_tsv") skipped (besides gtest's own cases)"
  [ "$_cases_failed" -eq 0 ] && [ "$rc" -eq 0 ] && exit 0
  exit 1
}
trap _cases_finish EXIT
