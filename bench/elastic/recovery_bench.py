"""Time from a lost worker to training again: fault_tolerance ELASTIC against
RESTART, in the same run. A coordinator and four workers (real processes,
loopback, one compute thread each); a job on three of them, the fourth idle.
At a random point after the job's checkpoint at step 10, one worker gets
SIGKILL.

ELASTIC: the two survivors' collective fails, they leave it and regroup
(detection = the kill to the coordinator's "regrouping" line, when every
survivor has answered; regroup = that to "training on 2 of 3"); at the next
chunk boundary the idle worker joins and receives the state by broadcast
(its size and time). RESTART: the attempt ends, the job is scheduled again on
the survivors and the idle worker, every rank reads checkpoint_10, and the
new attempt runs ("running from step 10"). Steps recomputed: ELASTIC, the
step the survivors abandoned (their "failed part way" lines); RESTART, from
the checkpoint to the furthest step reported before the kill.

usage: bench/elastic/run.sh [--models tiny,t5_1_1_small] [--reps N]
Prints one JSON line per run, then one summary line per model and mode."""
import argparse
import datetime
import json
import os
import random
import re
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "testing"))
import system_harness  # noqa: E402
from system_harness import Cluster, wait_for  # noqa: E402

SPEC = """
name: "recovery-bench"
model {{ preset: "{model}" dropout_rate: 0.0 }}
task: "digits_to_words"
feature_lengths {{ inputs: {inputs} targets: {targets} }}
batch_size: 6
num_workers: 3
total_steps: 100000
summary_period: 2
checkpoint_period: 10
seed: 1
optimizer {{ adafactor {{}} }}
learning_rate {{ factors: "constant" base_learning_rate: 0.01 }}
data {{ pack: false }}
fault_tolerance {{ mode: {mode} }}
"""
LENGTHS = {"tiny": (32, 32), "t5_1_1_small": (128, 64)}
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}) ")


def stamp(line):
    return datetime.datetime.fromisoformat(STAMP.match(line).group(1)).timestamp()


def lines_after(text, t0, pattern):
    """(time, line) of each line after t0 that matches `pattern`."""
    out = []
    for line in text.splitlines():
        if STAMP.match(line) and re.search(pattern, line) and stamp(line) >= t0:
            out.append((stamp(line), line))
    return out


def one_run(root, model, mode, rng):
    inputs, targets = LENGTHS[model]
    spec = os.path.join(root, f"{model}-{mode}.textproto")
    with open(spec, "w") as f:
        f.write(SPEC.format(model=model, inputs=inputs, targets=targets, mode=mode))
    cluster = Cluster(root)
    try:
        for _ in range(4):
            cluster.add_worker(extra=("--threads", "1"))
        job = cluster.submit(spec, f"output_dir={model}-{mode}")
        kill_after = rng.randint(12, 15)
        wait_for(lambda: cluster.status(job)["step"] >= kill_after, 1800, f"step {kill_after}")
        status = cluster.status(job)
        step_seconds = max(r.get("last_step_seconds", 0) for r in status["ranks"])
        # Somewhere inside a step.
        time.sleep(rng.uniform(0, step_seconds))
        reached = cluster.status(job)["step"]
        victim_id = status["ranks"][1]["worker_id"]
        victim = next(p for p in cluster.workers if victim_id in open(p.log).read())
        t0 = time.time()
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        log = lambda: cluster.logs("coordinator")  # noqa: E731
        row = {"model": model, "mode": mode, "step_seconds": round(step_seconds, 3)}
        if mode == "ELASTIC":
            wait_for(lambda: lines_after(log(), t0, r"joined: .*training on 3 of 3"), 1800, "the replacement")
            detected, _ = lines_after(log(), t0, r"lost rank .*regrouping 2 rank")[0]
            again, line = lines_after(log(), t0, r"lost rank .*training on 2 of 3")[0]
            joined, join_line = lines_after(log(), t0, r"joined: .*training on 3 of 3")[0]
            resumed = int(re.search(r"from step (\d+)", line).group(1))
            abandoned = set(re.findall(r"step (\d+) failed part way", cluster.logs("worker-")))
            sent = re.search(r"sent \((\d+) bytes in ([\d.]+) s\)", join_line)
            join_seconds = float(re.search(r"regroup 2 in ([\d.]+) s", join_line).group(1))
            row.update(detect_seconds=round(detected - t0, 3), regroup_seconds=round(again - detected, 3),
                       fault_to_training_seconds=round(again - t0, 3), resumed_from_step=resumed,
                       steps_recomputed=len(abandoned), join_seconds=join_seconds,
                       state_bytes=int(sent.group(1)), transfer_seconds=float(sent.group(2)))
        else:
            wait_for(lambda: len(lines_after(log(), t0, r"running from step")) >= 1, 1800, "the restart")
            detected, _ = lines_after(log(), t0, r"RESTARTING")[0]
            again, line = lines_after(log(), t0, r"running from step")[0]
            resumed = int(re.search(r"running from step (\d+)", line).group(1))
            row.update(detect_seconds=round(detected - t0, 3), regroup_seconds=round(again - detected, 3),
                       fault_to_training_seconds=round(again - t0, 3), resumed_from_step=resumed,
                       steps_recomputed=max(reached - resumed, 0))
        # Back where the job was at the fault: the steps computed again at
        # the step time measured before it.
        row["back_to_fault_seconds"] = round(row["fault_to_training_seconds"] +
                                             row["steps_recomputed"] * step_seconds, 3)
        cluster.cli("cancel", job)
        print(json.dumps(row), flush=True)
        return row
    finally:
        cluster.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--models", default="tiny,t5_1_1_small")
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    system_harness.TRAINYARD = os.path.abspath(args.trainyard)
    rng = random.Random(11)
    rows = []
    for model in args.models.split(","):
        for rep in range(args.reps):
            for mode in ("ELASTIC", "RESTART"):
                root = tempfile.mkdtemp(prefix=f"recovery-{model}-{mode}-{rep}-")
                rows.append(one_run(root, model, mode, rng))
    for model in args.models.split(","):
        for mode in ("ELASTIC", "RESTART"):
            mine = [r for r in rows if r["model"] == model and r["mode"] == mode]
            summary = {"summary": True, "model": model, "mode": mode, "runs": len(mine)}
            for key in ("detect_seconds", "regroup_seconds", "fault_to_training_seconds", "steps_recomputed",
                        "back_to_fault_seconds",
                        "join_seconds", "transfer_seconds", "state_bytes", "step_seconds"):
                values = [r[key] for r in mine if key in r]
                if values:
                    summary[key] = round(statistics.median(values), 3)
            print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
