#!/usr/bin/env bash
# Runs the real `trainyard` binary: every example validates (exit 0), every
# bad spec in tests/bad_specs/ is rejected with exit code 2 and a message that
# names the field (tests/bad_specs/EXPECTED.tsv), and usage errors exit 2.
set -u
trainyard="$1"
passed=0
failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
pass() { passed=$((passed + 1)); }

tmp="${TEST_TMPDIR:-$(mktemp -d)}"

# Examples: valid, and the normalised output is itself valid and a fixed point.
for spec in examples/*.textproto examples/*.json; do
  if "$trainyard" validate "$spec" >"$tmp/out.textproto" 2>"$tmp/err"; then
    "$trainyard" validate "$tmp/out.textproto" >"$tmp/again.textproto" 2>>"$tmp/err" \
      && cmp -s "$tmp/out.textproto" "$tmp/again.textproto" \
      && pass || fail "$spec: normalised spec is not a fixed point: $(cat "$tmp/err")"
  else
    fail "$spec: exit $? : $(cat "$tmp/err")"
  fi
done
"$trainyard" validate examples/*.textproto >/dev/null 2>"$tmp/err" && pass \
  || fail "validate examples/*.textproto in one call: $(cat "$tmp/err")"

# Bad specs.
count=0
while IFS=$'\t' read -r file expected flags; do
  case "$file" in ''|'#'*) continue ;; esac
  count=$((count + 1))
  # shellcheck disable=SC2086  # flags are words
  "$trainyard" validate "tests/bad_specs/$file" $flags >"$tmp/out" 2>"$tmp/err"
  code=$?
  if [ "$code" -ne 2 ]; then
    fail "$file: exit code $code, want 2"
  elif ! grep -qF -- "$expected" "$tmp/err"; then
    fail "$file: stderr lacks [$expected]; got: $(cat "$tmp/err")"
  elif [ -s "$tmp/out" ]; then
    fail "$file: printed a spec although invalid"
  else
    pass
  fi
done < tests/bad_specs/EXPECTED.tsv
[ "$count" -ge 25 ] && pass || fail "only $count bad specs; want at least 25"

# --set applies before validation, and fixes or breaks a spec.
"$trainyard" validate tests/bad_specs/zero_steps.textproto --set total_steps=10 >"$tmp/out" 2>"$tmp/err" \
  && grep -q '^total_steps: 10$' "$tmp/out" && pass || fail "--set did not fix zero_steps: $(cat "$tmp/err")"
"$trainyard" validate examples/tiny_local.textproto --set batch_size=33 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -qF "batch_size: 33 is not divisible" "$tmp/err" && pass || fail "--set batch_size=33"
"$trainyard" validate examples/tiny_local.textproto --set nosuch=1 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -qF "nosuch: no such field in JobSpec" "$tmp/err" && pass || fail "--set nosuch"

# Usage errors and help.
"$trainyard" >/dev/null 2>&1; [ $? -eq 2 ] && pass || fail "no command: want exit 2"
"$trainyard" frobnicate >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'unknown command "frobnicate"' "$tmp/err" && pass || fail "unknown command"
"$trainyard" validate --bogus x >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'unknown flag --bogus' "$tmp/err" && pass || fail "unknown flag"
"$trainyard" validate /nonexistent.textproto >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q '/nonexistent.textproto: no such file' "$tmp/err" && pass || fail "missing file"
"$trainyard" local --threads -1 examples/tiny_local.textproto >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -qF -- "--threads: -1; allowed 1..1024" "$tmp/err" && pass || fail "local --threads -1"
"$trainyard" --help | grep -q '^  validate' && pass || fail "--help lists validate"
"$trainyard" validate --help | grep -q -- '--set PATH=VALUE' && pass || fail "validate --help"
"$trainyard" model-info --help | grep -q -- '--preset NAME' && pass || fail "model-info --help"
echo 'name: "from-stdin" model { preset: "tiny" } task: "t" feature_lengths { inputs: 8 targets: 8 } batch_size: 4 total_steps: 1 output_dir: "o"' \
  | "$trainyard" validate - | grep -q '^name: "from-stdin"$' && pass || fail "spec from stdin"

# model-info.
"$trainyard" model-info --preset t5_1_1_xxl --json >"$tmp/xxl.json" 2>"$tmp/err" \
  && grep -q '"num_params": 11135332352' "$tmp/xxl.json" && pass || fail "model-info xxl: $(cat "$tmp/err")"
"$trainyard" model-info --preset t5_huge >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q 'unknown preset "t5_huge"' "$tmp/err" && pass || fail "model-info unknown preset"
"$trainyard" model-info | grep -q '^t5_small  *60,506,624' && pass || fail "model-info table"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
