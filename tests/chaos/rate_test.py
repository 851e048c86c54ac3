"""Goodput under a failure rate: the same job, once with fault_tolerance
ELASTIC and once with RESTART (the default), each through faults that
arrive at random times at a fixed mean rate while it runs, on 4 workers,
each on a host of its own (a network namespace on a bridge).

The faults, drawn by a seeded Poisson process (a mean of one per --mtbf
seconds of the run) and a seeded mix dominated by lost hosts:

  worker_sigkill       (50 %) a worker killed; a replacement starts on its host
  worker_hang          (15 %) a worker stopped (SIGSTOP): found by the
                       watchdog; the stopped process is then killed and
                       replaced, as a hung host is rebooted
  worker_sigterm       (10 %) a worker preempted (emergency checkpoint);
                       replaced once it exits
  link_cut             (15 %) a host's link down until the coordinator has
                       acted on it, then up (the worker registers again)
  coordinator_sigkill  (10 %) the coordinator killed and started again on
                       the same address and state directory

Each run must end SUCCEEDED: RESTART bit for bit equal to an uninterrupted
run (it resumes from checkpoints), ELASTIC within 1e-4 (its ranks sum the
gradients in another order while fewer are left; a batch skipped or seen
twice moves the parameters by 1e-3 and more) for runs of up to 300 steps;
longer ones report its largest difference (rounding grows with the
training's dynamics over thousands of steps). The job's goodput
(`trainyard status --json`: the share of its wall time spent training
steps not trained before, and where the rest went) and the steps lost per
fault are printed as one JSON line per mode (and written to --report).

CI runs a short version (80 steps, a fault every 6 s on average: a rate
no job would survive long, to see every fault kind's path in a short run);
tests/chaos/rate.sh runs the long one (docs/reliability.md has its figures).
"""
import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "testing"))
import junit  # noqa: E402  (tests/testing: each test a case in $XML_OUTPUT_FILE)
import system_harness  # noqa: E402
from system_harness import SPEC, Cluster, Hosts, assert_same_data, netns_unavailable, wait_for  # noqa: E402

import numpy as np  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

HOSTS = 4
HEARTBEAT_TIMEOUT = 3
COLLECTIVE_TIMEOUT = 8
ADOPT_GRACE = 8
MIX = (("worker_sigkill", 0.50), ("worker_hang", 0.15), ("worker_sigterm", 0.10), ("link_cut", 0.15),
       ("coordinator_sigkill", 0.10))
# A global batch of 12 rows splits over 4, 3 and 2 ranks; dropout off (its
# masks depend on the rank), packing off (SPEC).
COMMON = ("num_workers=4", "batch_size=12", "summary_period=10", "checkpoint_period=20", "eval_period=0",
          "max_restarts=1000")
TOLERANCE = 1e-4
# Beyond a few hundred steps the rounding differences of ELASTIC's smaller
# groups grow with the training's own dynamics (measured: 5e-6 at step 500,
# then 0.1 by step 800 in one run with no step skipped or repeated), so a
# longer run reports the difference instead of checking it.
COMPARED_STEPS = 300
CONFIG = {"seed": 1, "steps": 80, "mtbf": 6.0, "report": None}


def schedule(seed, mtbf, horizon):
    """(seconds after the job started, kind, host) for a Poisson process of
    mean interval `mtbf` up to `horizon` seconds; the same for both modes."""
    rng = random.Random(seed)
    kinds, weights = zip(*MIX)
    out, t = [], 0.0
    while True:
        t += rng.expovariate(1.0 / mtbf)
        if t > horizon:
            return out
        out.append((round(t, 2), rng.choices(kinds, weights)[0], rng.randrange(HOSTS)))


def load_state(checkpoint):
    return {name: load_file(os.path.join(checkpoint, f"{name}.safetensors")) for name in ("params", "optimizer")}


