"""The control plane at cluster scale: a real coordinator process and
simulated workers (bench/scale/sim_workers.cc: each registers, heartbeats
every second, and answers its WorkerService calls after a fixed time per
step). Measures, and prints as one JSON object:
  - registration: seconds until every worker is IDLE;
  - idle: the coordinator's CPU share (of one core) and RSS with every
    worker heartbeating and no job;
  - per gang size: the chunks' overhead beyond the steps themselves (from
    one chunk's first RunSteps arrival at any worker to the next chunk's,
    less the chunk's simulated time: the fan-out, the answers collected,
    the coordinator's bookkeeping), and the fan-out spread (the first to
    the last rank's arrival of one chunk);
  - a dead worker: from its death (its calls fail UNAVAILABLE, as a dead
    process's connection does) to the gang's teardown (the first AbortJob)
    and to the job running again on a new gang (the last StartJob of the
    next attempt);
  - per gang size, the CPU time the coordinator and the simulator spent
    per rank per chunk, beyond their idle heartbeat load: where the two
    share cores, both are in the overhead above; the coordinator's alone is
    what a dedicated coordinator host pays;
  - the scheduler's tick time (trainyard_scheduler_tick_seconds).
With --check it asserts correctness only (every job SUCCEEDED, every chunk
reached every rank once, the killed job restarted once): the CI version
(//tests/scale:scale_test).

  bench/scale/run.sh                                          # 1032 workers, gangs of 256 and 1024
  bench/scale/run.sh --workers 4104 --gangs 1024,4096 --chunks 20
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "testing"))
import system_harness  # noqa: E402
from system_harness import SPEC, Cluster, scrape, wait_for  # noqa: E402


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def metric(cluster, name, labels=""):
    _, body = scrape(cluster.coordinator.metrics)
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} ([0-9.e+-]+)$", body, re.M)
    return float(m.group(1)) if m else 0.0


class Sim:
    def __init__(self, binary, coordinator, workers, step_ms, root):
        self.log = open(os.path.join(root, "sim.log"), "w")
        self.proc = subprocess.Popen([binary, "--coordinator", coordinator, "--workers", str(workers), "--step-ms",
                                      str(step_ms)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("simulating"):
            raise AssertionError(f"sim_workers: {line!r}; see {self.log.name}")

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def wait_finished(cluster, finished, timeout):
    """Waits until `finished` jobs have ended. Polls the metrics page (one HTTP request), not `trainyard
    status`: a CLI process per poll, printing a 1024-rank status, costs a
    quarter of a second of CPU and would compete with what is measured."""
    def ended():
        time.sleep(0.25)  # on top of wait_for's 50 ms: each scrape renders every metric
        return sum(metric(cluster, "trainyard_jobs", f'{{state="{s}"}}')
                   for s in ("SUCCEEDED", "FAILED", "CANCELLED")) >= finished
    wait_for(ended, timeout, f"{finished} jobs to end")


def events(report, kind, job):
    return sorted((e for e in report["events"] if e["kind"] == kind and e["job"] == job), key=lambda e: e["key"])


def run(args):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # inherited by both processes
    gangs = [int(g) for g in args.gangs.split(",")]
    total = max(gangs) + args.spares
    if args.workers < total:
        raise SystemExit(f"--workers {args.workers}: want at least the largest gang plus {args.spares} spares")
    root = tempfile.mkdtemp(prefix="scale-", dir=os.environ.get("TEST_TMPDIR"))
    spec = os.path.join(root, "job.textproto")
    with open(spec, "w") as f:
        f.write(SPEC)
    system_harness.TRAINYARD = os.path.abspath(args.trainyard)
    cluster = Cluster(root, heartbeat_timeout=args.heartbeat_timeout,
                      coordinator_extra=("--metrics-listen", "127.0.0.1:0"))
    sim = None
    out = {"workers": args.workers, "step_ms": args.step_ms, "chunk_steps": args.chunk_steps}
    try:
        pid = cluster.coordinator.pid
        start = time.monotonic()
        sim = Sim(args.sim, cluster.address, args.workers, args.step_ms, root)
        wait_for(lambda: metric(cluster, "trainyard_workers", '{state="IDLE"}') >= args.workers, 600,
                 f"{args.workers} idle workers")
        out["registration_seconds"] = time.monotonic() - start
        cpu0, sim0, t0 = cpu_seconds(pid), cpu_seconds(sim.proc.pid), time.monotonic()
        time.sleep(args.idle_seconds)
        idle_seconds = time.monotonic() - t0
        idle_share = (cpu_seconds(pid) - cpu0) / idle_seconds
        sim_idle_share = (cpu_seconds(sim.proc.pid) - sim0) / idle_seconds
        out["idle"] = {"cpu_share": idle_share, "rss_mib": rss_mib(pid), "simulator_cpu_share": sim_idle_share}
        out["gangs"] = []
        steps = args.chunks * args.chunk_steps
        finished = 0
        for gang in gangs:
            job = cluster.submit(spec, f"output_dir=g{gang}", f"num_workers={gang}", f"batch_size={gang}",
                                 f"total_steps={steps}", f"summary_period={args.chunk_steps}",
                                 "checkpoint_period=0", "eval_period=0")
            t = time.monotonic()
            cpu_coordinator, cpu_sim = cpu_seconds(pid), cpu_seconds(sim.proc.pid)
            finished += 1
            wait_finished(cluster, finished, 600)
            wall = time.monotonic() - t
            cpu_coordinator = cpu_seconds(pid) - cpu_coordinator
            cpu_sim = cpu_seconds(sim.proc.pid) - cpu_sim
            s = cluster.status(job)
            assert s["state"] == "SUCCEEDED", s["reason"]
            chunks = events(sim.ask("report"), "RunSteps", job)
            assert [c["key"] for c in chunks] == list(range(0, steps, args.chunk_steps)), chunks
            assert all(c["count"] == gang for c in chunks), [c["count"] for c in chunks]
            chunk_seconds = args.chunk_steps * args.step_ms / 1000
            overhead = [b["first"] - a["first"] - chunk_seconds for a, b in zip(chunks, chunks[1:])]
            spread = [c["last"] - c["first"] for c in chunks]
            # CPU per rank per chunk beyond the idle heartbeats (each
            # process's idle share taken off): what a rank's chunk costs
            # each process (the job's start and end spread over its chunks).
            per_rank_chunk = 1e6 / (len(chunks) * gang)
            cpu_coordinator -= idle_share * wall
            cpu_sim -= sim_idle_share * wall
            out["gangs"].append({
                "gang": gang, "chunks": len(chunks), "job_seconds": wall,
                "chunk_overhead_ms": {"median": 1e3 * statistics.median(overhead), "max": 1e3 * max(overhead)},
                "fanout_spread_ms": {"median": 1e3 * statistics.median(spread), "max": 1e3 * max(spread)},
                "cpu_us_per_rank_chunk": {
                    "coordinator": per_rank_chunk * cpu_coordinator, "simulator": per_rank_chunk * cpu_sim},
                "rss_mib": rss_mib(pid)})
        # A dead worker: the largest gang, one of its ranks killed mid-job.
        gang = max(gangs)
        # Long enough that the victim is found (the status of a large gang
        # takes a while) and killed well before the job ends.
        dead_steps = 4 * steps
        job = cluster.submit(spec, "output_dir=dead", f"num_workers={gang}", f"batch_size={gang}",
                             f"total_steps={dead_steps}", f"summary_period={args.chunk_steps}",
                             f"checkpoint_period={args.chunk_steps}", "eval_period=0", "max_restarts=1")
        wait_for(lambda: time.sleep(0.5) or cluster.status(job)["step"] >= args.chunk_steps, 600,
                 "the job's first chunk")
        ranks = cluster.status(job)["ranks"]
        victim_port = int(ranks[gang // 2]["address"].rsplit(":", 1)[1])
        report = sim.ask("report")
        victim = next(w["index"] for w in report["workers"] if w["port"] == victim_port)
        killed = sim.ask(f"kill {victim}")["t"]
        wait_finished(cluster, finished + 1, 600)
        s = cluster.status(job)
        assert s["state"] == "SUCCEEDED", s["reason"]
        assert s["restarts"] == 1, s
        report = sim.ask("report")
        aborts = events(report, "AbortJob", job)
        starts = events(report, "StartJob", job)
        assert [e["key"] for e in starts] == [0, 1], starts
        assert starts[1]["count"] == gang, starts
        out["dead_worker"] = {"gang": gang, "reason": s["reason"],
                              "teardown_seconds": aborts[0]["first"] - killed,
                              "running_again_seconds": starts[1]["last"] - killed}
        out["tick_ms_mean"] = 1e3 * metric(cluster, "trainyard_scheduler_tick_seconds_sum") / max(
            metric(cluster, "trainyard_scheduler_tick_seconds_count"), 1)
        out["final_rss_mib"] = rss_mib(pid)
    finally:
        if sim is not None:
            sim.stop()
        cluster.stop()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--sim", required=True, help="the sim_workers binary")
    parser.add_argument("--workers", type=int, default=1032)
    parser.add_argument("--gangs", default="256,1024")
    parser.add_argument("--spares", type=int, default=8)
    parser.add_argument("--step-ms", type=float, default=10)
    parser.add_argument("--chunk-steps", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--idle-seconds", type=float, default=10)
    parser.add_argument("--heartbeat-timeout", type=int, default=10)
    parser.add_argument("--check", action="store_true", help="correctness only (CI): no figures printed")
    args = parser.parse_args()
    out = run(args)
    if args.check:
        print(f"ok: {args.workers} workers, gangs {args.gangs}, a dead worker's job restarted once")
    else:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
