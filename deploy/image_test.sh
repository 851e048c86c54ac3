#!/bin/bash
# The image as users build and run it: deploy/Dockerfile built with podman,
# then a coordinator and two workers run as containers on a private network
# the way the Kubernetes manifests run them (user 10001, read-only root
# filesystem, writable /tmp, outputs and state on volumes, mutual TLS and a
# bearer token), and the `trainyard` CLI outside the containers submits jobs:
#   - the image's user is 10001 and its root filesystem cannot be written;
#   - a job runs to SUCCEEDED on the two worker containers;
#   - `podman stop` of a worker (SIGTERM, then a 60 s grace period, as
#     Kubernetes delivers a preemption) makes the job stop with an emergency
#     checkpoint; the worker started again, the job resumes from it and
#     succeeds.
#
#   deploy/image_test.sh [--long] [--keep]
#
# By default (scripts/test.sh) the image is built from source in the host's
# default configuration with the host's Bazel disk cache mounted into the
# build, so that the container reuses what the host compiled from the same
# sources instead of compiling the project again (the build log's process
# line, printed with the check, says how many actions came from the cache).
# --long (scripts/test.sh --long) builds both images as users build them:
# -c opt from source without the host's cache, and the CUDA image
# (--target cuda), which without a GPU is checked as far as it goes: every
# library its binaries link is inside, and its worker refuses --device
# cuda:0 with the reason. --keep leaves the containers and files for a look.
#
# No image registry is reachable here, so the Debian 12 base is made
# locally: `debootstrap --variant=minbase bookworm` from this machine's apt
# mirror, imported as localhost/trainyard-base:bookworm (kept between runs),
# and passed to the Dockerfile as BUILD_BASE and RUN_BASE. Bazel's and apt's
# caches of the image build are kept under /var/cache/trainyard-image, so a
# rerun on the same machine builds only what changed. Needs root, podman
# with runc (scripts/setup.sh installs them) and the host's
# //client:trainyard (the CLI).
set -u
cd "$(dirname "$0")/.."
source tests/testing/cases.sh

keep=0 long=0
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    --long) long=1 ;;
    *) echo "usage: deploy/image_test.sh [--long] [--keep]"; exit 2 ;;
  esac
done
[[ "$(id -u)" -eq 0 ]] || { echo "deploy/image_test.sh: needs root (podman's networks, debootstrap)"; exit 1; }

# podman's settings for these machines (runc; no default ulimits): see the
# file.
export CONTAINERS_CONF="$PWD/deploy/testdata/containers.conf"
cache=/var/cache/trainyard-image
base=localhost/trainyard-base:bookworm
image=localhost/trainyard:image-test
cuda_image=localhost/trainyard-cuda:image-test
trainyard="$(bazel info bazel-bin 2>/dev/null)/client/trainyard"  # the default build's
run=$$
work=$(mktemp -d /tmp/trainyard-image-test.XXXXXX)
net=trainyard-it-$run
containers=()

cleanup() {
  if [[ $keep -eq 1 ]]; then
    echo "kept: containers ${containers[*]}, network $net, files $work"
    return
  fi
  for c in "${containers[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1; done
  podman network rm -f "$net" >/dev/null 2>&1
  rm -rf "$work"
}
# cases.sh's exit handler judges by the script's exit status: keep it
# through the clean-up.
trap 'status=$?; cleanup; (exit "$status"); _cases_finish' EXIT

