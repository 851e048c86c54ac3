#!/usr/bin/env bash
# On a GPU machine, with .gpu/ from bench/gpu/stage.sh: the GPU tests, then
# Trainyard's training tokens/s and MFU on one GPU beside Hugging Face
# transformers' T5ForConditionalGeneration training step (bench/gpu/hf_peer.py:
# bf16 autocast, fused AdamW, the same batch and lengths), in the same run.
# Uses the machine's own PyTorch (python3) for LibTorch, CUDA and NCCL.
# Prints JSON lines; copies them and the logs to $OUT when it is set.
#
# usage: bench/gpu/run.sh [BATCH [INPUTS [TARGETS [STEPS]]]]   (default 64 512 128 20)
set -uo pipefail
cd "$(dirname "$0")/../.."
batch="${1:-64}"
inputs="${2:-512}"
targets="${3:-128}"
steps="${4:-20}"
out="${OUT:-.gpu/out}"
mkdir -p "$out"
[ -x .gpu/bin/gpu_bench ] || { echo "no .gpu/bin/gpu_bench: run bench/gpu/stage.sh on the CPU machine and carry .gpu" >&2; exit 2; }
py="$(command -v python3)"
site="$("$py" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
torch_version="$("$py" -c 'import torch; print(torch.__version__)')"
echo "python $py, torch $torch_version" | tee "$out/environment.txt"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$out/environment.txt"
libs="$site/torch/lib"
for d in "$site"/nvidia/*/lib; do libs="$libs:$d"; done
export LD_LIBRARY_PATH="$libs:$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

status=0
for t in device_test nccl_collective_test device_training_test; do
  echo "== $t"
  if ! timeout 600 ".gpu/bin/$t" --gtest_brief=0 2>&1 | tee "$out/$t.log"; then
    echo "FAILED: $t" | tee -a "$out/summary.txt"
    status=1
  fi
done

preset="$("$py" -c 'import json; print(json.load(open(".gpu/preset.json"))["preset"])' 2>/dev/null || echo t5_1_1_base)"
echo "== throughput ($preset, batch $batch, lengths $inputs/$targets)"
: >"$out/throughput.jsonl"
for rep in 0 1; do  # alternate which system goes first
  runs=(trainyard peer)
  ((rep)) && runs=(peer trainyard)
  for r in "${runs[@]}"; do
    if [ "$r" = trainyard ]; then
      timeout 900 .gpu/bin/gpu_bench --preset "$preset" --device cuda:0 --dtype bf16 --batch "$batch" \
        --inputs "$inputs" --targets "$targets" --steps "$steps" | tee -a "$out/throughput.jsonl" || status=1
    else
      timeout 900 "$py" .gpu/hf_peer.py --preset .gpu/preset.json --batch "$batch" --inputs "$inputs" \
        --targets "$targets" --steps "$steps" | tee -a "$out/throughput.jsonl" || status=1
    fi
  done
done
"$py" - "$out/throughput.jsonl" <<'PY' | tee "$out/summary.json"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
med = {s: {k: statistics.median(r[k] for r in rows if r["system"] == s) for k in ("tokens_per_second", "mfu")}
       for s in ("trainyard", "hf_transformers") if any(r["system"] == s for r in rows)}
if len(med) == 2:
    med["ratio_tokens_per_second"] = med["trainyard"]["tokens_per_second"] / med["hf_transformers"]["tokens_per_second"]
print(json.dumps({"summary": med}))
PY
exit "$status"
