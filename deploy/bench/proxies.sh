#!/usr/bin/env bash
# Compares what tlcd costs as a plain HTTP/2 pass-through proxy with what
# nginx and HAProxy cost, all in front of one nghttpd server, loaded by
# h2load, on loopback. See deploy/bench/README.md.
#
#   deploy/bench/proxies.sh [--runs N] [--peers LIST] [--workloads LIST]
#                           [--tlcd PATH] [--out DIR] [--base-port PORT]
#                           [--no-install]
#
# Peers: direct (h2load straight to nghttpd), tlcd (--threads 1),
# tlcd-2t (--threads 2), nginx (1 worker, grpc_pass), haproxy (nbthread 1),
# and nginx-64k, haproxy-64k: the same with 64 KiB buffers
# (grpc_buffer_size 64k; tune.bufsize 65536) instead of their defaults.
# Workloads: large (2.39 MB file, 400 requests, 1 connection x 4 streams),
# small (1 KiB file, 40,000 requests, 4 connections x 10 streams).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=haproxy-config.sh
source "$HERE/haproxy-config.sh"

RUNS=3
ALL_PEERS=direct,tlcd,tlcd-2t,nginx,nginx-64k,haproxy,haproxy-64k
PEERS=$ALL_PEERS
WORKLOADS=large,small
TLCD=$REPO/target/release/tlcd
OUT=
BASE_PORT=18480
INSTALL=1
MAX_OTHER=10
COMMAND="deploy/bench/proxies.sh${*:+ $(printf '%q ' "$@")}"
COMMAND=${COMMAND% }

# The two workloads: file size in bytes, then h2load's -n, -c, -m.
LARGE_BYTES=2390000
LARGE_N=400 LARGE_C=1 LARGE_M=4
SMALL_BYTES=1024
SMALL_N=40000 SMALL_C=4 SMALL_M=10

usage() {
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    cat <<EOF

Options:
  --runs N          repeat every cell N times, report the median (default $RUNS)
  --peers LIST      comma-separated, from $ALL_PEERS (default: all)
  --workloads LIST  large, small or both (default $WORKLOADS)
  --tlcd PATH       the tlcd binary (default target/release/tlcd)
  --out DIR         where results.json, results.md and logs go (default: a new temp dir)
  --base-port PORT  first of the loopback ports used (default $BASE_PORT; uses PORT..PORT+12)
  --max-other PCT   measure a cell again (up to 3 attempts) when other processes took
                    more than PCT % of the machine's CPU during it (default $MAX_OTHER; 100: never)
  --no-install      do not apt-get install missing tools; fail instead
EOF
}

die() {
    echo "proxies.sh: error: $*" >&2
    exit 1
}

note() {
    echo "== $*" >&2
}

while [[ $# -gt 0 ]]; do
    case $1 in
        --runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
        --peers) PEERS=${2:?--peers needs a list}; shift 2 ;;
        --workloads) WORKLOADS=${2:?--workloads needs a list}; shift 2 ;;
        --tlcd) TLCD=${2:?--tlcd needs a path}; shift 2 ;;
        --out) OUT=${2:?--out needs a directory}; shift 2 ;;
        --base-port) BASE_PORT=${2:?--base-port needs a port}; shift 2 ;;
        --no-install) INSTALL=0; shift ;;
        --max-other) MAX_OTHER=${2:?--max-other needs a percentage}; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done

[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "--runs $RUNS: a positive integer"
[[ $MAX_OTHER =~ ^[0-9]+$ ]] || die "--max-other $MAX_OTHER: a percentage, 0 to 100"
if ! [[ $BASE_PORT =~ ^[0-9]+$ ]] || ((BASE_PORT < 1024 || BASE_PORT > 65500)); then
    die "--base-port $BASE_PORT: 1024 to 65500"
fi
IFS=, read -r -a PEER_LIST <<<"$PEERS"
IFS=, read -r -a WORKLOAD_LIST <<<"$WORKLOADS"
for peer in "${PEER_LIST[@]}"; do
    case ,$ALL_PEERS, in
        *,"$peer",*) ;;
        *) die "--peers: unknown peer '$peer' (known: $ALL_PEERS)" ;;
    esac
done
for workload in "${WORKLOAD_LIST[@]}"; do
    [[ $workload == large || $workload == small ]] ||
        die "--workloads: unknown workload '$workload' (known: large, small)"
done

has_peer() {
    case ,$PEERS, in
        *,"$1",*) return 0 ;;
        *) return 1 ;;
    esac
}

