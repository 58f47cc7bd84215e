#!/usr/bin/env bash
# Redirects a pod's TensorFlow traffic through its tlcd sidecar.
# The same script runs as the Kubernetes init container and in the local
# network-namespace pods (deploy/local). Needs root (NET_ADMIN).
#
#   deploy/iptables.sh apply  --tf-ports 2222,2223 --uid 1337 [--outbound-port 17001] [--inbound-port 17006]
#   deploy/iptables.sh remove
#
# What it does, in the nat table:
# - inbound: TCP arriving for the local TensorFlow ports (PREROUTING) goes
#   to the inbound listener;
# - outbound: TCP the pod sends to TensorFlow ports elsewhere (OUTPUT) goes
#   to the outbound listener, except connections made by the sidecar's own
#   UID (which would loop) and connections to loopback.
# Everything lives in chains of its own (TLC_INBOUND, TLC_OUTBOUND), so
# `remove` takes away exactly what `apply` added.
set -euo pipefail

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

action=${1:-}; shift || true
tf_ports=""; uid=""; outbound_port=17001; inbound_port=17006
while [ $# -gt 0 ]; do
  case "$1" in
    --tf-ports) tf_ports=$2; shift 2 ;;
    --uid) uid=$2; shift 2 ;;
    --outbound-port) outbound_port=$2; shift 2 ;;
    --inbound-port) inbound_port=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "iptables.sh: unknown argument '$1'" >&2; usage ;;
  esac
done

ipt() { iptables -w 5 -t nat "$@"; }

remove() {
  ipt -D PREROUTING -p tcp -j TLC_INBOUND 2>/dev/null || true
  ipt -D OUTPUT -p tcp -j TLC_OUTBOUND 2>/dev/null || true
  for chain in TLC_INBOUND TLC_OUTBOUND; do
    ipt -F "$chain" 2>/dev/null || true
    ipt -X "$chain" 2>/dev/null || true
  done
}

case "$action" in
  apply)
    [ -n "$tf_ports" ] || { echo "iptables.sh: --tf-ports is required" >&2; exit 2; }
    [ -n "$uid" ] || { echo "iptables.sh: --uid (the sidecar's UID) is required" >&2; exit 2; }
    case "$uid" in *[!0-9]*) echo "iptables.sh: --uid must be numeric, got '$uid'" >&2; exit 2 ;; esac
    remove
    ipt -N TLC_INBOUND
    ipt -N TLC_OUTBOUND
    ipt -A TLC_INBOUND -p tcp -m multiport --dports "$tf_ports" -j REDIRECT --to-ports "$inbound_port"
    # The sidecar's own connections go out as they are.
    ipt -A TLC_OUTBOUND -m owner --uid-owner "$uid" -j RETURN
    ipt -A TLC_OUTBOUND -d 127.0.0.0/8 -j RETURN
    ipt -A TLC_OUTBOUND -p tcp -m multiport --dports "$tf_ports" -j REDIRECT --to-ports "$outbound_port"
    ipt -A PREROUTING -p tcp -j TLC_INBOUND
    ipt -A OUTPUT -p tcp -j TLC_OUTBOUND
    ;;
  remove) remove ;;
  *) usage ;;
esac
