#!/usr/bin/env bash
# Debian's PyTorch 1.13 (the LibTorch Trainyard builds against) against
# PyPI's PyTorch 2.x on this CPU, alternating, REPS times (compare.py says
# what is measured). The 2.x build is installed once into .bench/torch2 (a
# CUDA wheel of about 3 GB with its NVIDIA libraries; only its CPU kernels
# run here). Prints JSON lines; results also go to .bench/libtorch/.
#
# usage: bench/libtorch/run.sh [REPS [PRESET]]   (default 3, t5_1_1_small)
set -euo pipefail
cd "$(dirname "$0")/../.."
reps="${1:-3}"
preset="${2:-t5_1_1_small}"
torch2_version=2.15.0
scripts/setup.sh >/dev/null
bazel build -c opt //client:trainyard >/dev/null 2>&1 || { bazel build -c opt //client:trainyard; exit 1; }
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
if ! .bench/torch2/bin/python -c "import torch, transformers; assert torch.__version__.startswith('$torch2_version')" 2>/dev/null; then
  rm -rf .bench/torch2
  /usr/bin/python3 -m venv .bench/torch2
  .bench/torch2/bin/pip install -q "torch==$torch2_version" "transformers==$(.venv/bin/python -c 'import transformers; print(transformers.__version__)')" sentencepiece
fi
core=$(grep -q avx512bw /proc/cpuinfo && echo SkylakeX || true)
export OPENBLAS_CORETYPE="$core" OMP_NUM_THREADS=1
[ -n "$core" ] || unset OPENBLAS_CORETYPE
mkdir -p .bench/libtorch
out=".bench/libtorch/$(date +%Y%m%d-%H%M%S)-$preset.jsonl"
for ((rep = 0; rep < reps; rep++)); do
  pythons=(.venv/bin/python .bench/torch2/bin/python)
  ((rep % 2)) && pythons=(.bench/torch2/bin/python .venv/bin/python)
  for py in "${pythons[@]}"; do
    "$py" -W ignore bench/libtorch/compare.py --trainyard "$bin/client/trainyard" --preset "$preset" \
      --label "rep$rep" | tee -a "$out"
  done
done
.venv-jax/bin/python - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for r in rows:
    med.setdefault((r["what"], r["dtype"], r["torch"]), []).append(r["value"])
summary = {f"{w}/{d}/{t}": statistics.median(v) for (w, d, t), v in sorted(med.items())}
print(json.dumps({"summary": summary}))
PY