# ---------------------------------------------------------------- tools

# nginx and haproxy live in /usr/sbin, which a user's PATH may lack.
PATH=$PATH:/usr/sbin:/sbin

install_missing() {
    local -a want=()
    command -v h2load >/dev/null || want+=(nghttp2-client)
    command -v nghttpd >/dev/null || want+=(nghttp2-server)
    if has_peer nginx || has_peer nginx-64k; then command -v nginx >/dev/null || want+=(nginx); fi
    if has_peer haproxy || has_peer haproxy-64k; then command -v haproxy >/dev/null || want+=(haproxy); fi
    command -v curl >/dev/null || want+=(curl)
    command -v python3 >/dev/null || want+=(python3)
    command -v ss >/dev/null || want+=(iproute2)
    [[ ${#want[@]} -eq 0 ]] && return 0
    if [[ $INSTALL -eq 0 ]]; then
        die "missing tools; install these packages: ${want[*]} (or run without --no-install)"
    fi
    local -a sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || die "need root (or sudo) to install: ${want[*]}"
        sudo=(sudo)
    fi
    command -v apt-get >/dev/null || die "no apt-get here; install these yourself: ${want[*]}"
    note "installing with apt-get: ${want[*]}"
    "${sudo[@]}" apt-get update -qq || die "apt-get update failed"
    local pkg candidate
    for pkg in "${want[@]}"; do
        candidate=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
        if [[ -z $candidate || $candidate == "(none)" ]]; then
            die "package $pkg is not available from apt here; install it yourself"
        fi
    done
    # Debian starts nginx and haproxy as services on install unless
    # policy-rc.d forbids it; this script never uses those services.
    if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "${want[@]}" >"$WORK/apt.log" 2>&1; then
        tail -20 "$WORK/apt.log" >&2
        die "apt-get install ${want[*]} failed"
    fi
    sed -n 's/^Setting up \(.*\) \.\.\.$/   installed: \1/p' "$WORK/apt.log" >&2
}

# ---------------------------------------------------------------- processes

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tlc-bench.XXXXXX")
declare -A PID=()   # peer (or "upstream") -> main process id

cleanup() {
    local name pid
    for name in "${!PID[@]}"; do
        pid=${PID[$name]}
        kill "$pid" 2>/dev/null || true
    done
    for name in "${!PID[@]}"; do
        pid=${PID[$name]}
        # Up to 5 s for a graceful exit (tlcd drains, nginx's master stops its worker).
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

install_missing
for tool in h2load nghttpd curl python3 ss; do
    command -v "$tool" >/dev/null || die "$tool not found"
done
if has_peer tlcd || has_peer tlcd-2t; then
    [[ -x $TLCD ]] || die "tlcd not found at $TLCD: build it (cargo build --release --locked -p tlc-daemon) or pass --tlcd PATH"
fi

if [[ -z $OUT ]]; then
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/tlc-bench-results.XXXXXX")
fi
mkdir -p "$OUT/logs" "$OUT/raw"
OUT=$(cd "$OUT" && pwd)
: >"$OUT/cells.jsonl"

CLK_TCK=$(getconf CLK_TCK)
CORES=$(nproc)
UP_PORT=$BASE_PORT
declare -A PORT=(
    [direct]=$BASE_PORT
    [tlcd]=$((BASE_PORT + 1))
    [tlcd-2t]=$((BASE_PORT + 2))
    [nginx]=$((BASE_PORT + 3))
    [haproxy]=$((BASE_PORT + 4))
    [nginx-64k]=$((BASE_PORT + 5))
    [haproxy-64k]=$((BASE_PORT + 6))
)
declare -A ADMIN_PORT=([tlcd]=$((BASE_PORT + 11)) [tlcd-2t]=$((BASE_PORT + 12)))

listening() {
    [[ -n $(ss -Hltn "sport = :$1") ]]
}

port_free() {
    ! listening "$1" || die "port $1 ($2) is already in use: pick other ports with --base-port"
}

# Processes whose CPU counts for a peer: the main one and its children
# (nginx's worker under its master).
peer_pids() {
    local pid=${PID[$1]}
    echo "$pid"
    ps -o pid= --ppid "$pid" 2>/dev/null | tr -d ' ' || true
}

# utime+stime in clock ticks, summed over the given process ids. Field 2
# (comm) may hold spaces, so fields are counted after its closing ')'.
cpu_ticks() {
    local total=0 pid rest
    local -a f
    for pid in "$@"; do
        [[ -r /proc/$pid/stat ]] || continue
        rest=$(<"/proc/$pid/stat")
        rest=${rest##*) }
        read -r -a f <<<"$rest"
        # f[0] is field 3 (state): utime is field 14, stime field 15.
        total=$((total + f[11] + f[12]))
    done
    echo "$total"
}

# Waits until a peer listens and answers an HTTP/2 request for small.bin.
wait_ready() {
    local name=$1 port=$2 log=$3
    for _ in $(seq 100); do
        if ! kill -0 "${PID[$name]}" 2>/dev/null; then
            tail -20 "$log" >&2 || true
            die "$name did not start (exited); its log: $log"
        fi
        if listening "$port" && curl -sf --http2-prior-knowledge -o /dev/null \
            "http://127.0.0.1:$port/small.bin" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    tail -20 "$log" >&2 || true
    die "$name is not serving on 127.0.0.1:$port after 10 s; its log: $log"
}

# The file crosses the peer intact.
verify() {
    local name=$1 port=$2 got
    got=$(curl -sS --http2-prior-knowledge "http://127.0.0.1:$port/large.bin" | sha256sum | cut -d' ' -f1)
    [[ $got == "$LARGE_SHA" ]] || die "$name: large.bin arrived changed through 127.0.0.1:$port (sha256 $got, expected $LARGE_SHA)"
    got=$(curl -sS --http2-prior-knowledge "http://127.0.0.1:$port/small.bin" | sha256sum | cut -d' ' -f1)
    [[ $got == "$SMALL_SHA" ]] || die "$name: small.bin arrived changed through 127.0.0.1:$port"
    note "$name: 127.0.0.1:$port serves both files intact (sha256 checked)"
}

start_upstream() {
    local log=$OUT/logs/nghttpd.log
    port_free "$UP_PORT" nghttpd
    nghttpd --no-tls -a 127.0.0.1 -d "$WORK/htdocs" "$UP_PORT" >"$log" 2>&1 &
    PID[upstream]=$!
    PID[direct]=${PID[upstream]}
    wait_ready upstream "$UP_PORT" "$log"
}

start_tlcd() {
    local name=$1 threads=$2 port=${PORT[$1]} admin=${ADMIN_PORT[$1]}
    local log=$OUT/logs/$name.log run=$WORK/run-$name
    port_free "$port" "$name"
    port_free "$admin" "$name admin API"
    mkdir -p "$run"
    chmod 700 "$run"
    # Its own runtime dir (admin token, hand-over socket) and admin port;
    # no metrics listener; no TLC_* settings from the caller's environment.
    local -a unset=(-u RUST_LOG)
    local var
    for var in $(compgen -e); do
        [[ $var == TLC_* ]] && unset+=(-u "$var")
    done
    env "${unset[@]}" XDG_RUNTIME_DIR="$run" TMPDIR="$run" \
        "$TLCD" --threads "$threads" \
        --route "127.0.0.1:$port=127.0.0.1:$UP_PORT,outbound" \
        --admin-listen "127.0.0.1:$admin" --metrics-listen off \
        --log-level info >"$log" 2>&1 &
    PID[$name]=$!
    wait_ready "$name" "$port" "$log"
}

# nginx, one worker: HTTP/2 (h2c) in, HTTP/2 out to nghttpd through the
# gRPC module (nginx's only HTTP/2 upstream). EXTRA: further http-level
# directives (the -64k variant's buffer size).
start_nginx() {
    local name=$1 extra=$2
    local dir=$WORK/$name port=${PORT[$name]}
    local log=$OUT/logs/$name.log stderr=$OUT/logs/$name.stderr.log
    port_free "$port" "$name"
    mkdir -p "$dir/tmp"
    chmod 777 "$dir/tmp"
    cat >"$dir/nginx.conf" <<EOF
# Written by deploy/bench/proxies.sh for the peer "$name".
worker_processes 1;
daemon off;
master_process on;
pid $dir/nginx.pid;
error_log $log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    # The default (1000 calls, then GOAWAY) would end h2load's connections
    # early: h2load does not reconnect.
    keepalive_requests 1000000;
$extra
    upstream nghttpd {
        server 127.0.0.1:$UP_PORT;
        # nginx sends one call at a time per upstream connection: keep
        # enough of them open for every stream h2load has in flight.
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$port http2;
        location / {
            grpc_pass grpc://nghttpd;
        }
    }
}
EOF
    nginx -t -q -e "$log" -p "$dir" -c "$dir/nginx.conf" >"$stderr" 2>&1 ||
        { cat "$stderr" >&2; die "$name: its configuration $dir/nginx.conf is refused"; }
    nginx -e "$log" -p "$dir" -c "$dir/nginx.conf" >>"$stderr" 2>&1 &
    PID[$name]=$!
    wait_ready "$name" "$port" "$log"
    cp "$dir/nginx.conf" "$OUT/logs/$name.conf"
}

# HAProxy, one thread: HTTP/2 (h2c) both sides. EXTRA: further global
# settings (the -64k variant's buffer size).
start_haproxy() {
    local name=$1 extra=$2
    local dir=$WORK/$name port=${PORT[$name]}
    local log=$OUT/logs/$name.log
    port_free "$port" "$name"
    mkdir -p "$dir"
    {
        echo "# Written by deploy/bench/proxies.sh for the peer \"$name\"."
        haproxy_config "$port" "$UP_PORT" "$extra"
    } >"$dir/haproxy.cfg"
    haproxy -c -q -f "$dir/haproxy.cfg" >>"$log" 2>&1 ||
        { tail -20 "$log" >&2; die "$name: its configuration $dir/haproxy.cfg is refused; log: $log"; }
    # -db: stay in the foreground, one process (no master-worker).
    haproxy -db -f "$dir/haproxy.cfg" >>"$log" 2>&1 &
    PID[$name]=$!
    wait_ready "$name" "$port" "$log"
    cp "$dir/haproxy.cfg" "$OUT/logs/$name.cfg"
}

# ---------------------------------------------------------------- one cell

# Non-idle CPU of the whole machine so far, in clock ticks (/proc/stat:
# user nice system idle iowait irq softirq steal).
machine_busy_ticks() {
    local user nice system irq softirq steal
    read -r _ user nice system _ _ irq softirq steal _ </proc/stat
    echo $((user + nice + system + irq + softirq + steal))
}

# Waits (at most 2 minutes) until the machine's other jobs leave at least
# 100-MAX_OTHER % of its CPU idle over one second.
wait_quiet() {
    local before after pct
    for _ in $(seq 120); do
        before=$(machine_busy_ticks)
        sleep 1
        after=$(machine_busy_ticks)
        pct=$(((after - before) * 100 / (CLK_TCK * CORES)))
        ((pct <= MAX_OTHER)) && return 0
    done
    note "the machine stayed busy (${pct}% of its CPU) for 2 minutes; measuring anyway"
}

# One cell: measures it, and again (up to 3 attempts in all, after waiting
# for the machine to quieten) while other processes took more than
# MAX_OTHER % of the machine's CPU during the load.
run_cell() {
    local peer=$1 workload=$2 run=$3 attempt other
    for attempt in 1 2 3; do
        other=$(measure_cell "$peer" "$workload" "$run" "$attempt")
        if ((other <= MAX_OTHER)); then
            break
        fi
        if ((attempt < 3)); then
            note "$workload $peer run $run: other processes took ${other}% of the CPU during the load; waiting for a quieter machine, then measuring again"
            wait_quiet
        else
            note "$workload $peer run $run: other processes took ${other}% of the CPU on all 3 attempts; keeping the last (flagged in results.json)"
        fi
    done
    cat "$WORK/cell.json" >>"$OUT/cells.jsonl"
}

# One h2load run of WORKLOAD against PEER: writes the cell as JSON to
# $WORK/cell.json and prints the share of the machine's CPU (percent) that
# went to processes other than h2load, nghttpd and the proxy meanwhile.
measure_cell() {
    local peer=$1 workload=$2 run=$3 attempt=$4
    local port=${PORT[$peer]} file n c m bytes
    if [[ $workload == large ]]; then
        file=large.bin n=$LARGE_N c=$LARGE_C m=$LARGE_M bytes=$LARGE_BYTES
    else
        file=small.bin n=$SMALL_N c=$SMALL_C m=$SMALL_M bytes=$SMALL_BYTES
    fi
    local tag=$workload-$peer-$run
    local stdout=$OUT/raw/$tag.h2load.txt reqlog=$WORK/$tag.requests.tsv times=$WORK/$tag.times
    local -a pids=()
    if [[ $peer != direct ]]; then
        mapfile -t pids < <(peer_pids "$peer")
    fi
    local before up_before busy_before t0 t1 after up_after busy_after
    before=$(cpu_ticks "${pids[@]}")
    up_before=$(cpu_ticks "${PID[upstream]}")
    busy_before=$(machine_busy_ticks)
    t0=$(date +%s.%N)
    # `times` in the subshell reports the CPU its child (h2load) used.
    # A peer that stops answering fails the cell after 5 minutes.
    (
        timeout 300 h2load -n "$n" -c "$c" -m "$m" --log-file "$reqlog" \
            "http://127.0.0.1:$port/$file" >"$stdout" 2>&1 || echo "h2load exit status $?" >>"$stdout"
        times >"$times"
    )
    t1=$(date +%s.%N)
    busy_after=$(machine_busy_ticks)
    after=$(cpu_ticks "${pids[@]}")
    up_after=$(cpu_ticks "${PID[upstream]}")
    kill -0 "${PID[$peer]}" 2>/dev/null || die "$peer exited during the $workload load (run $run); log in $OUT/logs/"
    python3 - "$WORK/cell.json" "$peer" "$workload" "$run" "$n" "$c" "$m" "$bytes" \
        "$((after - before))" "$((up_after - up_before))" "$CLK_TCK" "$t0" "$t1" \
        "$stdout" "$reqlog" "$times" "${#pids[@]}" "$((busy_after - busy_before))" \
        "$CORES" "$attempt" <<'PY'
import json, math, re, sys
(out, peer, workload, run, n, c, m, size, ticks, up_ticks, clk, t0, t1,
 stdout, reqlog, times, nprocs, busy, cores, attempt) = sys.argv[1:]
text = open(stdout).read()

def grab(pattern, cast=float, default=None):
    found = re.search(pattern, text)
    return cast(found.group(1)) if found else default

def seconds(v):
    # h2load prints times as 12.3us, 4.56ms or 1.2s.
    num, unit = re.match(r"([\d.]+)(us|ms|s)", v).groups()
    return float(num) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]

req_line = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", text)
durations = []
try:
    for line in open(reqlog):
        parts = line.split("\t")
        if len(parts) >= 3 and parts[1].startswith("2"):
            durations.append(int(parts[2]))
except FileNotFoundError:
    pass
durations.sort()

def pct(p):
    if not durations:
        return None
    # Nearest rank: the smallest value with at least p % of the calls at or below it.
    k = max(0, math.ceil(p / 100 * len(durations)) - 1)
    return durations[k] / 1000.0  # ms

# `times`: line 2 is the children's user and system time, "0m1.234s 0m0.056s".
client = [0.0, 0.0]
lines = open(times).read().split("\n")
if len(lines) >= 2:
    for i, v in enumerate(lines[1].split()[:2]):
        mins, secs = re.match(r"(\d+)m([\d.]+)s", v).groups()
        client[i] = int(mins) * 60 + float(secs)

clk = int(clk)
wall = float(t1) - float(t0)
ours = int(ticks) / clk + int(up_ticks) / clk + client[0] + client[1]
other = max(0.0, int(busy) / clk - ours)
other_share = other / (wall * int(cores)) if wall > 0 else 0.0
cell = {
    "peer": peer, "workload": workload, "run": int(run), "attempt": int(attempt),
    "requests": int(n), "clients": int(c), "streams": int(m), "file_bytes": int(size),
    "succeeded": grab(r"(\d+) succeeded", int, 0),
    "failed": grab(r"(\d+) failed", int),
    "errored": grab(r"(\d+) errored", int),
    "traffic_bytes": grab(r"traffic: \S+ \((\d+)\) total", int, 0),
    "data_bytes": grab(r"\((\d+)\) data", int, 0),
    "h2load_seconds": grab(r"finished in ([\d.]+)ms", lambda v: float(v) / 1000)
        or grab(r"finished in ([\d.]+)s,", float),
    "req_per_s": grab(r"([\d.]+) req/s,", float),
    "wall_seconds": wall,
    "other_cpu_seconds": other,
    "other_cpu_share": other_share,
    "proxy_processes": int(nprocs),
    "proxy_cpu_seconds": int(ticks) / clk if peer != "direct" else None,
    "upstream_cpu_seconds": int(up_ticks) / clk,
    "client_cpu_seconds": client[0] + client[1],
    "latency_ms": {
        "p50": pct(50), "p99": pct(99),
        "mean": seconds(req_line.group(3)) * 1000 if req_line else None,
        "max": seconds(req_line.group(2)) * 1000 if req_line else None,
        "from_log": len(durations),
    },
}
gb = cell["traffic_bytes"] / 1e9
calls = cell["succeeded"]
cpu = cell["proxy_cpu_seconds"]
cell["proxy_cpu_s_per_gb"] = cpu / gb if cpu is not None and gb else None
cell["proxy_cpu_us_per_call"] = cpu / calls * 1e6 if cpu is not None and calls else None
cell["upstream_cpu_s_per_gb"] = cell["upstream_cpu_seconds"] / gb if gb else None
cell["upstream_cpu_us_per_call"] = cell["upstream_cpu_seconds"] / calls * 1e6 if calls else None
with open(out, "w") as f:
    f.write(json.dumps(cell) + "\n")
lat = cell["latency_ms"]
fmt = lambda v, spec: "-" if v is None else format(v, spec)
if workload == "large":
    cost = f"{fmt(cell['proxy_cpu_s_per_gb'], '.3f')} CPU-s/GB"
else:
    cost = f"{fmt(cell['proxy_cpu_us_per_call'], '.1f')} CPU-us/call"
print(f"   run {run} {workload:5} {peer:11} {cost:>20}  {fmt(cell['req_per_s'], '.0f'):>7} req/s"
      f"  p50 {fmt(lat['p50'], '.2f')} ms  p99 {fmt(lat['p99'], '.2f')} ms"
      f"  {calls}/{n} ok  other {other_share:.0%}", file=sys.stderr)
if calls != int(n):
    print(f"   warning: {peer} {workload} run {run}: only {calls} of {n} requests succeeded; see {stdout}",
          file=sys.stderr)
print(round(other_share * 100))
PY
    rm -f "$reqlog"
}

# ---------------------------------------------------------------- memcpy reference

# CPU-seconds per GB for one user-space copy of the large file's size,
# repeated until as many bytes as one large run have been copied.
memcpy_reference() {
    python3 - "$LARGE_BYTES" "$((LARGE_BYTES * LARGE_N))" <<'PY'
import sys, time
size, total = int(sys.argv[1]), int(sys.argv[2])
src = bytearray(b"\x5a" * size)
dst = bytearray(size)
s, d = memoryview(src), memoryview(dst)
d[:] = s  # touch both buffers once
copies = -(-total // size)
t0 = time.process_time()
for _ in range(copies):
    d[:] = s
cpu = time.process_time() - t0
print(f"{cpu / (copies * size / 1e9):.6f}")
PY
}

# ---------------------------------------------------------------- main

mkdir -p "$WORK/htdocs"
head -c "$LARGE_BYTES" /dev/urandom >"$WORK/htdocs/large.bin"
head -c "$SMALL_BYTES" /dev/urandom >"$WORK/htdocs/small.bin"
LARGE_SHA=$(sha256sum "$WORK/htdocs/large.bin" | cut -d' ' -f1)
SMALL_SHA=$(sha256sum "$WORK/htdocs/small.bin" | cut -d' ' -f1)

note "versions"
H2LOAD_VERSION=$(h2load --version 2>&1 | sed -n 1p)
NGHTTPD_VERSION=$(nghttpd --version 2>&1 | sed -n 1p)
NGINX_VERSION=none HAPROXY_VERSION=none TLCD_VERSION=none
if has_peer nginx || has_peer nginx-64k; then NGINX_VERSION=$(nginx -v 2>&1 | sed -n 1p); fi
if has_peer haproxy || has_peer haproxy-64k; then HAPROXY_VERSION=$(haproxy -v 2>&1 | sed -n 1p); fi
if has_peer tlcd || has_peer tlcd-2t; then
    TLCD_VERSION="$("$TLCD" --version 2>&1 | sed -n 1p) ($TLCD, built $(date -u -r "$TLCD" '+%Y-%m-%d %H:%M UTC')"
    if commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null); then
        TLCD_VERSION+="; repository at $commit"
        git -C "$REPO" diff --quiet HEAD 2>/dev/null || TLCD_VERSION+=" with uncommitted changes"
    fi
    TLCD_VERSION+=")"
fi
printf '   %s\n' "$H2LOAD_VERSION" "$NGHTTPD_VERSION" "$NGINX_VERSION" "$HAPROXY_VERSION" "$TLCD_VERSION" | grep -v '^   none$' >&2 || true

if has_peer tlcd || has_peer tlcd-2t; then
    # A copy: a rebuild of target/release meanwhile does not change what is measured.
    cp "$TLCD" "$WORK/tlcd"
    TLCD=$WORK/tlcd
fi

note "starting nghttpd and the proxies (logs in $OUT/logs)"
start_upstream
for peer in "${PEER_LIST[@]}"; do
    case $peer in
        direct) ;;
        tlcd) start_tlcd tlcd 1 ;;
        tlcd-2t) start_tlcd tlcd-2t 2 ;;
        nginx) start_nginx nginx "" ;;
        nginx-64k) start_nginx nginx-64k "    grpc_buffer_size 64k;" ;;
        haproxy) start_haproxy haproxy "" ;;
        haproxy-64k) start_haproxy haproxy-64k "    tune.bufsize 65536" ;;
    esac
