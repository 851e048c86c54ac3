"""Job specs of real T5 workloads, run as users run them: `trainyard local`
(a coordinator and workers as child processes) in a directory holding the
user's files, with the spec fragments exactly as the docs show them.

  * span-corruption pretraining on a plain-text corpus of the user's (one
    document per line) with a vocabulary made by `trainyard vocab train`;
  * a mixture of the bundled task and a task of the user's, evaluated per
    component task;
  * `trainyard local` writing to a relative output_dir, with no confinement
    unless --output-root asks for it.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import junit  # noqa: E402  (tests/testing: each test a case in $XML_OUTPUT_FILE)

from tensorboard.backend.event_processing import event_accumulator  # noqa: E402

TRAINYARD = None  # set in main
REPO = os.getcwd()  # the runfiles tree: examples/, data/corpus/

JOB = """
name: "work"
model { preset: "tiny" dropout_rate: 0.0 }
batch_size: 8
seed: 1
output_dir: "out"
optimizer { adafactor {} }
learning_rate { factors: "constant" base_learning_rate: 0.01 }
"""

# The fragments as docs/architecture.md and the README show them.
SPAN_FRAGMENT = """
task: "my_corpus_span"
task_definitions {
  name: "my_corpus_span"
  splits { key: "train" value: "corpus/train-*.txt" }
  splits { key: "validation" value: "corpus/valid.txt" }
  vocabulary: "corpus/spm.model"
  preprocessors { span_corruption { noise_density: 0.15 mean_noise_span_length: 3.0 } }
}
"""

MIXTURE_FRAGMENT = """
mixture_definitions { name: "mix" tasks { name: "digits_to_words" rate: 1.0 } tasks { name: "my_qa" rate: 3.0 } }
"""


def documents():
    """Paragraphs of the licence texts every Debian system ships (base-files)."""
    out = []
    for path in ("/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"):
        with open(path) as f:
            for para in f.read().split("\n\n"):
                words = para.split()
                if len(words) >= 8:
                    out.append(" ".join(words))
    return out


def scalars(directory, tag):
    acc = event_accumulator.EventAccumulator(directory, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


class WorkloadsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="workload-", dir=os.environ.get("TEST_TMPDIR"))

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path

    def local(self, spec_text, *args, timeout=600):
        spec = self.write("job.textproto", spec_text)
        return subprocess.run([TRAINYARD, "local", spec, "--state-dir", os.path.join(self.dir, "state"), *args],
                              capture_output=True, text=True, timeout=timeout, cwd=self.dir)

    def make_corpus(self):
        docs = documents()
        self.assertGreater(len(docs), 100)
        self.write("corpus/train-0.txt", "".join(d + "\n" for d in docs[0::3]))
        self.write("corpus/train-1.txt", "".join(d + "\n" for d in docs[1::3]))
        self.write("corpus/valid.txt", "".join(d + "\n" for d in docs[2::3]))
        r = subprocess.run([TRAINYARD, "vocab", "train", "--input", "corpus/train-0.txt", "--input",
                            "corpus/train-1.txt", "--size", "400", "--out", "corpus/spm"],
                           capture_output=True, text=True, timeout=120, cwd=self.dir)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_span_corruption_pretraining_on_a_plain_text_corpus(self):
        self.make_corpus()
        spec = JOB + SPAN_FRAGMENT + """
kind: PRETRAINING
feature_lengths { inputs: 64 targets: 16 }
num_workers: 2
total_steps: 60
summary_period: 10
eval_period: 60
eval { num_batches: 2 }
"""
        r = self.local(spec)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SUCCEEDED, step 60/60", r.stdout)
        out = os.path.join(self.dir, "out")  # relative to where `local` ran
        self.assertTrue(os.path.isdir(os.path.join(out, "checkpoint_60")), os.listdir(out))
        # The stored spec says what ran: T5's rekey of plain text first.
        with open(os.path.join(out, "config.textproto")) as f:
            config = f.read()
        self.assertRegex(config, re.compile(r'preprocessors \{\s*rekey \{\s*key_map \{\s*key: "targets"\s*'
                                            r'value: "text"', re.S))
        self.assertIn("extra_ids: 100", config)
        loss = scalars(os.path.join(out, "train"), "loss")
        self.assertEqual([s for s, _ in loss], [10, 20, 30, 40, 50, 60])
        print(f"span-corruption loss by step: {loss}")
        self.assertLess(loss[-1][1], 0.8 * loss[0][1], loss)
        evals = scalars(os.path.join(out, "training_eval", "my_corpus_span"), "loss")
        self.assertEqual([s for s, _ in evals], [60])

    def test_the_pretraining_example_lowers_the_loss_on_the_bundled_corpus(self):
        out = os.path.join(self.dir, "pretrain")
        r = subprocess.run([TRAINYARD, "local", "examples/pretrain_local.textproto", "--state-dir",
                            os.path.join(self.dir, "state"), "--set", "total_steps=80", "--set", "eval_period=80",
                            "--set", "checkpoint_period=0", "--set", f"output_dir={out}"],
                           capture_output=True, text=True, timeout=600, cwd=REPO)  # run from the repository's root
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SUCCEEDED, step 80/80", r.stdout)
        loss = scalars(os.path.join(out, "train"), "loss")
        print(f"pretrain_local loss by step: {loss}")
        self.assertEqual([s for s, _ in loss], [20, 40, 60, 80])
        self.assertLess(loss[-1][1], 0.85 * loss[0][1], loss)

    def test_a_mixture_trains_and_is_evaluated_per_task(self):
        rows = "".join(f"what is {n} plus one?\t{n + 1}\n" for n in range(200))
        self.write("qa/train.tsv", rows)
        self.write("qa/valid.tsv", "".join(rows.splitlines(keepends=True)[:20]))
        spec = JOB + MIXTURE_FRAGMENT + """
