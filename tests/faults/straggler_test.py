"""The straggler view with real processes: one of three workers is slowed
on purpose (SIGSTOP/SIGCONT, 90 ms stopped in every 100 ms). The ranks
stay in lock-step, so their wall times per step are equal; `trainyard
status` must still single out the slow rank by its compute time, and rank
0's summary must name it as the slowest."""
import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import junit  # noqa: E402  (tests/testing: each test a case in $XML_OUTPUT_FILE)
import system_harness  # noqa: E402
from system_harness import SPEC, Cluster, wait_for  # noqa: E402


class Throttle:
    """Keeps a process stopped `stopped` s out of every `period` s until
    stop() (which leaves it running)."""

    def __init__(self, pid, stopped=0.09, period=0.1):
        self.pid, self.stopped, self.period = pid, stopped, period
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            while not self.done.is_set():
                os.kill(self.pid, signal.SIGSTOP)
                time.sleep(self.stopped)
                os.kill(self.pid, signal.SIGCONT)
                time.sleep(self.period - self.stopped)
        except ProcessLookupError:
            pass

    def stop(self):
        self.done.set()
        self.thread.join(timeout=5)
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


class StragglerTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="straggler-", dir=os.environ.get("TEST_TMPDIR"))
        self.spec = os.path.join(self.root, "job.textproto")
        with open(self.spec, "w") as f:
            f.write(SPEC)
        self.cluster = Cluster(self.root)
        for _ in range(3):
            self.cluster.add_worker()
        self.throttle = None

    def tearDown(self):
        if self.throttle is not None:
            self.throttle.stop()
        self.cluster.stop()

    def test_the_slowed_worker_is_the_one_flagged(self):
        c = self.cluster
        job = c.submit(self.spec, "output_dir=slow", "num_workers=3", "batch_size=6", "total_steps=400", "summary_period=4",
                       "eval_period=0", "checkpoint_period=0")
        s = wait_for(lambda: (lambda s: s if s["state"] == "RUNNING" and s["metrics_step"] >= 4 else None)(
            c.status(job)), 120, "the first summary")
        # Rank 1's worker, by its address.
        by_address = {w.listening: w for w in c.workers}
        slow = by_address[s["ranks"][1]["address"]]
        self.throttle = Throttle(slow.pid)
        first = s["metrics_step"]
        # Two whole chunks with the throttle on.
        s = wait_for(lambda: (lambda s: s if s["metrics_step"] >= first + 12 else None)(c.status(job)), 180,
                     "two chunks with rank 1 slowed")
        ranks = s["ranks"]
        compute = [r["last_compute_seconds"] for r in ranks]
        wall = [r["last_step_seconds"] for r in ranks]
        collective = [r["last_collective_seconds"] for r in ranks]
        print(f"wall {wall}\ncompute {compute}\ncollective {collective}")
        # The rule `trainyard status` applies (client/job_format.cc): above
        # 1.25 times the others' median. A fixed larger factor is not
        # promised: on a loaded 2-core machine the others' compute slows
        # too (CI measured 0.16 s against 0.12 s).
        self.assertGreater(compute[1], 1.25 * statistics.median([compute[0], compute[2]]), ranks)
        # Lock-step: the others waited for rank 1.
        for r in (0, 2):
            self.assertGreater(collective[r], collective[1], ranks)
        self.assertEqual([r["straggler"] for r in ranks], [False, True, False], ranks)
        self.assertEqual(s["metrics"]["timing/slowest_compute_rank"], 1.0, s["metrics"])
        human = c.cli("status", job).stdout
        flagged = [line for line in human.splitlines() if "(straggler)" in line]
        self.assertEqual(len(flagged), 1, human)
        self.assertTrue(flagged[0].split()[0] == "1", human)
        self.throttle.stop()
        self.throttle = None
        c.cli("cancel", job)
        self.assertEqual(c.wait_state(job, ["CANCELLED"], 60)["state"], "CANCELLED")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    args, rest = parser.parse_known_args()
    system_harness.TRAINYARD = os.path.abspath(args.trainyard)
    junit.main([sys.argv[0], *rest])


if __name__ == "__main__":
    main()
