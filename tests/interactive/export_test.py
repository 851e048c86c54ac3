"""ExportJobSpec end to end: examples/interactive_export makes a task from
examples, exports a PRETRAINING job spec and trains one step interactively;
the spec, submitted to a real coordinator with one worker, trains, and its
first step's loss equals the interactive one."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import junit  # noqa: E402  (tests/testing: each test a case in $XML_OUTPUT_FILE)
import system_harness  # noqa: E402
from system_harness import Cluster  # noqa: E402

EXPORT = None
TRAIN_PREDICT = None
EVALUATE = None


class ExportTest(unittest.TestCase):
    def test_the_exported_spec_trains_with_the_interactive_first_step_loss(self):
        root = tempfile.mkdtemp(prefix="export-", dir=os.environ.get("TEST_TMPDIR"))
        out = subprocess.run([EXPORT, "--output_dir", root], capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        result = json.loads(out.stdout.strip().splitlines()[-1])
        with open(result["spec"]) as f:
            text = f.read()
        self.assertIn('task: "my_numbers"', text)
        self.assertIn("kind: PRETRAINING", text)
        cluster = Cluster(root)
        try:
            cluster.add_worker(extra=("--threads", "2"))
            job = cluster.submit(result["spec"], "total_steps=1", "summary_period=1")
            s = cluster.wait_state(job, ["SUCCEEDED", "FAILED"], 120)
            self.assertEqual(s["state"], "SUCCEEDED", s["reason"])
            batch_loss = s["metrics"]["loss"]
            print(f"first-step loss: interactive {result['first_step_loss']:.9g}, batch job {batch_loss:.9g}")
            self.assertAlmostEqual(batch_loss, result["first_step_loss"], delta=1e-6 * abs(batch_loss))
            self.assertEqual(s["metrics"]["data/examples"], 8)
            # The trained state as an INFERENCE job: the same predictions,
            # token for token, as the interactive model's.
            job = cluster.submit(result["infer_spec"])
            s = cluster.wait_state(job, ["SUCCEEDED", "FAILED"], 120)
            self.assertEqual(s["state"], "SUCCEEDED", s["reason"])
            out = os.path.join(root, "session", "inference", "inference", "my_numbers-validation.jsonl")
            with open(out) as f:
                lines = [json.loads(line) for line in f]
            self.assertEqual([x["prediction"] for x in lines], result["predictions"])
        finally:
            cluster.stop()


class ExamplesTest(unittest.TestCase):
    """The other example programs run and print what they say."""

    def run_example(self, binary, *args):
        root = tempfile.mkdtemp(prefix="example-", dir=os.environ.get("TEST_TMPDIR"))
        out = subprocess.run([binary, "--output_dir", root, *args], capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]

    def test_train_predict(self):
        rows = self.run_example(TRAIN_PREDICT, "--steps", "40")
        losses = [r["loss"] for r in rows if "loss" in r]
        self.assertEqual(len(losses), 40)
        self.assertLess(losses[-1], 0.2 * losses[0])
        predictions = {r["input"]: r["prediction"] for r in rows if "prediction" in r}
        # 40 steps on these four examples: it has learned them.
        self.assertEqual(predictions, {"12": "twelve", "40": "forty", "115": "one hundred fifteen", "7": "seven"})

    def test_evaluate(self):
        (row,) = self.run_example(EVALUATE)
        self.assertEqual(row["step"], 50)
        self.assertEqual(row["evaluated_steps"], [1, 50])
        for k in ("exact_match", "bleu", "score_of_longest_target", "mean_prediction_score"):
            self.assertIn(k, row["metrics"])
        self.assertLess(row["first_target_score"], 0)


def main():
    global EXPORT, TRAIN_PREDICT, EVALUATE
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--export", required=True)
    parser.add_argument("--train-predict", required=True)
    parser.add_argument("--evaluate", required=True)
    args, rest = parser.parse_known_args()
    system_harness.TRAINYARD = os.path.abspath(args.trainyard)
    EXPORT = os.path.abspath(args.export)
    TRAIN_PREDICT = os.path.abspath(args.train_predict)
    EVALUATE = os.path.abspath(args.evaluate)
    junit.main([sys.argv[0], *rest])


if __name__ == "__main__":
    main()