done
for peer in "${PEER_LIST[@]}"; do
    verify "$peer" "${PORT[$peer]}"
done

# One unmeasured warm-up per peer (connections, allocator, page cache).
for peer in "${PEER_LIST[@]}"; do
    h2load -n 40 -c 1 -m 4 "http://127.0.0.1:${PORT[$peer]}/large.bin" >/dev/null 2>&1 || true
    h2load -n 2000 -c 4 -m 10 "http://127.0.0.1:${PORT[$peer]}/small.bin" >/dev/null 2>&1 || true
done

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
note "measuring: $RUNS run(s) x ${#WORKLOAD_LIST[@]} workload(s) x ${#PEER_LIST[@]} peer(s); load average now $LOAD_BEFORE"
MEMCPY=()
for run in $(seq "$RUNS"); do
    for workload in "${WORKLOAD_LIST[@]}"; do
        for peer in "${PEER_LIST[@]}"; do
            run_cell "$peer" "$workload" "$run"
        done
    done
    MEMCPY+=("$(memcpy_reference)")
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$OUT" "$RUNS" "$PEERS" "$WORKLOADS" "$CORES" "$CLK_TCK" "$LOAD_BEFORE" "$LOAD_AFTER" \
    "$H2LOAD_VERSION" "$NGHTTPD_VERSION" "$NGINX_VERSION" "$HAPROXY_VERSION" "$TLCD_VERSION" \
    "$LARGE_BYTES $LARGE_N $LARGE_C $LARGE_M" "$SMALL_BYTES $SMALL_N $SMALL_C $SMALL_M" \
    "${MEMCPY[*]}" "$COMMAND" "$MAX_OTHER" <<'PY'
