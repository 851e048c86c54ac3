"""System tests: a coordinator and workers as real processes on loopback.

Each test starts its own coordinator (port chosen by the OS, read from its
first stdout line) and workers, drives them through the `trainyard` CLI (and
the Python client example), and stops and reaps every process it started.

One file (longer than most): the tests run as one Bazel target, `exclusive`,
so that their heartbeats and timings never compete with each other for the
machine. The harness they share (Cluster, Hosts, the certificates) is
tests/testing/system_harness.py.
"""
import argparse
import glob
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import junit  # noqa: E402  (tests/testing: each test a case in $XML_OUTPUT_FILE)
import system_harness  # noqa: E402
from system_harness import (SPEC, Cluster, Hosts, dev_certs, netns_unavailable, samples, scrape,  # noqa: E402
                            tls_flags, wait_for)

import numpy as np
from safetensors.numpy import load_file


class SystemTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="sys-", dir=os.environ.get("TEST_TMPDIR"))
        self.spec = os.path.join(self.root, "job.textproto")
        with open(self.spec, "w") as f:
            f.write(SPEC)
        self.cluster = None

    def tearDown(self):
        if self.cluster:
            self.cluster.stop()
            # Clean exits only: the processes handled SIGTERM.
            for proc in self.cluster.procs:
                if proc.returncode not in (0, -signal.SIGKILL):
                    self.fail(f"{proc.name} exited {proc.returncode}; log:\n{Cluster.log(proc)}")

    def start(self, workers, **kwargs):
        self.cluster = Cluster(self.root, **kwargs)
        for _ in range(workers):
            self.cluster.add_worker()
        return self.cluster

    def test_two_workers_train_and_only_rank0_writes_summaries(self):
        c = self.start(2)
        job = c.submit(self.spec, "output_dir=two")
        self.assertEqual(job, "sys-1")
        watch = c.cli("watch", job)
        # Not a terminal: one line per summary, then the final report.
        self.assertIn("sys-1: RUNNING", watch.stdout)
        self.assertIn("] 10/20", watch.stdout)
        self.assertIn("] 20/20", watch.stdout)
        self.assertIn("job sys-1: SUCCEEDED, step 20/20", watch.stdout)
        s = c.status(job)
        for key in ("job_id", "state", "step", "total_steps", "restarts", "reason", "metrics"):
            self.assertIn(key, s)
        self.assertEqual((s["state"], s["step"], s["total_steps"], s["restarts"], s["reason"]),
                         ("SUCCEEDED", 20, 20, 0, ""))
        self.assertEqual(s["metrics_step"], 20)
        self.assertEqual(s["metrics"]["timing/seqs"], 80.0)  # 10 steps x 8 examples
        self.assertLess(s["metrics"]["loss"], 6.5)
        self.assertIn("training_eval/digits_to_words/loss", s["metrics"])
        self.assertEqual([r["rank"] for r in s["ranks"]], [0, 1])
        out = os.path.join(self.root, "two")
        self.assertEqual(s["output_dir"], out)
        self.assertEqual(s["latest_checkpoint"], os.path.join(out, "checkpoint_20"))
        # Rank 0 alone writes TensorBoard events: one file per writer.
        self.assertEqual(len(glob.glob(os.path.join(out, "train", "events.out.tfevents.*"))), 1)
        self.assertEqual(len(glob.glob(os.path.join(out, "training_eval", "digits_to_words", "events.*"))), 1)
        self.assertEqual(sorted(os.listdir(out)),
                         ["checkpoint_20", "config.textproto", "data_ledger.jsonl", "train", "training_eval"])
        # The job's goodput so far, as TensorBoard reads it, at each chunk's
        # first step: the start first, then the first chunk's training.
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        events = EventAccumulator(os.path.join(out, "train"))
        events.Reload()
        goodput = {t: [(e.step, e.value) for e in events.Scalars(t)] for t in events.Tags()["scalars"]
                   if t.startswith("goodput/")}
        self.assertEqual([s for s, _ in goodput["goodput/trained_to_step"]], [0, 10])
        self.assertEqual([v for _, v in goodput["goodput/trained_to_step"]], [0, 10])
        (_, productive0), (_, productive10) = goodput["goodput/productive_seconds"]
        self.assertEqual(productive0, 0)
        self.assertGreater(productive10, 0)
        self.assertGreater(goodput["goodput/startup_seconds"][0][1], 0)
        walls = [v for _, v in goodput["goodput/wall_seconds"]]
        self.assertLess(walls[0], walls[1])
        self.assertTrue(all(0 <= v < 1 for _, v in goodput["goodput/ratio"]), goodput["goodput/ratio"])
        listed = json.loads(c.cli("list", "--json").stdout)
        self.assertEqual([j["job_id"] for j in listed], ["sys-1"])
        human = c.cli("status", job).stdout
        self.assertIn("job sys-1: SUCCEEDED, step 20/20", human)
        self.assertIn("s/step", human)

    def test_one_and_two_workers_reach_the_same_parameters(self):
        c = self.start(2)
        one = c.submit(self.spec, "output_dir=w1", "num_workers=1")
        c.wait_state(one, ["SUCCEEDED"], 120)
        two = c.submit(self.spec, "output_dir=w2", "num_workers=2")
        c.wait_state(two, ["SUCCEEDED"], 120)
        a = load_file(os.path.join(self.root, "w1", "checkpoint_20", "params.safetensors"))
        b = load_file(os.path.join(self.root, "w2", "checkpoint_20", "params.safetensors"))
        self.assertEqual(sorted(a), sorted(b))
        worst = max(float(np.abs(a[k] - b[k]).max()) for k in a)
        moved = max(float(np.abs(a[k]).max()) for k in a)
        print(f"W=1 vs W=2 after 20 steps: max |diff| {worst:.3g} (max |param| {moved:.3g})")
        # Same global batches, loss normalised by the global batch's tokens:
        # only the float summation order differs.
        self.assertLess(worst, 1e-4)
        sa, sb = c.status(one)["metrics"], c.status(two)["metrics"]
        self.assertAlmostEqual(sa["loss"], sb["loss"], delta=1e-4 * abs(sa["loss"]))
        self.assertEqual(sa["timing/target_tokens"], sb["timing/target_tokens"])

    def test_jobs_queue_and_cancel_frees_the_gang(self):
        c = self.start(2)
        long_job = c.submit(self.spec, "output_dir=long", "total_steps=100000", "summary_period=5")
        short = c.submit(self.spec, "output_dir=short")
        c.wait_state(long_job, ["RUNNING"], 60)
        wait_for(lambda: c.status(long_job)["step"] > 0, 60, "the long job to make progress")
        s = c.status(short)
        self.assertEqual(s["state"], "PENDING")
        self.assertIn("waiting for 2 idle workers (0 idle of 2 registered)", s["reason"])
        # A checkpoint on request: written at the next chunk boundary, durable
        # (its manifest is there) when `trainyard checkpoint` prints it.
        path = c.cli("checkpoint", long_job, "--timeout", "60").stdout.strip()
        self.assertRegex(path, r"/long/checkpoint_\d+$")
        self.assertTrue(os.path.isfile(os.path.join(path, "MANIFEST.json")), os.listdir(path))
        self.assertEqual(c.status(long_job)["latest_checkpoint"], path)
        refused = c.cli("checkpoint", short, check=False)
        self.assertEqual(refused.returncode, 1)
        self.assertIn("is PENDING; only a RUNNING job can write a checkpoint on request", refused.stderr)
        cancelled = c.cli("cancel", long_job, "--reason", "testing")
        self.assertIn(long_job, cancelled.stdout)
        s = c.wait_state(long_job, ["CANCELLED"], 60)
        self.assertEqual(s["reason"], "cancelled: testing")
        # The freed gang takes the queued job.
        c.wait_state(short, ["SUCCEEDED"], 120)
        watch = c.cli("watch", long_job, check=False)
        self.assertEqual(watch.returncode, 1)
        again = c.cli("cancel", short, check=False)
        self.assertEqual(again.returncode, 1)
        self.assertIn("already ended: SUCCEEDED", again.stderr)

    def test_killed_worker_fails_the_job_naming_its_rank(self):
        c = self.start(2)
        job = c.submit(self.spec, "output_dir=killed", "total_steps=100000", "summary_period=5", "max_restarts=0")
        c.wait_state(job, ["RUNNING"], 60)
        wait_for(lambda: c.status(job)["step"] > 0, 60, "progress")
        ranks = c.status(job)["ranks"]
        victim = c.workers[1]
        rank = next(r["rank"] for r in ranks if r["address"].endswith(":" + victim.listening.split(":")[1]))
        start = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        s = c.wait_state(job, ["FAILED"], 30)
        took = time.monotonic() - start
        print(f"job failed {took:.1f} s after SIGKILL: {s['reason']}")
        self.assertIn(f"rank {rank} (worker ", s["reason"])
        self.assertIn("(no restarts left: max_restarts 0)", s["reason"])
        # The survivor returns to the pool and runs the next job.
        nxt = c.submit(self.spec, "output_dir=next", "num_workers=1")
        c.wait_state(nxt, ["SUCCEEDED"], 120)
        self.assertEqual(c.status(nxt)["ranks"][0]["address"].split(":")[1], c.workers[0].listening.split(":")[1])

    def test_sigterm_preempts_and_the_job_resumes_exactly(self):
        c = self.start(2)
        # Two microbatches: the stop may land between them (the step is then
        # abandoned and its batch put back) or at a step boundary.
        common = ("total_steps=30", "summary_period=5", "checkpoint_period=10", "model.dropout_rate=0.1",
                  "num_microbatches=2")
        whole = c.submit(self.spec, "output_dir=whole", *common)
        c.wait_state(whole, ["SUCCEEDED"], 120)
        job = c.submit(self.spec, "output_dir=resumed", *common)
        c.wait_state(job, ["RUNNING"], 60)
        wait_for(lambda: c.status(job)["step"] >= 12, 60, "step 12")
        victim = c.workers[1]
        start = time.monotonic()
        victim.send_signal(signal.SIGTERM)
        s = c.wait_state(job, ["RESTARTING"], 30)
        self.assertEqual(s["restarts"], 1)
        self.assertIn("was asked to stop; emergency checkpoint at step", s["reason"])
        self.assertEqual(victim.wait(timeout=30), 0)  # a clean exit once the job was handed back
        print(f"worker stopped {time.monotonic() - start:.1f} s after SIGTERM: {s['reason']}")
        emergency = int(s["reason"].split("emergency checkpoint at step ")[1].split(":")[0])
        self.assertTrue(os.path.isdir(os.path.join(self.root, "resumed", f"checkpoint_{emergency}")))
        # A new worker joins; the job resumes from the emergency checkpoint.
        c.add_worker()
        s = c.wait_state(job, ["SUCCEEDED", "FAILED"], 120)
        self.assertEqual((s["state"], s["step"], s["restarts"]), ("SUCCEEDED", 30, 1), s["reason"])
        # Exact replay: the interrupted job ends bit for bit where the whole
        # one did (same batches, same dropout masks, same optimizer state).
        for name in ("params.safetensors", "optimizer.safetensors"):
            a = load_file(os.path.join(self.root, "whole", "checkpoint_30", name))
            b = load_file(os.path.join(self.root, "resumed", "checkpoint_30", name))
            self.assertEqual(sorted(a), sorted(b))
            for k in a:
                self.assertTrue(np.array_equal(a[k], b[k]), f"{name}: {k} differs")
        with open(os.path.join(self.root, "resumed", "checkpoint_30", "metadata.json")) as f:
            meta = json.load(f)
        self.assertEqual((meta["version"], meta["step"], meta["world_size"]), (2, 30, 2))
        self.assertEqual(len(meta["data_states"]), 2)

    def test_sigterm_during_an_evaluation_preempts_at_that_step(self):
        c = self.start(2)
        job = c.submit(self.spec, "output_dir=eval-preempted", "total_steps=20", "eval_period=10",
                       "eval.num_batches=400", "checkpoint_period=0")
        victim = c.workers[1]
        wait_for(lambda: "evaluating step 10" in Cluster.log(victim), 60, "the evaluation of step 10")
        victim.send_signal(signal.SIGTERM)
        s = c.wait_state(job, ["RESTARTING"], 30)
        self.assertIn("was asked to stop; emergency checkpoint at step 10 (during the evaluation of step 10, "
                      "which is not repeated)", s["reason"])
        self.assertEqual(victim.wait(timeout=30), 0)
        self.assertTrue(os.path.isdir(os.path.join(self.root, "eval-preempted", "checkpoint_10")))
        c.add_worker()
        s = c.wait_state(job, ["SUCCEEDED", "FAILED"], 120)
        self.assertEqual((s["state"], s["step"], s["restarts"]), ("SUCCEEDED", 20, 1), s["reason"])

    def test_evaluation_and_inference_jobs_shard_and_merge_in_order(self):
        c = self.start(2)
        train = c.submit(self.spec, "output_dir=trained", "total_steps=20", "eval_period=0")
        self.assertEqual(c.wait_state(train, ["SUCCEEDED", "FAILED"], 120)["state"], "SUCCEEDED")
        ckpt = os.path.join(self.root, "trained", "checkpoint_20")
        common = ("restore.mode=SPECIFIC", f"restore.path={ckpt}", "inference.num_batches=3")
        ev = c.submit(self.spec, "kind=EVALUATION", "output_dir=evaluated", *common)
        s = c.wait_state(ev, ["SUCCEEDED", "FAILED"], 120)
        self.assertEqual(s["state"], "SUCCEEDED", s["reason"])
        self.assertIn("24 example(s) decoded", s["reason"])
        for k in ("exact_match", "sequence_accuracy", "mean_log_likelihood"):
            self.assertIn(f"digits_to_words/{k}", s["metrics"])
        with open(os.path.join(self.root, "evaluated", "inference", "digits_to_words-validation.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        # 3 batches of 8 over 2 ranks, merged back into the split's order.
        self.assertEqual([x["index"] for x in lines], list(range(24)))
        exact = sum(x["prediction"] == x["target"] for x in lines)
        self.assertAlmostEqual(s["metrics"]["digits_to_words/exact_match"], 100.0 * exact / 24, places=6)
        with open(os.path.join(self.root, "evaluated", "inference_eval", "digits_to_words-validation.json")) as f:
            summary = json.load(f)
        self.assertEqual((summary["checkpoint_step"], summary["metrics"]["examples"]), (20, 24))
        self.assertTrue(glob.glob(os.path.join(self.root, "evaluated", "inference_eval", "digits_to_words",
                                               "events.out.tfevents.*")))
        inf = c.submit(self.spec, "kind=INFERENCE", "output_dir=inferred", *common)
        s = c.wait_state(inf, ["SUCCEEDED", "FAILED"], 120)
        self.assertEqual(s["state"], "SUCCEEDED", s["reason"])
        with open(os.path.join(self.root, "inferred", "inference", "digits_to_words-validation.jsonl")) as f:
            inferred = [json.loads(line) for line in f]
        self.assertEqual([(x["input"], x["prediction"]) for x in inferred],
                         [(x["input"], x["prediction"]) for x in lines])  # greedy: the same predictions
        self.assertFalse(glob.glob(os.path.join(self.root, "inferred", "inference", "*shard*")))

        # The same checkpoint in this process through the CLI: the same
        # predictions, the same target scores, the same exact match.
        examples = os.path.join(self.root, "examples.jsonl")
        with open(examples, "w") as f:
            for x in lines:
                f.write(json.dumps({"input": x["input"], "target": x["target"]}) + "\n")
        lengths = ("--input-length", "16", "--target-length", "32", "--batch-size", "8")
        # The bits of a matrix product depend on how many threads split it:
        # this process computes with as many as the workers do (each logs
        # its count; the tests' OMP_NUM_THREADS would otherwise give 1).
        with open(c.workers[0].log) as f:
            threads = re.search(r"worker: (\d+) compute thread", f.read()).group(1)
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        run = lambda *a: subprocess.run([system_harness.TRAINYARD, *a], capture_output=True, text=True, timeout=120,
                                        env=env)
        r = run("predict", "--checkpoint", ckpt, "--examples", examples, "--json", *lengths)
        self.assertEqual(r.returncode, 0, r.stderr)
        predicted = [json.loads(x) for x in r.stdout.splitlines()]
        self.assertEqual([p["prediction"] for p in predicted], [x["prediction"] for x in lines])
        r = run("score", "--checkpoint", ckpt, "--examples", examples, "--json", *lengths)
        self.assertEqual(r.returncode, 0, r.stderr)
        scored = [json.loads(x) for x in r.stdout.splitlines()]
        for got, want in zip(scored, lines):
            self.assertAlmostEqual(got["score"], want["target_score"], delta=1e-3)
        r = run("evaluate", "--checkpoint", ckpt, "--examples", examples, "--json", "--metric", "exact_match",
                *lengths)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertAlmostEqual(json.loads(r.stdout)["exact_match"], 100.0 * exact / 24, places=6)
        # The same through an interactive session on one of the coordinator's
        # workers: predictions token for token, scores bit for bit.
        r = run("predict", "--coordinator", c.address, "--checkpoint", ckpt, "--examples", examples, "--json",
                *lengths)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([json.loads(x) for x in r.stdout.splitlines()], predicted)
        r = run("score", "--coordinator", c.address, "--checkpoint", ckpt, "--examples", examples, "--json", *lengths)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([json.loads(x) for x in r.stdout.splitlines()], scored)
        r = run("evaluate", "--coordinator", c.address, "--checkpoint", ckpt, "--examples", examples, "--json",
                "--metric", "exact_match", *lengths)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertAlmostEqual(json.loads(r.stdout)["exact_match"], 100.0 * exact / 24, places=6)
        # Data-parallel on both workers (4 rows of every batch each, gathered
        # over Gloo): the same predictions; scores to float rounding.
        r = run("predict", "--coordinator", c.address, "--workers", "2", "--checkpoint", ckpt, "--examples",
                examples, "--json", *lengths)
        self.assertEqual(r.returncode, 0, r.stderr)
        parallel = [json.loads(x) for x in r.stdout.splitlines()]
        self.assertEqual([p["prediction"] for p in parallel], [p["prediction"] for p in predicted])
        for got, want in zip(parallel, predicted):
            self.assertAlmostEqual(got["score"], want["score"], delta=1e-4)
        # The decoding options of INFERENCE jobs, in this process and in
        # sessions alike: beam search (also data-parallel), and sampling.
        beam = ("--method", "beam", "--beam-size", "3", "--alpha", "0.6")
        r = run("predict", "--checkpoint", ckpt, "--examples", examples, "--json", *lengths, *beam)
        self.assertEqual(r.returncode, 0, r.stderr)
        beamed = [json.loads(x) for x in r.stdout.splitlines()]
        self.assertEqual(len(beamed), 24)
        for workers in ("1", "2"):
            r = run("predict", "--coordinator", c.address, "--workers", workers, "--checkpoint", ckpt, "--examples",
                    examples, "--json", *lengths, *beam)
            self.assertEqual(r.returncode, 0, r.stderr)
            got = [json.loads(x) for x in r.stdout.splitlines()]
            self.assertEqual([p["prediction"] for p in got], [p["prediction"] for p in beamed], workers)
            for g, w in zip(got, beamed):
                self.assertAlmostEqual(g["score"], w["score"], delta=1e-4)
        sample = ("--method", "sample", "--temperature", "1.5", "--top-k", "5", "--sample-seed", "7")
        r = run("predict", "--checkpoint", ckpt, "--examples", examples, "--json", *lengths, *sample)
        self.assertEqual(r.returncode, 0, r.stderr)
        sampled = [json.loads(x) for x in r.stdout.splitlines()]
        self.assertNotEqual([p["prediction"] for p in sampled], [p["prediction"] for p in predicted])
        r = run("predict", "--coordinator", c.address, "--checkpoint", ckpt, "--examples", examples, "--json",
                *lengths, *sample)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([json.loads(x) for x in r.stdout.splitlines()], sampled)
        # Each example samples with a key of its own (its index in the
        # request), not its rank's: the same texts on two workers.
        r = run("predict", "--coordinator", c.address, "--workers", "2", "--checkpoint", ckpt, "--examples",
                examples, "--json", *lengths, *sample)
        self.assertEqual(r.returncode, 0, r.stderr)
        got = [json.loads(x) for x in r.stdout.splitlines()]
        self.assertEqual([p["prediction"] for p in got], [p["prediction"] for p in sampled])
        for g, w in zip(got, sampled):
            self.assertAlmostEqual(g["score"], w["score"], delta=1e-4)
        r = run("predict", "--checkpoint", ckpt, "--input", "1", "--json", "--method", "nucleus")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--method: 'nucleus'; one of greedy, beam, sample", r.stderr)
        r = run("predict", "--coordinator", c.address, "--checkpoint", ckpt, "--input", "1", "--json", "--top-k", "5")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("temperature, top_k, top_p and seed only apply with method: SAMPLE", r.stderr)
        r = run("score", "--checkpoint", ckpt, "--input", "1", "--target", "one", "--method", "beam")
        self.assertEqual(r.returncode, 2, r.stderr)  # scoring does not decode
        r = run("predict", "--coordinator", c.address, "--workers", "3", "--checkpoint", ckpt, "--input", "1",
                *lengths)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("batch_size: 8 is not a multiple of num_workers 3", r.stderr)
        r = run("predict", "--coordinator", c.address, "--checkpoint", "/nonexistent/checkpoint_1", "--input", "1",
                "--json")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("opening the session: worker", r.stderr)
        # The sessions were closed: both workers take a job again.
        again = c.submit(self.spec, "output_dir=after-sessions", "total_steps=2")
        self.assertEqual(c.wait_state(again, ["SUCCEEDED", "FAILED"], 120)["state"], "SUCCEEDED")
        r = run("score", "--checkpoint", ckpt, "--input", "12")
        self.assertEqual(r.returncode, 2)
        self.assertIn("each --input needs a --target", r.stderr)
        with open(examples, "a") as f:
            f.write("not json\n")
        r = run("evaluate", "--checkpoint", ckpt, "--examples", examples)
        self.assertEqual(r.returncode, 2)
        self.assertIn(f"{examples}:25: not a JSON object", r.stderr)

    def test_a_restarted_coordinator_adopts_the_running_job(self):
        c = self.start(2)
        job = c.submit(self.spec, "output_dir=survive", "total_steps=40", "summary_period=5",
                       "checkpoint_period=10")
        c.wait_state(job, ["RUNNING"], 60)
        wait_for(lambda: c.status(job)["latest_checkpoint"].endswith("checkpoint_10"), 60, "checkpoint_10")
        c.restart_coordinator()  # SIGTERM: the old one leaves the ranks running
        # The workers learn the coordinator forgot them, register again
        # holding the job, and the new coordinator takes it over where they
        # are: no restart, nothing restored.
        s = c.wait_state(job, ["SUCCEEDED", "FAILED", "RESTARTING"], 120)
        self.assertEqual((s["state"], s["step"], s["restarts"]), ("SUCCEEDED", 40, 0), s["reason"])
        with open(c.coordinator.log) as f:
            self.assertIn(f"job {job}: adopted at step ", f.read())
        self.assertTrue(os.path.isdir(os.path.join(self.root, "survive", "checkpoint_40")))
        self.assertNotIn("restored", c.logs("worker-"))

    def test_bad_spec_is_refused_with_the_field(self):
        c = self.start(0)
        r = c.cli("submit", self.spec, "--set", "batch_size=-4", check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("batch_size", r.stderr)
        r = c.cli("status", "nope", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no job 'nope'", r.stderr)
        r = subprocess.run([system_harness.TRAINYARD, "status", "--coordinator", "127.0.0.1:1", "x"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1)
        self.assertIn("coordinator 127.0.0.1:1 unreachable", r.stderr)

    def test_python_client_example(self):
        c = self.start(1)
        client = os.path.join("examples", "python_client.py")
        r = subprocess.run([sys.executable, client, "--coordinator", c.address, "--proto-root", ".", self.spec,
                            "--set", "num_workers=1", "--set", "output_dir=py", "--predict", "12", "--predict", "40"],
                           capture_output=True, text=True, timeout=180)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(lines[0], "sys-1")
        self.assertIn("state RUNNING", lines)
        self.assertIn("step 20/20", " ".join(lines))
        self.assertEqual([x.split(" -> ")[0] for x in lines if x.startswith("predict ")], ["predict 12", "predict 40"])
        self.assertEqual(lines[-1], f"final SUCCEEDED step 20 checkpoint {os.path.join(self.root, 'py', 'checkpoint_20')}")


class LocalModeTest(unittest.TestCase):
    """`trainyard local`: the whole system as child processes of one command."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="local-", dir=os.environ.get("TEST_TMPDIR"))
        self.spec = os.path.join(self.root, "job.textproto")
        with open(self.spec, "w") as f:
            f.write(SPEC)

    @staticmethod
    def processes_mentioning(text):
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
        return found

    def test_local_runs_a_job_and_leaves_nothing_behind(self):
        state = os.path.join(self.root, "state")
        r = subprocess.run([system_harness.TRAINYARD, "local", "--workers", "2", self.spec, "--state-dir", state,
                            "--set", f"output_dir={self.root}/out"], capture_output=True, text=True, timeout=300,
                           cwd=self.root)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("with 2 worker(s); logs in " + state, r.stdout)
        self.assertIn("job sys-1: SUCCEEDED, step 20/20", r.stdout)
        self.assertIn("jobs.db", os.listdir(state))
        for log in ("coordinator.log", "worker-0.log", "worker-1.log"):
            self.assertTrue(os.path.getsize(os.path.join(state, log)) > 0, log)
        self.assertEqual(self.processes_mentioning(state), [])

    def test_ctrl_c_cancels_the_job_and_stops_every_process(self):
        state = os.path.join(self.root, "state")
        proc = subprocess.Popen([system_harness.TRAINYARD, "local", "--workers", "2", self.spec, "--state-dir", state,
                                 "--set", f"output_dir={self.root}/out", "--set", "total_steps=100000", "--set",
                                 "summary_period=5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=self.root)
        try:
            address = proc.stdout.readline().split()[1]  # "coordinator HOST:PORT with ..."
            for line in proc.stdout:
                if "] 5/100000" in line or "] 10/100000" in line:
                    break
            children = self.processes_mentioning(state) + self.processes_mentioning(address)
            self.assertGreaterEqual(len(children), 3)  # the coordinator and two workers
            start = time.monotonic()
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
            print(f"trainyard local stopped {time.monotonic() - start:.1f} s after SIGINT")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertEqual(proc.returncode, 1)
        self.assertIn("interrupted: cancelling sys-1", err)
        self.assertIn("CANCELLED", out)
        for pid in children:
            self.assertFalse(os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z",
                             f"process {pid} survived")


class ReproducibleTest(unittest.TestCase):
    """data_parallel.reproducible with real processes: `trainyard local`
    on one worker and on two (Gloo over loopback), and on two with
    sharding PARAMETERS, ends with the same bytes of parameters and
    optimizer state, and logs the same train metrics; without it, one and
    two workers end in different bytes."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="repro-", dir=os.environ.get("TEST_TMPDIR"))
        self.spec = os.path.join(self.root, "job.textproto")
        with open(self.spec, "w") as f:
            f.write(SPEC)

    def run_local(self, name, workers, reproducible, sharding="NONE"):
        # 2-row microbatches on any number of workers; dropout drawn from
        # the global microbatch; 10 steps, one summary at the end.
        state = os.path.join(self.root, f"state-{name}")
        sets = [f"output_dir={self.root}/{name}", f"num_workers={workers}", f"num_microbatches={4 // workers}",
                "total_steps=10", "summary_period=10", "eval_period=0", "checkpoint_period=10",
                "model.dropout_rate=0.1", f"data_parallel.reproducible={str(reproducible).lower()}",
                f"data_parallel.sharding={sharding}"]
        cmd = [system_harness.TRAINYARD, "local", "--workers", str(workers), self.spec, "--state-dir", state]
        for x in sets:
            cmd += ["--set", x]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=self.root)
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        self.assertIn("SUCCEEDED, step 10/10", r.stdout)
        checkpoint = os.path.join(self.root, name, "checkpoint_10")
        # Every tensor of the parameters and the optimizer state, whole or
        # from the shards' files (sharding writes each rank's parameters).
        tensors = {}
        for path in sorted(glob.glob(os.path.join(checkpoint, "params*.safetensors")) +
                           glob.glob(os.path.join(checkpoint, "optimizer*.safetensors"))):
            kind = os.path.basename(path).split("-")[0].split(".")[0]
            for key, value in load_file(path).items():
                self.assertNotIn((kind, key), tensors, path)
                tensors[(kind, key)] = (value.dtype.str, value.shape, value.tobytes())
        self.assertGreater(len(tensors), 10, os.listdir(checkpoint))
        state_bytes = tensors
        # Rank 0's log (whichever worker holds rank 0) has the summary.
        lines = [x for log in sorted(glob.glob(os.path.join(state, "worker-*.log")))
                 for x in open(log) if "train step 10:" in x]
        self.assertEqual(len(lines), 1, lines)
        line = lines[0]
        # Everything but the timings (and the per-rank throughput).
        metrics = {k: v for k, v in re.findall(r"(\S+)=(\S+)", line.split("train step 10:")[1])
                   if not k.startswith("timing/")}
        return state_bytes, metrics

    def test_one_and_two_workers_end_with_the_same_bytes(self):
        one, one_metrics = self.run_local("w1", 1, True)
        two, two_metrics = self.run_local("w2", 2, True)
        self.assertTrue(one == two, "the parameters or optimizer state differ between 1 and 2 workers")
        self.assertIn("cross_ent_loss", one_metrics)
        self.assertEqual(one_metrics, two_metrics)
        sharded, sharded_metrics = self.run_local("w2-parameters", 2, True, "PARAMETERS")
        self.assertTrue(one == sharded, "2 workers with sharding PARAMETERS differ from 1 worker")
        self.assertEqual(one_metrics, sharded_metrics)
        # The control: the float all-reduce, on the same two sizes.
        float_one, _ = self.run_local("w1-float", 1, False)
        float_two, _ = self.run_local("w2-float", 2, False)
        self.assertFalse(float_one == float_two, "without reproducible, 2 workers add in another order than 1")


class SecurityTest(unittest.TestCase):
    """TLS, mutual TLS between coordinator and workers, bearer tokens, and
    the listen policy, with real processes and a throwaway CA."""

    TOKEN = "alice-0123456789abcdef"

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="sec-", dir=os.environ.get("TEST_TMPDIR"))
        self.spec = os.path.join(self.root, "job.textproto")
        with open(self.spec, "w") as f:
            f.write(SPEC)
        self.certs = dev_certs(os.path.join(self.root, "certs"))
        self.other = dev_certs(os.path.join(self.root, "other-ca"))  # a CA nobody trusts
        self.tokens = os.path.join(self.root, "tokens")
        with open(self.tokens, "w") as f:
            f.write(f"# name token\nalice {self.TOKEN}\n")
        self.cluster = None

    def tearDown(self):
        if self.cluster:
            self.cluster.stop()

    def ca(self, certs=None):
        return os.path.join(certs or self.certs, "ca.pem")

    def test_mutual_tls_and_tokens(self):
        c = self.cluster = Cluster(self.root, coordinator_extra=(*tls_flags(self.certs), "--auth-tokens", self.tokens),
                                   env={"TRAINYARD_TLS_CA": self.ca(), "TRAINYARD_TOKEN": self.TOKEN})
        c.add_worker(extra=("--threads", "1", *tls_flags(self.certs)))
        # A job end to end: the worker registered over mutual TLS, the CLI
        # over TLS with its token.
        job = c.submit(self.spec, "output_dir=tls", "total_steps=4", "num_workers=1")
        s = c.wait_state(job, ["SUCCEEDED", "FAILED"], 120)
        self.assertEqual(s["state"], "SUCCEEDED", s["reason"])

        # The Python client over TLS with the token (and refused without).
        client = [sys.executable, os.path.join("examples", "python_client.py"), "--coordinator", c.address,
                  "--proto-root", ".", self.spec, "--set", "num_workers=1", "--set", "output_dir=py",
                  "--set", "total_steps=2"]
        r = subprocess.run(client, capture_output=True, text=True, timeout=180, env=c.env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("final SUCCEEDED step 2", r.stdout)
        r = subprocess.run(client, capture_output=True, text=True, timeout=180,
                           env=dict(os.environ, TRAINYARD_TLS_CA=self.ca()))
        self.assertEqual(r.returncode, 1)
        self.assertIn("UNAUTHENTICATED: no bearer token", r.stderr)

        def cli(env, *args):
            return subprocess.run([system_harness.TRAINYARD, "list", "--coordinator", c.address, *args],
                                  capture_output=True, text=True, timeout=60, env=dict(os.environ, **env))
        r = cli({"TRAINYARD_TLS_CA": self.ca()})
        self.assertEqual(r.returncode, 1)
        self.assertIn("no bearer token: set TRAINYARD_TOKEN", r.stderr)
        r = cli({"TRAINYARD_TLS_CA": self.ca(), "TRAINYARD_TOKEN": "mallory-0123456789abcdef"})
        self.assertEqual(r.returncode, 1)
        self.assertIn("unknown bearer token", r.stderr)
        r = cli({"TRAINYARD_TLS_CA": self.ca(self.other), "TRAINYARD_TOKEN": self.TOKEN})  # the wrong CA
        self.assertEqual(r.returncode, 1)
        self.assertIn("unreachable", r.stderr)
        self.assertIn("is TRAINYARD_TLS_CA the CA that signed its certificate", r.stderr)
        r = cli({"TRAINYARD_TOKEN": self.TOKEN})  # plaintext to a TLS port
        self.assertEqual(r.returncode, 1)
        self.assertIn("if it uses TLS, set TRAINYARD_TLS_CA", r.stderr)
        r = cli({"TRAINYARD_TLS_CA": self.ca(), "TRAINYARD_TOKEN": self.TOKEN})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(job, r.stdout)

        import grpc
        read = lambda path: pathlib.Path(path).read_bytes()
        ca = read(self.ca())

        def call(target, method, cert_dir=None, ca_pem=ca):
            key = cert = None
            if cert_dir:
                key = read(os.path.join(cert_dir, "node.key"))
                cert = read(os.path.join(cert_dir, "node.pem"))
            creds = grpc.ssl_channel_credentials(root_certificates=ca_pem, private_key=key, certificate_chain=cert)
            with grpc.secure_channel(target, creds) as channel:
                rpc = channel.unary_unary(method, request_serializer=lambda m: m, response_deserializer=lambda m: m)
                try:
                    rpc(b"", timeout=10)
                    return grpc.StatusCode.OK
                except grpc.RpcError as e:
                    return e.code()
        # The workers' service on the coordinator wants a worker's
        # certificate: TLS alone (a user) is not enough.
        self.assertEqual(call(c.address, "/trainyard.CoordinatorService/Heartbeat"),
                         grpc.StatusCode.UNAUTHENTICATED)
        self.assertEqual(call(c.address, "/trainyard.CoordinatorService/Heartbeat", self.certs), grpc.StatusCode.OK)
        # A certificate from another CA is refused in the handshake.
        self.assertEqual(call(c.address, "/trainyard.CoordinatorService/Heartbeat", self.other),
                         grpc.StatusCode.UNAVAILABLE)
        # A worker's port takes the coordinator's certificate only.
        worker = c.status(job)["ranks"][0]["address"]
        self.assertEqual(call(worker, "/trainyard.WorkerService/AbortJob"), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(call(worker, "/trainyard.WorkerService/AbortJob", self.other), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(call(worker, "/trainyard.WorkerService/AbortJob", self.certs), grpc.StatusCode.OK)
        # A worker with a certificate from another CA never registers.
        stranger = c.add_worker(extra=("--threads", "1", *tls_flags(self.other)))
        time.sleep(3)
        self.assertNotIn("registered with the coordinator", Cluster.log(stranger))

    def test_plaintext_beyond_loopback_needs_insecure(self):
        state = os.path.join(self.root, "state")
        r = subprocess.run([system_harness.TRAINYARD, "coordinator", "--listen", "0.0.0.0:0", "--state-dir", state],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--listen: '0.0.0.0:0' is reachable beyond this machine and TLS is off", r.stderr)
        r = subprocess.run([system_harness.TRAINYARD, "worker", "--coordinator", "127.0.0.1:1", "--listen",
                            "0.0.0.0:0"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("TLS is off", r.stderr)
        r = subprocess.run([system_harness.TRAINYARD, "coordinator", "--listen", "127.0.0.1:0", "--state-dir", state,
                            "--auth-tokens", os.path.join(self.root, "missing")],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--auth-tokens: cannot read", r.stderr)
        # With --insecure it serves (and stops on SIGTERM).
        self.cluster = Cluster(self.root, listen="0.0.0.0:0", coordinator_extra=("--insecure",))
        self.assertEqual(self.cluster.cli("list").returncode, 0)

    def test_submit_rate_limit(self):
        c = self.cluster = Cluster(self.root, coordinator_extra=("--submit-rate", "1"))
        codes = [c.cli("submit", self.spec, "--set", f"output_dir=r{i}", check=False) for i in range(4)]
        # A burst of 2, then one a second: the 3rd and 4th in quick
        # succession are refused, saying when to retry.
        self.assertEqual([r.returncode for r in codes[:2]], [0, 0], [r.stderr for r in codes])
        refused = [r for r in codes[2:] if r.returncode != 0]
        self.assertTrue(refused, [r.stderr for r in codes])
        self.assertIn("submit rate limit (1 per second) reached", refused[0].stderr)
        self.assertIn("retry in", refused[0].stderr)


class ObservabilityTest(unittest.TestCase):
    """/metrics on the coordinator and a worker, read with the Prometheus
    client library's own parser, moving as a job runs."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="obs-", dir=os.environ.get("TEST_TMPDIR"))
        self.spec = os.path.join(self.root, "job.textproto")
        with open(self.spec, "w") as f:
            f.write(SPEC)
        self.cluster = None

    def tearDown(self):
        if self.cluster:
            self.cluster.stop()

    def test_metrics_parse_and_move_as_a_job_runs(self):
        c = self.cluster = Cluster(self.root, coordinator_extra=("--metrics-listen", "127.0.0.1:0"))
        worker = c.add_worker(extra=("--threads", "1", "--metrics-listen", "127.0.0.1:0"))
        coordinator = c.coordinator.metrics
        self.assertEqual(scrape(coordinator, "/healthz"), (200, "ok\n"))
        self.assertEqual(scrape(worker.metrics, "/healthz"), (200, "ok\n"))
        self.assertEqual(scrape(coordinator, "/nothing")[0], 404)
        wait_for(lambda: samples(scrape(coordinator)[1]).get(("trainyard_workers", frozenset({("state", "IDLE")}))) == 1,
                 30, "the worker to be IDLE")
        before = samples(scrape(coordinator)[1])
        self.assertEqual(before[("trainyard_jobs_submitted_total", frozenset())], 0)
        self.assertEqual(before[("trainyard_jobs", frozenset({("state", "SUCCEEDED")}))], 0)

        job = c.submit(self.spec, "output_dir=observed", "num_workers=1", "total_steps=8", "summary_period=4",
                       "checkpoint_period=4")
        self.assertEqual(c.wait_state(job, ["SUCCEEDED", "FAILED"], 120)["state"], "SUCCEEDED")
        after = samples(scrape(coordinator)[1])
        self.assertEqual(after[("trainyard_jobs_submitted_total", frozenset())], 1)
        self.assertEqual(after[("trainyard_jobs_finished_total", frozenset({("state", "SUCCEEDED")}))], 1)
        self.assertEqual(after[("trainyard_jobs", frozenset({("state", "SUCCEEDED")}))], 1)
        self.assertEqual(after[("trainyard_scheduling_delay_seconds_count", frozenset())], 1)
        self.assertGreater(after[("trainyard_scheduler_tick_seconds_count", frozenset())],
                           before[("trainyard_scheduler_tick_seconds_count", frozenset())])
        submit = frozenset({("method", "JobService/SubmitJob"), ("code", "OK")})
        self.assertEqual(after[("trainyard_rpc_requests_total", submit)], 1)
        heartbeat = ("trainyard_rpc_requests_total",
                     frozenset({("method", "CoordinatorService/Heartbeat"), ("code", "OK")}))
        wait_for(lambda: samples(scrape(coordinator)[1]).get(heartbeat, 0) > 0, 30, "a heartbeat to be counted")
        self.assertEqual(after[("trainyard_rpc_duration_seconds_count",
                                frozenset({("method", "JobService/SubmitJob")}))], 1)
        # A refused call is counted under its code.
        c.cli("status", "no-such-job", check=False)
        self.assertEqual(samples(scrape(coordinator)[1])[
            ("trainyard_rpc_requests_total", frozenset({("method", "JobService/GetJob"), ("code", "NOT_FOUND")}))], 1)

        w = samples(scrape(worker.metrics)[1])
        self.assertEqual(w[("trainyard_worker_steps_total", frozenset())], 8)
        self.assertEqual(w[("trainyard_worker_step_seconds_count", frozenset())], 2)  # two chunks of 4
        self.assertGreater(w[("trainyard_worker_step_seconds_sum", frozenset())], 0)
        self.assertGreater(w[("trainyard_worker_tokens_per_second", frozenset())], 0)
        self.assertEqual(w[("trainyard_worker_allreduce_seconds_count", frozenset())], 2)
        self.assertGreaterEqual(w[("trainyard_worker_checkpoint_seconds_count", frozenset())], 1)
        self.assertGreater(w[("trainyard_rpc_requests_total",
                              frozenset({("method", "WorkerService/RunSteps"), ("code", "OK")}))], 0)


class SeparateHostsTest(unittest.TestCase):
    """Workers in their own network namespaces: separate hosts to the
    coordinator and to each other, whose links can be cut."""

    def setUp(self):
        reason = netns_unavailable()
        if reason:
            self.skipTest(f"network namespaces unavailable here ({reason}): separate hosts need "
                          "root and `ip netns`")
        self.root = tempfile.mkdtemp(prefix="hosts-", dir=os.environ.get("TEST_TMPDIR"))
        self.spec = os.path.join(self.root, "job.textproto")
        with open(self.spec, "w") as f:
            f.write(SPEC)
        self.hosts = Hosts(2)
        self.cluster = None

    def tearDown(self):
        try:
            if self.cluster:
                self.cluster.stop()
        finally:
            self.hosts.remove()

    def start(self, heartbeat_timeout, tls=False):
        """Plaintext beyond loopback needs --insecure; with `tls`, every
        process has a certificate from a throwaway CA naming its address, and
        coordinator and workers authenticate each other (mutual TLS)."""
        security, env = ("--insecure",), None
        if tls:
            certs = dev_certs(os.path.join(self.root, "certs"), f"{self.hosts.subnet}.1", *self.hosts.addresses)
            security = tls_flags(certs)
            env = {"TRAINYARD_TLS_CA": os.path.join(certs, "ca.pem")}
        self.cluster = Cluster(self.root, heartbeat_timeout=heartbeat_timeout,
                               listen=f"{self.hosts.subnet}.1:0", coordinator_extra=security, env=env)
        for i in range(2):
            self.cluster.add_worker(listen=f"{self.hosts.addresses[i]}:0", prefix=self.hosts.prefix(i),
                                    extra=("--collective-timeout", "8", *security))
        return self.cluster

    def test_workers_on_separate_hosts_train(self):
        c = self.start(heartbeat_timeout=10, tls=True)
        job = c.submit(self.spec, "output_dir=hosts")
        s = c.wait_state(job, ["SUCCEEDED", "FAILED"], 120)
        self.assertEqual(s["state"], "SUCCEEDED", s["reason"])
        self.assertEqual(sorted(r["address"].rsplit(":", 1)[0] for r in s["ranks"]), self.hosts.addresses)

    def test_cut_link_fails_the_job_then_the_host_rejoins(self):
        c = self.start(heartbeat_timeout=3)
        job = c.submit(self.spec, "output_dir=cut", "total_steps=100000", "summary_period=5")
        c.wait_state(job, ["RUNNING"], 60)
        wait_for(lambda: c.status(job)["step"] > 0, 60, "progress")
        ranks = c.status(job)["ranks"]
        victim = next(r["rank"] for r in ranks if r["address"].startswith(self.hosts.addresses[1] + ":"))
        start = time.monotonic()
        self.hosts.cut(1)
        s = c.wait_state(job, ["RESTARTING"], 30)
        print(f"attempt failed {time.monotonic() - start:.1f} s after the link was cut: {s['reason']}")
        self.assertIn(f"rank {victim} (worker ", s["reason"])
        self.assertIn("stopped heartbeating", s["reason"])
        self.assertIn("restart 1 of 3", s["reason"])
        # The link comes back: the cut-off worker registers again once its
        # collective has timed out and it has let go of the job, and the job
        # resumes on both workers.
        self.hosts.cut(1, down=False)
        wait_for(lambda: c.status(job)["state"] == "RUNNING", 60, "the job to run again")
        c.cli("cancel", job)
        c.wait_state(job, ["CANCELLED"], 60)
        nxt = c.submit(self.spec, "output_dir=after")
        s = c.wait_state(nxt, ["SUCCEEDED", "FAILED"], 120)
        self.assertEqual(s["state"], "SUCCEEDED", s["reason"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    args, rest = parser.parse_known_args()
    system_harness.TRAINYARD = os.path.abspath(args.trainyard)
    junit.main([sys.argv[0], *rest])


if __name__ == "__main__":
    main()
