"""Data-parallel efficiency on this machine: tokens/s of one worker with one
thread, one worker with two threads, and two workers with one thread each,
against the ideal (twice one worker with one thread). Same job as
bench/peer's padded configuration (fixed-length batches of 32, AdamW), the
figures from Trainyard's own train summaries. Alternating, REPS times;
prints every measurement, then the medians and efficiencies.

usage: run.py --trainyard BIN [--reps 3] [--preset tiny] [--steps 20]
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

SPEC = """
name: "scaling"
model {{ preset: "{preset}" }}
task: "digits_to_words"
feature_lengths {{ inputs: 16 targets: 32 }}
batch_size: 32
num_workers: {workers}
total_steps: {total}
summary_period: {steps}
eval_period: 0
checkpoint_period: 0
seed: 42
output_dir: "out"
optimizer {{ adamw {{}} }}
learning_rate {{ factors: "constant" base_learning_rate: 0.001 }}
data {{ pack: false shuffle: true }}
"""


def run(args, workers, threads):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    work = tempfile.mkdtemp(prefix=f"scaling-{workers}x{threads}-")
    with open(os.path.join(work, "job.textproto"), "w") as f:
        f.write(SPEC.format(preset=args.preset, workers=workers, total=2 * args.steps, steps=args.steps))
    r = subprocess.run([args.trainyard, "local", "--workers", str(workers), "--threads", str(threads),
                        "job.textproto"], cwd=work, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        sys.exit(f"trainyard local failed:\n{r.stderr[-3000:]}")
    acc = EventAccumulator(os.path.dirname(glob.glob(os.path.join(work, "out", "train", "events.*"))[0]))
    acc.Reload()
    last = lambda tag: acc.Scalars(tag)[-1].value
    return {"workers": workers, "threads": threads, "preset": args.preset,
            "steps_per_second": last("timing/steps_per_second"),
            "tokens_per_second": last("timing/target_tokens_per_second"),
            "exposed_allreduce_seconds_per_step": last("timing/allreduce_seconds_per_step")}


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
