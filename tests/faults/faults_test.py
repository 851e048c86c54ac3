"""Fault injection: kill workers (SIGKILL, no warning) and the coordinator at
random steps; the job restarts from its newest checkpoint and its final
parameters and optimizer state are bitwise equal to an uninterrupted run's.
Uses the system tests' harness (real processes, loopback)."""
import argparse
import os
import random
import signal
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import junit  # noqa: E402  (tests/testing: each test a case in $XML_OUTPUT_FILE)
import system_harness  # noqa: E402
from system_harness import SPEC, Cluster, assert_same_data, wait_for  # noqa: E402

import numpy as np  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

COMMON = ("total_steps=30", "summary_period=5", "checkpoint_period=10", "model.dropout_rate=0.1")


class FaultsTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="faults-", dir=os.environ.get("TEST_TMPDIR"))
        self.spec = os.path.join(self.root, "job.textproto")
        with open(self.spec, "w") as f:
            f.write(SPEC)
        self.cluster = Cluster(self.root)
        for _ in range(2):
            self.cluster.add_worker()

    def tearDown(self):
        self.cluster.stop()

    def reference(self):
        job = self.cluster.submit(self.spec, "output_dir=reference", *COMMON)
        self.cluster.wait_state(job, ["SUCCEEDED"], 120)
        return os.path.join(self.root, "reference", "checkpoint_30")

    @staticmethod
    def load_state(checkpoint):
        """The parameters and the optimizer state, whether one file each
        (params.safetensors, optimizer.safetensors) or one per rank (a
        sharded job's optimizer-*, and PARAMETERS' params-*)."""
        def union(prefix):
            files = sorted(f for f in os.listdir(checkpoint) if f.startswith(prefix) and f.endswith(".safetensors"))
            tensors = {}
            for f in files:
                part = load_file(os.path.join(checkpoint, f))
                assert not set(part) & set(tensors), f"{checkpoint}/{f}: a tensor in two files"
                tensors.update(part)
            return tensors, files

        optimizer, files = union("optimizer")
        # PARAMETERS: each rank's own parameters in its own file.
        params, param_files = union("params")
        return {"params": params, "optimizer": optimizer, "optimizer files": files, "param files": param_files}

    def assert_same_final_state(self, reference, out, optimizer_files=None, param_files=None):
        a = self.load_state(reference)
        b = self.load_state(os.path.join(self.root, out, "checkpoint_30"))
        if optimizer_files is not None:
            self.assertEqual(b["optimizer files"], optimizer_files)
        if param_files is not None:
            self.assertEqual(b["param files"], param_files)
        for name in ("params", "optimizer"):
            self.assertEqual(sorted(a[name]), sorted(b[name]))
            for k in a[name]:
                self.assertTrue(np.array_equal(a[name][k], b[name][k]), f"{out}: {name}: {k} differs")
        assert_same_data(self, os.path.dirname(reference), os.path.join(self.root, out), 30)

    def test_sigkill_a_random_worker_at_a_random_step(self):
        c = self.cluster
        reference = self.reference()
        for seed in range(5):
            rng = random.Random(seed)
            kill_at = rng.randint(2, 27)
            victim_index = rng.randrange(len(c.workers))
            out = f"killed-{seed}"
            job = c.submit(self.spec, f"output_dir={out}", *COMMON)
            wait_for(lambda: c.status(job)["step"] >= kill_at or c.status(job)["state"] == "SUCCEEDED", 60,
                     f"step {kill_at}")
            victim = c.workers[victim_index]
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=10)
            c.workers.pop(victim_index)
            c.add_worker()  # a replacement joins the pool
            s = c.wait_state(job, ["SUCCEEDED", "FAILED"], 120)
            print(f"seed {seed}: SIGKILL worker {victim_index} at step >= {kill_at}: {s['state']}, "
                  f"restarts {s['restarts']}")
            self.assertEqual(s["state"], "SUCCEEDED", s["reason"])
            self.assertLessEqual(s["restarts"], 1)
            self.assert_same_final_state(reference, out)

    def test_a_sharded_job_preempted_then_killed_ends_as_the_unsharded_one(self):
        """data_parallel.sharding OPTIMIZER: SIGTERM to a worker (the
        emergency checkpoint holds each rank's shard, written by it), then
        SIGKILL to another after the resume; the job ends bit for bit where
        the unsharded reference does."""
        self.preempt_then_kill_sharded("OPTIMIZER", self.reference())

    def test_a_job_with_sharded_gradients_preempted_then_killed_ends_as_the_unsharded_one(self):
        """The same with data_parallel.sharding GRADIENTS (one microbatch,
        two ranks: NONE's sums, so bit for bit too)."""
        self.preempt_then_kill_sharded("GRADIENTS", self.reference())

    def test_a_job_with_sharded_parameters_preempted_then_killed_ends_as_the_unsharded_one(self):
        """The same with data_parallel.sharding PARAMETERS: each rank holds
        only its own parameters between steps and writes them into the
        checkpoints itself (GRADIENTS' arithmetic: bit for bit)."""
        self.preempt_then_kill_sharded("PARAMETERS", self.reference())

    def preempt_then_kill_sharded(self, mode, reference):
        c = self.cluster
        out = f"sharded-{mode}"
        job = c.submit(self.spec, f"output_dir={out}", f"data_parallel.sharding={mode}", *COMMON)
        wait_for(lambda: c.status(job)["step"] >= 7, 60, "step 7")
        victim = c.workers[1]
        victim.send_signal(signal.SIGTERM)
        s = c.wait_state(job, ["RESTARTING"], 30)
        self.assertIn("was asked to stop; emergency checkpoint at step", s["reason"])
        self.assertEqual(victim.wait(timeout=30), 0)
        c.workers.pop(1)
        c.add_worker()
        wait_for(lambda: c.status(job)["step"] >= 17 or c.status(job)["state"] == "SUCCEEDED", 60, "step 17")
        victim = c.workers[0]
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        c.workers.pop(0)
        c.add_worker()
        s = c.wait_state(job, ["SUCCEEDED", "FAILED"], 120)
        print(f"sharded {mode}: preempted, then a worker killed: {s['state']}, restarts {s['restarts']}")
        self.assertEqual(s["state"], "SUCCEEDED", s["reason"])
        self.assertGreaterEqual(s["restarts"], 1)
        # Each rank wrote its own shard of the optimizer state (and with
        # PARAMETERS of the parameters).
        params = (["params-00000-of-00002.safetensors", "params-00001-of-00002.safetensors"]
                  if mode == "PARAMETERS" else ["params.safetensors"])
        self.assert_same_final_state(reference, out, ["optimizer-00000-of-00002.safetensors",
                                                      "optimizer-00001-of-00002.safetensors"], params)

    def test_a_hybrid_sharded_job_killed_resumes_bit_for_bit(self):
        """HSDP: sharding PARAMETERS within groups of 2 of 4 workers (each
        group's ranks make their own Gloo groups, and each shard's replica
        set one more). A worker SIGKILLed after the first checkpoint: the
        job restarts from the checkpoint the first group wrote (2 shards)
        and ends bit for bit where the uninterrupted HSDP run does, on the
        same examples at every step."""
        c = self.cluster
        for _ in range(2):
            c.add_worker()
        hybrid = ("num_workers=4", "data_parallel.sharding=PARAMETERS", "data_parallel.shard_group_size=2")
        ref = c.submit(self.spec, "output_dir=hsdp-reference", *hybrid, *COMMON)
        s = c.wait_state(ref, ["SUCCEEDED", "FAILED"], 180)
        self.assertEqual(s["state"], "SUCCEEDED", s["reason"])
        job = c.submit(self.spec, "output_dir=hsdp", *hybrid, *COMMON)
        wait_for(lambda: c.status(job)["step"] >= 12, 120, "step 12")
        victim = c.workers.pop(3)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        c.add_worker()
        s = c.wait_state(job, ["SUCCEEDED", "FAILED"], 180)
        print(f"HSDP: a worker killed: {s['state']}, restarts {s['restarts']}")
        self.assertEqual(s["state"], "SUCCEEDED", s["reason"])
        self.assertGreaterEqual(s["restarts"], 1)
        self.assert_same_final_state(os.path.join(self.root, "hsdp-reference", "checkpoint_30"), "hsdp",
                                     ["optimizer-00000-of-00002.safetensors", "optimizer-00001-of-00002.safetensors"],
                                     ["params-00000-of-00002.safetensors", "params-00001-of-00002.safetensors"])

    def test_sigkill_the_coordinator_and_restart_it(self):
        """The workers keep the job through the outage; the new coordinator
        adopts them where they are: no restart, no step lost, and the end
        bit for bit the uninterrupted run's."""
        c = self.cluster
        reference = self.reference()
        job = c.submit(self.spec, "output_dir=coordinator-killed", *COMMON)
        step = wait_for(lambda: c.status(job)["step"] >= 14 and c.status(job)["step"], 60, "step 14")
        c.coordinator.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        c.coordinator.wait(timeout=10)
        c.coordinator = c._start("coordinator-2", [
            system_harness.TRAINYARD, "coordinator", "--listen", c.address, "--state-dir",
            os.path.join(self.root, "state"), "--output-root", self.root])
        wait_for(lambda: f"job {job}: adopted at step" in c.logs("coordinator-2"), 60, "the adoption")
        adopted_after = time.monotonic() - killed_at
        s = c.wait_state(job, ["SUCCEEDED", "FAILED", "RESTARTING"], 120)
        self.assertEqual((s["state"], s["restarts"]), ("SUCCEEDED", 0), s["reason"])
        log = c.logs("coordinator-2")
        adopted = [line for line in log.splitlines() if f"job {job}: adopted at step" in line]
        self.assertEqual(len(adopted), 1, log)
        # Nothing ran from a checkpoint again: one attempt, started once.
        self.assertNotIn("restored", c.logs("worker-"))
        g = s["goodput"]
        print(f"coordinator SIGKILL at step {step}: {adopted[0].split('] ', 2)[-1]}; adopted {adopted_after:.2f} s "
              f"after the kill; goodput {g['ratio']:.2f} (recovery {g['recovery_seconds']:.2f} s of "
              f"{g['wall_seconds']:.2f} s)")
        self.assert_same_final_state(reference, "coordinator-killed")

    def test_restarts_stop_at_max_restarts(self):
        c = self.cluster
        job = c.submit(self.spec, "output_dir=doomed", "total_steps=100000", "summary_period=5", "max_restarts=1")
        for attempt in range(2):
            wait_for(lambda: c.status(job)["state"] == "RUNNING" and c.status(job)["restarts"] == attempt, 60,
                     f"attempt {attempt} to run")
            victim = c.workers.pop(1)
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=10)
            c.add_worker()
        s = c.wait_state(job, ["FAILED"], 60)
        self.assertEqual(s["restarts"], 1)
        self.assertIn("(no restarts left: max_restarts 1)", s["reason"])


