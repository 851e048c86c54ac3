"""Chaos soak: one data-parallel job on 3 workers, each on its own host (a
network namespace), through a seeded random schedule of faults of every kind
the system claims to survive:

  worker_sigkill       a worker killed without warning; a replacement starts
                       on the same host
  worker_sigterm       a worker preempted (emergency checkpoint); replaced
  coordinator_sigkill  the coordinator killed and started again on the same
                       address and state directory: it adopts the running
                       job from its workers (no restart); paired with
                       another fault, the job restarts
  link_cut             a worker's link cut until the job fails over, then
                       restored (the worker rejoins)
  disk_full            the output disk (a small tmpfs) filled so that the
                       next checkpoint write fails; training goes on, the job
                       reports the failure, the space comes back and the next
                       checkpoint is written
  corrupt_checkpoint   a byte of the newest checkpoint flipped on disk, then
                       a worker killed: the restart passes over it
  double               two of the process and link faults at once, on
                       different hosts

A second job waits in the queue behind the soak's the whole time. The soak
job must end SUCCEEDED with parameters and optimizer state bit for bit equal
to an uninterrupted run's, the queued job must run after it, every restart's
reason must name its fault, no half-written checkpoint may remain, and every
TensorBoard event file must read back whole. The run's figures (schedule,
restarts, steps recomputed, wall-time overhead) are printed as one JSON line
(and written to --report).

CI runs the short schedule (10 faults, each kind at least once);
tests/chaos/soak.sh runs a long one.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
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

KINDS = ("worker_sigkill", "worker_sigterm", "coordinator_sigkill", "link_cut", "disk_full", "corrupt_checkpoint",
         "double")
PAIRABLE = ("worker_sigkill", "worker_sigterm", "coordinator_sigkill", "link_cut")
HOSTS = 3
HEARTBEAT_TIMEOUT = 3
COLLECTIVE_TIMEOUT = 8
ADOPT_GRACE = 8  # a rank killed or cut off with the coordinator: the restart comes this much later
CHECKPOINT_PERIOD = 10
CONFIG = {"seed": 1, "faults": 10, "report": None}


def steps_for(faults):
    """Enough steps that the schedule ends before the job does: each fault
    comes at most 2 checkpoint periods after the job last ran again, and a
    fault that needs no restart (a full disk) lasts about one more."""
    return 60 + 3 * CHECKPOINT_PERIOD * faults


def schedule(seed, faults):
    """`faults` faults in order, every kind at least once: each `after`
    steps (seeded, 3 to 2 checkpoint periods) once the job runs again after
    the previous one; hosts and pairs drawn from the same seed."""
    assert faults >= len(KINDS)
    rng = random.Random(seed)
    kinds = list(KINDS) + [rng.choice(KINDS) for _ in range(faults - len(KINDS))]
    rng.shuffle(kinds)
    plan = []
    for kind in kinds:
        after = rng.randint(3, 2 * CHECKPOINT_PERIOD)
        if kind == "double":
            a, b = rng.sample(PAIRABLE, 2) if rng.random() < 0.5 else (rng.choice(PAIRABLE[:2]),) * 2
            hosts = rng.sample(range(HOSTS), 2)
            detail = {"faults": [[a, hosts[0]], [b, hosts[1]]]}
        elif kind in ("disk_full", "coordinator_sigkill"):
            detail = {}
        else:
            detail = {"host": rng.randrange(HOSTS)}
        plan.append({"kind": kind, "after": after, **detail})
    return plan


def read_events(path):
    """The records of a TensorBoard event file, each checked whole (length,
    both masked CRC32Cs); raises on a torn or corrupt record."""
    with open(path, "rb") as f:
        data = f.read()
    pos, records = 0, 0
    while pos < len(data):
        if len(data) - pos < 12:
            raise AssertionError(f"{path}: a torn record header at byte {pos}")
        n = int.from_bytes(data[pos:pos + 8], "little")
        if len(data) - pos - 12 < n + 4:
            raise AssertionError(f"{path}: a torn record at byte {pos}")
        for body, crc_at in ((data[pos:pos + 8], pos + 8), (data[pos + 12:pos + 12 + n], pos + 12 + n)):
            if masked_crc32c(body) != int.from_bytes(data[crc_at:crc_at + 4], "little"):
                raise AssertionError(f"{path}: a bad CRC at byte {crc_at}")
        pos += 12 + n + 4
        records += 1
    return records


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def masked_crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


class ChaosTest(unittest.TestCase):
    def setUp(self):
        reason = netns_unavailable()
        if reason:
            self.skipTest(f"network namespaces unavailable here ({reason}): the soak cuts links between hosts")
        self.root = tempfile.mkdtemp(prefix="chaos-", dir=os.environ.get("TEST_TMPDIR"))
        self.out = os.path.join(self.root, "out")  # the job's output disk: a small tmpfs
        os.makedirs(self.out)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", self.out], capture_output=True,
                           text=True)
        if r.returncode != 0:
            shutil.rmtree(self.root, ignore_errors=True)
            self.skipTest(f"cannot mount a tmpfs for the output disk: {r.stderr.strip()}")
        self.spec = os.path.join(self.root, "job.textproto")
        with open(self.spec, "w") as f:
            f.write(SPEC)
        self.hosts = Hosts(HOSTS)
        self.cluster = None
        self.filler = os.path.join(self.out, "filler")

    def tearDown(self):
        try:
            if self.cluster:
                self.cluster.stop()
        finally:
            if self.cluster:
                self.cluster.keep_logs()
            self.hosts.remove()
            subprocess.run(["umount", self.out], capture_output=True)

    # The cluster: a coordinator on the bridge, one worker per host.

    def start(self):
        self.cluster = Cluster(self.root, heartbeat_timeout=HEARTBEAT_TIMEOUT, listen=f"{self.hosts.subnet}.1:0",
                               coordinator_extra=("--adopt-grace", str(ADOPT_GRACE), "--insecure"))
        self.started = 0
        self.on_host = [None] * HOSTS
        for i in range(HOSTS):
            self.start_worker(i)

    def start_worker(self, host):
        self.started += 1
        c = self.cluster
        proc = c._start(f"worker-{self.started}-host{host}",
                        [system_harness.TRAINYARD, "worker", "--coordinator", c.address, "--listen",
                         f"{self.hosts.addresses[host]}:0", "--collective-timeout", str(COLLECTIVE_TIMEOUT),
                         "--insecure"], self.hosts.prefix(host))
        self.on_host[host] = proc

    def coordinator_log(self):
        return self.cluster.logs("coordinator")

    def events(self, job, what):
        """The coordinator's log lines for `job` about `what` ("RESTARTING",
        "running from step"), in order, across its restarts."""
        return [line for line in self.coordinator_log().splitlines() if f"job {job}: {what}" in line]

    # The faults. Each returns what a restart's reason may name: a list of
    # alternatives, each a tuple of substrings that must all be in it (None:
    # no restart).

    def worker_sigkill(self, job, host):
        victim = self.on_host[host]
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        self.start_worker(host)
        return [(f", {victim.listening})",)]

    def worker_sigterm(self, job, host):
        victim = self.on_host[host]
        victim.send_signal(signal.SIGTERM)

        def replace():
            self.assertEqual(victim.wait(timeout=60), 0, f"{victim.name}: its exit status after SIGTERM")
            self.start_worker(host)
        self.after.append(replace)
        return [(f", {victim.listening}) was asked to stop; emergency checkpoint at step",)]

    def coordinator_sigkill(self, job, alone=True):
        c = self.cluster
        c.restart_coordinator(signal.SIGKILL)
        # Nothing queued is lost across the restart.
        listed = {j["job_id"]: j["state"] for j in json.loads(c.cli("list", "--json").stdout)}
        self.assertEqual(listed.get(self.queued), "PENDING", listed)
        if alone:
            # Its ranks come back holding the job: adopted, not restarted.
            def adopted():
                with open(c.coordinator.log) as f:
                    return f"job {job}: adopted at step" in f.read()
            wait_for(adopted, 60, "the new coordinator to adopt the job")
            s = c.status(job)
            self.assertEqual(s["restarts"], self.restarts, s["reason"])
            self.record["adopted"] = True
            return None
        # With another fault a rank may not come back: then a restart.
        return [("the coordinator restarted while the job was",)]

    def link_cut(self, job, host):
        self.hosts.cut(host)
        self.cut = True  # restored once the job has failed over
        self.after.append(lambda: self.hosts.cut(host, down=False))
        # Its heartbeats stop, and its rank no longer answers the
        # watchdog's probes: whichever the coordinator sees first.
        address = self.on_host[host].listening
        return [(f", {address}) stopped heartbeating",),
                (f", {address}): rank", "did not answer the watchdog's probe")]

    def disk_full(self, job):
        """A background checkpoint write that fails leaves training going and
        the failure in the job's record; a waited one (the last, or an
        emergency checkpoint) fails the attempt, and the restart's reason
        names the full disk. Either way the space comes back and so do the
        checkpoints."""
        c = self.cluster
        st = os.statvfs(self.out)
        # Room for summaries, not for a checkpoint.
        fill = st.f_bavail * st.f_frsize - self.checkpoint_bytes // 2
        with open(self.filler, "wb") as f:
            os.posix_fallocate(f.fileno(), 0, fill)
        st = os.statvfs(self.out)
        self.record["free_bytes"] = st.f_bavail * st.f_frsize

        def failing():
            s = c.status(job)
            return s if s["checkpoint_failure"] or s["restarts"] > self.restarts or s["state"] != "RUNNING" else None
        s = wait_for(failing, 120, "a checkpoint write to fail on the full disk")
        self.assertTrue(s["checkpoint_failure"] or s["restarts"] > self.restarts,
                        f"the job went {s['state']} at step {s['step']} with {self.record['free_bytes']} bytes free "
                        f"and no checkpoint write failed")
        # The failed write left nothing half-written behind.
        self.assertEqual([n for n in os.listdir(os.path.join(self.out, "chaos")) if ".tmp-" in n], [])
        os.remove(self.filler)
        if s["checkpoint_failure"]:
            self.assertIn("No space left on device", s["checkpoint_failure"])
            self.record["checkpoint_failure"] = s["checkpoint_failure"]

            def written():
                s = c.status(job)
                return s if not s["checkpoint_failure"] else None
            s = wait_for(written, 120, "the next checkpoint write to succeed")
            self.assertIn(s["state"], ("RUNNING", "SUCCEEDED"))
            self.record["written_again"] = s["latest_checkpoint"]
            return None
        return [(": No space left on device",)]

    def corrupt_checkpoint(self, job, host):
        """The checkpoint a restart would resume from, damaged on disk, then
        a worker killed. The workers are held (SIGSTOP) meanwhile, so that no
        newer checkpoint becomes the job's newest in between."""
        c = self.cluster
        for proc in self.on_host:
            proc.send_signal(signal.SIGSTOP)
        s = c.status(job)
        damaged = s["latest_checkpoint"]
        if not damaged:  # none yet: only the kill
            for proc in self.on_host:
                proc.send_signal(signal.SIGCONT)
            return self.worker_sigkill(job, host)
        params = os.path.join(damaged, "params.safetensors")
        with open(params, "r+b") as f:
            f.seek(300)
            byte = f.read(1)
            f.seek(300)
            f.write(bytes([byte[0] ^ 0xFF]))
        self.record["damaged"] = damaged
        self.passed_over.append(damaged)
        names = self.worker_sigkill(job, host)  # its replacement starts meanwhile
        for h, proc in enumerate(self.on_host):
            if h != host:
                proc.send_signal(signal.SIGCONT)
        return names

    def double(self, job, faults):
        names = []
        for kind, host in faults:
            names += (self.coordinator_sigkill(job, alone=False) if kind == "coordinator_sigkill"
                      else getattr(self, kind)(job, host))
        return names

    # The soak.

    def test_a_job_survives_a_seeded_schedule_of_faults_bit_for_bit(self):
        seed = CONFIG["seed"]
        steps = steps_for(CONFIG["faults"])
        common = (f"total_steps={steps}", "num_workers=3", "batch_size=6", "summary_period=5",
                  f"checkpoint_period={CHECKPOINT_PERIOD}", "model.dropout_rate=0.1", "max_restarts=100")
        self.start()
        c = self.cluster
        reference = c.submit(self.spec, "output_dir=out/reference", "keep_checkpoints=1", *common)
        ref = c.wait_state(reference, ["SUCCEEDED", "FAILED"], 600)
        self.assertEqual(ref["state"], "SUCCEEDED", ref["reason"])
        self.checkpoint_bytes = dir_bytes(os.path.join(self.out, "reference", f"checkpoint_{steps}"))

        plan = schedule(seed, CONFIG["faults"])
        job = c.submit(self.spec, "output_dir=out/chaos", "keep_checkpoints=3", *common)
        self.queued = c.submit(self.spec, "output_dir=out/queued", "total_steps=10", "num_workers=3",
                               "batch_size=6")
        self.passed_over = []
        log = []
        resumed = 0  # the step the job last ran again from
        for i, fault in enumerate(plan):
            def due():
                s = c.status(job)
                return s if s["state"] == "SUCCEEDED" or (
                    s["state"] == "RUNNING" and s["step"] >= resumed + fault["after"]) else None
            s = wait_for(due, 300, f"fault {i} ({fault['kind']}) {fault['after']} steps after step {resumed}")
            self.assertEqual(s["state"], "RUNNING", f"the job finished before fault {i} of the schedule")
            before = len(self.events(job, "RESTARTING"))
            restarts = self.restarts = s["restarts"]
            self.record = {"fault": i, **fault, "injected_at_step": s["step"], "at": time.strftime("%H:%M:%S")}
            self.after, self.cut = [], False
            start = time.monotonic()
            names = getattr(self, fault["kind"])(job, **{k: v for k, v in fault.items() if k in ("host", "faults")})
            if self.cut:  # the link stays down until the attempt has failed
                wait_for(lambda: c.status(job)["restarts"] > restarts, 60, f"fault {i}: the cut to fail the attempt")
            for then in self.after:
                then()
            if names is not None:
                def running_again():
                    s = c.status(job)
                    return s if s["state"] == "RUNNING" and s["restarts"] > restarts else None
                s = wait_for(running_again, 300, f"the job to run again after fault {i}")
                reasons = [line.split(": RESTARTING ", 1)[1] for line in self.events(job, "RESTARTING")[before:]]
                self.assertTrue(reasons, f"fault {i} ({fault['kind']}): no restart logged")
                for reason in reasons:
                    self.assertTrue(any(all(n in reason for n in alternative) for alternative in names),
                                    f"fault {i} ({fault['kind']}): the restart's reason {reason!r} names none of "
                                    f"{names}")
                self.record["restarts"] = s["restarts"] - restarts
                self.record["reasons"] = reasons
                resumed = int(re.search(r"running from step (\d+)", self.events(job, "running from step")[-1]).group(1))
            else:
                resumed = c.status(job)["step"]
            self.record["recovered_seconds"] = round(time.monotonic() - start, 2)
            log.append(self.record)
            print(json.dumps(self.record), flush=True)

        done = c.wait_state(job, ["SUCCEEDED", "FAILED"], 600)
        self.assertEqual(done["state"], "SUCCEEDED", done["reason"])
        queued = c.wait_state(self.queued, ["SUCCEEDED", "FAILED"], 300)
        self.assertEqual(queued["state"], "SUCCEEDED", queued["reason"])

        # Bit for bit where the uninterrupted run ended.
        for name in ("params.safetensors", "optimizer.safetensors"):
            a = load_file(os.path.join(self.out, "reference", f"checkpoint_{steps}", name))
            b = load_file(os.path.join(self.out, "chaos", f"checkpoint_{steps}", name))
            self.assertEqual(sorted(a), sorted(b))
            for k in a:
                self.assertTrue(np.array_equal(a[k], b[k]), f"{name}: {k} differs")
        # ... on the same examples at every step, none skipped.
        assert_same_data(self, os.path.join(self.out, "reference"), os.path.join(self.out, "chaos"), steps)
        # Every damaged checkpoint was passed over by a restart, by name.
        coordinator_log = self.coordinator_log()
        for damaged in self.passed_over:
            self.assertIn(f"passed over {damaged} passed over: ", coordinator_log)
        # Nothing half-written left, every event file whole.
        chaos = os.path.join(self.out, "chaos")
        self.assertEqual([n for n in os.listdir(chaos) if ".tmp-" in n], [])
        event_files = [os.path.join(d, f) for d, _, files in os.walk(chaos) for f in files
                       if f.startswith("events.out.tfevents.")]
        self.assertTrue(event_files)
        for path in event_files:
            read_events(path)

        # Steps recomputed: for each attempt that ran after a fault, the step
        # the coordinator had recorded when the fault struck minus the step
        # the attempt ran from (its restored checkpoint's). An attempt that
        # ended before it ran (a second fault of a pair striking its start)
        # logs no "running from": the next one pairs with the same fault.
        struck = [r["injected_at_step"] for r in log for _ in range(r.get("restarts", 0))]
        starts, recomputed, restarting, current = [], [], 0, None
        for line in coordinator_log.splitlines():
            if f"job {job}: RESTARTING" in line:
                current = struck[restarting] if restarting < len(struck) else current
                restarting += 1
            elif f"job {job}: running from step" in line:
                starts.append(int(re.search(r"running from step (\d+)", line).group(1)))
                if len(starts) > 1:
                    self.assertIsNotNone(current, f"attempt {len(starts)} ran with no restart before it: {starts}")
                    recomputed.append(max(0, current - starts[-1]))
                current = None
        self.assertEqual(restarting, done["restarts"], starts)
        self.assertLessEqual(len(starts), done["restarts"] + 1, starts)
        self.assertEqual(len(recomputed), len(starts) - 1, starts)
        ms = lambda info: info["end_time_unix_ms"] - info["create_time_unix_ms"]  # noqa: E731
        report = {
            "seed": seed, "faults": len(plan), "steps": steps, "restarts": done["restarts"],
            "attempts_ran_from": starts,
            "steps_recomputed": sum(recomputed),
            "reference_seconds": round(ms(ref) / 1000, 1), "soak_seconds": round(ms(done) / 1000, 1),
            "overhead": round(ms(done) / ms(ref) - 1, 2), "schedule": log,
        }
        print("CHAOS " + json.dumps(report), flush=True)
        if CONFIG["report"]:
            with open(CONFIG["report"], "w") as f:
                json.dump(report, f, indent=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--seed", type=int, default=CONFIG["seed"])
    parser.add_argument("--faults", type=int, default=CONFIG["faults"])
    parser.add_argument("--report")
    args, rest = parser.parse_known_args()
    system_harness.TRAINYARD = os.path.abspath(args.trainyard)
    CONFIG.update(seed=args.seed, faults=args.faults, report=args.report)
    junit.main([sys.argv[0], *rest])


if __name__ == "__main__":
    main()
