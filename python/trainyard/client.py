"""A client of a Trainyard coordinator's JobService (proto/job_service.proto).

Submits jobs (from a JobSpec, a textproto, a JSON file or a dict), reads
them, lists them, follows them as a stream of events, cancels them and asks
running ones for a checkpoint. Security is the `trainyard` CLI's: TLS when a
CA, or a client certificate and key, is given (TRAINYARD_TLS_CA,
TRAINYARD_TLS_CERT, TRAINYARD_TLS_KEY, TRAINYARD_TLS_SERVER_NAME), and an
`authorization: Bearer TOKEN` header on every call when a token is
(TRAINYARD_TOKEN, or the first line of TRAINYARD_TOKEN_FILE).

A JobClient holds one gRPC channel; its methods may be called from several
threads at once.
"""
import dataclasses
import json
import os
import pathlib
from typing import Any, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc
from google.protobuf import json_format, text_format
from google.protobuf.message import Message

from trainyard.proto import job_pb2, job_service_pb2, job_service_pb2_grpc

JobSpecLike = Union[job_pb2.JobSpec, Mapping, str, "os.PathLike[str]"]

FINAL_STATES = (job_service_pb2.SUCCEEDED, job_service_pb2.FAILED, job_service_pb2.CANCELLED)


class Error(grpc.RpcError):
    """A call the coordinator (or the channel) refused: `code()` is its
    grpc.StatusCode and `details()` the message, as on grpc's own errors."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        """The call's status code."""
        return self._code

    def details(self) -> str:
        """The status message (for UNAVAILABLE, with what to check)."""
        return self._details


@dataclasses.dataclass(frozen=True)
class TlsConfig:
    """PEM files, as the CLI's TRAINYARD_TLS_* variables name them. TLS is on
    when any file is given; cert_file and key_file go together (a client
    certificate). server_name: the name the coordinator's certificate must
    carry when it is not the host of the address dialled."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""

    @staticmethod
    def from_env() -> "TlsConfig":
        """TRAINYARD_TLS_CA, TRAINYARD_TLS_CERT, TRAINYARD_TLS_KEY and
        TRAINYARD_TLS_SERVER_NAME (empty when unset)."""
        env = lambda name: os.environ.get(name, "")
        return TlsConfig(ca_file=env("TRAINYARD_TLS_CA"), cert_file=env("TRAINYARD_TLS_CERT"),
                         key_file=env("TRAINYARD_TLS_KEY"), server_name=env("TRAINYARD_TLS_SERVER_NAME"))

    @property
    def enabled(self) -> bool:
        """Whether the channel uses TLS."""
        return bool(self.ca_file or self.cert_file or self.key_file)

    def credentials(self) -> Tuple[grpc.ChannelCredentials, List[Tuple[str, str]]]:
        """The channel credentials and options (the server name override);
        ValueError naming the file that is missing or not PEM, or the
        certificate without its key."""
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("TRAINYARD_TLS_CERT and TRAINYARD_TLS_KEY (cert_file, key_file): give both or neither")
        root = _read_pem("TRAINYARD_TLS_CA", self.ca_file) if self.ca_file else None
        cert = _read_pem("TRAINYARD_TLS_CERT", self.cert_file) if self.cert_file else None
        key = _read_pem("TRAINYARD_TLS_KEY", self.key_file) if self.key_file else None
        options = [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []
        return grpc.ssl_channel_credentials(root_certificates=root, private_key=key, certificate_chain=cert), options


def _read_pem(what: str, path: str) -> bytes:
    try:
        data = pathlib.Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"{what}: cannot read '{path}': {e.strerror}") from None
    if b"-----BEGIN " not in data:
        raise ValueError(f"{what}: '{path}' is not PEM")
    return data


def token_from_env() -> str:
    """The bearer token: TRAINYARD_TOKEN, else the first line of the file
    TRAINYARD_TOKEN_FILE (whitespace stripped), else "". ValueError naming
    the file when it cannot be read or its first line is empty."""
    token = os.environ.get("TRAINYARD_TOKEN", "")
    if token:
        return token
    path = os.environ.get("TRAINYARD_TOKEN_FILE", "")
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except OSError:
        raise ValueError(f"TRAINYARD_TOKEN_FILE: cannot read '{path}'") from None
    if not token:
        raise ValueError(f"TRAINYARD_TOKEN_FILE: '{path}' is empty")
    return token


def coordinator_address(address: Optional[str] = None) -> str:
    """`address`, else TRAINYARD_COORDINATOR; ValueError when neither is set."""
    address = address or os.environ.get("TRAINYARD_COORDINATOR", "")
    if not address:
        raise ValueError("coordinator: not given and TRAINYARD_COORDINATOR is not set; want HOST:PORT")
    return address


def parse_job_spec(spec: JobSpecLike) -> job_pb2.JobSpec:
    """A JobSpec from a JobSpec (copied), a dict (JSON field names or proto
    field names, as json_format.ParseDict takes), textproto text (a str), or
    a file (an os.PathLike: JSON when it ends in .json, else textproto).
    ValueError naming the source and the parser's complaint."""
    out = job_pb2.JobSpec()
    if isinstance(spec, job_pb2.JobSpec):
        out.CopyFrom(spec)
        return out
    if isinstance(spec, Mapping):
        try:
            return json_format.ParseDict(spec, out)
        except json_format.ParseError as e:
            raise ValueError(f"job spec (dict): {e}") from None
    if isinstance(spec, os.PathLike):
        path = os.fspath(spec)
        with open(path, encoding="utf-8") as f:
            content = f.read()
        try:
            if path.endswith(".json"):
                return json_format.Parse(content, out)
            return text_format.Parse(content, out)
        except (json_format.ParseError, text_format.ParseError) as e:
            raise ValueError(f"{path}: {e}") from None
    if isinstance(spec, str):
        try:
            return text_format.Parse(spec, out)
        except text_format.ParseError as e:
            raise ValueError(f"job spec (textproto): {e}") from None
    raise TypeError(f"job spec: a JobSpec, dict, textproto str or path, not {type(spec).__name__}")


