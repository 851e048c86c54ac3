#!/usr/bin/env bash
# `trainyard vocab train` through the real binary: SentencePiece in the same
# process as libprotobuf, through the shim library.
set -u
source tests/testing/cases.sh
trainyard="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

for n in $(seq 1 3000); do echo "$((n * 37)) apples and $n pears"; done >"$tmp/corpus.txt"
"$trainyard" vocab train --input "$tmp/corpus.txt" --size 64 --out "$tmp/v" >"$tmp/out" 2>"$tmp/err" \
  && grep -q "64 pieces; model vocab_size 128" "$tmp/out" && [ -s "$tmp/v.model" ] && case_pass "vocab train" \
  || case_fail "vocab train" "$(cat "$tmp/out" "$tmp/err")"
"$trainyard" vocab train --input /nonexistent.txt --size 64 --out "$tmp/v2" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "/nonexistent.txt: no such file" "$tmp/err" && case_pass "vocab train: missing input" \
  || case_fail "vocab train: missing input" "$(cat "$tmp/err")"
