#!/usr/bin/env bash
# Trainyard's T5 against the same model in PyTorch eager (transformers, same
# ATen), in the same run: forward+backward tokens/s at batch 8, lengths
# 128/64, and greedy decoding tokens/s (64 tokens), 1 intra-op thread each,
# alternating the two systems, REPS repetitions; prints every measurement as
# a JSON line, then medians and ratios.
#
# Both systems use the BLAS that LibTorch resolves as libblas.so.3: OpenBLAS
# (scripts/setup.sh installs it) with OPENBLAS_CORETYPE=SkylakeX set for
# both (common/blas.h says why), and, for comparison, Debian's reference
# BLAS selected with LD_LIBRARY_PATH.
#
# usage: bench/model/run.sh [REPS [SMALL_REPS]]   (default 3 and 1)
# t5_1_1_small runs SMALL_REPS alternating repetitions of 1 warm-up + 1
# timed step (OpenBLAS only: minutes per step on the reference BLAS).
set -euo pipefail
cd "$(dirname "$0")/../.."
reps="${1:-3}"
small_reps="${2:-1}"
scripts/setup.sh >/dev/null
bazel build -c opt //bench:model_bench //client:trainyard >/dev/null 2>&1 \
  || { bazel build -c opt //bench:model_bench //client:trainyard; exit 1; }
bench="$(bazel info -c opt bazel-bin 2>/dev/null)/bench/model_bench"
trainyard="$(bazel info -c opt bazel-bin 2>/dev/null)/client/trainyard"
python=.venv/bin/python

reference_dir=/usr/lib/x86_64-linux-gnu/blas
core=$(grep -q avx512bw /proc/cpuinfo && echo SkylakeX || true)

out=$(mktemp)
run() {  # BLAS PRESET STEPS SYSTEM
  local blas="$1" preset="$2" steps="$3" system="$4" env=()
  if [ "$blas" = openblas ]; then
    [ -n "$core" ] && env=(OPENBLAS_CORETYPE="$core")
  else
    env=(LD_LIBRARY_PATH="$reference_dir")
  fi
  local args=(--preset "$preset" --steps "$steps" --warmup 1 --threads 1)
  if [ "$system" = trainyard ]; then
    env "${env[@]}" OMP_NUM_THREADS=1 "$bench" "${args[@]}"
  else
    env "${env[@]}" OMP_NUM_THREADS=1 "$python" bench/model/peer.py "${args[@]}" --trainyard "$trainyard"
  fi | sed "s/^{/{\"blas\": \"$blas\", /" | tee -a "$out"
}

for rep in $(seq "$reps"); do
  for system in trainyard pytorch_eager; do
    run reference tiny 5 "$system"
    run openblas tiny 5 "$system"
  done
done
# t5_1_1_small takes minutes per step on the reference BLAS: OpenBLAS only.
for rep in $(seq "$small_reps"); do
  for system in trainyard pytorch_eager; do
    run openblas t5_1_1_small 1 "$system"
  done
done

"$python" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
groups = {}
for r in rows:
    groups.setdefault((r["blas"], r["preset"], r["measure"], r["system"]), []).append(r["tokens_per_second"])
print("\nmedians (tokens/s) and ratio trainyard / pytorch_eager:")
summary = []
for (blas, preset, measure, system) in sorted(groups):
    if system != "trainyard":
        continue
    ours = statistics.median(groups[(blas, preset, measure, "trainyard")])
    peer = statistics.median(groups.get((blas, preset, measure, "pytorch_eager"), [float("nan")]))
    print(f"  {blas:9s} {preset:13s} {measure:14s} trainyard {ours:9.1f}  pytorch_eager {peer:9.1f}  ratio {ours / peer:5.2f}")
    summary.append({"blas": blas, "preset": preset, "measure": measure, "trainyard": ours,
                    "pytorch_eager": peer, "ratio": ours / peer, "reps": len(groups[(blas, preset, measure, "trainyard")])})
print(json.dumps({"model_bench_summary": summary}))
PY
rm -f "$out"
