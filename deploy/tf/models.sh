#!/usr/bin/env bash
# Runs train.py's models through tlcd: each case once without sidecars
# (run_local.sh) and once with one tlcd per task (run_with_tlcd.sh), same
# seed and steps, one TF job at a time, and prints a table: accuracy and
# loss without / through tlcd, tensor bytes per direction (raw and on the
# sidecar hop), ratios, every byte between tasks as the kernel counted it
# (hop bytes), decode failures, fallbacks, keyframes, step time.
#
#   deploy/tf/models.sh [--cases LIST] [--steps N] [--config FILE] [--out DIR]
#                       [--tlcd PATH] [--check] [--timeout S] [--tls] [-- train.py flags]
#
#   --cases LIST   comma-separated MODEL-MODE-<N>ps[@STEPS], MODEL mlp,
#                  embedding, widedeep, resnet, bnconv or a member of the
#                  model zoo (zoo.py list; train.py --model),
#                  MODE sync or async, N ps tasks (embedding, widedeep: each
#                  table is split into one shard per ps);
#                  @STEPS overrides --steps for that case. Default:
#                  mlp-sync-1ps,embedding-sync-1ps,embedding-sync-2ps,
#                  resnet-sync-1ps,mlp-async-1ps,embedding-async-1ps
#   --steps N      global steps of every run (default 300)
#   --config FILE  given to every tlcd (default: none, tlcd's built-in policy)
#   --out DIR      results (default a new /tmp/tlc-models.XXXXXX): per case
#                  DIR/<case>/base and DIR/<case>/tlcd (run_local.sh's and
#                  run_with_tlcd.sh's --out), their console output in
#                  DIR/<case>/{base,tlcd}.out; the table in DIR/results.md
#                  and DIR/results.json
#   --tlcd PATH    the tlcd binary (default target/release/tlcd); copied to
#                  DIR/tlcd first, so a rebuild meanwhile changes nothing;
#                  deploy/bench/nginx-sidecar times the job through nginx
#                  instead (no tlcd counters then)
#   --check        fail a case when the accuracy through tlcd is more than
#                  --max-loss points below the run without, a sidecar
#                  reports a decode failure, or (train.py --check-final-read)
#                  the chief reads the model, during training (--eval-every)
#                  or after it, or restores it, other than bit for bit
#   --max-loss P   the accuracy --check allows to lose, in points (default
#                  0.5; asynchronous cases vary by about 1 point from run to
#                  run without tlcd)
#   --timeout S    kill a run after S seconds (default 900)
#   --tls          the sidecars speak mutual TLS to each other
#                  (run_with_tlcd.sh --tls)
#   --base-from DIR  take each case's run without sidecars from an earlier
#                  --out DIR (same cases, steps and train.py flags) instead
#                  of running it again: synchronous runs are deterministic,
#                  so comparing settings needs one baseline per seed
#
# Bytes are tlcd's own counters, summed over the sidecars (the last
# "sidecar totals" line of each OUT/sidecars/tlcd-*.log): raw = the
# compressed tensors' size as f32, wire = their envelopes; tensors passed
# through uncompressed (small, not f32, ...) are in neither: counted by
# reason (results.json, "passed") and measured ("passed MB", the totals
# line's passed_bytes: response bodies the holder's sidecar read; a tensor
# an override skips unread is not in it). "all ratio" = (raw + passed) /
# (wire + passed): the job's whole tensor traffic, the figure a conv net of
# many small tensors is judged by. push = gradients (worker -> ps), pull = model
# values and gathered rows (ps -> worker). Keyframes = pull keyframes the ps
# sidecars served (tlc_keyframes_total{side="holder"}, scraped from /metrics);
# drift resets = the totals line's drift_resets (tlcd that has them);
# refinements = further 3LC passes sent (policy.refine; newer tlcd).
# Step time = run_local.sh's training-loop seconds per local step.
#
# Hop bytes are the kernel's: every TCP byte between tasks (calls, requests,
# ids, tensors, framing), counted by iptables rules in a chain of their own
# (TLC_MODELS_HOP, from OUTPUT for -o lo -p tcp), set up before each run and
# removed after it (and on exit), on the peer-facing ports: TF's listeners
# without sidecars (2222...), the sidecars' inbound listeners through tlcd
# (4322...; TF to its own sidecar is not counted). As --dport: the request
# direction (the dialler's calls and RecvTensor requests); as --sport: the
# response direction (RecvTensor responses). "hop MB" is TCP payload: IP
# bytes less 52 per packet (IPv4 + TCP + timestamps on loopback; IPv6, also
# counted where ip6tables works, 72); "w/ hdr" the IP bytes; hop ratio =
# without / through tlcd. Needs root and iptables, otherwise "hop bytes:
# unavailable (needs root and iptables)" and the columns are "-".
#
# Exit status: 0 if every run finished (and, with --check, every case
# passed); 1 otherwise, with the reasons on stderr. Runs use run_local.sh's
# default ports (2222...) and run_with_tlcd.sh's (2322..., 4322..., 5322...,
# 6322, 15100..., 15190...). The Python interpreter is found as run_local.sh
# finds it ($TLC_PYTHON, ...).
set -euo pipefail
# The whole script is one block: bash reads it all before running any of
# it, so editing or checking out this file while a matrix runs (tens of
# minutes) cannot change what the running copy does next.
{

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cases=mlp-sync-1ps,embedding-sync-1ps,embedding-sync-2ps,resnet-sync-1ps,mlp-async-1ps,embedding-async-1ps
steps=300; config=""; OUT=""; base_from=""; TLCD=$root/target/release/tlcd; check=0; max_loss=0.5; timeout=900; tls=()
train_args=()
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
die() { echo "models: $*" >&2; exit 1; }
while (($#)); do
    case $1 in
        --cases) cases=${2:?}; shift 2 ;;
        --steps) steps=${2:?}; shift 2 ;;
        --config) config=${2:?}; shift 2 ;;
        --out) OUT=${2:?}; shift 2 ;;
        --tlcd) TLCD=${2:?}; shift 2 ;;
        --check) check=1; shift ;;
        --max-loss) max_loss=${2:?}; shift 2 ;;
        --timeout) timeout=${2:?}; shift 2 ;;
        --tls) tls=(--tls); shift ;;
        --base-from) base_from=${2:?}; shift 2 ;;
        -h | --help) usage 0 ;;
        --) shift; train_args=("$@"); break ;;
        *) echo "models: unknown argument '$1'" >&2; usage 2 >&2 ;;
    esac
