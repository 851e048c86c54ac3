#!/usr/bin/env bash
# Runs the real `trainyard` binary: every example validates (exit 0), every
# bad spec in tests/bad_specs/ is rejected with exit code 2 and a message that
# names the field (tests/bad_specs/EXPECTED.tsv), and usage errors exit 2.
# Each check is a test case (tests/testing/cases.sh).
set -u
source tests/testing/cases.sh
trainyard="$1"

tmp="${TEST_TMPDIR:-$(mktemp -d)}"

# Examples: valid, and the normalised output is itself valid and a fixed point.
for spec in examples/*.textproto examples/*.json; do
  if "$trainyard" validate "$spec" >"$tmp/out.textproto" 2>"$tmp/err"; then
    "$trainyard" validate "$tmp/out.textproto" >"$tmp/again.textproto" 2>>"$tmp/err" \
      && cmp -s "$tmp/out.textproto" "$tmp/again.textproto" \
      && case_pass "validate $spec" \
      || case_fail "validate $spec" "normalised spec is not a fixed point: $(cat "$tmp/err")"
  else
    case_fail "validate $spec" "exit $? : $(cat "$tmp/err")"
  fi
done
"$trainyard" validate examples/*.textproto >/dev/null 2>"$tmp/err" && case_pass "validate examples/*.textproto" \
  || case_fail "validate examples/*.textproto" "in one call: $(cat "$tmp/err")"

# Bad specs.
count=0
while IFS=$'\t' read -r file expected flags; do
  case "$file" in ''|'#'*) continue ;; esac
  count=$((count + 1))
  # shellcheck disable=SC2086  # flags are words
  "$trainyard" validate "tests/bad_specs/$file" $flags >"$tmp/out" 2>"$tmp/err"
  code=$?
  if [ "$code" -ne 2 ]; then
    case_fail "bad spec $file" "exit code $code, want 2"
  elif ! grep -qF -- "$expected" "$tmp/err"; then
    case_fail "bad spec $file" "stderr lacks [$expected]; got: $(cat "$tmp/err")"
  elif [ -s "$tmp/out" ]; then
    case_fail "bad spec $file" "printed a spec although invalid"
  else
    case_pass "bad spec $file"
  fi
done < tests/bad_specs/EXPECTED.tsv
[ "$count" -ge 25 ] && case_pass "at least 25 bad specs" || case_fail "at least 25 bad specs" "only $count"

# --set applies before validation, and fixes or breaks a spec.
ok() { case_pass "$1"; }
ko() { case_fail "$1" "stderr: $(cat "$tmp/err" 2>/dev/null)"; }
"$trainyard" validate tests/bad_specs/zero_steps.textproto --set total_steps=10 >"$tmp/out" 2>"$tmp/err" \
  && grep -q '^total_steps: 10$' "$tmp/out" && ok "--set fixes zero_steps" || ko "--set fixes zero_steps"
"$trainyard" validate examples/tiny_local.textproto --set batch_size=33 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -qF "batch_size: 33 is not divisible" "$tmp/err" && ok "--set batch_size=33" || ko "--set batch_size=33"
"$trainyard" validate examples/tiny_local.textproto --set nosuch=1 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -qF "nosuch: no such field in JobSpec" "$tmp/err" && ok "--set nosuch" || ko "--set nosuch"

# Usage errors and help.
"$trainyard" >/dev/null 2>"$tmp/err"; [ $? -eq 2 ] && ok "no command: exit 2" || ko "no command: exit 2"
"$trainyard" frobnicate >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'unknown command "frobnicate"' "$tmp/err" && ok "unknown command" || ko "unknown command"
"$trainyard" validate --bogus x >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'unknown flag --bogus' "$tmp/err" && ok "unknown flag" || ko "unknown flag"
"$trainyard" validate /nonexistent.textproto >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q '/nonexistent.textproto: no such file' "$tmp/err" && ok "missing file" || ko "missing file"
"$trainyard" local --threads -1 examples/tiny_local.textproto >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -qF -- "--threads: -1; allowed 1..1024" "$tmp/err" && ok "local --threads -1" || ko "local --threads -1"
"$trainyard" --help 2>"$tmp/err" | grep -q '^  validate' && ok "--help lists validate" || ko "--help lists validate"
"$trainyard" validate --help 2>"$tmp/err" | grep -q -- '--set PATH=VALUE' && ok "validate --help" || ko "validate --help"
"$trainyard" model-info --help 2>"$tmp/err" | grep -q -- '--preset NAME' && ok "model-info --help" || ko "model-info --help"
echo 'name: "from-stdin" model { preset: "tiny" } task: "digits_to_words" feature_lengths { inputs: 8 targets: 8 } batch_size: 4 total_steps: 1 output_dir: "o"' \
  | "$trainyard" validate - 2>"$tmp/err" | grep -q '^name: "from-stdin"$' && ok "spec from stdin" || ko "spec from stdin"

# model-info.
"$trainyard" model-info --preset t5_1_1_xxl --json >"$tmp/xxl.json" 2>"$tmp/err" \
  && grep -q '"num_params": 11135332352' "$tmp/xxl.json" && ok "model-info xxl" || ko "model-info xxl"
"$trainyard" model-info --preset t5_huge >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'unknown preset "t5_huge"' "$tmp/err" && ok "model-info unknown preset" || ko "model-info unknown preset"
"$trainyard" model-info 2>"$tmp/err" | grep -q '^t5_small  *60,506,624' && ok "model-info table" || ko "model-info table"
