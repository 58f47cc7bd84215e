#!/usr/bin/env bash
# Runs the real TensorFlow job (deploy/tf/train.py: 1 ps + N workers) with
# one task per local pod (deploy/local/pods.sh), either talking directly or
# through one tlcd per pod in transparent mode (deploy/iptables.sh), and
# compares what tlcd says it sent with what the pods' interfaces carried.
#
#   deploy/local/run.sh --mode none|tlcd [options] [-- train.py flags...]
#
# Options:
#   --mode none|tlcd    none: TF dials its peers directly. tlcd: in every pod
#                       a tlcd in transparent mode under UID --uid, and the
#                       iptables rules that redirect TF's connections to it.
#   --config FILE       tlcd policy (TOML: [policy...] tables, drain_seconds);
#                       the [transparent] table is added by this script.
#                       Default: tlcd's built-in policy (3LC, s = 1.0).
#   --steps N           global steps [200]
#   --workers N         worker pods [2]
#   --rate MBIT         tbf rate on every pod's link, both directions [unlimited]
#   --delay MS          netem delay on every pod's egress (needs sch_netem)
#   --out DIR           results and logs [a new /tmp/tlc-local.XXXXXX]
#   --timeout S         kill everything after S seconds of training [600]
#   --tlcd PATH         tlcd binary [target/release/tlcd]; copied into DIR
#                       first, so a rebuild during the run changes nothing
#   --tlcd-threads N    tlcd --threads (default: tlcd's, one per CPU)
#   --uid N             UID (and GID) tlcd runs as [1337]; no user is needed
#   --tf-port P         port every TF task listens on in its pod [2222]
#   --start ORDER       together: all tasks at once, as pods in Kubernetes
#                       would (default); ps-first: start the workers once
#                       the ps task listens
#   --ps-delay S        start the ps task S seconds after the workers
#                       (implies --start together)
#
# Everything after `--` goes to every train.py (e.g. --batch, --hidden, --threads).
# Environment: TLC_PYTHON (interpreter with TensorFlow, else /work/tfvenv/bin/python,
# else ./.venv-tf/bin/python), RUST_LOG (tlcd's log filter, default info).
#
# Writes into DIR: <task>.log and <task>.json (train.py), tlcd-<pod>.log,
# tlcd.toml, counters.json (interface bytes before and after), nat-<pod>.txt
# and conntrack-<pod>.txt (evidence of redirection), tc-stats.txt (shapers,
# with --rate), summary.json; prints a
# one-line summary. Pods, processes and rules are removed on exit, timeout,
# failure or Ctrl-C. Exit status: 0 ok, 124 timeout, 1 otherwise. Needs root.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
SCRIPT_NAME=run
# shellcheck source=lib.sh
source "$here/lib.sh"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

mode=""; config=""; steps=200; workers=2; rate=""; delay=""; OUT=""; timeout=600
TLCD=$root/target/release/tlcd; tlcd_threads=""; uid=1337; tf_port=2222
start=together; ps_delay=0
OUTBOUND_PORT=17001; INBOUND_PORT=17006
train_args=()
while (($#)); do
    case $1 in
        --mode) mode=${2:?}; shift 2 ;;
        --config) config=${2:?}; shift 2 ;;
        --steps) steps=${2:?}; shift 2 ;;
        --workers) workers=${2:?}; shift 2 ;;
        --rate) rate=${2:?}; shift 2 ;;
        --delay) delay=${2:?}; shift 2 ;;
        --out) OUT=${2:?}; shift 2 ;;
        --timeout) timeout=${2:?}; shift 2 ;;
        --tlcd) TLCD=${2:?}; shift 2 ;;
        --tlcd-threads) tlcd_threads=${2:?}; shift 2 ;;
        --uid) uid=${2:?}; shift 2 ;;
        --tf-port) tf_port=${2:?}; shift 2 ;;
        --start) start=${2:?}; shift 2 ;;
        --ps-delay) ps_delay=${2:?}; start=together; shift 2 ;;
        -h | --help) usage 0 ;;
        --) shift; train_args=("$@"); break ;;
        *) echo "run: unknown option '$1'" >&2; usage 2 >&2 ;;
    esac
