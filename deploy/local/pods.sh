#!/usr/bin/env bash
# Local "pods": one network namespace per TensorFlow task, joined by a Linux
# bridge, optionally with a rate-limited link per pod.
#
#   deploy/local/pods.sh up [--workers N] [--rate MBIT] [--delay MS] [--offload on|off] [--node]
#   deploy/local/pods.sh down
#   deploy/local/pods.sh status
#
#   pods       tlc-ps 10.77.0.10, tlc-w0 10.77.0.11, tlc-w1 10.77.0.12, ...
#              (--workers N, default 2), each with lo and eth0 only
#   bridge     tlc-br0, in its own namespace tlc-hub; hub-side veths tlcv-ps, tlcv-w0, ...
#   --rate     tbf of MBIT Mbit/s on both directions of every pod's link
#              (pod eth0 egress and hub-side veth egress)
#   --delay    netem delay of MS ms on every pod's egress (one way pod to pod)
#   --node     also tlc-node 10.77.0.2, the "node": no shaping on its link;
#              for what reaches the pods from outside (probes, Prometheus)
#   --offload  TSO/GSO on the veths (default off: every packet is a real
#              MTU-sized frame, so interface byte counters are wire bytes)
#
# `up` replaces any pods a previous run left; `down` removes every tlc-ps,
# tlc-wN and tlc-hub namespace (ending the processes still inside them) and
# is safe to run any number of times. Needs root.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SCRIPT_NAME=pods
# shellcheck source=lib.sh
source "$here/lib.sh"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

action=${1:-}
(($#)) && shift
workers=2; rate=""; delay=""; offload=off; node=0
while (($#)); do
    case $1 in
        --workers) workers=${2:?--workers needs a value}; shift 2 ;;
        --rate) rate=${2:?--rate needs a value}; shift 2 ;;
        --delay) delay=${2:?--delay needs a value}; shift 2 ;;
        --offload) offload=${2:?--offload needs on or off}; shift 2 ;;
        --node) node=1; shift ;;
        -h | --help) usage 0 ;;
        *) echo "pods: unknown argument '$1'" >&2; usage 2 >&2 ;;
    esac
done

