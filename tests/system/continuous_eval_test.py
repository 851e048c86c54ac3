"""Continuous evaluation with real processes: an EVALUATION job with
`restore { mode: ALL wait_seconds: N }` is running before a training job
starts writing checkpoints into the directory it watches; every checkpoint
the training job writes is evaluated exactly once, in step order, with its
outputs named by its step. A cancel ends a waiting evaluation at once."""
import argparse
import glob
import json
import os
import re
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import junit  # noqa: E402  (tests/testing: each test a case in $XML_OUTPUT_FILE)
import system_harness  # noqa: E402
from system_harness import SPEC, Cluster  # noqa: E402


def steps_in(pattern, regex):
    """The steps in the names of the files matching `pattern`, sorted."""
    return sorted(int(re.fullmatch(regex, os.path.basename(p)).group(1)) for p in glob.glob(pattern))


class ContinuousEvalTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="continuous-eval-", dir=os.environ.get("TEST_TMPDIR"))
        self.spec = os.path.join(self.root, "job.textproto")
        with open(self.spec, "w") as f:
            f.write(SPEC)
        self.cluster = Cluster(self.root)
        for _ in range(3):
            self.cluster.add_worker()

    def tearDown(self):
        self.cluster.stop()

    def test_every_checkpoint_of_a_running_training_job_is_evaluated_once(self):
        c = self.cluster
        trained = os.path.join(self.root, "trained")
        evaluated = os.path.join(self.root, "evaluated")
        # The evaluation first (2 ranks), waiting for checkpoints that do not
        # exist yet; then the training job (1 rank) beside it.
        ev = c.submit(self.spec, "kind=EVALUATION", "output_dir=evaluated", "restore.mode=ALL",
                      f"restore.path={trained}", "restore.wait_seconds=15", "inference.num_batches=1")
        c.wait_state(ev, ["RUNNING"], 60)
        self.assertFalse(os.path.exists(trained))
        train = c.submit(self.spec, "output_dir=trained", "num_workers=1", "total_steps=40", "checkpoint_period=10",
                         "eval_period=0", "keep_checkpoints=0")
        s = c.wait_state(train, ["SUCCEEDED", "FAILED"], 120)
        self.assertEqual(s["state"], "SUCCEEDED", s["reason"])
        written = steps_in(os.path.join(trained, "checkpoint_*"), r"checkpoint_(\d+)")
        self.assertEqual(written, [10, 20, 30, 40])
        s = c.wait_state(ev, ["SUCCEEDED", "FAILED"], 60)
        self.assertEqual(s["state"], "SUCCEEDED", s["reason"])
        # Once each, in step order: the driver's list, the job's record, the
        # outputs named by the step, the metrics at the checkpoint's step.
        listed = re.search(r"evaluated: steps ([\d, ]+);", s["reason"])
        self.assertIsNotNone(listed, s["reason"])
        self.assertEqual([int(x) for x in listed.group(1).split(", ")], written, s["reason"])
        with open(os.path.join(evaluated, "evaluated_checkpoints.json")) as f:
            record = json.load(f)
        self.assertEqual((record["path"], record["steps"]), (trained, written))
        self.assertEqual(steps_in(os.path.join(evaluated, "inference", "digits_to_words-validation-*.jsonl"),
                                  r"digits_to_words-validation-(\d+)\.jsonl"), written)
        for step in written:
            with open(os.path.join(evaluated, "inference", f"digits_to_words-validation-{step}.jsonl")) as f:
                self.assertEqual([json.loads(line)["index"] for line in f], list(range(8)))
            with open(os.path.join(evaluated, "inference_eval", f"digits_to_words-validation-{step}.json")) as f:
                self.assertEqual(json.load(f)["checkpoint_step"], step)
        self.assertEqual((s["metrics_step"], s["step"]), (40, 40))
        self.assertIn("digits_to_words/exact_match", s["metrics"])

        # A cancel during the wait ends the job at once.
        waiting = c.submit(self.spec, "kind=EVALUATION", "output_dir=waiting", "num_workers=1", "restore.mode=ALL",
                           f"restore.path={os.path.join(self.root, 'nothing_yet')}", "restore.wait_seconds=600")
        c.wait_state(waiting, ["RUNNING"], 60)
        time.sleep(1.5)  # into the wait
        start = time.monotonic()
        c.cli("cancel", waiting)
        s = c.wait_state(waiting, ["CANCELLED", "FAILED", "SUCCEEDED"], 10)
        self.assertEqual(s["state"], "CANCELLED", s["reason"])
        self.assertLess(time.monotonic() - start, 3.0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    args, rest = parser.parse_known_args()
    system_harness.TRAINYARD = os.path.abspath(args.trainyard)
    junit.main([sys.argv[0], *rest])


if __name__ == "__main__":
    main()
