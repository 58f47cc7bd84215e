#!/usr/bin/env bash
# Counts the user-space instructions a proxy spends per small forwarded
# call, under valgrind's callgrind: tlcd (passing calls through, one
# runtime thread) and HAProxy (nbthread 1) in front of one nghttpd, each
# loaded by h2load on loopback. See deploy/bench/README.md.
#
#   deploy/bench/call-instructions.sh [--peers LIST] [--calls N]
#                                     [--tlcd PATH] [--base-port PORT]
#
# A count of instructions is the same from run to run whatever else the
# machine does, so it can judge a change of a few percent that CPU time
# on a shared 2-core machine cannot (deploy/bench/proxies.sh's spread is
# ±20% there). It leaves out the kernel's side (syscalls, TCP) and says
# nothing of how fast an instruction runs: read it beside proxies.sh.
# Each peer is run twice, serving 1,000 and 1,000 + N calls; the
# difference divided by N is the count per call, without start-up.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=haproxy-config.sh
source "$HERE/haproxy-config.sh"

PEERS=tlcd,haproxy
CALLS=4000
TLCD=$REPO/target/release/tlcd
BASE_PORT=18580
WARM=1000

die() {
    echo "call-instructions.sh: error: $*" >&2
    exit 1
}

while [[ $# -gt 0 ]]; do
    case $1 in
        --peers) PEERS=${2:?--peers needs a list}; shift 2 ;;
        --calls) CALLS=${2:?--calls needs a number}; shift 2 ;;
        --tlcd) TLCD=${2:?--tlcd needs a path}; shift 2 ;;
        --base-port) BASE_PORT=${2:?--base-port needs a port}; shift 2 ;;
        -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
done
[[ $CALLS =~ ^[1-9][0-9]*$ ]] || die "--calls $CALLS: a positive integer"
[[ $BASE_PORT =~ ^[0-9]+$ ]] && ((BASE_PORT >= 1024 && BASE_PORT <= 65500)) ||
    die "--base-port $BASE_PORT: 1024 to 65500"

PATH=$PATH:/usr/sbin:/sbin
for tool in valgrind callgrind_annotate h2load nghttpd curl; do
    command -v "$tool" >/dev/null ||
        die "$tool is missing (Debian: apt-get install valgrind nghttp2-client nghttp2-server curl)"
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tlc-instr.XXXXXX")
declare -a KILL=()
cleanup() {
    local pid
    for pid in "${KILL[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

# tlcd's runtime dir (admin token, hand-over socket), and valgrind's TMPDIR.
mkdir -p "$WORK/run"
chmod 700 "$WORK/run"
UP_PORT=$BASE_PORT
PROXY_PORT=$((BASE_PORT + 1))
ADMIN_PORT=$((BASE_PORT + 2))
mkdir -p "$WORK/htdocs"
head -c 1024 /dev/urandom >"$WORK/htdocs/small"
nghttpd --no-tls -a 127.0.0.1 -d "$WORK/htdocs" "$UP_PORT" >"$WORK/nghttpd.log" 2>&1 &
KILL+=($!)

wait_ready() {
    local i
    for i in $(seq 1 240); do
        curl -sf --http2-prior-knowledge -o /dev/null "http://127.0.0.1:$PROXY_PORT/small" && return 0
        sleep 0.5
    done
    die "$1 did not answer on port $PROXY_PORT within 2 minutes (logs in $WORK)"
}

# Instructions of one proxy process that served WARM + EXTRA calls.
count() {
    local peer=$1 extra=$2 out=$WORK/$1.$2.callgrind pid
    local -a cmd
    # How each is told to stop: tlcd drains on SIGINT; HAProxy under
    # valgrind leaves SIGINT unanswered but stops on SIGTERM.
    local stop=INT
    case $peer in
        tlcd)
            [[ -x $TLCD ]] || die "no tlcd at $TLCD (cargo build --release -p tlc-daemon, or --tlcd PATH)"
            cmd=("$TLCD" --threads 1 --route "127.0.0.1:$PROXY_PORT=127.0.0.1:$UP_PORT,outbound"
                --admin-listen "127.0.0.1:$ADMIN_PORT" --metrics-listen off --log-level warn)
            ;;
        haproxy)
            command -v haproxy >/dev/null || die "haproxy is missing (apt-get install haproxy)"
            haproxy_config "$PROXY_PORT" "$UP_PORT" >"$WORK/haproxy.cfg"
            cmd=(haproxy -db -f "$WORK/haproxy.cfg")
            stop=TERM
            ;;
        *) die "--peers: unknown peer '$peer' (known: tlcd, haproxy)" ;;
    esac
    env -u RUST_LOG XDG_RUNTIME_DIR="$WORK/run" TMPDIR="$WORK/run" \
        valgrind --tool=callgrind --callgrind-out-file="$out" "${cmd[@]}" \
        >"$WORK/$peer.$extra.log" 2>&1 &
    pid=$!
    KILL+=("$pid")
    wait_ready "$peer"
    h2load -n "$((WARM + extra))" -c 4 -m 10 "http://127.0.0.1:$PROXY_PORT/small" >"$WORK/h2load.log" 2>&1 ||
        die "h2load failed through $peer: $(tail -3 "$WORK/h2load.log")"
    grep -q " 0 failed, 0 errored" "$WORK/h2load.log" ||
        die "calls failed through $peer: $(grep 'requests:' "$WORK/h2load.log")"
    kill -"$stop" "$pid"
    wait "$pid" || true
    callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}

echo "| peer | instructions per call | calls counted |"
echo "|---|---:|---:|"
IFS=, read -r -a PEER_LIST <<<"$PEERS"
for peer in "${PEER_LIST[@]}"; do
    # The curl of wait_ready is one more call in both runs: it cancels out.
    small=$(count "$peer" 0)
    large=$(count "$peer" "$CALLS")
    [[ -n $small && -n $large ]] || die "no instruction count for $peer (logs in $WORK)"
    echo "| $peer | $(((large - small) / CALLS)) | $CALLS |"
done
