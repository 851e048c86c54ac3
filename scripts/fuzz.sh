#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + ASan (--config=fuzz) and runs each
# for a while, seeded with the example and bad specs.
#   scripts/fuzz.sh [SECONDS]     (default 60 per target)
# The fuzz build (--config=fuzz) has an output tree of its own, so it never
# invalidates the other configurations' objects.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"

targets=(//spec:jobspec_fuzzer //spec:session_request_fuzzer //common/grpc:security_fuzzer //common:http_request_fuzzer //data:source_fuzzer //checkpoint:msgpack_fuzzer //checkpoint:ocdbt_fuzzer)

# Seeds: real inputs of each kind.
seed_corpus() {  # NAME DIR
  case "$1" in
    jobspec_fuzzer)
      cp examples/*.textproto examples/*.json tests/bad_specs/*.textproto tests/bad_specs/*.json "$2/" ;;
    session_request_fuzzer)
      printf 'checkpoint: "/srv/trainyard/run/checkpoint_10"\nbatch_size: 8\nnum_workers: 2\noutput_dir: "s"\n' >"$2/text"
      printf 'job_id: "j-1"\nfeature_lengths { inputs: 16 targets: 32 }\nwait_seconds: 5\n' >"$2/job" ;;
    security_fuzzer)
      printf 'alice 0123456789abcdef-alice\n# comment\nbob\t0123456789abcdef-bob\n' >"$2/tokens"
      printf 'Bearer 0123456789abcdef-alice' >"$2/bearer"
      printf '127.0.0.1:7070' >"$2/listen"; printf '[::1]:0' >"$2/listen6" ;;
    http_request_fuzzer)
      printf 'GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n' >"$2/get"
      printf 'HEAD /healthz?probe=1 HTTP/1.0\r\n\r\n' >"$2/head"
      printf 'POST / HTTP/1.1\r\n\r\n' >"$2/post" ;;
    source_fuzzer)
      printf '{"inputs": "12", "targets": "twelve"}\n{"inputs": "\\u00e9", "targets": "x"}\n' >"$2/jsonl"
      printf '12\ttwelve\n7\tseven\n' >"$2/tsv"
      # tf.train.Example {inputs: "12", targets: "twelve"} (framed as a record by the target)
      printf '\x0a\x29\x0a\x10\x0a\x06inputs\x12\x06\x0a\x04\x0a\x0212\x0a\x15\x0a\x07targets\x12\x0a\x0a\x08\x0a\x06twelve' >"$2/example" ;;
    msgpack_fuzzer)
      # {"version": 3, "optimizer": {"step": ext 1 [[], "int32", 4 bytes]}}
      printf '\x82\xa7version\x03\xa9optimizer\x81\xa4step\xc7\x0e\x01\x93\x90\xa5int32\xc4\x04\x01\x00\x00\x00' >"$2/state"
      printf '\xdc\x00\x03\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00\xd3\xff\xff\xff\xff\xff\xff\xff\xfe\xc0' >"$2/scalars" ;;
    ocdbt_fuzzer)
      # First byte odd: a manifest's body (uuid, kind 0, configuration, one
      # data file d/root, one version); even: a leaf node's (".zarray"
      # inline, "0" out of line in data).
      printf '\x01\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x11\x00\x64\x80\x80\x40\x04\x00\x01\x06\x02d/root\x01\x05\x01\x00\x07\x63\x02\x7b\x0b\x00\x00\x00\x00\x00\x00\x00\x01\x00' >"$2/manifest"
      printf '\x00\x00\x01\x04\x00data\x02\x00\x07\x01.zarray0\x02\x0b\x00\x01\x00\x28{}' >"$2/leaf" ;;
  esac
}
# The build log is kept aside and shown only when the build fails.
if ! bazel build --symlink_prefix=/ --config=fuzz "${targets[@]}" >/tmp/trainyard-fuzz-build.log 2>&1; then
  tail -60 /tmp/trainyard-fuzz-build.log >&2
  exit 1
fi
bin="$(bazel info --config=fuzz bazel-bin 2>/dev/null)"

# Each target runs for SECONDS; as many run at once as there are cores
# (TRAINYARD_FUZZ_JOBS), so the campaign takes SECONDS x targets / cores.
jobs="${TRAINYARD_FUZZ_JOBS:-$(nproc)}"
results="$(mktemp -d)"
fuzz_one() {  # TARGET: writes $results/NAME.rc and NAME.out
  local target="$1" name="${1##*:}" work
  work="$(mktemp -d)"
  mkdir -p "$work/corpus"
  seed_corpus "$name" "$work/corpus"
  # -rss_limit_mb: a spec is at most 1 MiB, so anything near this is a leak.
  if (cd "$work" && "$bin/$(echo "${target#//}" | tr : /)" -max_total_time="$seconds" -rss_limit_mb=2048 \
        -max_len=4096 -print_final_stats=1 corpus >"$work/log" 2>&1); then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/log" | grep -o '[0-9]*$' || echo 0)
    echo "fuzz: $name ok: $runs inputs in ${seconds}s, no crash" >"$results/$name.out"
    rm -rf "$work"
    echo 0 >"$results/$name.rc"
  else
    { echo "fuzz: $name FAILED; log and crash input in $work"; tail -40 "$work/log"; } >"$results/$name.out"
    echo 1 >"$results/$name.rc"
  fi
}
running=0
for target in "${targets[@]}"; do
  echo "fuzz: ${target##*:} for ${seconds}s"
  fuzz_one "$target" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait
status=0
for target in "${targets[@]}"; do
  name="${target##*:}"
  if [ "$(cat "$results/$name.rc" 2>/dev/null)" = 0 ]; then
    cat "$results/$name.out"
  else
    cat "$results/$name.out" >&2 2>/dev/null || echo "fuzz: $name: no result" >&2
    status=1
  fi
done
rm -rf "$results"
exit "$status"
