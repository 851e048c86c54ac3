#!/usr/bin/env python3
"""Submits a job to a Trainyard coordinator from Python and follows it.

Any language with gRPC can drive Trainyard: this client uses code generated
from proto/job_service.proto by grpcio-tools (generated at start-up into a
temporary directory, so nothing generated is checked in).

    pip install grpcio grpcio-tools protobuf
    python3 examples/python_client.py --coordinator 127.0.0.1:PORT \\
        examples/tiny_local.textproto --set total_steps=40

Prints the job id, one line per state change or summary, and the final
state; exits 0 if the job succeeded, 1 if it failed or was cancelled, 2 on
bad input. With --predict TEXT (repeatable), then opens an interactive
session on the job's final checkpoint (served by one of the coordinator's
idle workers), prints a prediction for each text, and closes it.
"""
import argparse
import importlib
import os
import sys
import tempfile


def load_generated(proto_root):
    """Generates job_pb2/job_service_pb2(_grpc) from proto/ and imports them."""
    from grpc_tools import protoc
    import grpc_tools

    out = tempfile.mkdtemp(prefix="trainyard-proto-")
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    for name in ("proto/job.proto", "proto/job_service.proto"):
        code = protoc.main(["protoc", f"-I{proto_root}", f"-I{include}", f"--python_out={out}",
                            f"--grpc_python_out={out}", name])
        if code != 0:
            sys.exit(f"error: protoc failed on {name}")
    sys.path.insert(0, out)
    return (importlib.import_module("proto.job_pb2"), importlib.import_module("proto.job_service_pb2"),
            importlib.import_module("proto.job_service_pb2_grpc"))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", help="a job spec (.textproto or .json)")
    parser.add_argument("--coordinator", default=os.environ.get("TRAINYARD_COORDINATOR"),
                        help="HOST:PORT (default: $TRAINYARD_COORDINATOR)")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                        help="override a field of the spec (applied by the coordinator)")
    parser.add_argument("--predict", action="append", default=[], metavar="TEXT",
                        help="after the job: predict for TEXT in an interactive session")
    parser.add_argument("--proto-root", default=os.path.dirname(here),
                        help="the directory holding proto/ (default: the repository)")
    args = parser.parse_args()
    if not args.coordinator:
        parser.error("--coordinator is required (or set TRAINYARD_COORDINATOR)")

    import grpc
    from google.protobuf import json_format, text_format

    job_pb2, service_pb2, service_grpc = load_generated(args.proto_root)
    spec = job_pb2.JobSpec()
    with open(args.spec) as f:
        content = f.read()
    try:
        if args.spec.endswith(".json"):
            json_format.Parse(content, spec)
        else:
            text_format.Parse(content, spec)
    except (text_format.ParseError, json_format.ParseError) as e:
        print(f"error: {args.spec}: {e}", file=sys.stderr)
        return 2

    with grpc.insecure_channel(args.coordinator) as channel:
        jobs = service_grpc.JobServiceStub(channel)
        try:
            submitted = jobs.SubmitJob(service_pb2.SubmitJobRequest(spec=spec, overrides=args.set), timeout=30)
        except grpc.RpcError as e:
            print(f"error: {e.code().name}: {e.details()}", file=sys.stderr)
            return 2 if e.code() == grpc.StatusCode.INVALID_ARGUMENT else 1
        job_id = submitted.job_id
        print(job_id, flush=True)

        state, metrics_step = None, -1
        for event in jobs.WatchJob(service_pb2.WatchJobRequest(job_id=job_id)):
            job = event.job
            name = service_pb2.JobState.Name(job.state)
            if name != state:
                state = name
                print(f"state {name}" + (f" ({job.reason})" if job.reason else ""), flush=True)
            if job.metrics_step != metrics_step and "loss" in job.metrics:
                metrics_step = job.metrics_step
                print(f"step {job.step}/{job.spec.total_steps} loss {job.metrics['loss']:.4f}", flush=True)

        final = jobs.GetJob(service_pb2.GetJobRequest(job_id=job_id), timeout=30)
        if args.predict and final.state == service_pb2.SUCCEEDED:
            opened = jobs.OpenSession(job_pb2.OpenSessionRequest(
                job_id=job_id, batch_size=8, feature_lengths=final.spec.feature_lengths), timeout=600)
            try:
                request = job_pb2.SessionRequest(session_id=opened.session_id, op=job_pb2.SessionRequest.PREDICT,
                                                 examples=[job_pb2.SessionExample(input=t) for t in args.predict])
                answer = jobs.RunSession(request, timeout=600)
                for text, prediction, score in zip(args.predict, answer.predictions, answer.scores):
                    print(f"predict {text} -> {prediction} ({score:.3f})")
            finally:
                jobs.CloseSession(job_pb2.CloseSessionRequest(session_id=opened.session_id), timeout=30)
        print(f"final {service_pb2.JobState.Name(final.state)} step {final.step} "
              f"checkpoint {final.latest_checkpoint or '-'}")
        return 0 if final.state == service_pb2.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