# --- The base image -------------------------------------------------------
mirror() {  # this machine's Debian mirror (deb822 or one-line sources)
  local uri
  uri=$(grep -h '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1 | awk '{print $2}')
  [[ -n "$uri" ]] || uri=$(grep -h '^deb ' /etc/apt/sources.list 2>/dev/null | grep -v security | head -1 | awk '{print $2}')
  echo "${uri:-http://deb.debian.org/debian}"
}
make_base() {
  if podman image exists "$base"; then
    echo "$base: present"
    return 0
  fi
  local root="$work/rootfs"
  debootstrap --variant=minbase bookworm "$root" "$(mirror)" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log"; return 1; }
  # The image's apt uses this machine's sources (suites, security mirror).
  rm -f "$root/etc/apt/sources.list"
  cp -a /etc/apt/sources.list.d/*.sources "$root/etc/apt/sources.list.d/" 2>/dev/null \
    || cp -a /etc/apt/sources.list "$root/etc/apt/sources.list"
  tar -C "$root" -c . | podman import --change 'CMD ["/bin/bash"]' - "$base" >/dev/null || return 1
  rm -rf "$root"
  echo "$base: made by debootstrap from $(mirror)"
}
case_check "the Debian 12 base image (debootstrap, podman import)" make_base || exit 1

# --- The image --------------------------------------------------------------
build() {  # IMAGE LOG [podman build flags]: builds deploy/Dockerfile as IMAGE
  local image="$1" log="$2" began=$SECONDS old processes
  shift 2
  mkdir -p "$cache/bazel" "$cache/bazel-default" "$cache/apt"
  # The .deb files the host's apt already fetched (hard links where the
  # file system allows): the image's apt finds them instead of downloading.
  cp -ln /var/cache/apt/archives/*.deb "$cache/apt/" 2>/dev/null || cp -n /var/cache/apt/archives/*.deb "$cache/apt/" 2>/dev/null
  old=$(podman image inspect -f '{{.Id}}' "$image" 2>/dev/null)
  # No layer cache (--layers=false): no 2 GB build-stage image left behind
  # per run; the Bazel and apt caches make a rebuild quick without it.
  podman build --pull=never --layers=false -f deploy/Dockerfile -t "$image" "$@" \
    --build-arg BUILD_BASE="$base" --build-arg RUN_BASE="$base" \
    -v "$cache/apt:/var/cache/apt/archives" \
    . >"$work/$log" 2>&1 || { tail -40 "$work/$log"; return 1; }
  if [[ -n "$old" && "$old" != "$(podman image inspect -f '{{.Id}}' "$image")" ]]; then
    podman rmi "$old" >/dev/null 2>&1  # the previous run's image
  fi
  processes=$(grep -o 'INFO: [0-9]* processes: .*' "$work/$log" | tail -1)
  echo "built $image in $((SECONDS - began)) s ($(podman image inspect -f '{{.Size}}' "$image") bytes); Bazel: ${processes#INFO: }"
}
if [[ $long -eq 0 ]]; then
  # The host's default configuration, with the host's disk cache (the one
  # scripts/setup.sh configured in .bazelrc.setup) at the path the image's
  # set-up gives it.
  host_disk_cache=$(sed -n 's/^build --disk_cache=//p' .bazelrc.setup 2>/dev/null | head -1)
  build_flags=(--build-arg "BAZEL_FLAGS=-c fastbuild" -v "$cache/bazel-default:/root/.cache/bazel")
  if [[ -n "$host_disk_cache" && -d "$host_disk_cache" ]]; then
    build_flags+=(--build-arg TRAINYARD_DISK_CACHE=/var/cache/trainyard/bazel-disk
      -v "$host_disk_cache:/var/cache/trainyard/bazel-disk")
  fi
  case_check "deploy/Dockerfile builds from source with podman (the host's configuration and disk cache)" \
    build "$image" build.log "${build_flags[@]}" || exit 1
else
  # As users build it: -c opt, nothing of the host's (the output base under
  # $cache/bazel is the image builds' own, kept between runs).
  case_check "deploy/Dockerfile builds from source with podman (-c opt, as users build it)" \
    build "$image" build.log -v "$cache/bazel:/root/.cache/bazel" || exit 1
fi

# --- The CUDA image (--target cuda) ---------------------------------------
# pip in the build fetches from PyPI over TLS: give it this machine's CA
# bundle, which trusts the machine's egress proxy if it has one.
ca=()
host_ca=/etc/ssl/certs/ca-certificates.crt
[[ -f "$host_ca" ]] && ca=(-v "$host_ca:/etc/ssl/host-ca.crt:ro" --build-arg PIP_CERT_FILE=/etc/ssl/host-ca.crt)
cuda_built=1
if [[ $long -eq 1 ]]; then
  case_check "deploy/Dockerfile's cuda target builds with podman" \
    build "$cuda_image" build-cuda.log --target cuda -v "$cache/bazel:/root/.cache/bazel" "${ca[@]}"
  cuda_built=$?
fi

cuda_libraries_resolve() {
  local user missing
  user=$(podman image inspect -f '{{.Config.User}}' "$cuda_image")
  [[ "$user" == "10001:10001" ]] || { echo "the CUDA image's user is '$user', not 10001:10001"; return 1; }
  # Every library the CUDA binaries link resolves inside the image (the
  # GPU driver's libcuda.so.1 is not one of them: the CUDA LibTorch opens it
  # at run time, from the host).
  missing=$(podman run --rm --read-only --entrypoint /bin/sh "$cuda_image" -c \
    'for f in /opt/trainyard/bin/*; do ldd "$f"; done | grep "not found" | sort -u')
  [[ -z "$missing" ]] || { echo "unresolved in the CUDA image: $missing"; return 1; }
  echo "user 10001; every library its binaries link resolves inside it"
}
cuda_worker_refuses_without_a_gpu() {
  local out rc
  out=$(podman run --rm --read-only "$cuda_image" worker --coordinator=127.0.0.1:1 --device=cuda:0 2>&1)
  rc=$?
  echo "exit $rc: $(tail -1 <<<"$out")"
  [[ $rc -ne 0 ]] && grep -q "no CUDA device is visible" <<<"$out"
}
if [[ $cuda_built -eq 0 ]]; then
  case_check "the CUDA image: user 10001, every library it links inside" cuda_libraries_resolve
  case_check "the CUDA image's worker refuses --device cuda:0 without a GPU, saying why" \
    cuda_worker_refuses_without_a_gpu
fi

runs_as_non_root_read_only() {
  local user
  user=$(podman image inspect -f '{{.Config.User}}' "$image")
  [[ "$user" == "10001:10001" ]] || { echo "the image's user is '$user', not 10001:10001"; return 1; }
  local out
  out=$(podman run --rm --read-only --entrypoint /bin/sh "$image" -c 'id -u; touch /opt/trainyard/bin/x' 2>&1)
  [[ "$(head -1 <<<"$out")" == 10001 ]] || { echo "runs as: $out"; return 1; }
  grep -q "Read-only file system" <<<"$out" || { echo "the root filesystem was writable: $out"; return 1; }
  echo "runs as uid 10001; a write to the root filesystem fails: $(tail -1 <<<"$out")"
}
case_check "the image runs as user 10001 with a read-only root filesystem" runs_as_non_root_read_only

# --- A cluster of containers -------------------------------------------------
[[ -x "$trainyard" ]] || { echo "$trainyard is missing: bazel build //client:trainyard"; exit 1; }
subnet=10.$((90 + run % 60)).$((run % 250)).0/24
prefix=${subnet%.0/24}
coordinator_ip=$prefix.2
mkdir -p "$work/outputs" "$work/state" "$work/tls" "$work/auth"
scripts/gen-dev-certs.sh "$work/tls" trainyard-coordinator trainyard-worker >/dev/null 2>&1 || exit 1
cp "$work/tls/node.pem" "$work/tls/tls.crt"
cp "$work/tls/node.key" "$work/tls/tls.key"
cp "$work/tls/ca.pem" "$work/tls/ca.crt"
token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "ci $token" >"$work/auth/tokens"
chown -R 10001:10001 "$work/outputs" "$work/state"
chown 10001:10001 "$work/tls/tls.key" "$work/auth/tokens"
chmod 600 "$work/tls/tls.key" "$work/auth/tokens"
podman network create --subnet "$subnet" "$net" >/dev/null || { echo "podman network create $subnet failed"; exit 1; }

# As deploy/base: the ConfigMap's TLS settings, read-only root, /tmp writable.
common=(--network "$net" --read-only --tmpfs /tmp
  -v "$work/tls:/etc/trainyard/tls:ro" -v "$work/outputs:/outputs"
  -e TRAINYARD_TLS_CERT=/etc/trainyard/tls/tls.crt -e TRAINYARD_TLS_KEY=/etc/trainyard/tls/tls.key
  -e TRAINYARD_TLS_CA=/etc/trainyard/tls/ca.crt -e TRAINYARD_TLS_SERVER_NAME=trainyard-worker)
coordinator=ty-coordinator-$run
containers+=("$coordinator")
podman run -d --name "$coordinator" "${common[@]}" --ip "$coordinator_ip" -p 127.0.0.1::7070 \
  -v "$work/state:/var/lib/trainyard" -v "$work/auth:/etc/trainyard/auth:ro" \
  "$image" coordinator --listen=0.0.0.0:7070 --state-dir=/var/lib/trainyard --output-root=/outputs \
  --auth-tokens=/etc/trainyard/auth/tokens >/dev/null || exit 1
start_worker() {  # INDEX
  local name=ty-worker-$1-$run ip=$prefix.$((10 + $1))
  containers+=("$name")
  podman run -d --name "$name" "${common[@]}" --ip "$ip" --stop-timeout 60 \
    -e TRAINYARD_TLS_SERVER_NAME=trainyard-coordinator \
    "$image" worker --coordinator=$coordinator_ip:7070 --listen=0.0.0.0:7071 --advertise-host="$ip" \
    --threads=1 >/dev/null
}
start_worker 0 && start_worker 1 || exit 1
port=$(podman port "$coordinator" 7070/tcp | head -1 | sed 's/.*://')

cli() {  # the CLI outside the containers, as a user runs it
  TRAINYARD_COORDINATOR="127.0.0.1:$port" TRAINYARD_TLS_CA="$work/tls/ca.pem" \
    TRAINYARD_TLS_SERVER_NAME=trainyard-coordinator TRAINYARD_TOKEN="$token" "$trainyard" "$@"
}
field() {  # JOB FIELD: one field of `trainyard status --json`
  cli status --json "$1" 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin).get('$2', ''))"
}
wait_field() {  # JOB FIELD PATTERN SECONDS
  local deadline=$((SECONDS + $4)) v=""
  while [[ $SECONDS -lt $deadline ]]; do
    v=$(field "$1" "$2")
    [[ "$v" =~ $3 ]] && return 0
    sleep 1
  done
  echo "job $1: $2 is '$v' after $4 s, waiting for /$3/"
  return 1
}
logs() {
  for c in "${containers[@]}"; do echo "--- $c"; podman logs --tail 15 "$c" 2>&1; done
}

workers_register() {
  local deadline=$((SECONDS + 60)) n=0 i
  while [[ $SECONDS -lt $deadline ]]; do
    n=0
    for i in 0 1; do
      podman logs "ty-worker-$i-$run" 2>&1 | grep -q "registered with the coordinator" && n=$((n + 1))
    done
    [[ $n -eq 2 ]] && { echo "both worker containers registered (mutual TLS, advertised as $prefix.10-11)"; return 0; }
    sleep 1
  done
  echo "$n of 2 workers registered after 60 s"; logs; return 1
}
case_check "the coordinator and two workers start as containers and register" workers_register || exit 1

spec="$work/job.textproto"
cp examples/tiny_local.textproto "$spec"
job_succeeds() {
  local job
  job=$(cli submit "$spec" --set output_dir=first --set num_workers=2 --set total_steps=8 \
        --set eval_period=0 --set checkpoint_period=4) || return 1
  wait_field "$job" state '^(SUCCEEDED|FAILED|CANCELLED)$' 300 || { logs; return 1; }
  [[ "$(field "$job" state)" == SUCCEEDED ]] || { cli status "$job"; logs; return 1; }
  [[ -f "$work/outputs/first/checkpoint_8/MANIFEST.json" ]] || { ls -R "$work/outputs"; return 1; }
  echo "job $job SUCCEEDED; checkpoint_8 is on the outputs volume, written by uid $(stat -c %u "$work/outputs/first/checkpoint_8")"
}
case_check "a job submitted from outside runs to SUCCEEDED on the worker containers" job_succeeds

sigterm_preempts_and_resumes() {
  local job worker=ty-worker-1-$run reason step
  job=$(cli submit "$spec" --set output_dir=preempted --set num_workers=2 --set total_steps=400 \
        --set eval_period=0 --set checkpoint_period=1000) || return 1
  wait_field "$job" step '^([3-9][0-9]?|[1-9][0-9]{2,})$' 300 || { logs; return 1; }
  # What Kubernetes does to a preempted pod: SIGTERM, then SIGKILL after the
  # grace period (60 s, as terminationGracePeriodSeconds).
  local began=$SECONDS
  podman stop -t 60 "$worker" >/dev/null || return 1
  echo "podman stop took $((SECONDS - began)) s; exit code $(podman inspect -f '{{.State.ExitCode}}' "$worker")"
  wait_field "$job" reason 'emergency checkpoint at step' 60 || { logs; return 1; }
  reason=$(field "$job" reason)
  step=$(sed -n 's/.*emergency checkpoint at step \([0-9]*\).*/\1/p' <<<"$reason")
  echo "status: $(field "$job" state): $reason"
  [[ -f "$work/outputs/preempted/checkpoint_$step/MANIFEST.json" ]] || { echo "no checkpoint_$step"; return 1; }
  podman start "$worker" >/dev/null || return 1
  wait_field "$job" state '^(SUCCEEDED|FAILED|CANCELLED)$' 600 || { logs; return 1; }
  [[ "$(field "$job" state)" == SUCCEEDED ]] || { cli status "$job"; logs; return 1; }
  echo "resumed from checkpoint_$step and SUCCEEDED"
}
case_check "SIGTERM to a worker container: emergency checkpoint, then the job resumes" sigterm_preempts_and_resumes
