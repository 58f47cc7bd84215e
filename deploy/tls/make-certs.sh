#!/usr/bin/env bash
# Makes a CA and one certificate per sidecar for tlcd's mutual TLS ([tls]).
#
#   deploy/tls/make-certs.sh DIR [NAME...]
#
# DIR/ca.pem, DIR/ca-key.pem    the CA (made once: an existing one is reused,
#                               so names can be added or renewed later)
# DIR/NAME.pem, DIR/NAME-key.pem  per name: certificate and key, with URI SAN
#                               spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/NAME and
#                               DNS SAN NAME, for TLS server and client use
# Keys are mode 0600. Environment: TRUST_DOMAIN (tlc.local), NAMESPACE
# (default), DAYS (365, the CA 3650), KEY_TYPE (ec: P-256; or rsa: 2048 bits).
set -euo pipefail

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
dir=$1; shift

trust_domain=${TRUST_DOMAIN:-tlc.local}
namespace=${NAMESPACE:-default}
days=${DAYS:-365}
key_type=${KEY_TYPE:-ec}

command -v openssl >/dev/null 2>&1 || { echo "make-certs.sh: openssl not found (apt-get install openssl)" >&2; exit 1; }
case "$key_type" in
  ec) newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256); usage_bits="digitalSignature" ;;
  rsa) newkey=(-newkey rsa:2048); usage_bits="digitalSignature, keyEncipherment" ;;
  *) echo "make-certs.sh: KEY_TYPE is ec or rsa, not '$key_type'" >&2; exit 2 ;;
esac
[[ "$trust_domain" =~ ^[a-z0-9._-]+$ ]] || { echo "make-certs.sh: TRUST_DOMAIN '$trust_domain' is not a SPIFFE trust domain (a-z 0-9 . - _)" >&2; exit 2; }
[[ "$namespace" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "make-certs.sh: NAMESPACE '$namespace' must be one path segment" >&2; exit 2; }
for name in "$@"; do
  # One DNS label or name, and one SPIFFE path segment.
  [[ "$name" =~ ^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$ ]] || {
    echo "make-certs.sh: name '$name' must be lowercase letters, digits, '-' and '.' (a DNS name)" >&2; exit 2; }
done

mkdir -p "$dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Our own openssl config, so the system's openssl.cnf adds nothing.
cat >"$work/openssl.cnf" <<CNF
[req]
distinguished_name = dn
prompt = no
[dn]
CN = tlc sidecar CA
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
CNF

umask 077
if [ -s "$dir/ca.pem" ] && [ -s "$dir/ca-key.pem" ]; then
  echo "reusing the CA in $dir/ca.pem"
else
  openssl req -x509 -new "${newkey[@]}" -nodes -config "$work/openssl.cnf" -extensions ca \
    -days $((days * 10)) -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" 2>"$work/log" \
    || { cat "$work/log" >&2; exit 1; }
  chmod 0600 "$dir/ca-key.pem"
  chmod 0644 "$dir/ca.pem"
  echo "made the CA $dir/ca.pem"
fi

for name in "$@"; do
  uri="spiffe://$trust_domain/ns/$namespace/sa/$name"
  cat >"$work/$name.cnf" <<CNF
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, $usage_bits
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = URI:$uri, DNS:$name
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
CNF
  openssl req -new "${newkey[@]}" -nodes -config "$work/openssl.cnf" -subj "/CN=$name" \
    -keyout "$work/$name-key.pem" -out "$work/$name.csr" 2>"$work/log" \
    || { cat "$work/log" >&2; exit 1; }
  openssl x509 -req -in "$work/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$days" \
    -extfile "$work/$name.cnf" -extensions leaf -out "$work/$name.pem" 2>"$work/log" \
    || { cat "$work/log" >&2; exit 1; }
  openssl verify -CAfile "$dir/ca.pem" "$work/$name.pem" >/dev/null
  # Certificate and key replace the old pair together (a renewal).
  chmod 0600 "$work/$name-key.pem"
  chmod 0644 "$work/$name.pem"
  mv -f "$work/$name-key.pem" "$dir/$name-key.pem"
  mv -f "$work/$name.pem" "$dir/$name.pem"
  echo "made $dir/$name.pem ($uri, DNS:$name)"
done
