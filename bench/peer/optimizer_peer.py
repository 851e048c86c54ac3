"""The peer of bench/optimizer_bench.cc: PyTorch's AdamW and transformers'
Adafactor (T5X's settings: no parameter scaling here, fixed learning rate)
over the same preset's parameter shapes, one update timed (median of
--steps). Prints the same JSON lines.

usage: optimizer_peer.py --trainyard BIN --preset NAME [--steps 5] [--threads 1]
"""
import argparse
import json
import statistics
import time

import torch
from transformers.optimization import Adafactor

from ddp_peer import preset_config
from transformers import T5ForConditionalGeneration


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    model = T5ForConditionalGeneration(preset_config(args.trainyard, args.preset))
    params = list(model.parameters())
    torch.manual_seed(0)
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    count = sum(p.numel() for p in params)
    for name, make in (("adafactor", lambda: Adafactor(params, lr=1e-3, scale_parameter=False, relative_step=False,
                                                       warmup_init=False)),
                       ("adamw", lambda: torch.optim.AdamW(params, lr=1e-3))):
        opt = make()
        opt.step()
        seconds = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            opt.step()
            seconds.append(time.perf_counter() - t0)
        print(json.dumps({"system": "pytorch", "optimizer": name, "preset": args.preset, "parameters": count,
                          "threads": args.threads, "seconds_per_update": statistics.median(seconds)}), flush=True)


if __name__ == "__main__":
    main()