# Processes still inside a namespace keep it (and its veth) alive after
# `ip netns del`, so they are ended first. They can only be ones started
# into these pods (by run.sh or by hand).
end_processes_in() {
    local ns=$1 pids
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    [[ -n ${pids// /} ]] || return 0
    say "ending processes still in $ns: $pids"
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
        [[ -n ${pids// /} ]] || return 0
        sleep 0.3
    done
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
}

down() {
    local ns
    for ns in $(existing_pod_namespaces); do
        end_processes_in "$ns"
        ip netns del "$ns" 2>/dev/null || say "warning: could not delete namespace $ns"
    done
    # Deleting a namespace destroys its interfaces; a veth whose peer was in
    # it goes too. Nothing of ours lives in the root namespace, but an older
    # layout (bridge in the root namespace) is cleaned up as well.
    ip link del "$TLC_BRIDGE" 2>/dev/null || true
    local dev
    for dev in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^tlcv-' || true); do
        ip link del "$dev" 2>/dev/null || true
    done
}

# tbf burst: 4 ms of traffic at the rate, at least 16 KB, so that one timer
# tick (4 ms at HZ=250) never starves the link; the queue holds 100 ms at the
# rate so TCP sees a plausible bottleneck rather than constant drops.
tbf_args() {
    local mbit=$1 burst
    burst=$((mbit * 500)) # bytes in 4 ms at mbit Mbit/s
    ((burst >= 16384)) || burst=16384
    printf 'rate %smbit burst %s latency 100ms' "$mbit" "$burst"
}

# shaping DEV NS [DELAY]: tbf at $rate on DEV's egress, under a netem delay
# if DELAY is given.
shape() {
    local dev=$1 ns=$2 with_delay=${3:-}
    local tc=(ip netns exec "$ns" tc)
    if [[ -n $with_delay && -n $delay ]]; then
        "${tc[@]}" qdisc add dev "$dev" root handle 1: netem delay "${delay}ms" limit 100000 ||
            die "cannot add netem to $dev in $ns: this kernel may lack sch_netem (CONFIG_NET_SCH_NETEM); run without --delay"
        if [[ -n $rate ]]; then
            # shellcheck disable=SC2046
            "${tc[@]}" qdisc add dev "$dev" parent 1: handle 2: tbf $(tbf_args "$rate")
        fi
    elif [[ -n $rate ]]; then
        # shellcheck disable=SC2046
        "${tc[@]}" qdisc add dev "$dev" root handle 1: tbf $(tbf_args "$rate") ||
            die "cannot add tbf to $dev in $ns: this kernel may lack sch_tbf (CONFIG_NET_SCH_TBF)"
    fi
}

set_offload() { # NS DEV
    [[ $offload == off ]] || return 0
    ip netns exec "$1" ethtool -K "$2" tso off gso off gro off >/dev/null 2>&1 ||
        say "warning: could not turn off TSO/GSO on $2 in $1; byte counters will count one header per large segment"
}

add_pod() { # ROLE
    local role=$1 ns addr veth
    ns=$(pod_name "$role"); addr=$(pod_addr "$role"); veth=$(hub_veth "$role")
    ip netns add "$ns"
    # Interfaces created from now on in this namespace get no IPv6 (no link-local
    # addresses, no router/neighbour solicitations in the byte counters); lo,
    # which already exists, keeps ::1 so TF's dual-stack listener still works.
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
    ip netns exec "$ns" ip link set lo up
    ip -n "$TLC_HUB_NS" link add "$veth" type veth peer name eth0 netns "$ns"
    ip -n "$TLC_HUB_NS" link set "$veth" master "$TLC_BRIDGE"
    ip -n "$ns" addr add "$addr/24" dev eth0
    set_offload "$ns" eth0
    set_offload "$TLC_HUB_NS" "$veth"
    if [[ $role != node ]]; then
        shape eth0 "$ns" delay
        shape "$veth" "$TLC_HUB_NS"
    fi
    ip -n "$ns" link set eth0 up
    ip -n "$TLC_HUB_NS" link set "$veth" up
}

up() {
    need_commands ip:iproute2 ping:iputils-ping sysctl:procps
    [[ -z $rate && -z $delay ]] || need_commands tc:iproute2
    [[ $offload == off ]] && need_commands ethtool:ethtool
    [[ $workers =~ ^[1-9][0-9]*$ ]] && ((workers <= TLC_MAX_WORKERS)) || die "--workers must be 1..$TLC_MAX_WORKERS, got '$workers'"
    [[ -z $rate || $rate =~ ^[1-9][0-9]*$ ]] || die "--rate is a whole number of Mbit/s, got '$rate'"
    [[ -z $delay || $delay =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--delay is in milliseconds, got '$delay'"
    [[ $offload == on || $offload == off ]] || die "--offload is on or off, got '$offload'"

    down
    # A half-built set of pods is worse than none: undo everything on failure.
    trap 'rc=$?; if ((rc != 0)); then say "up failed; removing what was made"; down; fi' EXIT

    # The bridge lives in a namespace of its own, not the root one: with
    # br_netfilter loaded (it is here, bridge-nf-call-iptables=1), bridged
    # frames would run through the host's own iptables chains (nat, filter,
    # conntrack), so host rules could rewrite or drop pod traffic, and a
    # bridge in the root namespace could be given a route out by accident.
    # In tlc-hub nothing is routed anywhere: it has no addresses at all.
    ip netns add "$TLC_HUB_NS"
    ip netns exec "$TLC_HUB_NS" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
    if ip netns exec "$TLC_HUB_NS" test -e /proc/sys/net/bridge/bridge-nf-call-iptables; then
        ip netns exec "$TLC_HUB_NS" sysctl -qw net.bridge.bridge-nf-call-iptables=0 \
            net.bridge.bridge-nf-call-ip6tables=0 net.bridge.bridge-nf-call-arptables=0
    fi
    ip netns exec "$TLC_HUB_NS" sysctl -qw net.ipv4.ip_forward=0
    ip -n "$TLC_HUB_NS" link add "$TLC_BRIDGE" type bridge stp_state 0 forward_delay 0
    ip -n "$TLC_HUB_NS" link set "$TLC_BRIDGE" up

    local roles=(ps) i
    for ((i = 0; i < workers; i++)); do roles+=("w$i"); done
    ((node)) && roles+=(node)
    local role
    for role in "${roles[@]}"; do add_pod "$role"; done

    # Every pod must reach every other one (and nothing else: no default route).
    local a b failed=0
    for a in "${roles[@]}"; do
        if ip -n "$(pod_name "$a")" route show default | grep -q .; then
            say "pod $(pod_name "$a") has a default route"; failed=1
        fi
        for b in "${roles[@]}"; do
            [[ $a == "$b" ]] && continue
            # The first ping also waits for ARP; allow a second try.
            if ! ip netns exec "$(pod_name "$a")" ping -q -c 1 -W 2 "$(pod_addr "$b")" >/dev/null 2>&1 &&
                ! ip netns exec "$(pod_name "$a")" ping -q -c 2 -W 2 "$(pod_addr "$b")" >/dev/null 2>&1; then
                say "$(pod_name "$a") cannot ping $(pod_name "$b") at $(pod_addr "$b")"; failed=1
            fi
        done
    done
    ((failed == 0)) || die "connectivity check failed"
    trap - EXIT
    say "up: ${roles[*]/#/tlc-} on $TLC_BRIDGE ($TLC_NET.0/24) rate=${rate:-unlimited}${rate:+ Mbit/s} delay=${delay:-0} ms offload=$offload; all $(( ${#roles[@]} * (${#roles[@]} - 1) )) pod pairs ping"
}

status() {
    local ns
    for ns in $(existing_pod_namespaces | sort); do
        echo "== $ns"
        ip -n "$ns" -br addr
        ip netns exec "$ns" tc qdisc show 2>/dev/null | grep -v -E 'qdisc noqueue' || true
        local pids
        pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
        [[ -z ${pids// /} ]] || echo "processes: $pids"
    done
}

case $action in
    up) need_root; up ;;
    down) need_root; need_commands ip:iproute2; down; say "down: no tlc pods left" ;;
    status) status ;;
    -h | --help | help) usage 0 ;;
    *) usage 2 >&2 ;;
esac