import datetime, json, statistics, sys
(out, runs, peers, workloads, cores, clk, load_before, load_after,
 v_h2load, v_nghttpd, v_nginx, v_haproxy, v_tlcd, large, small, memcpy, command, max_other) = sys.argv[1:]
cells = [json.loads(l) for l in open(f"{out}/cells.jsonl")]
peers = peers.split(",")
workloads = workloads.split(",")
memcpy = [float(v) for v in memcpy.split()]

def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None

def span(values):
    values = [v for v in values if v is not None]
    return [min(values), max(values)] if values else None

summary = {}
for w in workloads:
    for p in peers:
        cs = [c for c in cells if c["peer"] == p and c["workload"] == w]
        if not cs:
            continue
        summary.setdefault(w, {})[p] = {
            "runs": len(cs),
            "proxy_cpu_s_per_gb": med([c["proxy_cpu_s_per_gb"] for c in cs]),
            "proxy_cpu_s_per_gb_range": span([c["proxy_cpu_s_per_gb"] for c in cs]),
            "proxy_cpu_us_per_call": med([c["proxy_cpu_us_per_call"] for c in cs]),
            "proxy_cpu_us_per_call_range": span([c["proxy_cpu_us_per_call"] for c in cs]),
            "proxy_cpu_seconds": med([c["proxy_cpu_seconds"] for c in cs]),
            "upstream_cpu_s_per_gb": med([c["upstream_cpu_s_per_gb"] for c in cs]),
            "upstream_cpu_us_per_call": med([c["upstream_cpu_us_per_call"] for c in cs]),
            "client_cpu_seconds": med([c["client_cpu_seconds"] for c in cs]),
            "req_per_s": med([c["req_per_s"] for c in cs]),
            "gb_per_s": med([c["traffic_bytes"] / 1e9 / c["h2load_seconds"]
                             for c in cs if c["h2load_seconds"]]),
            "p50_ms": med([c["latency_ms"]["p50"] for c in cs]),
            "p99_ms": med([c["latency_ms"]["p99"] for c in cs]),
            "mean_ms": med([c["latency_ms"]["mean"] for c in cs]),
            "max_ms": med([c["latency_ms"]["max"] for c in cs]),
            "succeeded_min": min(c["succeeded"] for c in cs),
            "other_cpu_share": med([c["other_cpu_share"] for c in cs]),
            "attempts_max": max(c["attempt"] for c in cs),
            "requests": cs[0]["requests"],
        }

