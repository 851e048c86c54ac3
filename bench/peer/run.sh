#!/usr/bin/env bash
# Trainyard against PyTorch DDP in the same run (bench/peer/run.py says
# what is measured). Prints JSON lines: every measurement, then medians and
# the two ratios. Results also go to .bench/peer/.
#
# usage: bench/peer/run.sh [REPS [PRESET [STEPS [--compare-overlap|--compare-sharding|--compare-allgather|--compare-malloc|--sharding=MODE]]]]
#        (default 3, tiny, 20; --compare-overlap: Trainyard alone, the
#        gradient all-reduce after backward against overlapped with it;
#        --compare-sharding: Trainyard alone, data_parallel.sharding NONE
#        against OPTIMIZER, GRADIENTS and PARAMETERS; --compare-allgather: Trainyard
#        alone, GRADIENTS, the parameters' all-gather after the update
#        against overlapped with the next forward; --sharding=OPTIMIZER|GRADIENTS|PARAMETERS:
#        against the peer with that data_parallel.sharding, NONE by default;
#        --compare-malloc: Trainyard alone, glibc's dynamic mmap threshold
#        against one fixed at 128 KiB)
set -euo pipefail
cd "$(dirname "$0")/../.."
reps="${1:-3}"
preset="${2:-tiny}"
steps="${3:-20}"
extra="${4:-}"
scripts/setup.sh >/dev/null
bazel build -c opt //client:trainyard //bench:peer_examples >/dev/null 2>&1 \
  || { bazel build -c opt //client:trainyard //bench:peer_examples; exit 1; }
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
mkdir -p .bench/peer
"$bin/bench/peer_examples" 20000 >.bench/peer/examples.jsonl
# Both systems on the tuned BLAS (common/blas.h: trainyard-torch re-executes
# itself with it; the peer gets it from the environment).
core=$(grep -q avx512bw /proc/cpuinfo && echo SkylakeX || true)
export OPENBLAS_CORETYPE="$core"
[ -n "$core" ] || unset OPENBLAS_CORETYPE
.venv-jax/bin/python bench/peer/run.py --trainyard "$bin/client/trainyard" --peer-python .venv/bin/python \
  --examples .bench/peer/examples.jsonl --reps "$reps" --preset "$preset" --steps "$steps" $extra \
  | tee ".bench/peer/$(date +%Y%m%d-%H%M%S)-$preset.jsonl"
