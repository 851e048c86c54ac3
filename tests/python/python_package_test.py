"""The `trainyard` Python package against a real coordinator and workers.

The package is pip-installed from a copy of python/ and proto/ (as a
checkout has them) into a directory of this test's, with no network: the
build's requirements (setuptools, grpcio-tools) come from this Python's
environment (--no-build-isolation). Then, on one coordinator with two
workers (ports chosen by the OS, every process reaped): jobs submitted from
a dict and from a textproto and watched to their end, a running job
checkpointed and cancelled, RemoteInteractiveModel's methods compared with
the CLI's on the same checkpoint, and examples/notebook_finetune.py run to
its end. A coordinator of its own serves TLS with bearer tokens.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import junit  # noqa: E402
import system_harness  # noqa: E402
from system_harness import SPEC, Cluster, dev_certs, tls_flags  # noqa: E402

import grpc  # noqa: E402

ROOT = tempfile.mkdtemp(prefix="py-", dir=os.environ.get("TEST_TMPDIR"))
SITE = os.path.join(ROOT, "site")

# The first 8 and the next 4 numbers of the task's convention.
EXAMPLES = [
    {"input": "12", "target": "twelve"},
    {"input": "40", "target": "forty"},
    {"input": "115", "target": "one hundred fifteen"},
    {"input": "7", "target": "seven"},
    {"input": "300", "target": "three hundred"},
    {"input": "18", "target": "eighteen"},
    {"input": "1234", "target": "one thousand two hundred thirty-four"},
    {"input": "99", "target": "ninety-nine"},
]
LENGTHS = ("--input-length", "16", "--target-length", "32", "--batch-size", "8")


def pip_install(source, target):
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
    return subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                           "--target", target, source], capture_output=True, text=True, timeout=120, env=env)


def setUpModule():
    # A copy laid out as a checkout is: python/ beside proto/.
    src = os.path.join(ROOT, "checkout")
    for d in ("python", "proto"):
        shutil.copytree(d, os.path.join(src, d), symlinks=False)
    r = pip_install(os.path.join(src, "python"), SITE)
    assert r.returncode == 0, r.stdout + r.stderr
    sys.path.insert(0, SITE)


def spec_dict(output_dir, **fields):
    """SPEC as a dict of the proto's JSON names (json_format.ParseDict)."""
    spec = {
        "name": "py", "model": {"preset": "tiny", "dropoutRate": 0.0}, "task": "digits_to_words",
        "featureLengths": {"inputs": 16, "targets": 32}, "batchSize": 8, "numWorkers": 1, "totalSteps": 4,
        "summaryPeriod": 2, "seed": 3, "optimizer": {"adafactor": {}},
        "learningRate": {"factors": "constant", "baseLearningRate": 0.01}, "data": {"pack": False},
        "outputDir": output_dir,
    }
    spec.update(fields)
    return spec


