"""One PyTorch build's CPU speed on Trainyard's shapes, in one process with
one intra-op thread: float32 and bfloat16 matrix products at a T5 preset's
layer shapes, and a whole Hugging Face T5 training step (AdamW) in float32
and under bfloat16 autocast. bench/libtorch/run.sh runs it under Debian's
PyTorch 1.13 (the LibTorch Trainyard links) and PyPI's PyTorch 2.x,
alternating, to decide which LibTorch Trainyard should build against.

Prints one JSON line per measurement.
usage: compare.py --trainyard BIN [--preset t5_1_1_small] [--rows 16]
                  [--inputs 16] [--targets 32] [--steps 5] [--reps 1]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from transformers import T5ForConditionalGeneration

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peer"))
from ddp_peer import preset_config  # noqa: E402  (the peer's T5Config for a preset)


def preset(trainyard, name):
    return json.loads(subprocess.run([trainyard, "model-info", "--preset", name, "--json"], check=True,
                                     capture_output=True, text=True).stdout)


def timed(fn, reps):
    fn()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmuls(p, tokens, dtype):
    """GFLOP/s of the forward products of one layer: attention projections,
    the MLP and the logits, [tokens, in] x [in, out]."""
    d, f, v = p["d_model"], p["d_ff"], p["vocab_size"]
    shapes = [(d, d), (d, f), (f, d), (d, v)]
    g = torch.Generator().manual_seed(0)
    pairs = [(torch.randn(tokens, k, generator=g).to(dtype), torch.randn(k, n, generator=g).to(dtype))
             for k, n in shapes]
    # Correctness against float64 on the same inputs (bf16: its own rounding).
    for a, b in pairs:
        ref = a.double() @ b.double()
        err = ((a @ b).double() - ref).abs().max().item() / ref.abs().max().item()
        if err > (2e-2 if dtype == torch.bfloat16 else 1e-4):
            raise SystemExit(f"{dtype} matmul is off by {err:.2e} relative")
    flops = sum(2 * tokens * k * n for k, n in shapes)
    seconds = timed(lambda: [a @ b for a, b in pairs], 5)
    return flops / seconds / 1e9


def train_step_seconds(p, args, bf16):
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(preset_config(args.trainyard, args.preset))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, p["vocab_size"], (args.rows, args.inputs), generator=g)
    labels = torch.randint(2, p["vocab_size"], (args.rows, args.targets), generator=g)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss.item()

    return timed(step, args.steps)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--preset", default="t5_1_1_small")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--inputs", type=int, default=16)
    parser.add_argument("--targets", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    p = preset(args.trainyard, args.preset)
    tokens = args.rows * args.targets
    base = {"torch": torch.__version__, "label": args.label, "preset": args.preset}
    for dtype in (torch.float32, torch.bfloat16):
        print(json.dumps(dict(base, what="matmul_gflops", dtype=str(dtype).split(".")[1],
                              value=matmuls(p, tokens, dtype))), flush=True)
    for bf16 in (False, True):
        print(json.dumps(dict(base, what="train_step_seconds", dtype="bf16_autocast" if bf16 else "float32",
                              value=train_step_seconds(p, args, bf16))), flush=True)


if __name__ == "__main__":
    main()