done
[[ $steps =~ ^[1-9][0-9]*$ ]] || die "--steps must be a positive integer"
[[ -x $TLCD ]] || die "no tlcd at $TLCD (cargo build --release -p tlc-daemon, or --tlcd PATH)"
[[ -z $config || -r $config ]] || die "cannot read --config $config"
[[ -n $config ]] && config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")
if [[ -n $base_from ]]; then
    [[ -r $base_from/meta.txt ]] || die "--base-from $base_from: not the --out of an earlier run (no meta.txt)"
    [[ $(sed -n 's/^train_args=//p' "$base_from/meta.txt") == "${train_args[*]}" ]] ||
        die "--base-from $base_from: its train.py flags differ ($(sed -n 's/^train_args=//p' "$base_from/meta.txt"))"
    [[ $(sed -n 's/^steps=//p' "$base_from/meta.txt") == "$steps" ]] ||
        die "--base-from $base_from: not a run of --steps $steps"
fi

if [[ -n ${TLC_PYTHON:-} ]]; then PY=$TLC_PYTHON
elif [[ -x /work/tfvenv/bin/python ]]; then PY=/work/tfvenv/bin/python
elif [[ -x ./.venv-tf/bin/python ]]; then PY=./.venv-tf/bin/python
else die "no Python with TensorFlow: set TLC_PYTHON or run deploy/tf/setup-venv.sh"
fi
export TLC_PYTHON=$PY

