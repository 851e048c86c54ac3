"""Data-parallel efficiency on this machine: tokens/s of one worker with one
thread, one worker with two threads, and two workers with one thread each,
against the ideal (twice one worker with one thread). Same job as
bench/peer's padded configuration (fixed-length batches of 32, AdamW), the
figures from Trainyard's own train summaries. Alternating, REPS times;
prints every measurement, then the medians and efficiencies.

usage: run.py --trainyard BIN [--reps 3] [--preset tiny] [--steps 20]
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peer"))
from run import run_trainyard  # noqa: E402  (bench/peer/run.py: the same job and figures)


def run(args, workers, threads):
    m = run_trainyard(args, "padded", workers=workers, threads=threads)
    return {"workers": workers, "threads": threads, "preset": args.preset,
            "steps_per_second": m["steps_per_second"], "tokens_per_second": m["target_tokens_per_second"],
            "exposed_allreduce_seconds_per_step": m["exposed_allreduce_seconds_per_step"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    configs = [(1, 1), (1, 2), (2, 1)]
    rows = []
    for rep in range(args.reps):
        for workers, threads in (configs if rep % 2 == 0 else configs[::-1]):
            m = run(args, workers, threads)
            m["rep"] = rep
            print(json.dumps(m), flush=True)
            rows.append(m)
    med = {f"{w}x{t}": statistics.median(r["tokens_per_second"] for r in rows
                                         if (r["workers"], r["threads"]) == (w, t)) for w, t in configs}
    ideal = 2 * med["1x1"]
    print(json.dumps({"summary": {"preset": args.preset, "reps": args.reps, "tokens_per_second": med,
                                  "ideal_2x": ideal,
                                  "efficiency_1_worker_2_threads": med["1x2"] / ideal,
                                  "efficiency_2_workers_1_thread": med["2x1"] / ideal}}), flush=True)


if __name__ == "__main__":
    main()
