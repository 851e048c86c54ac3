#!/usr/bin/env bash
# Microbatching lowers peak memory: the same batch's gradients accumulated in
# 1, 2 and 4 microbatches (separate processes) must need strictly less peak
# resident memory as the count grows, and 4 microbatches at most 60 % of the
# activation memory of 1 (activations dominate: logits alone are 32 MiB at 1).
set -u
source tests/testing/cases.sh
bin="$1"
peak() { "$bin" "$1" | sed -E 's/.*"peak_rss_kib_before": ([0-9]+), "peak_rss_kib": ([0-9]+).*/\1 \2/'; }
read -r base1 p1 < <(peak 1)
read -r base2 p2 < <(peak 2)
read -r base4 p4 < <(peak 4)
for v in "$base1" "$p1" "$base2" "$p2" "$base4" "$p4"; do
  [[ "$v" =~ ^[0-9]+$ ]] || { case_fail "measure" "the peak_memory runs printed no figures"; exit 1; }
done
# Growth over the process's peak before the step (model, LibTorch).
g1=$((p1 - base1)); g2=$((p2 - base2)); g4=$((p4 - base4))
echo "peak growth (KiB): k=1 $g1, k=2 $g2, k=4 $g4"
[ "$g2" -lt "$g1" ] && case_pass "2 microbatches below 1" || case_fail "2 microbatches below 1" "k=2 ($g2) not below k=1 ($g1)"
[ "$g4" -lt "$g2" ] && case_pass "4 microbatches below 2" || case_fail "4 microbatches below 2" "k=4 ($g4) not below k=2 ($g2)"
[ $((g4 * 100)) -le $((g1 * 60)) ] && case_pass "4 microbatches at most 60% of 1" \
  || case_fail "4 microbatches at most 60% of 1" "k=4 ($g4) above 60% of k=1 ($g1)"
