"""Trainyard (`trainyard local --workers 2`) against PyTorch DDP
(bench/peer/ddp_peer.py) on the same machine, alternating, REPS times, in
two configurations:

  (a) recommended: Trainyard packs examples as T5X does (Adafactor); the
      peer pads each batch to its longest example (HF Adafactor). Figure:
      useful (non-padding) target tokens per second.
  (b) padded: both train on batches padded to the fixed feature lengths
      with AdamW. Figure: steps per second.

Both: global batch 32 (16 per rank), 2 processes x 1 intra-op thread, the
bundled task's examples. Trainyard's figures come from its own train
summaries (TensorBoard events of the run: the second summary, after the
warm-up chunk); its workers' peak RSS is read from /proc while they run.

Prints every measurement as a JSON line, then the medians and ratios.
usage: run.py --trainyard BIN --peer-python PY --examples FILE [--reps 3]
              [--preset tiny] [--steps 20] [--sharding=NONE|OPTIMIZER|GRADIENTS|PARAMETERS]
(--sharding: Trainyard's data_parallel.sharding in both configurations;
the peer is plain DDP in every case.)
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

SPEC = """
name: "peer-bench"
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
optimizer {{ {optimizer} {{}} }}
learning_rate {{ factors: "constant" base_learning_rate: 0.001 }}
data {{ pack: {pack} shuffle: true }}
"""


def peak_rss_of_workers(stop, peaks):
    """Polls the worker processes' VmHWM (peak RSS) until `stop` is set."""
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                if not argv or not argv[0].endswith(b"trainyard-torch") or b"worker" not in argv:
                    continue
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peaks[pid] = max(peaks.get(pid, 0), int(line.split()[1]) / 1024.0)
            except OSError:
                continue
        time.sleep(0.2)


def run_trainyard(args, mode, workers=2, threads=None, extra_spec="", env=None):
    """One `trainyard local` run of `mode` with `workers` workers (and
    `threads` each; default: the cores divided among them); `extra_spec` is
    appended to the job spec, `env` added to the environment of
    `trainyard local` and so of its workers."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    work = tempfile.mkdtemp(prefix=f"peer-{mode}-")
    with open(os.path.join(work, "job.textproto"), "w") as f:
        f.write(SPEC.format(preset=args.preset, total=2 * args.steps, steps=args.steps, workers=workers,
                            optimizer="adafactor" if mode == "recommended" else "adamw",
                            pack="true" if mode == "recommended" else "false") + extra_spec)
    command = [args.trainyard, "local", "--workers", str(workers), "job.textproto"]
    if threads:
        command[4:4] = ["--threads", str(threads)]
    stop, peaks = threading.Event(), {}
    poller = threading.Thread(target=peak_rss_of_workers, args=(stop, peaks))
    poller.start()
    try:
        r = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=3600,
                           env=dict(os.environ, **(env or {})))
    finally:
        stop.set()
        poller.join()
    if r.returncode != 0:
        sys.exit(f"trainyard local failed ({r.returncode}):\n{r.stderr[-3000:]}")
    events = glob.glob(os.path.join(work, "out", "train", "events.out.tfevents.*"))
    acc = EventAccumulator(os.path.dirname(events[0]))
    acc.Reload()

    def last(tag):
        return acc.Scalars(tag)[-1].value

    seconds = last("timing/seconds")
    return {"system": "trainyard", "mode": mode, "preset": args.preset, "world": workers, "threads": threads,
            "batch": 32,
            "steps": args.steps, "seconds_per_step": seconds / args.steps,
            "steps_per_second": last("timing/steps_per_second"),
            "target_tokens_per_second": last("timing/target_tokens_per_second"),
            "exposed_allreduce_seconds_per_step": last("timing/allreduce_seconds_per_step"),
            "optimizer_seconds_per_step": last("timing/optimizer_seconds_per_step"),
            "allgather_seconds_per_step": (last("timing/allgather_seconds_per_step")
                                           if "timing/allgather_seconds_per_step" in acc.Tags()["scalars"] else 0.0),
            "peak_rss_mb": sorted(round(v, 1) for v in peaks.values())}


def run_peer(args, mode):
    r = subprocess.run([args.peer_python, os.path.join(os.path.dirname(__file__), "ddp_peer.py"),
                        "--trainyard", args.trainyard, "--examples", args.examples, "--preset", args.preset,
                        "--mode", mode, "--steps", str(args.steps)],
                       capture_output=True, text=True, timeout=3600, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if r.returncode != 0:
        sys.exit(f"ddp_peer.py failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--peer-python", required=True)
    parser.add_argument("--examples", required=True)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--compare-overlap", action="store_true",
                        help="only Trainyard, padded: the all-reduce after backward against overlapped with it")
    parser.add_argument("--sharding", default="NONE", choices=("NONE", "OPTIMIZER", "GRADIENTS", "PARAMETERS"),
                        help="Trainyard's data_parallel.sharding against the peer's DDP")
    parser.add_argument("--compare-sharding", action="store_true",
                        help="only Trainyard, padded: data_parallel.sharding NONE against OPTIMIZER and GRADIENTS")
    parser.add_argument("--compare-malloc", action="store_true",
                        help="only Trainyard, padded: glibc's dynamic mmap threshold against one fixed at 128 KiB")
    parser.add_argument("--compare-allgather", action="store_true",
                        help="only Trainyard, padded, sharding GRADIENTS: the parameters' all-gather after the "
                             "update against overlapped with the next forward pass")
    args = parser.parse_args()
    if args.compare_allgather:
        compare_allgather(args)
        return
    if args.compare_overlap:
        compare_overlap(args)
        return
    if args.compare_sharding:
        compare_sharding(args)
        return
    if args.compare_malloc:
        compare_malloc(args)
        return
    results = []
    for rep in range(args.reps):
        for mode in ("recommended", "padded"):
            # Alternate which system goes first.
            def trainyard(args, mode):
                m = run_trainyard(args, mode, extra_spec=f"data_parallel {{ sharding: {args.sharding} }}")
                m["sharding"] = args.sharding
                return m
            order = (trainyard, run_peer) if rep % 2 == 0 else (run_peer, trainyard)
            for run in order:
                m = run(args, mode)
                m["rep"] = rep
                print(json.dumps(m), flush=True)
                results.append(m)
    summary = {"preset": args.preset, "reps": args.reps, "steps": args.steps, "sharding": args.sharding}
    for mode, figure in (("recommended", "target_tokens_per_second"), ("padded", "steps_per_second")):
        med = {}
        for system in ("trainyard", "pytorch_ddp"):
            rows = [r for r in results if r["system"] == system and r["mode"] == mode]
            med[system] = {k: statistics.median(r[k] for r in rows)
                           for k in ("steps_per_second", "target_tokens_per_second", "seconds_per_step",
                                     "exposed_allreduce_seconds_per_step")}
            med[system]["peak_rss_mb_max"] = max(max(r["peak_rss_mb"]) for r in rows)
        summary[mode] = {"figure": figure, "trainyard": med["trainyard"], "pytorch_ddp": med["pytorch_ddp"],
                         "ratio": med["trainyard"][figure] / med["pytorch_ddp"][figure],
                         "trainyard_exposed_allreduce_fraction":
                             med["trainyard"]["exposed_allreduce_seconds_per_step"] /
                             med["trainyard"]["seconds_per_step"]}
    print(json.dumps({"summary": summary}), flush=True)


def compare_overlap(args):
    """Trainyard alone on identical padded batches, alternating the gradient
    all-reduce after backward and overlapped with it."""
    compare_variants(args, {"after_backward": "data_parallel { overlap_allreduce: false }",
                            "overlapped": "data_parallel { overlap_allreduce: true }"})


def compare_sharding(args):
    """Trainyard alone on identical padded batches, alternating replicated
    training (sharding NONE) and the sharded modes."""
    compare_variants(args, {"none": "data_parallel { sharding: NONE }",
                            "optimizer": "data_parallel { sharding: OPTIMIZER }",
                            "gradients": "data_parallel { sharding: GRADIENTS }",
                            "parameters": "data_parallel { sharding: PARAMETERS }"})


def compare_allgather(args):
    """Trainyard alone on identical padded batches, sharding GRADIENTS,
    alternating the parameters' all-gather after the update and overlapped
    with the next step's forward pass (data_parallel.overlap_allgather)."""
    compare_variants(args, {
        "after_update": "data_parallel { sharding: GRADIENTS overlap_allgather: false }",
        "overlapped": "data_parallel { sharding: GRADIENTS overlap_allgather: true }"})