done

# ---- checks, all before anything is created ---------------------------------
need_root
[[ $mode == none || $mode == tlcd ]] || die "--mode must be none or tlcd"
[[ $steps =~ ^[1-9][0-9]*$ ]] || die "--steps must be a positive integer"
[[ $timeout =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive number of seconds"
[[ $uid =~ ^[1-9][0-9]*$ ]] || die "--uid must be a numeric non-root UID (tlcd's own connections are told apart by it)"
[[ $tf_port =~ ^[0-9]+$ ]] && ((tf_port != OUTBOUND_PORT && tf_port != INBOUND_PORT)) || die "--tf-port must be a port other than $OUTBOUND_PORT and $INBOUND_PORT"
[[ $start == ps-first || $start == together ]] || die "--start must be ps-first or together"
[[ $ps_delay =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--ps-delay is a number of seconds"
[[ -z $tlcd_threads || $tlcd_threads =~ ^[1-9][0-9]*$ ]] || die "--tlcd-threads must be a positive integer"
need_commands ip:iproute2 ss:iproute2 ping:iputils-ping
if [[ $mode == tlcd ]]; then
    need_commands iptables:iptables setpriv:util-linux conntrack:conntrack
    [[ -x $TLCD ]] || die "no tlcd at $TLCD (cargo build --release -p tlc-daemon, or --tlcd PATH)"
    if [[ -n $config ]]; then
        [[ -r $config ]] || die "cannot read --config $config"
        # The listeners are this script's business: a second [transparent]
        # table would be a TOML error inside tlcd, reported far from here.
        ! grep -qE '^\s*\[\s*transparent\s*\]' "$config" || die "--config $config has a [transparent] table; leave it out, run.sh adds it"
        ! grep -qE '^\s*\[\[\s*routes\s*\]\]' "$config" || die "--config $config has [[routes]]; transparent mode needs none"
    fi
elif [[ -n $config ]]; then
    die "--config only applies to --mode tlcd"
fi
if [[ -n ${TLC_PYTHON:-} ]]; then PY=$TLC_PYTHON
elif [[ -x /work/tfvenv/bin/python ]]; then PY=/work/tfvenv/bin/python
elif [[ -x $root/.venv-tf/bin/python ]]; then PY=$root/.venv-tf/bin/python
else die "no Python with TensorFlow: set TLC_PYTHON or run deploy/tf/setup-venv.sh"
fi
"$PY" -c 'import sys; sys.exit(0)' || die "$PY does not run"

OUT=${OUT:-$(mktemp -d /tmp/tlc-local.XXXXXX)}
mkdir -p "$OUT"
# tlcd runs as --uid and must reach its binary and config in here (mktemp
# makes the directory 0700).
chmod 755 "$OUT"
rm -f "$OUT"/{ps,worker}[0-9]*.{json,log} "$OUT"/tlcd-*.log "$OUT"/{nat,conntrack}-*.txt \
    "$OUT"/{counters,summary}.json "$OUT"/launch.log

roles=(ps)
for ((i = 0; i < workers; i++)); do roles+=("w$i"); done
task_of() { [[ $1 == ps ]] && echo ps0 || echo "worker${1#w}"; }

# ---- teardown ----------------------------------------------------------------
declare -A tf_pid=() tlcd_pid=()
# Ends the given PIDs (only ones this script started): TERM, up to $2
# seconds' grace, then KILL.
stop_pids() {
    local grace=$1; shift
    local alive=() p
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
    ((${#alive[@]})) || return 0
    kill -TERM "${alive[@]}" 2>/dev/null || true
    local deadline=$((SECONDS + grace))
    while ((SECONDS < deadline)); do
        local still=()
        for p in "${alive[@]}"; do kill -0 "$p" 2>/dev/null && still+=("$p"); done
        ((${#still[@]})) || break
        sleep 0.2
    done
    kill -KILL "${alive[@]}" 2>/dev/null || true
    wait "${alive[@]}" 2>/dev/null || true
}
cleaned=0
cleanup() {
    ((cleaned == 0)) || return 0
    cleaned=1
    stop_pids 3 "${tf_pid[@]}"
    stop_pids 10 "${tlcd_pid[@]}"
    # Deleting the namespaces takes their rules with them; remove them first
    # anyway so a failure in `down` leaves no redirection behind.
    local role
    for role in "${roles[@]}"; do
        ip netns exec "$(pod_name "$role")" "$root/deploy/iptables.sh" remove >/dev/null 2>&1 || true
    done
    "$here/pods.sh" down >/dev/null 2>&1 || say "warning: pods.sh down failed; run it by hand"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT TERM

# ---- pods --------------------------------------------------------------------
pod_args=(--workers "$workers")
[[ -n $rate ]] && pod_args+=(--rate "$rate")
[[ -n $delay ]] && pod_args+=(--delay "$delay")
"$here/pods.sh" up "${pod_args[@]}"

# Pod counters as JSON lines: the pod's eth0 (what the pod sent and received
# on its link, every header included; the hub-side veth mirrors it).
counters() { # LABEL
    local role ns stat
    for role in "${roles[@]}"; do
        ns=$(pod_name "$role")
        printf '{"when":"%s","pod":"%s","dev":"eth0"' "$1" "$role"
        for stat in rx_bytes tx_bytes rx_packets tx_packets rx_dropped tx_dropped; do
            printf ',"%s":%s' "$stat" "$(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/$stat)"
        done
        # TCP segments sent and retransmitted by the pod (its own netns
        # counters): retransmissions after tbf drops inflate the bytes.
        ip netns exec "$ns" awk '/^Tcp:/ { if (!h) { for (i = 1; i <= NF; i++) k[i] = $i; h = 1 } else for (i = 1; i <= NF; i++) if (k[i] == "OutSegs" || k[i] == "RetransSegs") printf ",\"tcp_%s\":%s", k[i], $i }' /proc/net/snmp
        printf '}\n'
    done
}

# ---- sidecars ----------------------------------------------------------------
if [[ $mode == tlcd ]]; then
    # A private copy: others rebuild target/release/tlcd while this runs.
    install -m 755 "$TLCD" "$OUT/tlcd"
    "$OUT/tlcd" --version >"$OUT/tlcd.version" 2>&1 || true
    {
        # Top-level keys first: TOML puts every key after a table header into that table.
        grep -qE '^\s*drain_seconds\s*=' "${config:-/dev/null}" || echo "drain_seconds = 5"
        [[ -n $config ]] && cat "$config" && echo
        printf '[transparent]\noutbound = "0.0.0.0:%s"\ninbound = "0.0.0.0:%s"\n' "$OUTBOUND_PORT" "$INBOUND_PORT"
    } >"$OUT/tlcd.toml"
    chmod 644 "$OUT/tlcd.toml"
    tlcd_args=(--config "$OUT/tlcd.toml")
    [[ -n $tlcd_threads ]] && tlcd_args+=(--threads "$tlcd_threads")
    for role in "${roles[@]}"; do
        ns=$(pod_name "$role")
        # ip netns exec and setpriv both exec, so $! is tlcd itself.
        # NO_COLOR: plain log lines, for grep and for the summary below.
        NO_COLOR=1 RUST_LOG=${RUST_LOG:-info} ip netns exec "$ns" \
            setpriv --reuid="$uid" --regid="$uid" --clear-groups -- "$OUT/tlcd" "${tlcd_args[@]}" \
            </dev/null >"$OUT/tlcd-$role.log" 2>&1 &
        tlcd_pid[$role]=$!
    done
    # Rules only once both listeners accept: a TF connection redirected to a
    # port nobody listens on yet would be refused.
    for role in "${roles[@]}"; do
        ns=$(pod_name "$role")
        for ((try = 0; ; try++)); do
            kill -0 "${tlcd_pid[$role]}" 2>/dev/null || { tail -n 5 "$OUT/tlcd-$role.log" >&2; die "tlcd in $ns exited at start (log: $OUT/tlcd-$role.log)"; }
            n=$(ip netns exec "$ns" ss -ltnH "( sport = :$OUTBOUND_PORT or sport = :$INBOUND_PORT )" | wc -l)
            ((n >= 2)) && break
            ((try < 50)) || die "tlcd in $ns is not listening on :$OUTBOUND_PORT and :$INBOUND_PORT after 10 s"
            sleep 0.2
        done
        actual_uid=$(awk '/^Uid:/ {print $2}' "/proc/${tlcd_pid[$role]}/status")
        [[ $actual_uid == "$uid" ]] || die "tlcd in $ns runs as UID $actual_uid, not $uid: its own connections would be redirected again"
        ip netns exec "$ns" "$root/deploy/iptables.sh" apply --tf-ports "$tf_port" --uid "$uid" \
            --outbound-port "$OUTBOUND_PORT" --inbound-port "$INBOUND_PORT"
    done
    say "tlcd listening in every pod as UID $uid; TF connections to :$tf_port are redirected"
fi

# ---- the TF job --------------------------------------------------------------
ps_spec="$(pod_addr ps):$tf_port"
workers_spec=""
for ((i = 0; i < workers; i++)); do workers_spec+="${workers_spec:+,}$(pod_addr "w$i"):$tf_port"; done

# start_task ROLE: one train.py in its pod, in the background.
start_task() {
    local role=$1 task job
    task=$(task_of "$role")
    if [[ $role == ps ]]; then job=(--job ps --task 0); else job=(--job worker --task "${role#w}"); fi
    # Every task gets the real addresses of its peers: redirection, if any,
    # is the pod's business, as in Kubernetes.
    echo "run: $task in $(pod_name "$role") at +$((($(date +%s%N) - started_ns) / 1000000)) ms: ${job[*]} --ps $ps_spec --workers $workers_spec" >>"$OUT/launch.log"
    ip netns exec "$(pod_name "$role")" "$PY" -u "$root/deploy/tf/train.py" "${job[@]}" \
        --ps "$ps_spec" --workers "$workers_spec" --steps "$steps" --result "$OUT/$task.json" \
        "${train_args[@]}" </dev/null >"$OUT/$task.log" 2>&1 &
    tf_pid[$role]=$!
}

counters before >"$OUT/counters.json"
started=$(date +%s.%N); started_ns=$(date +%s%N)
deadline=$((SECONDS + timeout))
if [[ $start == ps-first ]]; then
    # Workers are started only once the ps listens. Through tlcd, a worker
    # that asks the ps for its devices before the ps's TF server is up gets
    # a gRPC UNAVAILABLE from the ps pod's sidecar instead of a refused
    # connection, and TF fails the session instead of waiting (README.md,
    # "Known problem").
    start_task ps
    until [[ -n $(ip netns exec "$(pod_name ps)" ss -ltnH "sport = :$tf_port") ]]; do
        kill -0 "${tf_pid[ps]}" 2>/dev/null || { tail -n 5 "$OUT/ps0.log" >&2; die "ps exited before listening (log: $OUT/ps0.log)"; }
        ((SECONDS < deadline)) || { say "timed out: ps not listening on :$tf_port after ${timeout}s (log: $OUT/ps0.log)"; exit 124; }
        sleep 0.2
    done
    for role in "${roles[@]:1}"; do start_task "$role"; done
else
    for role in "${roles[@]:1}"; do start_task "$role"; done
    # Interruptible by the timeout like everything else: sleep is short.
    [[ $ps_delay == 0 ]] || sleep "$ps_delay"
    start_task ps
fi

declare -A rc=()
status=ok
while ((${#rc[@]} < ${#roles[@]})); do
    for role in "${roles[@]}"; do
        [[ -n ${rc[$role]:-} ]] && continue
        kill -0 "${tf_pid[$role]}" 2>/dev/null && continue
        set +e; wait "${tf_pid[$role]}"; rc[$role]=$?; set -e
        if ((rc[$role] != 0)); then
            say "$(task_of "$role") exited with status ${rc[$role]} (log: $OUT/$(task_of "$role").log)"
            tail -n 5 "$OUT/$(task_of "$role").log" >&2
            status=failed
        fi
    done
    [[ $status == ok ]] || break
    if ((SECONDS >= deadline)); then status=timeout; break; fi
    # A sidecar that dies mid-run leaves TF retrying a refused port forever.
    for role in "${!tlcd_pid[@]}"; do
        kill -0 "${tlcd_pid[$role]}" 2>/dev/null || { say "tlcd in $(pod_name "$role") died (log: $OUT/tlcd-$role.log)"; status=failed; }
    done
    [[ $status == ok ]] || break
    sleep 0.2
done
ended=$(date +%s.%N)
counters after >>"$OUT/counters.json"

# Evidence of what the kernel did with the connections, before the pods go.
if [[ $mode == tlcd ]]; then
    for role in "${roles[@]}"; do
        ns=$(pod_name "$role")
        ip netns exec "$ns" iptables -w 5 -t nat -L -n -v -x >"$OUT/nat-$role.txt" 2>&1 || true
        ip netns exec "$ns" conntrack -L -p tcp >"$OUT/conntrack-$role.txt" 2>&1 || true
    done
fi
# Shaper statistics (sent, dropped, overlimits) of both ends of every link.
if [[ -n $rate || -n $delay ]]; then
    for role in "${roles[@]}"; do
        echo "== $(pod_name "$role") eth0"; ip netns exec "$(pod_name "$role")" tc -s qdisc show dev eth0
        echo "== $TLC_HUB_NS $(hub_veth "$role")"; ip netns exec "$TLC_HUB_NS" tc -s qdisc show dev "$(hub_veth "$role")"
    done >"$OUT/tc-stats.txt" 2>&1 || true
fi
stop_pids 3 "${tf_pid[@]}"
# SIGTERM makes tlcd drain and log its "sidecar totals" line.
stop_pids 15 "${tlcd_pid[@]}"
cleanup

case $status in
    timeout) say "timed out after ${timeout}s; killed everything (logs in $OUT)"; exit 124 ;;
    failed) say "failed; killed everything (logs in $OUT)"; exit 1 ;;
esac

# ---- summary -----------------------------------------------------------------
"$PY" - "$OUT" "$mode" "$workers" "$steps" "${rate:-0}" "${config:-default}" "$started" "$ended" <<'EOF'
import json, re, sys
out, mode, n, steps, rate, config, t0, t1 = sys.argv[1:]
n, steps, rate = int(n), int(steps), int(rate)
wall = float(t1) - float(t0)
roles = ["ps"] + [f"w{i}" for i in range(n)]
problems = []

workers = []
for i in range(n):
    try:
        workers.append(json.load(open(f"{out}/worker{i}.json")))
    except OSError as e:
        sys.exit(f"run: missing result: {e}")
chief = workers[0]
local = [w["local_steps"] for w in workers]
step_s = sum(w["seconds"] for w in workers) / sum(local) if sum(local) else None
if any(s == 0 for s in local):
    problems.append("a worker ran no steps")
if chief["global_step"] < chief["target_steps"]:
    problems.append(f"chief ended at global step {chief['global_step']} of {chief['target_steps']} (model re-initialised?)")

# Interface bytes per pod: after - before, on the pod's eth0.
snap = {}
for line in open(f"{out}/counters.json"):
    r = json.loads(line)
    snap[(r["when"], r["pod"])] = r
HEADERS = 14 + 20 + 32
kernel = {}
for role in roles:
    b, a = snap[("before", role)], snap[("after", role)]
    kernel[role] = {k: a[k] - b[k] for k in ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets", "tx_dropped", "rx_dropped",
                                             "tcp_OutSegs", "tcp_RetransSegs") if k in a and k in b}
    # Offloads are off (pods.sh), so every packet is one Ethernet frame with
    # its own headers: 14 Ethernet + 20 IPv4 + 32 TCP (timestamps on). What
    # is left is TCP payload: gRPC/HTTP/2 bytes (ARP is negligible).
    kernel[role]["tx_tcp_payload_est"] = kernel[role]["tx_bytes"] - HEADERS * kernel[role]["tx_packets"]

# tlcd's own counters: what the holder's sidecar encoded (push on the
# workers' sidecars, pull on the ps's), tensor content only.
tlcd = {}
if mode == "tlcd":
    for role in roles:
        log = re.sub(r"\x1b\[[0-9;]*m", "", open(f"{out}/tlcd-{role}.log", errors="replace").read())
        totals = [l for l in log.splitlines() if "sidecar totals" in l]
        warnings = [l for l in log.splitlines() if re.search(r"\b(WARN|ERROR)\b", l)]
        if not totals:
            problems.append(f"tlcd-{role} logged no totals")
            continue
        line = totals[-1]
        t = {"warnings": len(warnings)}
        for d in ("push", "pull"):
            m = re.search(d + r": tensors=(\d+) raw_bytes=(\d+) wire_bytes=(\d+)", line)
            t[d] = {"tensors": int(m.group(1)), "raw_bytes": int(m.group(2)), "wire_bytes": int(m.group(3))}
        for k in ("restored", "decode_failures", "fallbacks", "fallbacks_served"):
            t[k] = int(re.search(k + r"=(\d+)", line).group(1))
        for k in ("mirror_matches", "mirror_mismatches", "forced_exact"):
            m = re.search(k + r"=(\d+)", line)
            if m:
                t[k] = int(m.group(1))
        m = re.search(r"passed=(\{.*\})", line)
        t["passed"] = m.group(1) if m else ""
        # Connections the nat rules redirected (the nat table sees only the
        # first packet of each connection, so packets = connections).
        nat = open(f"{out}/nat-{role}.txt", errors="replace").read()
        for chain, key in (("TLC_OUTBOUND", "redirected_out"), ("TLC_INBOUND", "redirected_in")):
            sect = nat.split(f"Chain {chain}")[1].split("Chain ")[0] if f"Chain {chain}" in nat else ""
            t[key] = sum(int(l.split()[0]) for l in sect.splitlines() if "REDIRECT" in l)
        tlcd[role] = t
        if t["decode_failures"]:
            problems.append(f"tlcd-{role}: {t['decode_failures']} decode failures")
    if not any(t.get("redirected_out") for t in tlcd.values()):
        problems.append("no connection was redirected to a sidecar")

raw = sum(t[d]["raw_bytes"] for t in tlcd.values() for d in ("push", "pull"))
wire = sum(t[d]["wire_bytes"] for t in tlcd.values() for d in ("push", "pull"))
kernel_total = sum(k["tx_bytes"] for k in kernel.values())  # every byte sent by some pod, once
summary = {
    "ok": not problems, "problems": problems, "mode": mode, "config": config, "rate_mbit": rate or None,
    "steps": steps, "global_step": chief["global_step"], "local_steps": local,
    "step_seconds": round(step_s, 5) if step_s else None,
    "test_accuracy": chief.get("test_accuracy"), "test_loss": chief.get("test_loss"),
    "wall_seconds": round(wall, 2), "params": chief["params"],
    "kernel": kernel, "kernel_tx_total_bytes": kernel_total,
    "tlcd": tlcd, "tlcd_raw_bytes": raw, "tlcd_wire_bytes": wire, "out": out,
}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
mb = lambda x: f"{x / 1e6:.1f}"
pods = " ".join(f"{r}={mb(kernel[r]['tx_bytes'])}/{mb(kernel[r]['rx_bytes'])}" for r in roles)
side = (f" tlcd raw={mb(raw)}MB wire={mb(wire)}MB ({raw / wire:.1f}x)" if wire else " tlcd raw=0 wire=0") if mode == "tlcd" else ""
redirect = ""
if mode == "tlcd":
    redirect = " redirected(out/in)=" + ",".join(f"{r}:{tlcd[r].get('redirected_out', 0)}/{tlcd[r].get('redirected_in', 0)}" for r in roles if r in tlcd)
    redirect += f" tlcd_warnings={sum(t['warnings'] for t in tlcd.values())}"
print(f"local-run {'ok' if not problems else 'FAILED: ' + '; '.join(problems)}: mode={mode}"
      f"{' config=' + config if mode == 'tlcd' else ''} rate={str(rate) + 'Mbit' if rate else 'unlimited'} "
      f"steps={chief['global_step']} step={step_s or 0:.4f}s acc={chief.get('test_accuracy')} "
      f"local_steps={'/'.join(map(str, local))} kernel tx/rx MB: {pods} (sent total {mb(kernel_total)}MB)"
      f"{side}{redirect} wall={wall:.1f}s out={out}")
sys.exit(1 if problems else 0)
EOF