def f(v, spec):
    return "—" if v is None else format(v, spec)

def with_range(v, r, spec):
    # The median, then the lowest and highest run when there are several.
    if v is None or r is None or int(runs) < 2:
        return f(v, spec)
    return f"{format(v, spec)} ({format(r[0], spec)}–{format(r[1], spec)})"

now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
lb = large.split()
sb = small.split()
md = []
md.append(f"Medians of {runs} run(s) per cell; {cores} cores shared by h2load, nghttpd and the proxy; {now}.")
md.append("")
if "large" in summary:
    md.append(f"**large**: {int(lb[0]):,}-byte file, {lb[1]} requests, {lb[2]} connection{'s' if lb[2] != '1' else ''} x {lb[3]} streams "
              f"(`h2load -n {lb[1]} -c {lb[2]} -m {lb[3]}`)")
    md.append("")
    md.append("| peer | proxy CPU-s per GB | GB/s | req/s | p50 ms | p99 ms | mean ms | max ms | nghttpd CPU-s per GB | succeeded |")
    md.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for p, s in summary["large"].items():
        md.append(f"| {p} | {with_range(s['proxy_cpu_s_per_gb'], s['proxy_cpu_s_per_gb_range'], '.3f')} | {f(s['gb_per_s'], '.2f')} | "
                  f"{f(s['req_per_s'], '.0f')} | {f(s['p50_ms'], '.2f')} | {f(s['p99_ms'], '.2f')} | "
                  f"{f(s['mean_ms'], '.2f')} | {f(s['max_ms'], '.2f')} | {f(s['upstream_cpu_s_per_gb'], '.3f')} | "
                  f"{s['succeeded_min']}/{s['requests']} |")
    md.append(f"| memcpy (reference) | {with_range(med(memcpy), span(memcpy), '.3f')} | | | | | | | | |")
    md.append("")
