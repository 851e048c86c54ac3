#!/usr/bin/env python3
"""Load on a real coordinator process: many concurrent WatchJob streams and a
steady stream of submissions, from one asyncio gRPC client.

    load_test.py --trainyard bazel-bin/client/trainyard [--duration 60]
                 [--rate 50] [--streams 200] [--json OUT]

For `--duration` seconds it submits `--rate` jobs per second (paced, each
call's latency recorded) while keeping `--streams` WatchJob streams open;
every second it cancels a few watched jobs, so streams get events and end,
and opens new ones in their place. No worker runs: jobs stay PENDING until
cancelled. Every second it samples the coordinator's RSS and thread count.

Fails (exit 1) on any RPC error, on a submit rate below 95 % of the target,
when fewer streams than asked were open at the end, or when the threads and
memory held for streams are not given back once the streams close. Prints
one JSON object of figures (docs/reliability.md records them).
"""
import argparse
import asyncio
import importlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time


def load_generated(proto_root):
    from grpc_tools import protoc
    import grpc_tools
    out = tempfile.mkdtemp(prefix="trainyard-proto-")
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    for name in ("proto/job.proto", "proto/job_service.proto"):
        if protoc.main(["protoc", f"-I{proto_root}", f"-I{include}", f"--python_out={out}",
                        f"--grpc_python_out={out}", name]) != 0:
            sys.exit(f"error: protoc failed on {name}")
    sys.path.insert(0, out)
    return importlib.import_module("proto.job_service_pb2"), importlib.import_module("proto.job_service_pb2_grpc")


def proc_status(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024.0, int(fields["Threads"])


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100.0 * (len(values) - 1))))] if values else 0.0


SPEC = """
name: "load"
model { preset: "tiny" }
task: "digits_to_words"
feature_lengths { inputs: 16 targets: 32 }
batch_size: 8
num_workers: 1
total_steps: 10
output_dir: "load"
"""


