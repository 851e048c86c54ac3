#!/bin/bash
# Makes a throwaway certificate authority and one certificate signed by it,
# for local runs and tests of TLS (never for production: the CA key lies
# next to the certificates).
#
#   scripts/gen-dev-certs.sh OUT_DIR [NAME_OR_IP]...
#
# OUT_DIR/ca.pem, ca.key      the CA (give ca.pem as --tls-ca / TRAINYARD_TLS_CA)
# OUT_DIR/node.pem, node.key  a certificate for coordinators, workers and
#                             users alike (server and client use), valid for
#                             localhost, 127.0.0.1 and every NAME_OR_IP given
# Existing files are kept (delete OUT_DIR to start over). Needs openssl.
set -euo pipefail
if [[ $# -lt 1 || "$1" == -* ]]; then
  echo "usage: $0 OUT_DIR [NAME_OR_IP]..." >&2
  exit 2
fi
command -v openssl >/dev/null || { echo "error: openssl is not installed (apt-get install openssl)" >&2; exit 1; }
out=$1
shift
mkdir -p "$out"
cd "$out"
if [[ -f ca.pem && -f node.pem && -f node.key ]]; then
  echo "$out: certificates already there"
  exit 0
fi
san="DNS:localhost,IP:127.0.0.1,IP:::1"
for name in "$@"; do
  if [[ "$name" =~ ^[0-9.]+$ || "$name" == *:* ]]; then
    san="$san,IP:$name"
  else
    san="$san,DNS:$name"
  fi
done
umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
  -subj "/CN=trainyard dev CA" -keyout ca.key -out ca.pem \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=trainyard node" \
  -keyout node.key -out node.csr 2>/dev/null
cat > node.ext <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san
EXT
openssl x509 -req -in node.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
  -extfile node.ext -out node.pem 2>/dev/null
rm -f node.csr node.ext ca.srl
chmod 644 ca.pem node.pem
echo "$out: ca.pem, node.pem, node.key (valid 30 days for ${san//,/ })"
