"""Bytes between hosts per step for each data_parallel.sharding mode over
every rank, against hybrid sharding (HSDP) with one shard group per host.

Two hosts (network namespaces on one bridge, as the fault tests make them)
run two workers each; the coordinator is on the bridge. The bytes between
the hosts are counted by iptables rules in host 0's namespace (packets to
and from host 1's address only: the coordinator's traffic is not counted),
zeroed before each job and read after it. Ranks 0, 1 must be on one host
and 2, 3 on the other for groups of 2 to be hosts; each line says whether
they were (`groups_are_hosts`).

With --rate-mbit R, both directions of each host's link are limited to R
Mbit/s (tc tbf; the workers of one host talk over its loopback, unlimited),
as hosts with fast links inside and a slower network between; the steps per
second of the job's last summary are then comparable between the modes.

Prints one JSON line per mode: bytes between the hosts per step, and per
step over the gradients' size (4 bytes x parameters).
usage: traffic.py --trainyard BIN [--preset tiny] [--steps 6] [--rate-mbit 0]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "testing"))
import system_harness  # noqa: E402
from system_harness import Cluster, Hosts  # noqa: E402

SPEC = """
name: "traffic"
model {{ preset: "{preset}" }}
task: "digits_to_words"
feature_lengths {{ inputs: 32 targets: 32 }}
batch_size: 8
total_steps: {steps}
summary_period: {steps}
checkpoint_period: 0
checkpoint {{ async: false }}
optimizer {{ adamw {{}} }}
learning_rate {{ factors: "constant" base_learning_rate: 0.001 }}
data_parallel {{ sharding: {sharding}{group} }}
"""
MODES = ("NONE", "OPTIMIZER", "OPTIMIZER/G2", "GRADIENTS", "GRADIENTS/G2", "PARAMETERS", "PARAMETERS/G2")
IPTABLES = shutil.which("iptables", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") or "iptables"


def in_ns(hosts, i, *argv):
    return subprocess.run(["ip", "netns", "exec", hosts.namespaces[i], *argv], check=True, capture_output=True,
                          text=True).stdout


def count_between(hosts):
    """Rules that count host 0's packets to and from host 1."""
    peer = hosts.addresses[1]
    in_ns(hosts, 0, IPTABLES, "-A", "OUTPUT", "-d", peer)
    in_ns(hosts, 0, IPTABLES, "-A", "INPUT", "-s", peer)


def bytes_between(hosts, zero=False):
    total = 0
    for chain in ("OUTPUT", "INPUT"):
        listing = in_ns(hosts, 0, IPTABLES, "-L", chain, "-v", "-x", "-n", *(("-Z",) if zero else ()))
        for line in listing.splitlines():
            if hosts.addresses[1] in line.split():
                total += int(line.split()[1])
    return total


def limit(hosts, mbit):
    for i in range(len(hosts.namespaces)):
        tbf = ("root", "tbf", "rate", f"{mbit}mbit", "burst", "256kb", "latency", "500ms")
        subprocess.run(["tc", "qdisc", "replace", "dev", hosts.links[i], *tbf], check=True)
        in_ns(hosts, i, "tc", "qdisc", "replace", "dev", "eth0", *tbf)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainyard", required=True)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rate-mbit", type=int, default=0)
    args = ap.parse_args()
    system_harness.TRAINYARD = os.path.abspath(args.trainyard)
    info = json.loads(subprocess.run([args.trainyard, "model-info", "--preset", args.preset, "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    gradient_bytes = 4 * int(info["num_params"])
    work = tempfile.mkdtemp(prefix="traffic-")
    hosts = Hosts(2)
    cluster = None
    try:
        cluster = Cluster(work, listen=f"{hosts.subnet}.1:0", coordinator_extra=("--insecure",))
        for h in (0, 0, 1, 1):
            cluster.add_worker(listen=f"{hosts.addresses[h]}:0", prefix=hosts.prefix(h), extra=("--insecure",))
        count_between(hosts)
        if args.rate_mbit:
            limit(hosts, args.rate_mbit)
        for mode in MODES:
            sharding, _, group = mode.partition("/G")
            spec = os.path.join(work, f"{mode.replace('/', '-')}.textproto")
            with open(spec, "w") as f:
                f.write(SPEC.format(preset=args.preset, steps=args.steps, sharding=sharding,
                                    group=f" shard_group_size: {group}" if group else ""))
            bytes_between(hosts, zero=True)
            job = cluster.submit(spec, "num_workers=4", f"output_dir=out-{mode.replace('/', '-')}")
            done = cluster.wait_state(job, ["SUCCEEDED", "FAILED"], 1800)
            if done["state"] != "SUCCEEDED":
                raise SystemExit(f"{mode}: {done['state']}: {done['reason']}")
            moved = bytes_between(hosts)
            on = [r["address"].rsplit(":", 1)[0] for r in done["ranks"]]
            print(json.dumps({
                "preset": args.preset, "sharding": mode, "steps": args.steps, "rate_mbit": args.rate_mbit,
                "groups_are_hosts": on[0] == on[1] and on[2] == on[3] and on[0] != on[2],
                "bytes_between_hosts_per_step": round(moved / args.steps),
                "per_step_over_gradient_bytes": round(moved / args.steps / gradient_bytes, 3),
                "steps_per_second": done["metrics"].get("timing/steps_per_second"),
            }), flush=True)
    finally:
        if cluster:
            cluster.stop()
        hosts.remove()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
