#!/usr/bin/env bash
# A resumed iterator in a new process: one process reads 105 batches and
# prints the state before each; a second process restores the state printed
# before batch 6 and must produce batches 6..105 byte for byte.
set -u
dump="$1"
vocab="$2"
work="${TEST_TMPDIR:-$(mktemp -d)}"
"$dump" "$vocab" 105 >"$work/first" || { echo "FAIL: first run"; exit 1; }
state=$(sed -n 6p "$work/first" | cut -f1)
"$dump" "$vocab" 100 --restore "$state" >"$work/second" || { echo "FAIL: restored run"; exit 1; }
if ! diff <(tail -n 100 "$work/first" | cut -f2) <(cut -f2 "$work/second") >/dev/null; then
  echo "FAIL: batches after restoring \"$state\" differ"
  diff <(tail -n 100 "$work/first") "$work/second" | head
  exit 1
fi
echo "100 batches identical after restoring \"$state\" in a new process"