class HeldSaveTest(unittest.TestCase):
    """Two workers; the first to register takes rank 0 (the only writer) and
    its background writer holds inside its HOLD_SAVE-th save, after the
    metadata file and before the manifest (TRAINYARD_FAULT_HOLD_AT)."""
    HOLD_SAVE = None

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="faults-held-", dir=os.environ.get("TEST_TMPDIR"))
        self.spec = os.path.join(self.root, "job.textproto")
        with open(self.spec, "w") as f:
            f.write(SPEC)
        self.cluster = Cluster(self.root)
        self.cluster.add_worker(
            prefix=("env", f"TRAINYARD_FAULT_HOLD_AT=checkpoint: metadata written#{self.HOLD_SAVE}"))
        self.cluster.add_worker()

    def tearDown(self):
        self.cluster.stop()

    def start_and_hold(self, out):
        """Submits the job; returns once rank 0 holds inside its save."""
        job = self.cluster.submit(self.spec, f"output_dir={out}", *COMMON)
        wait_for(lambda: "fault hold: checkpoint: metadata written" in Cluster.log(self.cluster.workers[0]), 60,
                 f"rank 0 to stop inside the save of checkpoint_{10 * self.HOLD_SAVE}")
        return job

    def kill_the_holder(self):
        c = self.cluster
        holder = c.workers.pop(0)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        c.add_worker()

    def worker_logs(self):
        return self.cluster.logs("worker-")

    def assert_equal_to_an_uninterrupted_run(self, out):
        """The reference runs on the two workers that never held."""
        c = self.cluster
        ref = c.submit(self.spec, "output_dir=reference", *COMMON)
        self.assertEqual(c.wait_state(ref, ["SUCCEEDED", "FAILED"], 120)["state"], "SUCCEEDED")
        for name in ("params.safetensors", "optimizer.safetensors"):
            a = load_file(os.path.join(self.root, "reference", "checkpoint_30", name))
            b = load_file(os.path.join(out, "checkpoint_30", name))
            self.assertEqual(sorted(a), sorted(b))
            for k in a:
                self.assertTrue(np.array_equal(a[k], b[k]), f"{name}: {k} differs")