class JobClient:
    """The JobService of one coordinator.

    address: HOST:PORT, default TRAINYARD_COORDINATOR. tls and token default
    to the environment as the CLI reads it (TlsConfig.from_env(),
    token_from_env()). timeout: seconds each unary call may take (a
    checkpoint request waits longer: its own timeout plus 10 s).
    """

    def __init__(self, address: Optional[str] = None, *, tls: Optional[TlsConfig] = None,
                 token: Optional[str] = None, timeout: float = 30.0) -> None:
        self.address = coordinator_address(address)
        self.tls = TlsConfig.from_env() if tls is None else tls
        self.timeout = timeout
        token = token_from_env() if token is None else token
        self._metadata: Tuple[Tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        if self.tls.enabled:
            credentials, options = self.tls.credentials()
            self._channel = grpc.secure_channel(self.address, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(self.address)
        self.stub = job_service_pb2_grpc.JobServiceStub(self._channel)

    def close(self) -> None:
        """Closes the channel (streams in progress end with CANCELLED)."""
        self._channel.close()

    def __enter__(self) -> "JobClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, request: Message, timeout: Optional[float] = None) -> Any:
        """Calls the unary JobService `method` (e.g. "GetJob") with the token;
        an error becomes Error with the call's code."""
        try:
            return getattr(self.stub, method)(request, timeout=self.timeout if timeout is None else timeout,
                                              metadata=self._metadata)
        except grpc.RpcError as e:
            raise self._error(e) from None

    def _error(self, e: grpc.RpcError) -> Error:
        code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
        details = e.details() if hasattr(e, "details") else str(e)
        if code == grpc.StatusCode.UNAVAILABLE:
            hint = (" (with TLS: is TRAINYARD_TLS_CA the CA that signed its certificate, and does the certificate "
                    "name the address dialled? TRAINYARD_TLS_SERVER_NAME overrides the name)" if self.tls.enabled
                    else " (if it uses TLS, set TRAINYARD_TLS_CA)")
            details = f"coordinator {self.address} unreachable: {details}{hint}"
        return Error(code, details)

    def submit(self, spec: JobSpecLike, overrides: Sequence[str] = ()) -> job_service_pb2.SubmitJobResponse:
        """Submits a job: `spec` as parse_job_spec takes it, `overrides` as
        the CLI's --set PATH=VALUE (applied by the coordinator before it
        validates). The response has the job_id and the normalized_spec;
        INVALID_ARGUMENT names the bad field."""
        request = job_service_pb2.SubmitJobRequest(spec=parse_job_spec(spec), overrides=list(overrides))
        return self.call("SubmitJob", request)

    def status(self, job_id: str) -> job_service_pb2.JobInfo:
        """The job's record (NOT_FOUND once its record is gone)."""
        return self.call("GetJob", job_service_pb2.GetJobRequest(job_id=job_id))

    get = status

    def list_jobs(self, states: Sequence[int] = (), limit: int = 0) -> List[job_service_pb2.JobInfo]:
        """Jobs newest first, in the given JobStates (all when empty), at most
        `limit` of them (0: all), read a page at a time."""
        request = job_service_pb2.ListJobsRequest(states=list(states), page_size=1000)
        jobs: List[job_service_pb2.JobInfo] = []
        while True:
            response = self.call("ListJobs", request)
            jobs.extend(response.jobs)
            if not response.next_page_token or (limit > 0 and len(jobs) >= limit):
                return jobs[:limit] if limit > 0 else jobs
            request.page_token = response.next_page_token

    list = list_jobs

    def watch(self, job_id: str, timeout: Optional[float] = None) -> Iterator[job_service_pb2.JobEvent]:
        """The job's events (a STATE_CHANGED event on every state change, a
        PROGRESS event on every rank-0 summary), ending after it reaches a
        final state. Breaking out of the loop cancels the stream; `timeout`
        (seconds, default none) bounds the whole stream (DEADLINE_EXCEEDED)."""
        call = self.stub.WatchJob(job_service_pb2.WatchJobRequest(job_id=job_id), timeout=timeout,
                                  metadata=self._metadata)
        try:
            for event in call:
                yield event
        except grpc.RpcError as e:
            raise self._error(e) from None
        finally:
            call.cancel()

    def wait(self, job_id: str, timeout: Optional[float] = None) -> job_service_pb2.JobInfo:
        """Watches the job to its final state and returns its record."""
        for _ in self.watch(job_id, timeout=timeout):
            pass
        return self.status(job_id)

    def cancel(self, job_id: str, reason: str = "") -> job_service_pb2.JobInfo:
        """Cancels the job (FAILED_PRECONDITION if it already ended); its
        record as the cancel left it."""
        return self.call("CancelJob", job_service_pb2.CancelJobRequest(job_id=job_id, reason=reason)).job

    def checkpoint(self, job_id: str, timeout_seconds: int = 600) -> job_service_pb2.CheckpointJobResponse:
        """A checkpoint of the RUNNING training job at its next chunk boundary
        (FAILED_PRECONDITION otherwise; DEADLINE_EXCEEDED when it does not
        come within timeout_seconds). The response has its path and step."""
        request = job_service_pb2.CheckpointJobRequest(job_id=job_id, timeout_seconds=timeout_seconds)
        return self.call("CheckpointJob", request, timeout=timeout_seconds + 10)


def job_state_name(state: int) -> str:
    """"RUNNING" for job_service_pb2.RUNNING, and so on."""
    return job_service_pb2.JobState.Name(state)


def spec_to_dict(spec: job_pb2.JobSpec) -> dict:
    """A JobSpec as a dict with the proto's field names (ParseDict takes it back)."""
    return json.loads(json_format.MessageToJson(spec, preserving_proto_field_name=True))
