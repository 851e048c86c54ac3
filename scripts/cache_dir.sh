# Sourced by the set-up scripts: the machine-wide cache that every clone of
# the project on this machine shares, so that a fresh clone reuses what
# another one installed or compiled from the same inputs:
#
#   $TRAINYARD_CACHE/bazel-disk/          Bazel's disk cache (content-addressed)
#   $TRAINYARD_CACHE/venv/NAME-SHA/       the test virtualenvs, by requirements hash
#   $TRAINYARD_CACHE/kubectl-VERSION/     kubectl (scripts/setup-kubectl.sh)
#   $TRAINYARD_CACHE/libtorch-cuda-VERSION/  (scripts/setup-libtorch-cuda.sh)
#   $TRAINYARD_CACHE/wheels/              downloaded wheels (scripts/fetch-wheel.sh)
#
# TRAINYARD_CACHE defaults to /var/cache/trainyard for root, else
# ${XDG_CACHE_HOME:-~/.cache}/trainyard. Paths under it are the same for every
# clone, which is what lets Bazel reuse test results across clones: the
# virtualenvs' and kubectl's paths are part of every test's environment.
if [ -z "${TRAINYARD_CACHE:-}" ]; then
  if [ "$(id -u)" -eq 0 ]; then
    TRAINYARD_CACHE=/var/cache/trainyard
  else
    TRAINYARD_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/trainyard"
  fi
fi
export TRAINYARD_CACHE
mkdir -p "$TRAINYARD_CACHE"

# with_cache_lock COMMAND...: runs COMMAND holding the cache's lock, so that
# two clones setting up at once never build the same entry side by side.
with_cache_lock() {
  (
    flock 9
    "$@"
  ) 9>"$TRAINYARD_CACHE/.lock"
}
