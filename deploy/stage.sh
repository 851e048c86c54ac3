#!/bin/bash
# Installs the built binaries into PREFIX, laid out as the image has them:
#   PREFIX/bin/trainyard, trainyard-torch, libtrainyard_spm.so
#   PREFIX/share/trainyard/vocab/...   (the bundled data)
#
#   deploy/stage.sh PREFIX [RUNFILES]
#
# RUNFILES is the built `trainyard`'s runfiles tree (default
# bazel-bin/client/trainyard.runfiles/trainyard, after
# `bazel build //client:trainyard`): client/trainyard, client/trainyard-torch,
# data/.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 PREFIX [BIN_DIR]" >&2
  exit 2
fi
prefix=$1
runfiles=${2:-bazel-bin/client/trainyard.runfiles/trainyard}
for f in "$runfiles/client/trainyard" "$runfiles/client/trainyard-torch" "$runfiles/data/libtrainyard_spm.so" \
         "$runfiles/data/vocab/digits_to_words.model"; do
  [[ -f "$f" ]] || { echo "error: $f is missing; build //client:trainyard first" >&2; exit 1; }
done
mkdir -p "$prefix/bin" "$prefix/share/trainyard/vocab"
install -m 755 "$runfiles/client/trainyard" "$runfiles/client/trainyard-torch" "$prefix/bin/"
install -m 644 "$runfiles/data/libtrainyard_spm.so" "$prefix/bin/"
install -m 644 "$runfiles/data/vocab/"* "$prefix/share/trainyard/vocab/"
echo "staged into $prefix"
