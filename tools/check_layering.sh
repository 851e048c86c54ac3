#!/usr/bin/env bash
# The layering of BUILD.bazel's comment, checked on the dependency graph:
# visibility stops a package from naming a forbidden package directly; this
# finds forbidden edges through other targets and to third-party libraries.
# Prints each rule and, for a broken one, a path that breaks it; exits 1 if
# any is broken. Run by scripts/test.sh (one case per rule).
#   tools/check_layering.sh
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
TENSORS="//third_party:libtorch + //trainer/... + //model/... + //data/... + //collective:collective + //job/... + //interactive/... + //worker/..."
SERVICES="//third_party:grpc + //proto:job_service_cc_proto_grpc + //proto:worker_cc_proto_grpc + //coordinator/... + //worker/... + //client/..."
forbid() {  # RULE FROM TO
  local path
  if ! path=$(bazel query --noshow_progress --noshow_loading_progress "somepath($2, $3)" 2>/tmp/check_layering.err); then
    echo "FAIL: $1: bazel query failed: $(tail -n 3 /tmp/check_layering.err)"
    status=1
  elif [ -n "$path" ]; then
    echo "FAIL: $1; a path that breaks it:"
    printf '    %s\n' $path
    status=1
  else
    echo "ok: $1"
  fi
}
forbid "the coordinator uses no tensors (no LibTorch, trainer, model, data, collectives, job, worker)" \
  "//coordinator/..." "$TENSORS"
forbid "the job spec, gin, evaluation and checkpoint libraries use no tensors" \
  "//spec/... + //gin/... + //evaluation/... + //checkpoint/..." "//third_party:libtorch"
forbid "the training and job libraries use no gRPC services" \
  "//trainer/... + //model/... + //data/... + //collective/... + //checkpoint/... + //job/... + //interactive/... + //evaluation/... + //spec/... + //gin/..." \
  "$SERVICES"
forbid "the training and job libraries speak no service's messages (only the job spec; spec/ validates session requests)" \
  "//trainer/... + //model/... + //data/... + //collective/... + //checkpoint/... + //job/... + //interactive/... + //evaluation/..." \
  "//proto:job_service_cc_proto + //proto:worker_cc_proto"
forbid "common/ depends on nothing of the project's libraries above it" \
  "//common/..." "//spec/... + //evaluation/... + //checkpoint/... + //collective/... + //data/... + //model/... + //trainer/... + //job/... + //interactive/... + //worker/... + //coordinator/... + //client/..."
forbid "the ground package common/ links neither gRPC nor LibTorch (their parts are common/grpc and common/torch)" \
  "//common:all" "//third_party:grpc + //third_party:libtorch"
forbid "the training layer knows nothing of jobs, sessions or processes" \
  "//trainer/... + //model/... + //data/... + //collective/... + //checkpoint/..." \
  "//job/... + //interactive/... + //worker/... + //coordinator/... + //client/..."
forbid "a job knows no process (worker, coordinator, CLI)" \
  "//job/... + //interactive/..." "//worker/... + //coordinator/... + //client/..."
forbid "the worker knows nothing of the coordinator's internals" \
  "//worker/..." "//coordinator/..."
forbid "the coordinator's and the worker's logic, jobs and specs link no gRPC (only their adapters do)" \
  "//coordinator:coordinator + //coordinator:job_store + //coordinator:job_driver + //coordinator:session_manager + //worker:worker_core + //worker:membership + //job/... + //spec/..." \
  "//third_party:grpc + //proto:job_service_cc_proto_grpc + //proto:worker_cc_proto_grpc"
exit "$status"