# Parse every case before running any.
IFS=, read -r -a case_list <<<"$cases"
((${#case_list[@]})) || die "--cases is empty"
declare -A c_model=() c_mode=() c_ps=() c_steps=()
known_models=" mlp embedding widedeep resnet bnconv $("$PY" "$here/zoo.py" list | tr '\n' ' ')"
for c in "${case_list[@]}"; do
    [[ $c =~ ^([a-z][a-z0-9]*)-(sync|async)-([1-5])ps(@([1-9][0-9]*))?$ && $known_models == *" ${BASH_REMATCH[1]} "* ]] ||
        die "bad case '$c': want MODEL-MODE-<N>ps[@STEPS], MODEL one of$known_models(zoo.py list: the zoo), MODE sync|async, N 1-5, e.g. embedding-sync-2ps"
    c_model[$c]=${BASH_REMATCH[1]} c_mode[$c]=${BASH_REMATCH[2]} c_ps[$c]=${BASH_REMATCH[3]}
    c_steps[$c]=${BASH_REMATCH[5]:-$steps}
done

OUT=${OUT:-$(mktemp -d /tmp/tlc-models.XXXXXX)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cp "$TLCD" "$OUT/tlcd.tmp" && mv "$OUT/tlcd.tmp" "$OUT/tlcd"
# The tlcctl beside tlcd, if any, dumps each sidecar's tensors after a run.
if [[ -x $(dirname "$TLCD")/tlcctl ]]; then
    cp "$(dirname "$TLCD")/tlcctl" "$OUT/tlcctl.tmp" && mv "$OUT/tlcctl.tmp" "$OUT/tlcctl"
fi
rm -f "$OUT"/results.{md,json} "$OUT"/runs.tsv
{
    echo "tlcd_source=$TLCD"
    echo "tlcd_sha256=$(sha256sum "$OUT/tlcd" | cut -d' ' -f1)"
    echo "tlcd_mtime=$(date -r "$TLCD" -Iseconds)"
    echo "tlcd_version=$("$OUT/tlcd" --version 2>/dev/null || true)"
    echo "config=${config:-none}"
    echo "train_args=${train_args[*]}"
    echo "steps=$steps"
    echo "started=$(date -Iseconds)"
} >"$OUT/meta.txt"
echo "models: ${#case_list[@]} case(s), results in $OUT (tlcd $(sed -n 's/^tlcd_sha256=//p' "$OUT/meta.txt" | cut -c1-12))"

# Hop bytes: iptables counting rules in their own chain, jumped to from
# OUTPUT for TCP on lo (a loopback packet passes OUTPUT once), matching the
# peer-facing ports of the run: as --dport (request direction: the dialler's
# packets, calls and RecvTensor requests) and as --sport (response
# direction: the listener's packets, RecvTensor responses). Without tlcd
# those are TF's own ports (2222...), through tlcd the sidecars' inbound
# ports (4322...), so TF-to-its-own-sidecar traffic (5322..., 2322...) is not
# counted. IPv6 (::1) is counted too where ip6tables works.
HOP_CHAIN=TLC_MODELS_HOP
hop_tools=()
if ((EUID == 0)) && command -v iptables >/dev/null && iptables -w -nL OUTPUT >/dev/null 2>&1; then
    hop_tools=(iptables)
    command -v ip6tables >/dev/null && ip6tables -w -nL OUTPUT >/dev/null 2>&1 && hop_tools+=(ip6tables)
else
    echo "models: hop bytes: unavailable (needs root and iptables)"
fi
hop_stop() { # removes the chain and every jump to it (also a killed run's)
    local ipt
    for ipt in "${hop_tools[@]}"; do
        while "$ipt" -w -D OUTPUT -o lo -p tcp -j "$HOP_CHAIN" 2>/dev/null; do :; done
        "$ipt" -w -F "$HOP_CHAIN" 2>/dev/null || true
        "$ipt" -w -X "$HOP_CHAIN" 2>/dev/null || true
    done
}
hop_start() { # LOW HIGH: counts TCP to and from ports LOW..HIGH on lo
    local ipt
    hop_stop
    for ipt in "${hop_tools[@]}"; do
        if ! { "$ipt" -w -N "$HOP_CHAIN" &&
            "$ipt" -w -A "$HOP_CHAIN" -p tcp --dport "$1:$2" -j RETURN &&
            "$ipt" -w -A "$HOP_CHAIN" -p tcp --sport "$1:$2" -j RETURN &&
            "$ipt" -w -I OUTPUT -o lo -p tcp -j "$HOP_CHAIN"; }; then
            hop_stop
            return 1
        fi
    done
}
hop_read() { # FILE: "family direction packets bytes" lines
    local ipt
    : >"$1"
    for ipt in "${hop_tools[@]}"; do
        "$ipt" -w -nvxL "$HOP_CHAIN" | awk -v fam="$([[ $ipt == iptables ]] && echo ipv4 || echo ipv6)" '
            / dpts?:/ { print fam, "request", $1, $2 }
            / spts?:/ { print fam, "response", $1, $2 }' >>"$1" || return 1
    done
}
if ((${#hop_tools[@]})); then
    hop_stop # a chain a killed run left behind
    trap hop_stop EXIT
    trap 'exit 130' INT TERM
fi

failed_runs=()
# run CASE KIND: one run, its console output in OUT/CASE/KIND.out, its hop
# counters in OUT/CASE/KIND.hop; appends "case kind status seconds load" to
# runs.tsv.
run() {
    local c=$1 kind=$2 dir=$OUT/$1/$2 rc=0 t0 t1 load hop=0 low=2222
    local ntasks=$((c_ps[$c] + 2))
    local args=(--model "${c_model[$c]}" --mode "${c_mode[$c]}" --steps "${c_steps[$c]}" "${train_args[@]}")
    mkdir -p "$dir"
    rm -f "$OUT/$c/$kind.hop"
    if ((${#hop_tools[@]})); then
        # TF's ports without sidecars (run_local.sh's 2222...), the sidecars'
        # inbound ports through tlcd (run_with_tlcd.sh's 4322...).
        [[ $kind == base ]] || low=4322
        if hop_start "$low" $((low + ntasks - 1)); then hop=1; else
            echo "models: $c $kind: hop bytes: unavailable (could not add iptables rules)" >&2
        fi
    fi
    load=$(cut -d' ' -f1 /proc/loadavg)
    t0=$(date +%s.%N)
    if [[ $kind == base ]]; then
        TIMEOUT=$timeout "$here/run_local.sh" --ps-tasks "${c_ps[$c]}" --out "$dir" -- "${args[@]}" \
            >"$OUT/$c/$kind.out" 2>&1 || rc=$?
    else
        local with=(--tlcd "$OUT/tlcd" --ps-tasks "${c_ps[$c]}" --out "$dir")
        [[ -n $config ]] && with+=(--config "$config")
        with+=("${tls[@]}")
        TIMEOUT=$timeout "$here/run_with_tlcd.sh" "${with[@]}" -- "${args[@]}" \
            >"$OUT/$c/$kind.out" 2>&1 || rc=$?
    fi
    t1=$(date +%s.%N)
    if ((hop)); then
        hop_read "$OUT/$c/$kind.hop" || { echo "models: $c $kind: could not read the hop counters" >&2; rm -f "$OUT/$c/$kind.hop"; }
        hop_stop
    fi
    printf '%s\t%s\t%s\t%.1f\t%s\n' "$c" "$kind" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$load" >>"$OUT/runs.tsv"
    if ((rc)); then
        echo "models: $c: the run $([[ $kind == base ]] && echo without sidecars || echo through tlcd) FAILED (exit $rc; output $OUT/$c/$kind.out, logs $dir):" >&2
        tail -n 8 "$OUT/$c/$kind.out" | sed 's/^/    /' >&2
        failed_runs+=("$c/$kind")
    else
        echo "models: $c $(printf '%-4s' "$kind") $(grep -a '^tf-run' "$OUT/$c/$kind.out" | tail -n 1 | sed 's/ out=[^ ]*//') [$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%d", b - a }') s]"
    fi
    [[ -s $OUT/$c/$kind.hop ]] && awk -v c="$c" -v k="$kind" '
        { p[$2] += $3; b[$2] += $4; h[$2] += $3 * ($1 == "ipv4" ? 52 : 72) }
        END { printf "models: %s %-4s hop bytes: request %.2f MB, response %.2f MB (TCP payload; %.2f MB with headers, %d packets)\n",
              c, k, (b["request"] - h["request"]) / 1e6, (b["response"] - h["response"]) / 1e6,
              (b["request"] + b["response"]) / 1e6, p["request"] + p["response"] }' "$OUT/$c/$kind.hop"
    return 0
}

# reuse CASE: the run without sidecars of --base-from, copied.
reuse() {
    local c=$1 from=$base_from/$1
    [[ -d $from/base && -s $from/base.out ]] || die "--base-from: no run without sidecars of $c in $base_from"
    mkdir -p "$OUT/$c"
    cp -r "$from/base" "$OUT/$c/" && cp "$from/base.out" "$OUT/$c/base.out"
    [[ -s $from/base.hop ]] && cp "$from/base.hop" "$OUT/$c/base.hop"
    grep "^$c	base	" "$base_from/runs.tsv" >>"$OUT/runs.tsv" || true
    echo "models: $c base taken from $from"
}

for c in "${case_list[@]}"; do
    if [[ -n $base_from ]]; then reuse "$c"; else run "$c" base; fi
    run "$c" tlcd
done

set +e
"$PY" - "$OUT" "$check" "$max_loss" "${case_list[@]}" <<'PY'
import glob, json, os, re, sys

out, check, max_loss, cases = sys.argv[1], sys.argv[2] == "1", float(sys.argv[3]), sys.argv[4:]
runs = {}
for line in open(f"{out}/runs.tsv"):
    c, kind, rc, secs, load = line.rstrip("\n").split("\t")
    runs[(c, kind)] = {"exit": int(rc), "script_seconds": float(secs), "load_before": float(load)}


def sidecars(d):
    """Summed counters of every sidecar of a run through tlcd."""
    tot = {"push_tensors": 0, "push_raw": 0, "push_wire": 0, "pull_tensors": 0, "pull_raw": 0, "pull_wire": 0,
           "restored": 0, "decode_failures": 0, "fallbacks": 0, "fallbacks_served": 0, "drift_resets": 0,
           "keyframes_served": 0, "keyframes_applied": 0, "passed": {}, "passed_bytes": 0, "refinements": 0,
           "sidecars": [], "missing": [], "cpu_seconds": 0.0, "recv_tensor_calls": 0}
    for log in sorted(glob.glob(f"{d}/sidecars/tlcd-*.log")):
        name = os.path.basename(log)[5:-4]
        tot["sidecars"].append(name)
        lines = [l for l in open(log, errors="replace") if "sidecar totals" in l]
        if not lines:
            tot["missing"].append(name)
            continue
        line = lines[-1]
        for direction in ("push", "pull"):
            m = re.search(direction + r": tensors=(\d+) raw_bytes=(\d+) wire_bytes=(\d+)", line)
            tot[f"{direction}_tensors"] += int(m.group(1))
            tot[f"{direction}_raw"] += int(m.group(2))
            tot[f"{direction}_wire"] += int(m.group(3))
            m = re.search(direction + r": [^;]*\brefinements=(\d+)", line)  # newer tlcd only
            tot["refinements"] += int(m.group(1)) if m else 0
        for key in ("restored", "decode_failures", "fallbacks", "fallbacks_served", "drift_resets", "passed_bytes"):
            m = re.search(rf"\b{key}=(\d+)", line)  # drift_resets: only in newer tlcd
            tot[key] += int(m.group(1)) if m else 0
        m = re.search(r"passed=\{(.*)\}", line)
        for k, v in re.findall(r'"([^"]+)": (\d+)', m.group(1) if m else ""):
            tot["passed"][k] = tot["passed"].get(k, 0) + int(v)
        try:
            metrics = open(f"{d}/sidecars/metrics-{name}.txt").read()
        except OSError:
            metrics = ""
            tot["missing"].append(f"metrics-{name}")
        # What the sidecars cost on the CPU per call: each RecvTensor call
        # between tasks is counted once, where it arrives (inbound).
        m = re.search(r"^process_cpu_seconds_total (\S+)", metrics, re.M)
        tot["cpu_seconds"] += float(m.group(1)) if m else 0.0
        for count in re.findall(r'^tlc_recv_tensor_seconds_count\{role="inbound"[^}]*\} (\d+)', metrics, re.M):
            tot["recv_tensor_calls"] += int(count)
        for side, key in (("holder", "keyframes_served"), ("requester", "keyframes_applied")):
            m = re.search(r'^tlc_keyframes_total\{side="' + side + r'"\} (\d+)', metrics, re.M)
            tot[key] += int(m.group(1)) if m else 0
    return tot


# TCP/IP header bytes per packet on loopback with TCP timestamps (the
# Linux default): IPv4 20 + TCP 20 + 12 options; IPv6 40 + 20 + 12.
# SYN and SYN-ACK carry 8 more option bytes, counted here as payload.
HEADER = {"ipv4": 52, "ipv6": 72}


def hop(path):
    """The kernel's counts of a run's peer-to-peer TCP: per direction packets,
    bytes (IP packets, headers included) and payload (bytes less the headers)."""
    try:
        lines = open(path).read().split()
    except OSError:
        return None
    h = {d: {"packets": 0, "bytes": 0, "payload": 0} for d in ("request", "response")}
    h["ipv6_packets"] = 0
    for fam, direction, packets, size in zip(*[iter(lines)] * 4):
        packets, size = int(packets), int(size)
        h[direction]["packets"] += packets
        h[direction]["bytes"] += size
        h[direction]["payload"] += size - HEADER[fam] * packets
        if fam == "ipv6":
            h["ipv6_packets"] += packets
    h["payload"] = h["request"]["payload"] + h["response"]["payload"]
    h["bytes"] = h["request"]["bytes"] + h["response"]["bytes"]
    h["packets"] = h["request"]["packets"] + h["response"]["packets"]
    return h


# A stand-in proxy (deploy/bench/nginx-sidecar) keeps no tlcd counters.
stand_in = "\ntlcd_version=nginx-sidecar" in open(f"{out}/meta.txt").read()
rows, problems = [], []
for c in cases:
    model, mode, ps = re.match(r"(\w+)-(\w+)-(\d)ps", c).groups()
    row = {"case": c, "model": model, "mode": mode, "ps_tasks": int(ps)}
    for kind in ("base", "tlcd"):
        r = dict(runs.get((c, kind), {"exit": None}))
        try:
            s = json.load(open(f"{out}/{c}/{kind}/summary.json"))
        except (OSError, ValueError):
            s = {}
        r.update({k: s.get(k) for k in ("ok", "global_step", "local_steps", "step_seconds", "test_accuracy",
                                       "test_loss", "wall_seconds", "params", "problems", "final_read_max_diff",
                                       "restore_max_diff", "eval_read_max_diff", "eval_read_max_rel_l2")})
        if kind == "tlcd":
            r.update(sidecars(f"{out}/{c}/{kind}"))
        r["hop"] = hop(f"{out}/{c}/{kind}.hop")
        row[kind] = r
    b, t = row["base"], row["tlcd"]
    for name, r in (("without sidecars", b), ("through tlcd", t)):
        if r["exit"] != 0 or not r.get("ok"):
            problems.append(f"{c}: the run {name} failed (exit {r['exit']}{'; ' + '; '.join(r['problems']) if r.get('problems') else ''})")
    if t.get("missing") and t["exit"] == 0 and not stand_in:
        problems.append(f"{c}: no counters from {', '.join(t['missing'])} (a tlcd did not shut down cleanly?)")
    if b.get("hop") and t.get("hop") and t["hop"]["payload"] > 0:
        row["hop_ratio"] = round(b["hop"]["payload"] / t["hop"]["payload"], 3)
    if b.get("test_accuracy") is not None and t.get("test_accuracy") is not None:
        row["accuracy_delta_points"] = round((t["test_accuracy"] - b["test_accuracy"]) * 100, 2)
    row["check"] = []
    if row.get("accuracy_delta_points") is not None and row["accuracy_delta_points"] < -max_loss:
        row["check"].append(f"accuracy {-row['accuracy_delta_points']:.2f} points below the run without sidecars")
    if t.get("decode_failures"):
        row["check"].append(f"{t['decode_failures']} decode failures")
    if t.get("final_read_max_diff"):
        row["check"].append(f"the model read after training is {t['final_read_max_diff']:g} off the ps's (train.py --check-final-read)")
    if t.get("eval_read_max_diff"):
        row["check"].append(f"a read during training (train.py --check-final-read --eval-every) was "
                            f"{t['eval_read_max_diff']:g} off the ps's ({t['eval_read_max_rel_l2']:.4g} relative L2)")
    if t.get("restore_max_diff"):
        row["check"].append(f"saving and restoring the model through the chief moved it by {t['restore_max_diff']:g} (train.py --check-final-read)")
    if check and row["check"]:
        problems.append(f"{c}: check failed: " + "; ".join(row["check"]))
    rows.append(row)


def mb(x):
    return "-" if x is None else f"{x / 1e6:.2f}"


def ratio(raw, wire):
    return "-" if not wire else f"{raw / wire:.1f}"


def fmt(x, spec, scale=1.0):
    return "-" if x is None else format(x * scale, spec)


head = ["case", "model", "mode", "ps", "run", "steps (local)", "test acc", "Δ acc (pts)", "test loss",
        "push raw MB", "push wire MB", "push ratio", "pull raw MB", "pull wire MB", "pull ratio",
        "passed MB", "all ratio",
        "hop req MB", "hop resp MB", "hop MB", "hop MB w/ hdr", "hop ratio", "refinements",
        "decode fail", "fallbacks", "keyframes", "drift resets", "step ms", "TF wall s", "run wall s",
        "sidecar CPU s", "CPU µs/call"]
lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
for row in rows:
    for kind, label in (("base", "without"), ("tlcd", "tlcd")):
        r = row[kind]
        tl = kind == "tlcd"
        sc = tl and not r.get("missing")  # this run's sidecar counters are all there
        h = r.get("hop")
        steps = "-" if r.get("global_step") is None else f"{r['global_step']} ({'/'.join(map(str, r.get('local_steps') or []))})"
        cells = [row["case"], row["model"], row["mode"], str(row["ps_tasks"]), label, steps,
                 fmt(r.get("test_accuracy"), ".2%"),
                 fmt(row.get("accuracy_delta_points"), "+.2f") if tl else "",
                 fmt(r.get("test_loss"), ".4f"),
                 mb(r.get("push_raw")) if sc else "-", mb(r.get("push_wire")) if sc else "-",
                 ratio(r.get("push_raw"), r.get("push_wire")) if sc else "-",
                 mb(r.get("pull_raw")) if sc else "-", mb(r.get("pull_wire")) if sc else "-",
                 ratio(r.get("pull_raw"), r.get("pull_wire")) if sc else "-",
                 mb(r.get("passed_bytes")) if sc else "-",
                 ratio(r.get("push_raw", 0) + r.get("pull_raw", 0) + r.get("passed_bytes", 0),
                       r.get("push_wire", 0) + r.get("pull_wire", 0) + r.get("passed_bytes", 0)) if sc else "-",
                 mb(h["request"]["payload"]) if h else "-", mb(h["response"]["payload"]) if h else "-",
                 mb(h["payload"]) if h else "-", mb(h["bytes"]) if h else "-",
                 fmt(row.get("hop_ratio"), ".2f") if tl else "",
                 str(r.get("refinements", "-")) if sc else "-",
                 str(r.get("decode_failures", "-")) if sc else "-", str(r.get("fallbacks", "-")) if sc else "-",
                 str(r.get("keyframes_served", "-")) if sc else "-",
                 str(r.get("drift_resets", "-")) if sc else "-",
                 fmt(r.get("step_seconds"), ".1f", 1000), fmt(r.get("wall_seconds"), ".1f"),
                 fmt(r.get("script_seconds"), ".1f"),
                 fmt(r.get("cpu_seconds"), ".2f") if sc else "-",
                 fmt(r["cpu_seconds"] / r["recv_tensor_calls"], ".1f", 1e6)
                 if sc and r.get("recv_tensor_calls") else "-"]
        lines.append("| " + " | ".join(cells) + " |")
meta = dict(l.rstrip("\n").split("=", 1) for l in open(f"{out}/meta.txt") if "=" in l)
md = [f"# train.py models through tlcd", "",
      f"{meta.get('tlcd_version', 'tlcd')} sha256 {meta.get('tlcd_sha256', '')[:16]} (from {meta.get('tlcd_source')}, "
      f"file dated {meta.get('tlcd_mtime')}); config {meta.get('config')}; extra train.py flags: {meta.get('train_args') or 'none'}; "
      f"started {meta.get('started')}", "",
      "Bytes: tlcd's counters summed over the sidecars, compressed tensors only (raw = as f32, wire = envelopes); "
      "push = gradients, pull = values and gathered rows. Passed: bytes of RecvTensor responses the sidecars read and "
      "left uncompressed (small, not float, dead...); all ratio: every tensor byte, compressed and passed, against "
      "what crossed. Refinements: further 3LC passes (policy.refine). Keyframes: pull keyframes served. "
      "Drift resets: lossless keyframes sent because a pull replica drifted (newer tlcd only). "
      "Hop: every TCP byte between tasks as the kernel counted it (iptables on lo, the peer-facing ports: "
      "TF's without sidecars, the sidecars' inbound ports through tlcd, so not TF to its own sidecar): "
      "control calls, requests, ids, tensors, HTTP/2 and gRPC framing, TLS; req = the dialler's packets "
      "(calls, RecvTensor requests), resp = the listener's (responses, tensors); MB = TCP payload "
      "(IP bytes less 52 per packet), w/ hdr = IP bytes; hop ratio = hop MB without / through tlcd; "
      "'-' = not measured (needs root and iptables). "
      "Step ms: training loop per local step. TF wall: first task start to last exit; run wall: the whole "
      "run_local.sh / run_with_tlcd.sh call. Sidecar CPU: every sidecar's CPU-seconds (process_cpu_seconds_total "
      "at the end); µs/call: those over the RecvTensor calls between tasks (each counted where it arrives), "
      "both ends of a call together.", ""] + lines + [""]
checks = [f"- {row['case']}: " + "; ".join(row["check"]) for row in rows if row["check"]]
if checks:
    md += ["Cases --check would fail:", ""] + checks + [""]
open(f"{out}/results.md", "w").write("\n".join(md) + "\n")


def strict(x):
    """NaN (a diverged loss) as null, so the file is plain JSON."""
    if isinstance(x, float) and x != x:
        return None
    if isinstance(x, dict):
        return {k: strict(v) for k, v in x.items()}
    if isinstance(x, list):
        return [strict(v) for v in x]
    return x


json.dump(strict({"meta": meta, "check": check, "cases": rows, "problems": problems}),
          open(f"{out}/results.json", "w"), indent=2)
print("\n".join(lines))
for p in problems:
    print(f"models: FAILED: {p}", file=sys.stderr)
sys.exit(1 if problems else 0)
PY
status=$?
set -e
echo "models: table in $OUT/results.md, details in $OUT/results.json"
((${#failed_runs[@]} == 0)) || echo "models: failed runs: ${failed_runs[*]}" >&2
exit "$status"
}
