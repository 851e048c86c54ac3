"""Trainyard from Python: a client of a coordinator's JobService
(JobClient) and T5X's InteractiveModel over its interactive sessions
(RemoteInteractiveModel). docs/python.md in the repository describes both.

The messages are `trainyard.job_pb2` (JobSpec, ...) and
`trainyard.job_service_pb2` (JobInfo, JobEvent, JobState values, ...),
generated from the repository's proto/ when the package was built.
"""
from trainyard.client import (FINAL_STATES, Error, JobClient, TlsConfig, coordinator_address, job_state_name,
                              parse_job_spec, spec_to_dict, token_from_env)
from trainyard.interactive import RemoteInteractiveModel, metric_fn_form
from trainyard.proto import job_pb2, job_service_pb2

__all__ = [
    "FINAL_STATES", "Error", "JobClient", "RemoteInteractiveModel", "TlsConfig", "coordinator_address", "job_pb2",
    "job_service_pb2", "job_state_name", "metric_fn_form", "parse_job_spec", "spec_to_dict", "token_from_env",
]