class RateTest(unittest.TestCase):
    def setUp(self):
        reason = netns_unavailable()
        if reason:
            self.skipTest(f"network namespaces unavailable here ({reason}): the faults cut links between hosts")
        self.root = tempfile.mkdtemp(prefix="rate-", dir=os.environ.get("TEST_TMPDIR"))
        self.spec = os.path.join(self.root, "job.textproto")
        with open(self.spec, "w") as f:
            f.write(SPEC)
        self.hosts = Hosts(HOSTS)
        self.cluster = None
        self.started = 0

    def tearDown(self):
        try:
            if self.cluster:
                self.cluster.stop()
        finally:
            if self.cluster:
                self.cluster.keep_logs()
            self.hosts.remove()

    # The cluster.

    def start(self):
        self.cluster = Cluster(self.root, heartbeat_timeout=HEARTBEAT_TIMEOUT, listen=f"{self.hosts.subnet}.1:0",
                               coordinator_extra=("--adopt-grace", str(ADOPT_GRACE), "--insecure"))
        self.on_host = [None] * HOSTS
        for host in range(HOSTS):
            self.start_worker(host)

    def start_worker(self, host):
        self.started += 1
        c = self.cluster
        self.on_host[host] = c._start(
            f"worker-{self.started}-host{host}",
            [system_harness.TRAINYARD, "worker", "--coordinator", c.address, "--listen",
             f"{self.hosts.addresses[host]}:0", "--collective-timeout", str(COLLECTIVE_TIMEOUT), "--threads", "1",
             "--insecure"],
            self.hosts.prefix(host))

    def replace(self, host):
        victim = self.on_host[host]
        if victim.poll() is None:
            victim.send_signal(signal.SIGCONT)
            victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        self.start_worker(host)

    # The faults. Each returns once the coordinator has acted on it (or
    # the job ended), leaving the cluster whole again.

    def in_job(self, job, host):
        """Whether the host's worker is a rank of the job's running attempt
        (between attempts the record still names the last one's ranks)."""
        s = self.cluster.status(job)
        address = self.on_host[host].listening
        return s["state"] == "RUNNING" and any(r["address"] == address for r in s["ranks"])

    def acted(self, job, host, before, timeout=60):
        """Until the job's restarts + regroups grew past `before`, or it
        ended; for a worker that holds no rank of a running attempt (idle,
        or the job between attempts), the heartbeat timeout: the coordinator
        drops it from the pool, and a new attempt waits for its
        replacement."""
        if not self.in_job(job, host):
            time.sleep(HEARTBEAT_TIMEOUT + 1)
            return

        def check():
            s = self.cluster.status(job)
            return s["state"] in ("SUCCEEDED", "FAILED") or s["restarts"] + s["regroups"] > before
        wait_for(check, timeout, "the coordinator to act on the fault")

    def worker_sigkill(self, job, host, before):
        self.on_host[host].send_signal(signal.SIGKILL)
        self.replace(host)

    def worker_hang(self, job, host, before):
        self.on_host[host].send_signal(signal.SIGSTOP)
        try:
            self.acted(job, host, before)
        finally:
            self.replace(host)

    def worker_sigterm(self, job, host, before):
        victim = self.on_host[host]
        victim.send_signal(signal.SIGTERM)
        self.assertEqual(victim.wait(timeout=60), 0, f"{victim.name}: its exit status after SIGTERM")
        self.start_worker(host)

    def link_cut(self, job, host, before):
        self.hosts.cut(host)
        try:
            self.acted(job, host, before)
        finally:
            self.hosts.cut(host, down=False)

    def coordinator_sigkill(self, job, host, before):
        self.cluster.restart_coordinator(signal.SIGKILL)

    # A run.

    def run_through(self, mode, plan):
        """The job with fault_tolerance `mode` through `plan`; its final
        status and what was injected."""
        c = self.cluster
        out = f"out-{mode.lower()}"
        job = c.submit(self.spec, f"output_dir={out}", f"total_steps={CONFIG['steps']}",
                       f"fault_tolerance.mode={mode}", *COMMON)
        try:
            c.wait_state(job, ["RUNNING"], 120)
        except AssertionError as e:
            raise AssertionError(f"{e}; {mode}: {c.status(job)}\n{c.coordinator_tail()}\n"
                                 + "\n".join(c.crashed())) from None
        start = time.monotonic()
        injected = []
        for at, kind, host in plan:
            while time.monotonic() - start < at and c.status(job)["state"] not in ("SUCCEEDED", "FAILED"):
                time.sleep(0.2)
            s = c.status(job)
            if s["state"] in ("SUCCEEDED", "FAILED"):
                break
            getattr(self, kind)(job, host, s["restarts"] + s["regroups"])
            injected.append({"at": round(time.monotonic() - start, 1), "kind": kind, "host": host,
                             "step": s["step"]})
        done = c.wait_state(job, ["SUCCEEDED", "FAILED"], 600)
        self.assertEqual(done["state"], "SUCCEEDED", done["reason"])
        return done, injected, os.path.join(self.root, out, f"checkpoint_{CONFIG['steps']}")

    def test_goodput_of_elastic_and_restart_at_the_same_failure_rate(self):
        self.start()
        c = self.cluster
        ref = c.submit(self.spec, "output_dir=out-reference", f"total_steps={CONFIG['steps']}", *COMMON)
        ref = c.wait_state(ref, ["SUCCEEDED", "FAILED"], 600)
        self.assertEqual(ref["state"], "SUCCEEDED", ref["reason"])
        reference = load_state(os.path.join(self.root, "out-reference", f"checkpoint_{CONFIG['steps']}"))
        # Faults keep coming as long as a run lasts: up to 20 times the
        # uninterrupted run.
        plan = schedule(CONFIG["seed"], CONFIG["mtbf"], 20 * ref["goodput"]["wall_seconds"])
        reports = []
        for mode in ("ELASTIC", "RESTART"):
            done, injected, final = self.run_through(mode, plan)
            state = load_state(final)
            worst = 0.0
            for name in ("params", "optimizer"):
                self.assertEqual(sorted(reference[name]), sorted(state[name]))
                for k in reference[name]:
                    a, b = reference[name][k], state[name][k]
                    if mode == "RESTART":
                        self.assertTrue(np.array_equal(a, b), f"{mode}: {name}: {k} differs")
                    worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))))
            # Whatever the state's rounding: every step trained on the
            # uninterrupted run's examples, none skipped.
            repeated = assert_same_data(self, os.path.join(self.root, "out-reference"),
                                        os.path.join(self.root, f"out-{mode.lower()}"), CONFIG["steps"])
            if CONFIG["steps"] <= COMPARED_STEPS:
                self.assertLessEqual(worst, TOLERANCE, f"{mode}: the final state is {worst} from the reference")
            g = done["goodput"]
            buckets = sum(v for k, v in g.items() if k.endswith("_seconds") and k != "wall_seconds")
            self.assertAlmostEqual(buckets, g["wall_seconds"], delta=1e-2)
            report = {
                "mode": mode, "seed": CONFIG["seed"], "steps": CONFIG["steps"], "mtbf_seconds": CONFIG["mtbf"],
                "faults": len(injected), "by_kind": {k: sum(1 for f in injected if f["kind"] == k) for k, _ in MIX},
                "restarts": done["restarts"], "regroups": done["regroups"],
                "goodput": round(g["ratio"], 4), "wall_seconds": round(g["wall_seconds"], 1),
                "reference_wall_seconds": round(ref["goodput"]["wall_seconds"], 1),
                "reference_goodput": round(ref["goodput"]["ratio"], 4),
                "steps_recomputed": g["recomputed_steps"],
                "steps_lost_per_fault": round(g["recomputed_steps"] / max(len(injected), 1), 2),
                "ledger_steps_trained_again": repeated,
                "largest_difference": worst,
                "final_loss": done["metrics"].get("loss"), "reference_final_loss": ref["metrics"].get("loss"),
                "seconds": {k.replace("_seconds", ""): round(v, 2) for k, v in g.items()
                            if k.endswith("_seconds") and k != "wall_seconds"},
                "injected": injected,
            }
            print("RATE " + json.dumps(report), flush=True)
            reports.append(report)
        if CONFIG["report"]:
            with open(CONFIG["report"], "w") as f:
                json.dump(reports, f, indent=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--seed", type=int, default=CONFIG["seed"])
    parser.add_argument("--steps", type=int, default=CONFIG["steps"])
    parser.add_argument("--mtbf", type=float, default=CONFIG["mtbf"], help="mean seconds between faults")
    parser.add_argument("--report")
    args, rest = parser.parse_known_args()
    system_harness.TRAINYARD = os.path.abspath(args.trainyard)
    CONFIG.update(seed=args.seed, steps=args.steps, mtbf=args.mtbf, report=args.report)
    junit.main([sys.argv[0], *rest])


if __name__ == "__main__":
    main()