class KillDuringAsyncSaveTest(HeldSaveTest):
    """(d): rank 0 is SIGKILLed while its background thread writes
    checkpoint_20; the job restarts from the previous checkpoint, the
    half-written directory is never read and is removed, and the final state
    equals an uninterrupted run's."""
    HOLD_SAVE = 2

    def test_sigkill_during_an_async_save_restores_the_previous_checkpoint(self):
        c = self.cluster
        out = os.path.join(self.root, "killed-saving")
        job = self.start_and_hold("killed-saving")
        leftovers = [n for n in os.listdir(out) if n.startswith("checkpoint_20.tmp-")]
        self.assertEqual(len(leftovers), 1, os.listdir(out))
        self.assertIn("metadata.json", os.listdir(os.path.join(out, leftovers[0])))
        self.assertNotIn("MANIFEST.json", os.listdir(os.path.join(out, leftovers[0])))
        self.kill_the_holder()
        s = c.wait_state(job, ["SUCCEEDED", "FAILED"], 120)
        self.assertEqual((s["state"], s["restarts"]), ("SUCCEEDED", 1), s["reason"])
        logs = self.worker_logs()
        self.assertIn(f"restored {out}/checkpoint_10 (step 10)", logs)
        self.assertIn(f"removed {out}/{leftovers[0]}, left by a save that did not finish", logs)
        self.assertEqual(sorted(n for n in os.listdir(out) if n.startswith("checkpoint_")),
                         ["checkpoint_10", "checkpoint_20", "checkpoint_30"])
        self.assert_equal_to_an_uninterrupted_run(out)