class PackageTest(unittest.TestCase):
    def test_install_without_proto_is_refused_naming_what_is_missing(self):
        alone = os.path.join(ROOT, "alone")
        shutil.copytree("python", os.path.join(alone, "python"))
        r = pip_install(os.path.join(alone, "python"), os.path.join(ROOT, "alone-site"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("error: trainyard: cannot find job.proto and job_service.proto (looked in "
                      f"{os.path.join(alone, 'proto')}", r.stdout + r.stderr)
        self.assertIn("TRAINYARD_PROTO_DIR", r.stdout + r.stderr)

    def test_stubs_are_generated_typed_inside_the_package(self):
        generated = sorted(os.listdir(os.path.join(SITE, "trainyard", "proto")))
        for name in ("job_pb2.py", "job_pb2.pyi", "job_service_pb2.py", "job_service_pb2.pyi",
                     "job_service_pb2_grpc.py"):
            self.assertIn(name, generated)
        with open(os.path.join(SITE, "trainyard", "proto", "job_service_pb2_grpc.py")) as f:
            self.assertIn("from trainyard.proto import job_service_pb2", f.read())
        self.assertTrue(os.path.isfile(os.path.join(SITE, "trainyard", "py.typed")))
        self.assertFalse(os.path.exists(os.path.join(SITE, "proto")))  # no top-level `proto` package

    def test_specs_parse_from_each_form(self):
        import trainyard
        from_dict = trainyard.parse_job_spec(spec_dict("/out"))
        from_text = trainyard.parse_job_spec("""
            name: "py" model { preset: "tiny" dropout_rate: 0.0 } task: "digits_to_words"
            feature_lengths { inputs: 16 targets: 32 } batch_size: 8 num_workers: 1 total_steps: 4
            summary_period: 2 seed: 3 optimizer { adafactor {} }
            learning_rate { factors: "constant" base_learning_rate: 0.01 } data { pack: false }
            output_dir: "/out"
        """)
        self.assertEqual(from_dict, from_text)
        path = os.path.join(ROOT, "spec.json")
        with open(path, "w") as f:
            json.dump(spec_dict("/out"), f)
        import pathlib
        self.assertEqual(trainyard.parse_job_spec(pathlib.Path(path)), from_dict)
        with self.assertRaisesRegex(ValueError, r"job spec \(dict\): .*batchSizes"):
            trainyard.parse_job_spec({"batchSizes": 8})
        with self.assertRaisesRegex(ValueError, r"job spec \(textproto\): 1:1"):
            trainyard.parse_job_spec("batch_size 8 }")

    def test_metric_function_forms(self):
        import trainyard
        self.assertEqual(trainyard.metric_fn_form(lambda targets, scores: {}), ("targets", "scores"))
        self.assertEqual(trainyard.metric_fn_form(lambda targets, predictions, k=1: {}), ("targets", "predictions"))
        self.assertEqual(trainyard.metric_fn_form(lambda targets, predictions, aux_values: {}),
                         ("targets", "predictions", "aux_values"))
        with self.assertRaisesRegex(ValueError, r"positional arguments \('predictions', 'targets'\)"):
            trainyard.metric_fn_form(lambda predictions, targets: {})


class ClusterTest(unittest.TestCase):
    """One coordinator, two workers, and a 4-step checkpoint trained by the CLI."""

    @classmethod
    def setUpClass(cls):
        cls.root = os.path.join(ROOT, "cluster")
        os.makedirs(cls.root)
        cls.spec = os.path.join(cls.root, "job.textproto")
        with open(cls.spec, "w") as f:
            f.write(SPEC)
        cls.cluster = Cluster(cls.root)
        try:
            for _ in range(2):
                cls.cluster.add_worker()
            cls.base_job = cls.cluster.submit(cls.spec, "output_dir=base", "total_steps=4", "num_workers=1",
                                              "eval_period=0")
            s = cls.cluster.wait_state(cls.base_job, ["SUCCEEDED", "FAILED"], 120)
            assert s["state"] == "SUCCEEDED", s["reason"]
            cls.checkpoint = s["latest_checkpoint"]
        except BaseException:
            cls.cluster.stop()
            raise
        import trainyard
        cls.client = trainyard.JobClient(cls.cluster.address)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.cluster.stop()

    def test_submit_from_a_dict_and_a_textproto_and_watch_to_the_end(self):
        import trainyard
        from trainyard import job_service_pb2 as pb
        submitted = self.client.submit(spec_dict("py-dict"))
        job = submitted.job_id
        self.assertRegex(job, r"^py-\d+$")
        self.assertEqual(submitted.normalized_spec.output_dir, os.path.join(self.root, "py-dict"))
        events = list(self.client.watch(job, timeout=120))
        progress = [e.job for e in events if e.kind == pb.JobEvent.PROGRESS]
        states = [trainyard.job_state_name(e.job.state) for e in events if e.kind == pb.JobEvent.STATE_CHANGED]
        # A summary every 2 steps of 4: each is streamed, the last one
        # possibly with the final state change rather than before it; the
        # stream ends at the final state.
        summaries = {e.job.metrics_step: e.job.metrics["timing/seqs"] for e in events if e.job.metrics_step > 0}
        self.assertEqual(summaries, {2: 16.0, 4: 16.0})  # 2 steps x 8 examples each
        # Between summaries, rank 0's heartbeats may move the step (progress
        # with no new summary: metrics_step 0 before the first).
        self.assertEqual([p.metrics_step for p in progress if p.metrics_step > 0][0], 2)
        self.assertTrue(set(p.metrics_step for p in progress) <= {0, 2, 4})
        self.assertEqual(events[-1].job.metrics_step, 4)
        self.assertEqual(states[-2:], ["RUNNING", "SUCCEEDED"])
        self.assertEqual(events[-1].job.state, pb.SUCCEEDED)
        info = self.client.status(job)
        self.assertEqual((info.state, info.step, info.restarts, info.reason), (pb.SUCCEEDED, 4, 0, ""))
        self.assertEqual(info.latest_checkpoint, os.path.join(self.root, "py-dict", "checkpoint_4"))
        self.assertTrue(os.path.isfile(os.path.join(info.latest_checkpoint, "MANIFEST.json")))

        text = self.client.submit(SPEC, overrides=["output_dir=py-text", "total_steps=6", "summary_period=3",
                                                   "num_workers=1", "eval_period=0"]).job_id
        self.assertRegex(text, r"^sys-\d+$")
        final = self.client.wait(text, timeout=120)
        self.assertEqual((final.state, final.step, final.metrics_step), (pb.SUCCEEDED, 6, 6))
        self.assertEqual(final.latest_checkpoint, os.path.join(self.root, "py-text", "checkpoint_6"))
        # The same record as the CLI's.
        self.assertEqual(self.cluster.status(text)["step"], 6)
        listed = [j.job_id for j in self.client.list_jobs()]
        self.assertEqual(listed[:2], [text, job])  # newest first
        self.assertIn(self.base_job, listed)
        self.assertEqual([j.job_id for j in self.client.list_jobs(limit=1)], [text])
        self.assertEqual(self.client.list_jobs(states=[pb.FAILED]), [])

    def test_refusals_carry_their_status_codes(self):
        import trainyard
        with self.assertRaises(trainyard.Error) as e:
            self.client.status("no-such-job")
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertIn("no job 'no-such-job'", e.exception.details())
        self.assertIsInstance(e.exception, grpc.RpcError)
        with self.assertRaises(trainyard.Error) as e:
            self.client.submit(spec_dict("bad", batchSize=-4))
        self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("batch_size", e.exception.details())
        with self.assertRaises(trainyard.Error) as e:
            list(self.client.watch("no-such-job", timeout=30))
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(trainyard.Error) as e:
            self.client.checkpoint(self.base_job, timeout_seconds=5)
        self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("is SUCCEEDED; only a RUNNING job can write a checkpoint on request", e.exception.details())
        unreachable = trainyard.JobClient("127.0.0.1:1", timeout=5)
        with self.assertRaises(trainyard.Error) as e:
            unreachable.list_jobs()
        unreachable.close()
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertIn("coordinator 127.0.0.1:1 unreachable", e.exception.details())
        self.assertIn("if it uses TLS, set TRAINYARD_TLS_CA", e.exception.details())

    def test_checkpoint_then_cancel_a_running_job(self):
        from trainyard import job_service_pb2 as pb
        job = self.client.submit(spec_dict("py-long", totalSteps=100000, summaryPeriod=5)).job_id
        for event in self.client.watch(job, timeout=120):
            if event.kind == pb.JobEvent.PROGRESS and event.job.step > 0:
                break  # leaving the loop ends the stream
        written = self.client.checkpoint(job, timeout_seconds=60)
        self.assertRegex(written.path, r"/py-long/checkpoint_\d+$")
        self.assertEqual(written.path, os.path.join(self.root, "py-long", f"checkpoint_{written.step}"))
        self.assertTrue(os.path.isfile(os.path.join(written.path, "MANIFEST.json")))
        self.assertEqual(written.step % 5, 0)  # at a chunk boundary
        self.assertEqual(self.client.status(job).latest_checkpoint, written.path)
        self.client.cancel(job, reason="testing")
        final = self.client.wait(job, timeout=60)
        self.assertEqual((final.state, final.reason), (pb.CANCELLED, "cancelled: testing"))
        import trainyard
        with self.assertRaises(trainyard.Error) as e:
            self.client.cancel(job)
        self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("already ended: CANCELLED", e.exception.details())

    def cli(self, *args):
        # The bits of a matrix product depend on how many threads split it:
        # this process computes with as many as the workers do.
        with open(self.cluster.workers[0].log) as f:
            threads = re.search(r"worker: (\d+) compute thread", f.read()).group(1)
        r = subprocess.run([system_harness.TRAINYARD, *args], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, OMP_NUM_THREADS=threads))
        self.assertEqual(r.returncode, 0, r.stderr)
        return [json.loads(line) for line in r.stdout.splitlines()]

    def test_remote_interactive_model(self):
        import trainyard
        examples = os.path.join(self.root, "examples.jsonl")
        with open(examples, "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in EXAMPLES)
        cli_scores = [x["score"] for x in self.cli("score", "--checkpoint", self.checkpoint, "--examples", examples,
                                                   "--json", *LENGTHS)]
        cli_predicted = self.cli("predict", "--checkpoint", self.checkpoint, "--examples", examples, "--json", *LENGTHS)

        out = os.path.join(self.root, "interactive")
        with trainyard.RemoteInteractiveModel(self.client, checkpoint=self.checkpoint, batch_size=8,
                                              task_feature_lengths={"inputs": 16, "targets": 32},
                                              output_dir=out) as model:
            self.assertEqual(model.step, 4)
            self.assertEqual(len(model.worker_ids), 1)
            # The checkpoint's model on a worker: what the CLI computes here.
            scores = model.score(EXAMPLES)
            self.assertEqual(scores, cli_scores)
            predictions, aux = model.predict_with_aux([x["input"] for x in EXAMPLES])
            self.assertEqual(predictions, [x["prediction"] for x in cli_predicted])
            self.assertEqual(aux, {"scores": [x["score"] for x in cli_predicted]})

            def exact(targets, predictions):
                return {"py_exact_match": 100.0 * sum(t == p for t, p in zip(targets, predictions)) / len(targets)}

            def mean_score(targets, scores):
                return {"py_mean_score": statistics.fmean(scores)}

            def best(targets, predictions, aux_values):
                return {"py_best_score": max(aux_values["scores"]), "py_count": len(predictions)}

            metrics = model.evaluate(EXAMPLES, [exact, mean_score, best, "exact_match"])
            self.assertEqual(sorted(metrics), ["exact_match", "py_best_score", "py_count", "py_exact_match",
                                               "py_mean_score"])
            self.assertAlmostEqual(metrics["py_exact_match"], metrics["exact_match"], places=9)
            self.assertEqual(metrics["py_mean_score"], statistics.fmean(cli_scores))
            self.assertEqual(metrics["py_best_score"], max(aux["scores"]))
            self.assertEqual(metrics["py_count"], 8)
            with self.assertRaisesRegex(ValueError, "metric 'py_exact_match' of exact is also another function's"):
                model.evaluate(EXAMPLES, [exact, exact])
            with self.assertRaisesRegex(ValueError, "needs a 'target'"):
                model.evaluate(["12"], [exact])

            with self.assertRaises(trainyard.Error) as e:
                model.train_step(EXAMPLES[:3])
            self.assertEqual(e.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertEqual(model.step, 4)
            trained = model.train_step(EXAMPLES)
            self.assertIn("loss", trained)
            self.assertEqual(model.step, 5)
            trained_scores = model.score(EXAMPLES)
            self.assertNotEqual(trained_scores, scores)
            saved = model.save_checkpoint()
            self.assertEqual(saved, os.path.join(out, "checkpoint_5"))
            self.assertTrue(os.path.isfile(os.path.join(saved, "MANIFEST.json")))
        with self.assertRaisesRegex(ValueError, "the session is closed"):
            model.score(EXAMPLES)
        # The saved step as the CLI reads it: the session's trained model.
        after = [x["score"] for x in self.cli("score", "--checkpoint", saved, "--examples", examples, "--json",
                                              *LENGTHS)]
        self.assertEqual(after, trained_scores)

        # Without an output_dir there is nowhere to save.
        with trainyard.RemoteInteractiveModel(self.client.address, job_id=self.base_job, batch_size=8,
                                              task_feature_lengths={"inputs": 16, "targets": 32}) as model:
            with self.assertRaises(trainyard.Error) as e:
                model.save_checkpoint()
            self.assertEqual(e.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIn("no output_dir", e.exception.details())

    def test_notebook_runs_to_the_end(self):
        env = dict(os.environ, TRAINYARD_COORDINATOR=self.cluster.address, NOTEBOOK_JOB=self.base_job,
                   NOTEBOOK_OUTPUT_DIR=os.path.join(self.root, "notebook"), NOTEBOOK_STEPS="3",
                   NOTEBOOK_JOB_STEPS="4", PYTHONPATH=SITE)
        r = subprocess.run([sys.executable, os.path.join("examples", "notebook_finetune.py")], capture_output=True,
                           text=True, timeout=300, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        print(r.stdout)
        self.assertIn("step 7: loss", r.stdout)  # 4 + 3 interactive steps
        saved = os.path.join(self.root, "notebook", "interactive", "checkpoint_7")
        self.assertIn(f"saved {saved} (step 7)", r.stdout)
        for metric in ("exact_match", "word_accuracy", "mean_target_log_likelihood"):
            self.assertRegex(r.stdout, rf"before: \{{.*'{metric}': -?[0-9.]+")
            self.assertRegex(r.stdout, rf"after: \{{.*'{metric}': -?[0-9.]+")
        job = re.search(r"exported job (\S+): SUCCEEDED at step 11, checkpoint (\S+)", r.stdout)
        self.assertIsNotNone(job, r.stdout)
        self.assertEqual(job.group(2), os.path.join(self.root, "notebook", "finetune", "checkpoint_11"))
        with open(os.path.join(self.root, "notebook", "finetune.textproto")) as f:
            exported = f.read()
        self.assertIn("kind: FINETUNING", exported)
        self.assertIn(f'path: "{saved}"', exported)


class SecurityTest(unittest.TestCase):
    """TLS and bearer tokens from the environment, as the CLI takes them."""

    TOKEN = "alice-0123456789abcdef"

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="tls-", dir=ROOT)
        self.certs = dev_certs(os.path.join(self.root, "certs"), "127.0.0.1")
        tokens = os.path.join(self.root, "tokens")
        with open(tokens, "w") as f:
            f.write(f"alice {self.TOKEN}\n")
        self.token_file = os.path.join(self.root, "token")
        with open(self.token_file, "w") as f:
            f.write(f"  {self.TOKEN}  \nignored\n")
        self.cluster = Cluster(self.root, coordinator_extra=(*tls_flags(self.certs), "--auth-tokens", tokens))
        self.saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("TRAINYARD_T")}

    def tearDown(self):
        os.environ.update(self.saved)
        self.cluster.stop()

    def list_with(self, **env):
        import trainyard
        for k in [k for k in os.environ if k.startswith("TRAINYARD_T")]:
            del os.environ[k]
        os.environ.update(env)
        with trainyard.JobClient(self.cluster.address, timeout=10) as client:
            return client.list_jobs()

    def test_tls_and_token_from_the_environment(self):
        import trainyard
        ca = os.path.join(self.certs, "ca.pem")
        self.assertEqual(self.list_with(TRAINYARD_TLS_CA=ca, TRAINYARD_TOKEN=self.TOKEN), [])
        self.assertEqual(self.list_with(TRAINYARD_TLS_CA=ca, TRAINYARD_TOKEN_FILE=self.token_file), [])
        # A client certificate too (the coordinator's JobService accepts one).
        self.assertEqual(self.list_with(TRAINYARD_TLS_CA=ca, TRAINYARD_TLS_CERT=os.path.join(self.certs, "node.pem"),
                                        TRAINYARD_TLS_KEY=os.path.join(self.certs, "node.key"),
                                        TRAINYARD_TOKEN=self.TOKEN), [])
        for env, code, text in [
            ({"TRAINYARD_TLS_CA": ca}, grpc.StatusCode.UNAUTHENTICATED,
             "no bearer token: set TRAINYARD_TOKEN or TRAINYARD_TOKEN_FILE"),
            ({"TRAINYARD_TLS_CA": ca, "TRAINYARD_TOKEN": "mallory-0123456789abcdef"}, grpc.StatusCode.UNAUTHENTICATED,
             "unknown bearer token"),
            ({"TRAINYARD_TOKEN": self.TOKEN}, grpc.StatusCode.UNAVAILABLE, "(if it uses TLS, set TRAINYARD_TLS_CA)"),
        ]:
            with self.assertRaises(trainyard.Error) as e:
                self.list_with(**env)
            self.assertEqual(e.exception.code(), code, env)
            self.assertIn(text, e.exception.details())
        with self.assertRaisesRegex(ValueError, "TRAINYARD_TLS_CERT and TRAINYARD_TLS_KEY .*: give both or neither"):
            self.list_with(TRAINYARD_TLS_CA=ca, TRAINYARD_TLS_CERT=os.path.join(self.certs, "node.pem"))
        with self.assertRaisesRegex(ValueError, "TRAINYARD_TOKEN_FILE: cannot read '/nonexistent'"):
            self.list_with(TRAINYARD_TLS_CA=ca, TRAINYARD_TOKEN_FILE="/nonexistent")
        with self.assertRaisesRegex(ValueError, "TRAINYARD_TLS_CA: cannot read '/nonexistent'"):
            self.list_with(TRAINYARD_TLS_CA="/nonexistent")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    args, rest = parser.parse_known_args()
    system_harness.TRAINYARD = os.path.abspath(args.trainyard)
    junit.main([sys.argv[0], *rest])


if __name__ == "__main__":
    main()