task: "mix"
task_definitions {
  name: "my_qa"
  splits { key: "train" value: "qa/train.tsv" }
  splits { key: "validation" value: "qa/valid.tsv" }
}
feature_lengths { inputs: 16 targets: 32 }
total_steps: 20
summary_period: 10
eval_period: 10
eval { num_batches: 1 }
"""
        r = self.local(spec)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SUCCEEDED, step 20/20", r.stdout)
        out = os.path.join(self.dir, "out")
        self.assertEqual(sorted(os.listdir(os.path.join(out, "training_eval"))), ["digits_to_words", "my_qa"])
        for task in ("digits_to_words", "my_qa"):
            steps = [s for s, _ in scalars(os.path.join(out, "training_eval", task), "loss")]
            self.assertEqual(steps, [10, 20], task)

    def test_inference_evaluation_during_training_and_early_stopping_on_exact_match(self):
        # A learning rate too small to learn anything in 40 steps: exact match
        # stays at 0, so early stopping with patience 1 fires at the second
        # inference evaluation, step 20.
        spec = JOB + """
task: "digits_to_words"
feature_lengths { inputs: 16 targets: 32 }
num_workers: 2
total_steps: 40
summary_period: 10
eval_period: 10
eval { num_batches: 2 infer_metrics: true }
actions { on: ACTION_INFER_EVAL early_stopping { task: "digits_to_words" metric: "exact_match" mode: MAX patience: 1 } }
"""
        r = self.local(spec, "--set", "learning_rate.base_learning_rate=0.000001")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SUCCEEDED", r.stdout)
        self.assertIn("early stopping at step 20: digits_to_words/exact_match has not improved on 0 for 1 "
                      "evaluations", r.stdout)
        out = os.path.join(self.dir, "out")
        board = os.path.join(out, "inference_eval", "digits_to_words")
        for tag in ("exact_match", "sequence_accuracy", "mean_log_likelihood", "examples"):
            self.assertEqual([s for s, _ in scalars(board, tag)], [10, 20], tag)
        # 2 batches of 8 rows (4 per rank): 16 examples decoded per evaluation.
        self.assertEqual([v for _, v in scalars(board, "examples")], [16.0, 16.0])
        with open(os.path.join(out, "inference_eval", "digits_to_words-validation.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        self.assertEqual([line["step"] for line in lines], [10, 20])
        self.assertEqual(lines[1]["metrics"]["exact_match"], 0.0)
        self.assertEqual(lines[1]["metrics"]["examples"], 16.0)
        self.assertLess(lines[1]["metrics"]["mean_log_likelihood"], 0.0)

    def test_validate_and_local_refuse_unknown_tasks_before_any_worker_starts(self):
        spec = self.write("job.textproto", JOB + 'task: "c4_v220_span_corruption"\n'
                          'feature_lengths { inputs: 16 targets: 16 } total_steps: 1\n')
        r = subprocess.run([TRAINYARD, "validate", spec], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn('task: "c4_v220_span_corruption" is not a known task or mixture; known: digits_to_words',
                      r.stderr)
        r = self.local(JOB + 'task: "c4_v220_span_corruption"\nfeature_lengths { inputs: 16 targets: 16 }\n'
                       'total_steps: 1\n', timeout=120)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("is not a known task or mixture", r.stderr)

    def test_local_output_dir_is_the_users_unless_an_output_root_confines_it(self):
        spec = JOB + 'task: "digits_to_words"\nfeature_lengths { inputs: 16 targets: 32 }\ntotal_steps: 2\n'
        elsewhere = tempfile.mkdtemp(prefix="elsewhere-", dir=os.environ.get("TEST_TMPDIR"))
        r = self.local(spec, "--set", f"output_dir={elsewhere}/run")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(os.path.isdir(os.path.join(elsewhere, "run", "checkpoint_2")))
        root = os.path.join(self.dir, "root")
        os.makedirs(root)
        r = self.local(spec, "--output-root", root, "--set", f"output_dir={elsewhere}/run2", timeout=120)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(f'is outside the allowed output root "{root}"', r.stderr)
        r = self.local(spec, "--output-root", root)  # output_dir "out" is taken from the root
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(os.path.isdir(os.path.join(root, "out", "checkpoint_2")))


class ExamplesTest(unittest.TestCase):
    """Every shipped example (examples/*.textproto, *.json) runs: shrunk to the
    tiny model, a few steps and one or two workers, with the bundled corpus
    and generated examples in place of the user's data, and checkpoints made
    by the shrunk tiny_local example in place of the user's."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="examples-", dir=os.environ.get("TEST_TMPDIR"))
        cls.base = None  # the shrunk tiny_local run's output_dir

    def normalized(self, path):
        r = subprocess.run([TRAINYARD, "validate", path, "--json"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def digits_file(self, split):
        path = os.path.join(self.dir, f"digits-{split}.tsv")
        with open(path, "w") as f:
            for n in range(40):
                f.write(f"{n}\t{['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven'][n % 8]}\n")
        return path

    def shrink(self, spec):
        name = spec["name"]
        spec["model"] = {"preset": "tiny"}
        workers = min(int(spec.get("num_workers", 1)), 2)
        micro = int(spec.get("num_microbatches", 1))
        spec["num_workers"] = workers
        spec["batch_size"] = 4 * workers * micro
        spec["feature_lengths"] = {"inputs": 64, "targets": 32}
        spec.get("inference", {}).pop("max_decode_length", None)
        spec.get("inference", {})["num_batches"] = 1
        if spec.get("kind") in ("TRAIN", "FINETUNING", "PRETRAINING"):
            spec["total_steps"] = 6
            spec["summary_period"] = 2
            for period in ("eval_period", "checkpoint_period"):
                if int(spec.get(period, 0)) > 0:
                    spec[period] = 3
            spec.setdefault("eval", {})["num_batches"] = 1
            lr = spec.get("learning_rate", {})
            if int(lr.get("warmup_steps", 0)) > 0:
                lr["warmup_steps"] = 2
            if int(lr.get("steps_per_cycle", 0)) > 0:
                lr["steps_per_cycle"] = 6
        spec["output_dir"] = os.path.join(self.dir, "out-" + name)
        for task in spec.get("task_definitions", []):
            for split, path in task["splits"].items():
                if path.endswith(".txt"):
                    task["splits"][split] = os.path.join(REPO, "data", "corpus",
                                                         "train.txt" if split == "train" else "valid.txt")
                    task["vocabulary"] = os.path.join(REPO, "data", "corpus", "spm.model")
                else:
                    task["splits"][split] = self.digits_file(split)
                    task.pop("vocabulary", None)  # the bundled one
        restore = spec.get("restore", {})
        if restore.get("path"):
            self.assertIsNotNone(self.base, "tiny_local.textproto runs first and makes the checkpoints")
            restore["path"] = (os.path.join(self.base, "checkpoint_6") if restore.get("mode") == "SPECIFIC"
                               else self.base)
        return spec

    def run_example(self, name):
        spec = self.shrink(self.normalized(os.path.join(REPO, "examples", name)))
        path = os.path.join(self.dir, name + ".json")
        with open(path, "w") as f:
            json.dump(spec, f)
        r = subprocess.run([TRAINYARD, "local", path, "--state-dir", os.path.join(self.dir, "state-" + name)],
                           capture_output=True, text=True, timeout=600, cwd=self.dir)
        self.assertEqual(r.returncode, 0, f"{name}:\n{r.stdout}\n{r.stderr}")
        self.assertIn("SUCCEEDED", r.stdout, name)
        return spec

    def test_every_example_runs(self):
        names = sorted(os.listdir(os.path.join(REPO, "examples")))
        specs = [n for n in names if n.endswith((".textproto", ".json"))]
        self.assertIn("tiny_local.textproto", specs)
        self.assertGreaterEqual(len(specs), 6, specs)
        base = self.run_example("tiny_local.textproto")
        ExamplesTest.base = base["output_dir"]
        self.assertTrue(os.path.isdir(os.path.join(self.base, "checkpoint_6")))
        for name in specs:
            if name != "tiny_local.textproto":
                with self.subTest(example=name):
                    self.run_example(name)


def main():
    global TRAINYARD
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    args, rest = parser.parse_known_args()
    TRAINYARD = os.path.abspath(args.trainyard)
    junit.main([sys.argv[0], *rest])


if __name__ == "__main__":
    main()