if "small" in summary:
    md.append(f"**small**: {int(sb[0]):,}-byte file, {int(sb[1]):,} requests, {sb[2]} connection{'s' if sb[2] != '1' else ''} x {sb[3]} streams "
              f"(`h2load -n {sb[1]} -c {sb[2]} -m {sb[3]}`)")
    md.append("")
    md.append("| peer | proxy CPU µs per call | req/s | p50 ms | p99 ms | mean ms | max ms | nghttpd CPU µs per call | succeeded |")
    md.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for p, s in summary["small"].items():
        md.append(f"| {p} | {with_range(s['proxy_cpu_us_per_call'], s['proxy_cpu_us_per_call_range'], '.1f')} | {f(s['req_per_s'], '.0f')} | "
                  f"{f(s['p50_ms'], '.3f')} | {f(s['p99_ms'], '.3f')} | {f(s['mean_ms'], '.3f')} | "
                  f"{f(s['max_ms'], '.2f')} | {f(s['upstream_cpu_us_per_call'], '.1f')} | "
                  f"{s['succeeded_min']}/{s['requests']} |")
    md.append("")
shares = [c["other_cpu_share"] for c in cells]
again = sum(1 for c in cells if c["attempt"] > 1)
md.append(f"Other processes took a median {statistics.median(shares):.0%} (at most {max(shares):.0%}) "
          f"of the machine's CPU during the cells kept; {again} of {len(cells)} cells were measured "
          f"again because other processes took more than {max_other}% during an earlier attempt. "
          f"Load average before / after: {load_before} / {load_after}.")
table = "\n".join(md)
open(f"{out}/results.md", "w").write(table + "\n")
json.dump({
    "date": now, "command": command, "runs": int(runs), "cores": int(cores), "clk_tck": int(clk),
    "max_other_percent": int(max_other),
    "load_average": {"before": load_before, "after": load_after},
    "versions": {"h2load": v_h2load, "nghttpd": v_nghttpd, "nginx": v_nginx,
                 "haproxy": v_haproxy, "tlcd": v_tlcd},
    "workloads": {
        "large": dict(zip(["file_bytes", "requests", "clients", "streams"], map(int, lb))),
        "small": dict(zip(["file_bytes", "requests", "clients", "streams"], map(int, sb))),
    },
    "memcpy_cpu_s_per_gb": {"runs": memcpy, "median": med(memcpy),
                            "what": "one user-space copy (Python memoryview slice assignment) of a "
                                    "buffer the large file's size, repeated for a large run's bytes"},
    "medians": summary,
    "cells": cells,
}, open(f"{out}/results.json", "w"), indent=1)
print(table)
PY
note "results: $OUT/results.md, $OUT/results.json (every run), logs in $OUT/logs"
