"""The cost of data_parallel.reproducible: the same job on the same workers
with and without it, runs alternating, `trainyard local` (real processes,
Gloo). Prints one JSON line per run and a summary line:

  {"preset": ..., "workers": W, "float_s_per_step": median,
   "reproducible_s_per_step": median, "ratio": reproducible / float,
   "gradient_bytes": float32 bytes of the gradients, "exact_bytes": the
   int64 integers the reproducible all-reduce sends instead}

s/step is rank 0's over the job's last chunk (the status table), so the
first step, which the exact sum computes twice to find its scales, is not
in it when the job has more than one chunk.

  python3 bench/reproducible/bench.py --trainyard bazel-bin/client/trainyard \\
      --preset tiny --steps 60 --chunk 20 --repeats 3 [--sharding GRADIENTS]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = os.path.join(HERE, "..", "..", "examples", "tiny_local.textproto")
PARAMETERS = {"tiny": None, "t5_1_1_small": 76961152}


def run(args, reproducible, out):
    sets = [f"output_dir={out}", f"total_steps={args.steps}", "eval_period=0", f"summary_period={args.chunk}",
            f"checkpoint_period={args.steps}", f"model.preset={args.preset}", f"batch_size={args.batch}",
            f"num_microbatches={args.microbatches}", f"num_workers={args.workers}",
            f"data_parallel.reproducible={'true' if reproducible else 'false'}",
            f"data_parallel.sharding={args.sharding}",
            f"data_parallel.overlap_allreduce={'false' if args.no_overlap else 'true'}"]
    cmd = [args.trainyard, "local", "--workers", str(args.workers), SPEC]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        sys.exit(f"trainyard local failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    rows = re.findall(r"^\s*0\s+\S+\s+\S+\s+\S+\s+\S+\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$", r.stdout, re.M)
    if not rows:
        sys.exit(f"no rank 0 row in the status table:\n{r.stdout[-3000:]}")
    step, compute, collective = map(float, rows[-1])
    return {"reproducible": reproducible, "s_per_step": step, "compute_s_per_step": compute,
            "collective_s_per_step": collective}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trainyard", required=True)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--chunk", type=int, default=20)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--microbatches", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sharding", default="NONE", choices=["NONE", "OPTIMIZER", "GRADIENTS", "PARAMETERS"])
    p.add_argument("--no-overlap", action="store_true", help="data_parallel.overlap_allreduce: false in both")
    args = p.parse_args()
    runs = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="reproducible-bench-") as root:
        for i in range(args.repeats):
            for mode in (False, True):
                r = run(args, mode, os.path.join(root, f"{int(mode)}-{i}"))
                r.update({"preset": args.preset, "sharding": args.sharding, "repeat": i})
                print(json.dumps(r), flush=True)
                runs[mode].append(r["s_per_step"])
    f, e = statistics.median(runs[False]), statistics.median(runs[True])
    print(json.dumps({"preset": args.preset, "workers": args.workers, "sharding": args.sharding,
                      "overlap_allreduce": not args.no_overlap,
                      "batch_size": args.batch,
                      "num_microbatches": args.microbatches, "steps": args.steps,
                      "float_s_per_step": f, "reproducible_s_per_step": e, "ratio": round(e / f, 3)}))


if __name__ == "__main__":
    main()