def compare_malloc(args):
    """Trainyard alone on identical padded batches, sharding as --sharding,
    alternating the workers' malloc settings: glibc's dynamic mmap
    threshold against one fixed at 128 KiB (MALLOC_MMAP_THRESHOLD_ in the
    environment, which the worker passes on to glibc untouched)."""
    spec = f"data_parallel {{ sharding: {args.sharding} }}"
    compare_variants(args, {"glibc_default": (spec, {}),
                            "threshold_128k": (spec, {"MALLOC_MMAP_THRESHOLD_": "131072"})})


def compare_variants(args, variants):
    """Alternates Trainyard's runs of each variant (spec fields, or a pair
    of spec fields and environment), padded; the summary's speedups are
    each variant's steps/s over the first's."""
    results = []
    for rep in range(args.reps):
        names = list(variants) if rep % 2 == 0 else list(reversed(variants))
        for name in names:
            spec, env = variants[name] if isinstance(variants[name], tuple) else (variants[name], None)
            m = run_trainyard(args, "padded", extra_spec=spec, env=env)
            m["variant"], m["rep"] = name, rep
            print(json.dumps(m), flush=True)
            results.append(m)
    summary = {"preset": args.preset, "reps": args.reps, "steps": args.steps, "sharding": args.sharding}
    for name in variants:
        rows = [r for r in results if r["variant"] == name]
        summary[name] = {k: statistics.median(r[k] for r in rows)
                         for k in ("steps_per_second", "seconds_per_step", "exposed_allreduce_seconds_per_step",
                                   "optimizer_seconds_per_step", "allgather_seconds_per_step")}
        summary[name]["exposed_allreduce_fraction"] = (summary[name]["exposed_allreduce_seconds_per_step"] /
                                                       summary[name]["seconds_per_step"])
        summary[name]["peak_rss_mb_max"] = max(max(r["peak_rss_mb"]) for r in rows)
    first = next(iter(variants))
    summary["speedup"] = {name: summary[name]["steps_per_second"] / summary[first]["steps_per_second"]
                          for name in variants if name != first}
    print(json.dumps({"summary": summary}), flush=True)


if __name__ == "__main__":
    main()
