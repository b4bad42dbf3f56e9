#!/usr/bin/env bash
# Makes the TLS files of a test cluster with openssl: a CA, and one
# certificate (with its key) every daemon of the cluster shows, good both
# as a server's and as a client's (rdzvd --tls-dir DIR).
#
# Usage: tools/tls-certs.sh [--days N] [--ca-from DIR2] [--expired] DIR [NAME...]
#
#   DIR        gets ca.crt (and ca.key), tls.crt and tls.key: the layout
#              of a Kubernetes TLS Secret with its CA (kubectl create
#              secret generic rdzv-tls --from-file=DIR/ca.crt
#              --from-file=DIR/tls.crt --from-file=DIR/tls.key).
#              DIR/ca.key is the CA's private key: keep it out of the
#              Secret and off the hosts.
#   NAME...    host names and IP addresses the certificate names (its
#              subjectAltName) beside localhost and 127.0.0.1; rdzv checks
#              the CA, not the names (see docs/security.md).
#   --days N   the certificate's life (default 365; the CA's is 10 times
#              it).
#   --ca-from DIR2
#              sign with DIR2's CA (its ca.crt and ca.key) instead of
#              DIR's own; ca.crt is copied. A CA already in DIR is reused.
#   --expired  a certificate that expired yesterday (for tests).
#
# Keys are ECDSA P-256. Re-running with the same DIR keeps its CA and
# replaces the certificate.
set -euo pipefail

days=365
ca_from=""
expired=0
while [ $# -gt 0 ]; do
  case "$1" in
  --days) days="$2"; shift 2 ;;
  --ca-from) ca_from="$2"; shift 2 ;;
  --expired) expired=1; shift ;;
  -h | --help) sed -n '2,27p' "$0"; exit 0 ;;
  --*) echo "tls-certs.sh: unknown option $1" >&2; exit 2 ;;
  *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "usage: tools/tls-certs.sh [--days N] [--ca-from DIR2] [--expired] DIR [NAME...]" >&2; exit 2; }
dir="$1"
shift
command -v openssl >/dev/null || { echo "tls-certs.sh: openssl is not installed" >&2; exit 1; }
mkdir -p "$dir"
umask 077

if [ -n "$ca_from" ]; then
  cp "$ca_from/ca.crt" "$dir/ca.crt"
  ca_key="$ca_from/ca.key"
elif [ -s "$dir/ca.crt" ] && [ -s "$dir/ca.key" ]; then
  ca_key="$dir/ca.key"
else
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
    -out "$dir/ca.key" 2>/dev/null
  openssl req -x509 -new -key "$dir/ca.key" -sha256 -days $((days * 10)) \
    -subj "/CN=rdzv test CA $(date +%s)-$$" -out "$dir/ca.crt" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  ca_key="$dir/ca.key"
fi

san="DNS:localhost,IP:127.0.0.1"
for n in "$@"; do
  if [[ "$n" =~ ^[0-9.]+$ || "$n" == *:* ]]; then
    san="$san,IP:$n"
  else
    san="$san,DNS:$n"
  fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
  -out "$dir/tls.key" 2>/dev/null
openssl req -new -key "$dir/tls.key" -subj "/CN=rdzvd" -out "$work/csr" 2>/dev/null
cat >"$work/ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$san
EOF
if [ "$expired" = 1 ]; then
  # x509 -req cannot date a certificate in the past; openssl ca can.
  mkdir -p "$work/ca"
  : >"$work/ca/index.txt"
  cat >"$work/ca.cnf" <<EOF
[ca]
default_ca = test
[test]
dir = $work/ca
database = $work/ca/index.txt
new_certs_dir = $work/ca
serial = $work/ca/serial
default_md = sha256
policy = any
copy_extensions = none
[any]
commonName = supplied
EOF
  openssl rand -hex 8 >"$work/ca/serial"
  openssl ca -batch -config "$work/ca.cnf" -cert "$dir/ca.crt" \
    -keyfile "$ca_key" -in "$work/csr" -out "$dir/tls.crt" \
    -startdate "$(date -u -d '-3 days' +%Y%m%d%H%M%SZ)" \
    -enddate "$(date -u -d '-1 day' +%Y%m%d%H%M%SZ)" \
    -extfile "$work/ext" -notext 2>/dev/null
else
  openssl x509 -req -in "$work/csr" -CA "$dir/ca.crt" -CAkey "$ca_key" \
    -CAcreateserial -CAserial "$work/serial" -days "$days" -sha256 \
    -extfile "$work/ext" -out "$dir/tls.crt" 2>/dev/null
fi
chmod 600 "$dir/tls.key"
chmod 644 "$dir/tls.crt" "$dir/ca.crt"
echo "tls-certs.sh: $dir: ca.crt, tls.crt, tls.key ($san$([ "$expired" = 1 ] && echo ', expired'))"