async def run(args, pb, grpc_stubs, address, coordinator_pid):
    import grpc
    from google.protobuf import text_format
    from proto import job_pb2

    spec = text_format.Parse(SPEC, job_pb2.JobSpec())
    errors = []
    latencies = []
    samples = []
    watch = {"opened": 0, "events": 0, "ended": 0, "open": 0}
    jobs = []

    async with grpc.aio.insecure_channel(address) as channel:
        stub = grpc_stubs.JobServiceStub(channel)

        async def submit(i):
            start = time.monotonic()
            try:
                r = await stub.SubmitJob(pb.SubmitJobRequest(spec=spec, overrides=[f"output_dir=load/{i}"]),
                                         timeout=30)
                latencies.append(time.monotonic() - start)
                jobs.append(r.job_id)
                return r.job_id
            except grpc.aio.AioRpcError as e:
                errors.append(f"submit: {e.code().name}: {e.details()}")

        async def watch_one(job_id):
            watch["opened"] += 1
            watch["open"] += 1
            try:
                async for event in stub.WatchJob(pb.WatchJobRequest(job_id=job_id)):
                    watch["events"] += 1
                watch["ended"] += 1
            except grpc.aio.AioRpcError as e:
                if e.code() != grpc.StatusCode.CANCELLED:
                    errors.append(f"watch {job_id}: {e.code().name}: {e.details()}")
            finally:
                watch["open"] -= 1

        # The jobs the streams watch, then the streams.
        watched = [await submit(f"w{i}") for i in range(args.streams)]
        baseline_rss, baseline_threads = proc_status(coordinator_pid)
        streams = {job: asyncio.create_task(watch_one(job)) for job in watched if job}
        await asyncio.sleep(1)
        with_streams_rss, with_streams_threads = proc_status(coordinator_pid)

        pending = set()
        start = time.monotonic()
        next_sample = start
        i = 0
        while time.monotonic() - start < args.duration:
            target = start + i / args.rate
            now = time.monotonic()
            if target > now:
                await asyncio.sleep(target - now)
            pending.add(asyncio.create_task(submit(i)))
            i += 1
            if time.monotonic() >= next_sample:
                next_sample += 1
                rss, threads = proc_status(coordinator_pid)
                samples.append({"t": round(time.monotonic() - start, 1), "rss_mb": round(rss, 1),
                                "threads": threads, "jobs": len(jobs), "streams": watch["open"]})
                # Turn over a few watched jobs: their streams see CANCELLED
                # and end; new streams watch fresh jobs.
                for job in random.sample(sorted(streams), min(3, len(streams))):
                    try:
                        await stub.CancelJob(pb.CancelJobRequest(job_id=job, reason="load test"), timeout=30)
                    except grpc.aio.AioRpcError as e:
                        errors.append(f"cancel: {e.code().name}: {e.details()}")
                    streams.pop(job)
                    fresh = await submit(f"r{i}-{job}")
                    if fresh:
                        streams[fresh] = asyncio.create_task(watch_one(fresh))
            pending = {t for t in pending if not t.done()}
        elapsed = time.monotonic() - start
        await asyncio.gather(*pending)
        await asyncio.sleep(0.5)  # streams just replaced have started
        open_at_end = watch["open"]

        # Close every stream: the threads and memory they held come back.
        for task in streams.values():
            task.cancel()
        await asyncio.gather(*streams.values(), return_exceptions=True)
    await asyncio.sleep(2)
    after_rss, after_threads = proc_status(coordinator_pid)

    submitted = i
    figures = {
        "duration_s": round(elapsed, 1),
        "submits": submitted,
        "submit_rate_per_s": round(submitted / elapsed, 1),
        "submit_p50_ms": round(1000 * percentile(latencies, 50), 2),
        "submit_p99_ms": round(1000 * percentile(latencies, 99), 2),
        "submit_max_ms": round(1000 * max(latencies), 2) if latencies else 0,
        "streams_target": args.streams,
        "streams_open_at_end": open_at_end,
        "streams_opened": watch["opened"],
        "watch_events": watch["events"],
        "errors": len(errors),
        "jobs_held": len(jobs),
        "rss_mb": {"baseline": round(baseline_rss, 1), "with_streams": round(with_streams_rss, 1),
                   "end_of_load": samples[-1]["rss_mb"] if samples else None,
                   "after_streams_closed": round(after_rss, 1)},
        "threads": {"baseline": baseline_threads, "with_streams": with_streams_threads,
                    "max": max(s["threads"] for s in samples) if samples else None,
                    "after_streams_closed": after_threads},
        "samples": samples,
    }
    # Memory per job held (jobs live in the coordinator's map and database):
    # the slope over the second half of the run.
    half = [s for s in samples if s["t"] >= elapsed / 2]
    if len(half) >= 2 and half[-1]["jobs"] > half[0]["jobs"]:
        figures["rss_kb_per_job_second_half"] = round(
            1024 * (half[-1]["rss_mb"] - half[0]["rss_mb"]) / (half[-1]["jobs"] - half[0]["jobs"]), 2)
    return figures, errors


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainyard", required=True)
    parser.add_argument("--duration", type=float, default=60)
    parser.add_argument("--rate", type=float, default=50)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--proto-root", default=".")
    args = parser.parse_args()
    pb, grpc_stubs = load_generated(args.proto_root)

    root = tempfile.mkdtemp(prefix="load-", dir=os.environ.get("TEST_TMPDIR"))
    log = open(os.path.join(root, "coordinator.log"), "w")
    coordinator = subprocess.Popen(
        [os.path.abspath(args.trainyard), "coordinator", "--listen", "127.0.0.1:0", "--state-dir",
         os.path.join(root, "state"), "--output-root", root, "--submit-rate", "0"],
        stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        line = coordinator.stdout.readline().strip()
        if not line.startswith("listening on "):
            sys.exit(f"coordinator: {line!r}")
        address = line[len("listening on "):]
        figures, errors = asyncio.run(run(args, pb, grpc_stubs, address, coordinator.pid))
    finally:
        coordinator.send_signal(signal.SIGTERM)
        try:
            code = coordinator.wait(timeout=60)
        except subprocess.TimeoutExpired:
            coordinator.kill()
            coordinator.wait()
            code = "killed after 60 s"
        log.close()
    figures["coordinator_exit"] = code
    text = json.dumps(figures, indent=1)
    print(json.dumps({k: v for k, v in figures.items() if k != "samples"}))
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")

    problems = list(errors[:10])
    if figures["submit_rate_per_s"] < 0.95 * args.rate:
        problems.append(f"submit rate {figures['submit_rate_per_s']}/s < 95 % of {args.rate}/s")
    if figures["streams_open_at_end"] < args.streams:
        problems.append(f"{figures['streams_open_at_end']} streams open at the end, {args.streams} wanted")
    threads = figures["threads"]
    if threads["after_streams_closed"] > threads["baseline"] + 8:
        problems.append(f"threads not given back: {threads}")
    if code != 0:
        problems.append(f"the coordinator exited {code} on SIGTERM")
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
