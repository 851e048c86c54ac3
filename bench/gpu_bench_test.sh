#!/usr/bin/env bash
# gpu_bench on the CPU with `tiny`: one JSON line with the fields
# bench/gpu/run.sh reads and the model FLOPs of the PaLM-style count (the
# same arithmetic as bench/gpu/hf_peer.py), and a clear refusal of a device
# this build does not have.
set -euo pipefail
bench="$1" trainyard="$2" flops_py="$3"
out=$("$bench" --device cpu --preset tiny --batch 2 --inputs 8 --targets 4 --steps 1 --warmup 1 --dtype fp32 \
  --peak-tflops 1 | grep '^{')
"$trainyard" model-info --preset tiny --json >tiny.json
python3 - "$out" tiny.json "$(dirname "$flops_py")" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[3])
from flops import train_flops_per_example
r = json.loads(sys.argv[1])
p = json.load(open(sys.argv[2]))
for k in ("tokens_per_second", "target_tokens_per_second", "mfu", "model_tflops", "seconds_per_step", "loss"):
    assert k in r, k
assert r["system"] == "trainyard" and r["device"] == "cpu" and r["batch"] == 2
examples_per_second = 2 / r["seconds_per_step"]
assert abs(r["tokens_per_second"] / examples_per_second - 12) < 1e-2, r
assert abs(r["target_tokens_per_second"] / examples_per_second - 4) < 1e-2, r
# The C++ count equals the Python peer's for the same preset and lengths.
expected = train_flops_per_example(p, 8, 4) * examples_per_second / 1e12
assert abs(r["model_tflops"] - expected) <= 1e-3 * expected, (r["model_tflops"], expected)
# --peak-tflops 1: MFU is the model TFLOP/s itself.
assert abs(r["mfu"] - r["model_tflops"]) <= 1e-5 * r["mfu"], r
PY
if "$bench" --device cuda:0 --preset tiny 2>err.txt; then
  echo "expected --device cuda:0 to be refused in a CPU build" >&2
  exit 1
fi
grep -q "needs a CUDA build" err.txt || { cat err.txt >&2; exit 1; }
if "$bench" --device cpu --dtype fp16 2>err.txt; then exit 1; fi
grep -q "allowed: bf16, fp32" err.txt
echo "gpu_bench_test: ok"
