"""Peak resident memory of each worker for data_parallel.sharding NONE,
OPTIMIZER, GRADIENTS and PARAMETERS, beside the analytic figure, on one machine through
`trainyard local` (a coordinator and W workers as processes).

Each worker's peak is its VmHWM (/proc/PID/status), polled every 50 ms
while it runs; the analytic figure counts the float32 training state a rank
holds: parameters and gradients (4 bytes each per parameter) and the
optimizer state (AdamW: 8 bytes per parameter; Adafactor: its factored
statistics). OPTIMIZER divides the state by W; GRADIENTS the gradients too,
less the buckets in flight during backward (2 of bucket_mb, 4 MiB);
PARAMETERS the parameters too (4 bytes each), less the layers gathered at
once during a pass (the embedding and two layers in flight); each rank
builds and restores only its own parameters.
Activations, LibTorch and the process itself come on top: the difference
NONE - mode is what to compare with the analytic saving.

With --group-size G (HSDP, data_parallel.shard_group_size) each sharded
mode runs again sharded within groups of G workers ("OPTIMIZER/G2"): the
state is divided by G instead of W; analytic figures for both.

Prints one JSON line per run (with the job's steps per second from its last
summary: on one machine the workers share its cores, so compare the modes
with each other, not with a cluster), then one with the savings.
usage: memory.py --trainyard BIN [--preset t5_1_1_small] [--workers 2] [--optimizer adamw|adafactor] [--steps 3]
                 [--group-size G]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

SPEC = """
name: "memory"
model {{ preset: "{preset}" }}
task: "digits_to_words"
feature_lengths {{ inputs: 32 targets: 32 }}
batch_size: {batch}
total_steps: {steps}
summary_period: {steps}
checkpoint_period: 0
checkpoint {{ async: false }}
optimizer {{ {optimizer} {{}} }}
learning_rate {{ factors: "constant" base_learning_rate: 0.001 }}
data_parallel {{ sharding: {sharding}{group} }}
output_dir: "{out}"
"""


def descendants(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def worker_hwm(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().split(b"\0")
        if b"worker" not in cmd:
            return None
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0  # MiB
    except OSError:
        return None
    return None


def run(args, mode, work):
    """Worker peaks (MiB, largest first) and the last summary's steps per
    second of one run; `mode` is a sharding, or "SHARDING/G<size>"."""
    sharding, _, group = mode.partition("/G")
    name = mode.replace("/", "-")
    out = os.path.join(work, f"out-{name}")
    spec = os.path.join(work, f"{name}.textproto")
    with open(spec, "w") as f:
        f.write(SPEC.format(preset=args.preset, batch=2 * args.workers, steps=args.steps, optimizer=args.optimizer,
                            sharding=sharding, group=f" shard_group_size: {group}" if group else "", out=out))
    proc = subprocess.Popen([args.trainyard, "local", spec, "--workers", str(args.workers), "--state-dir",
                             os.path.join(work, f"state-{name}")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peaks = {}
    while proc.poll() is None:
        for pid in descendants(proc.pid):
            hwm = worker_hwm(pid)
            if hwm is not None:
                peaks[pid] = max(peaks.get(pid, 0.0), hwm)
        time.sleep(0.05)
    log = proc.stdout.read().decode(errors="replace")
    if proc.returncode != 0:
        sys.stderr.write(log)
        raise SystemExit(f"trainyard local exited {proc.returncode} ({mode})")
    rate = re.findall(r"timing/steps_per_second\s+([0-9.e+-]+)", log)
    return sorted(peaks.values(), reverse=True), float(rate[-1]) if rate else None




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainyard", required=True)
    ap.add_argument("--preset", default="t5_1_1_small")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--optimizer", default="adamw", choices=["adamw", "adafactor"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--group-size", type=int, default=0, help="also each sharded mode in groups of this many")
    args = ap.parse_args()
    info = json.loads(subprocess.run([args.trainyard, "model-info", "--preset", args.preset, "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    params = int(info["num_params"])
    mib = 1024.0 * 1024.0
    sharded = ("OPTIMIZER", "GRADIENTS", "PARAMETERS")
    modes = ("NONE",) + sharded
    if args.group_size:
        modes += tuple(f"{m}/G{args.group_size}" for m in sharded)
    with tempfile.TemporaryDirectory() as work:
        results = {}
        for mode in modes:
            peaks, rate = run(args, mode, work)
            results[mode] = peaks
            print(json.dumps({"preset": args.preset, "optimizer": args.optimizer, "workers": args.workers,
                              "sharding": mode, "worker_peak_rss_mib": [round(p, 1) for p in peaks],
                              "steps_per_second": rate}), flush=True)
    state = 8 * params if args.optimizer == "adamw" else None
    line = {"preset": args.preset, "optimizer": args.optimizer, "workers": args.workers, "parameters": params}
    for mode in modes[1:]:
        # Workers by peak, largest first (rank 0, which writes the
        # checkpoint, first): NONE's minus the mode's.
        line[f"measured_saving_mib_by_worker_{mode}"] = [
            round(a - b, 1) for a, b in zip(results["NONE"], results[mode])]
    for ranks, suffix in ((args.workers, ""), (args.group_size, f"/G{args.group_size}")):
        if not ranks:
            continue
        split = 1 - 1 / ranks
        grads = 4 * params * split - 2 * 4 * mib
        if state is not None:
            line["analytic_state_mib"] = round(state / mib, 1)
            line[f"analytic_saving_mib_per_worker_OPTIMIZER{suffix}"] = round(state * split / mib, 1)
            line[f"analytic_saving_mib_per_worker_GRADIENTS{suffix}"] = round((state * split + grads) / mib, 1)
            line[f"analytic_saving_mib_per_worker_PARAMETERS{suffix}_at_most"] = round(
                (state * split + grads + 4 * params * split) / mib, 1)
        else:
            line[f"analytic_gradient_saving_mib_per_worker_GRADIENTS{suffix}"] = round(grads / mib, 1)
    print(json.dumps(line))


if __name__ == "__main__":
    main()
