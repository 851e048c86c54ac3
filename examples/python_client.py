#!/usr/bin/env python3
"""Submits a job to a Trainyard coordinator from Python and follows it.

Any language with gRPC can drive Trainyard: this client uses code generated
from proto/job_service.proto by grpcio-tools (generated at start-up into a
temporary directory, so nothing generated is checked in). It needs no
install; the installed client is the `trainyard` package (`pip install
./python`, docs/python.md).

    pip install grpcio grpcio-tools protobuf
    python3 examples/python_client.py --coordinator 127.0.0.1:PORT \\
        examples/tiny_local.textproto --set total_steps=40

Prints the job id, one line per state change or summary, and the final
state; exits 0 if the job succeeded, 1 if it failed or was cancelled, 2 on
bad input. With --predict TEXT (repeatable), then opens an interactive
session on the job's final checkpoint (served by one of the coordinator's
idle workers), prints a prediction for each text, and closes it.

Security as the CLI: TRAINYARD_TLS_CA (and TRAINYARD_TLS_CERT/KEY for a
client certificate) turn TLS on; TRAINYARD_TOKEN or TRAINYARD_TOKEN_FILE
give the bearer token sent with every call.
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


def open_channel(grpc, address):
    """TLS when TRAINYARD_TLS_CA is set (with a client certificate when
    TRAINYARD_TLS_CERT and TRAINYARD_TLS_KEY are), else plaintext."""
    ca = os.environ.get("TRAINYARD_TLS_CA")
    if not ca:
        return grpc.insecure_channel(address)
    read = lambda var: open(os.environ[var], "rb").read() if os.environ.get(var) else None
    creds = grpc.ssl_channel_credentials(root_certificates=read("TRAINYARD_TLS_CA"),
                                         private_key=read("TRAINYARD_TLS_KEY"),
                                         certificate_chain=read("TRAINYARD_TLS_CERT"))
    options = []
    if os.environ.get("TRAINYARD_TLS_SERVER_NAME"):
        options.append(("grpc.ssl_target_name_override", os.environ["TRAINYARD_TLS_SERVER_NAME"]))
    return grpc.secure_channel(address, creds, options=options)


def auth_metadata():
    token = os.environ.get("TRAINYARD_TOKEN")
    if not token and os.environ.get("TRAINYARD_TOKEN_FILE"):
        with open(os.environ["TRAINYARD_TOKEN_FILE"]) as f:
            token = f.readline().strip()
    return [("authorization", f"Bearer {token}")] if token else None


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

    with open_channel(grpc, args.coordinator) as channel:
        md = auth_metadata()
        jobs = service_grpc.JobServiceStub(channel)
        try:
            submitted = jobs.SubmitJob(service_pb2.SubmitJobRequest(spec=spec, overrides=args.set), timeout=30, metadata=md)
        except grpc.RpcError as e:
            print(f"error: {e.code().name}: {e.details()}", file=sys.stderr)
            return 2 if e.code() == grpc.StatusCode.INVALID_ARGUMENT else 1
        job_id = submitted.job_id
        print(job_id, flush=True)

        state, metrics_step = None, -1
        for event in jobs.WatchJob(service_pb2.WatchJobRequest(job_id=job_id), metadata=md):
            job = event.job
            name = service_pb2.JobState.Name(job.state)
            if name != state:
                state = name
                print(f"state {name}" + (f" ({job.reason})" if job.reason else ""), flush=True)
            if job.metrics_step != metrics_step and "loss" in job.metrics:
                metrics_step = job.metrics_step
                print(f"step {job.step}/{job.spec.total_steps} loss {job.metrics['loss']:.4f}", flush=True)

        final = jobs.GetJob(service_pb2.GetJobRequest(job_id=job_id), timeout=30, metadata=md)
        if args.predict and final.state == service_pb2.SUCCEEDED:
            opened = jobs.OpenSession(service_pb2.OpenSessionRequest(
                job_id=job_id, batch_size=8, feature_lengths=final.spec.feature_lengths), timeout=600, metadata=md)
            try:
                request = service_pb2.SessionRequest(session_id=opened.session_id, op=service_pb2.SessionRequest.PREDICT,
                                                 examples=[service_pb2.SessionExample(input=t) for t in args.predict])
                answer = jobs.RunSession(request, timeout=600, metadata=md)
                for text, prediction, score in zip(args.predict, answer.predictions, answer.scores):
                    print(f"predict {text} -> {prediction} ({score:.3f})")
            finally:
                jobs.CloseSession(service_pb2.CloseSessionRequest(session_id=opened.session_id), timeout=30, metadata=md)
        print(f"final {service_pb2.JobState.Name(final.state)} step {final.step} "
              f"checkpoint {final.latest_checkpoint or '-'}")
        return 0 if final.state == service_pb2.SUCCEEDED else 1


if __name__ == "__main__":
    sys.exit(main())