class DamagedCheckpointTest(HeldSaveTest):
    """A restart whose newest checkpoint turns out damaged restores the
    newest good one instead of failing: rank 0 is held inside the save of
    checkpoint_30 (so the job is still running with checkpoint_20 recorded
    as its newest), checkpoint_20's parameters are corrupted on disk, and
    rank 0 is SIGKILLed. The restart must pass over checkpoint_20 (moved
    aside, named in the coordinator's log and the job's reason), restore
    checkpoint_10, and end bitwise equal to an uninterrupted run."""
    HOLD_SAVE = 3

    def test_a_damaged_newest_checkpoint_restores_the_one_before(self):
        c = self.cluster
        out = os.path.join(self.root, "damaged")
        job = self.start_and_hold("damaged")
        s = c.status(job)
        self.assertEqual((s["state"], s["latest_checkpoint"]), ("RUNNING", f"{out}/checkpoint_20"), s)
        params = os.path.join(out, "checkpoint_20", "params.safetensors")
        with open(params, "r+b") as f:
            f.seek(300)
            byte = f.read(1)
            f.seek(300)
            f.write(bytes([byte[0] ^ 0xFF]))
        self.kill_the_holder()
        s = c.wait_state(job, ["SUCCEEDED", "FAILED"], 120)
        self.assertEqual((s["state"], s["restarts"]), ("SUCCEEDED", 1), s["reason"])
        logs = self.worker_logs()
        self.assertIn(f"restored {out}/checkpoint_10 (step 10)", logs)
        self.assertIn(f"{out}/checkpoint_20 passed over: {params}: SHA-256 mismatch", logs)
        with open(os.path.join(self.root, "coordinator.log")) as f:
            self.assertIn(f"restored {out}/checkpoint_10; passed over {out}/checkpoint_20 passed over", f.read())
        aside = [n for n in os.listdir(out) if n.startswith("checkpoint_20.damaged-")]
        self.assertEqual(len(aside), 1, os.listdir(out))
        self.assertEqual(sorted(n for n in os.listdir(out) if n.startswith("checkpoint_") and "." not in n),
                         ["checkpoint_10", "checkpoint_20", "checkpoint_30"])
        self.assert_equal_to_an_uninterrupted_run(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    args, rest = parser.parse_known_args()
    system_harness.TRAINYARD = os.path.abspath(args.trainyard)
    junit.main([sys.argv[0], *rest])


if __name__ == "__main__":
    main()
