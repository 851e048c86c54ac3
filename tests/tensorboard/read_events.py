"""Reads the event files write_events wrote with TensorBoard's own reader
(EventAccumulator) and checks every tag, step and value; rank 1's directory
must hold no files.

usage: read_events.py OUT_DIR
"""
import os
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def scalars(path):
    acc = EventAccumulator(path)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def main(out):
    failures = []
    train = scalars(os.path.join(out, "rank0", "train"))
    want_train = {
        "loss": [(s, 5.0 / s) for s in (10, 20, 30)],
        "accuracy": [(s, s / 40.0) for s in (10, 20, 30)],
        "learning_rate": [(30, 0.125)],
    }
    evals = scalars(os.path.join(out, "rank0", "training_eval", "copy_task"))
    want_eval = {"loss": [(s, 6.0 / s) for s in (10, 20, 30)]}
    for got, want, where in ((train, want_train, "train"), (evals, want_eval, "eval")):
        if sorted(got) != sorted(want):
            failures.append(f"{where}: tags {sorted(got)} != {sorted(want)}")
            continue
        for tag, points in want.items():
            steps = [s for s, _ in got[tag]]
            if steps != [s for s, _ in points] or any(
                    abs(g - w) > 1e-6 * max(1, abs(w)) for (_, g), (_, w) in zip(got[tag], points)):
                failures.append(f"{where}/{tag}: {got[tag]} != {points}")
    leaked = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(out, "rank1")) for f in fs]
    if leaked:
        failures.append(f"rank 1 wrote files: {leaked}")
    for f in failures:
        print("FAIL:", f)
    print(f"tensorboard read {sum(len(v) for v in train.values()) + len(evals['loss'])} scalars")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
