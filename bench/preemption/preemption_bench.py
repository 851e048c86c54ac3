"""SIGTERM-to-durable latency: a coordinator and two workers (real processes,
loopback, 1 compute thread each) train `t5_1_1_small` (batch 8, lengths
128/64, Adafactor); at a random point mid-step one worker gets SIGTERM, as
Kubernetes sends it. Measured: the time from the signal to the emergency
checkpoint directory's rename (its manifest verifies), and the worker's own
figure for the checkpoint write. Kubernetes' default grace period is 30 s.

usage: bench/preemption/run.sh [REPS]
Prints one JSON line per repetition, then a summary line."""
import argparse
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "testing"))
import system_harness  # noqa: E402
from system_harness import Cluster, wait_for  # noqa: E402

SPEC = """
name: "preemption-bench"
model { preset: "t5_1_1_small" dropout_rate: 0.0 }
task: "digits_to_words"
feature_lengths { inputs: 128 targets: 64 }
batch_size: 8
num_workers: 2
total_steps: 1000
summary_period: 1
seed: 1
optimizer { adafactor {} }
learning_rate { factors: "constant" base_learning_rate: 0.01 }
data { pack: false }
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    system_harness.TRAINYARD = os.path.abspath(args.trainyard)
    root = tempfile.mkdtemp(prefix="preemption-bench-")
    spec = os.path.join(root, "job.textproto")
    with open(spec, "w") as f:
        f.write(SPEC)
    cluster = Cluster(root)
    rng = random.Random(7)
    rows = []
    try:
        for _ in range(2):
            cluster.add_worker(extra=("--threads", "1"))
        for rep in range(args.reps):
            out = os.path.join(root, f"run-{rep}")
            job = cluster.submit(spec, f"output_dir={out}")
            wait_for(lambda: cluster.status(job)["step"] >= 2, 600, "step 2")
            step_seconds = max(r.get("last_step_seconds", 0) for r in cluster.status(job).get("ranks", [{}]))
            time.sleep(rng.uniform(0, step_seconds))  # anywhere within a step
            victim = cluster.workers.pop(1)
            t0 = time.monotonic()
            victim.send_signal(signal.SIGTERM)

            def durable():
                names = [n for n in os.listdir(out) if n.startswith("checkpoint_") and ".tmp-" not in n]
                done = [n for n in names if os.path.exists(os.path.join(out, n, "MANIFEST.json"))]
                return done or None
            done = wait_for(durable, 120, "the emergency checkpoint")
            durable_seconds = time.monotonic() - t0
            s = cluster.wait_state(job, ["RESTARTING", "PREEMPTED", "FAILED"], 120)
            exit_code = victim.wait(timeout=60)
            exited_seconds = time.monotonic() - t0
            row = {"rep": rep, "checkpoint": done[0], "sigterm_to_durable_seconds": round(durable_seconds, 2),
                   "sigterm_to_worker_exit_seconds": round(exited_seconds, 2), "worker_exit_code": exit_code,
                   "step_seconds": round(step_seconds, 2),
                   "emergency_checkpoint_write_seconds": round(
                       s.get("metrics", {}).get("timing/emergency_checkpoint_seconds", float("nan")), 2),
                   "state": s["state"], "reason": s["reason"][:160]}
            print(json.dumps(row), flush=True)
            rows.append(row)
            cluster.cli("cancel", job)
            cluster.wait_state(job, ["CANCELLED"], 60)
            cluster.add_worker(extra=("--threads", "1"))
    finally:
        cluster.stop()
    lat = [r["sigterm_to_durable_seconds"] for r in rows]
    print(json.dumps({"preemption_bench_summary": {
        "model": "t5_1_1_small", "reps": len(rows), "median_sigterm_to_durable_seconds": statistics.median(lat),
        "max_sigterm_to_durable_seconds": max(lat), "kubernetes_default_grace_seconds": 30,
        "median_step_seconds": statistics.median(r["step_seconds"] for r in rows)}}))


if __name__ == "__main__":
    main()
