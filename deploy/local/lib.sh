# shellcheck shell=bash disable=SC2034
# Shared by pods.sh and run.sh (sourced, not run): names, addresses and
# small helpers, so both scripts agree on what a pod is called and where it is.

# The pods' names and addresses are fixed by convention rather than stored
# in a state file: `pods.sh down` must work after any failure, including one
# that lost the state, and run.sh must find the pods pods.sh made.
TLC_HUB_NS=tlc-hub          # namespace holding the bridge (see pods.sh: why not the root namespace)
TLC_BRIDGE=tlc-br0
TLC_NET=10.77.0             # a /24; nothing outside it is ever routed
TLC_PS_POD=tlc-ps
TLC_PS_ADDR=$TLC_NET.10
TLC_MAX_WORKERS=200
# pods.sh up --node: a namespace standing for the Kubernetes node, for what
# reaches pods from outside them (the kubelet's probes, Prometheus).
TLC_NODE_NS=tlc-node
TLC_NODE_ADDR=$TLC_NET.2

# pod_name ROLE: ps -> tlc-ps, w3 -> tlc-w3
pod_name() { case $1 in ps) printf '%s' "$TLC_PS_POD" ;; node) printf '%s' "$TLC_NODE_NS" ;; w[0-9]*) printf 'tlc-%s' "$1" ;; *) return 1 ;; esac; }
# pod_addr ROLE: ps -> 10.77.0.10, wI -> 10.77.0.(11+I)
pod_addr() { case $1 in ps) printf '%s' "$TLC_PS_ADDR" ;; node) printf '%s' "$TLC_NODE_ADDR" ;; w[0-9]*) printf '%s.%d' "$TLC_NET" $((11 + ${1#w})) ;; *) return 1 ;; esac; }
# hub-side veth of a pod: tlcv-ps, tlcv-w3 (15 characters at most for any worker count we allow)
hub_veth() { printf 'tlcv-%s' "$1"; }

# Every namespace a previous `up` may have left, whatever its worker count.
existing_pod_namespaces() {
    ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^tlc-(ps|w[0-9]+|hub|node)$' || true
}

die() { echo "${SCRIPT_NAME:-tlc-local}: error: $*" >&2; exit 1; }
say() { echo "${SCRIPT_NAME:-tlc-local}: $*" >&2; }

need_root() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (creates network namespaces, veths, tc qdiscs, iptables rules)"
}

# need CMD:PACKAGE ...: fail once, naming every missing command and the
# Debian package that provides it.
need_commands() {
    local missing=() item
    for item in "$@"; do
        command -v "${item%%:*}" >/dev/null 2>&1 || missing+=("${item%%:*} (apt-get install -y ${item#*:})")
    done
    ((${#missing[@]} == 0)) || die "missing commands: ${missing[*]}"
}
