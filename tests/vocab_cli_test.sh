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

# A vocabulary of 500 pieces with span corruption's 100 sentinels is 600 ids:
# `validate` opens it and refuses the tiny preset's 512 rows, naming both
# sizes; the preset's vocab_size overridden to 640 holds it.
"$trainyard" vocab train --input "$tmp/corpus.txt" --size 500 --out "$tmp/v500" >/dev/null 2>"$tmp/err" \
  || case_fail "vocab train --size 500" "$(cat "$tmp/err")"
cat >"$tmp/own.textproto" <<EOF
name: "own-vocabulary"
model { preset: "tiny" }
task: "own"
task_definitions {
  name: "own"
  splits { key: "train" value: "$tmp/corpus.txt" }
  vocabulary: "$tmp/v500.model"
  preprocessors { span_corruption {} }
}
feature_lengths { inputs: 64 targets: 16 }
batch_size: 8
total_steps: 10
output_dir: "$tmp/runs/own"
EOF
"$trainyard" validate "$tmp/own.textproto" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -qF "task own: its vocabulary has 600 ids (500 pieces of $tmp/v500.model and 100 extra ids), more than the model's vocab_size 512" "$tmp/err" \
  && case_pass "validate: a vocabulary larger than the model" \
  || case_fail "validate: a vocabulary larger than the model" "$(cat "$tmp/err")"
"$trainyard" validate "$tmp/own.textproto" --set 'model={preset: "tiny" vocab_size: 640}' >"$tmp/out" 2>"$tmp/err" \
  && grep -q "vocab_size: 640" "$tmp/out" && case_pass "validate: model.vocab_size overrides the preset's" \
  || case_fail "validate: model.vocab_size overrides the preset's" "$(cat "$tmp/err")"
sed "s|$tmp/v500.model|$tmp/nowhere.model|" "$tmp/own.textproto" >"$tmp/far.textproto"
"$trainyard" validate "$tmp/far.textproto" >/dev/null 2>"$tmp/err" \
  && grep -q "note: .*the tasks' vocabularies are not checked here: .*nowhere.model: no such file" "$tmp/err" \
  && case_pass "validate: a vocabulary this machine cannot open is left to the workers" \
  || case_fail "validate: a vocabulary this machine cannot open is left to the workers" "$(cat "$tmp/err")"
