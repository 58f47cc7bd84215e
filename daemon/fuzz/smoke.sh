#!/usr/bin/env bash
# Smoke test of every fuzz target, for CI: builds all targets of
# daemon/fuzz, wire/fuzz, context/fuzz, proxy/fuzz and codec/fuzz, writes
# their seeds, and runs each for a few
# seconds from its seeds. Fails on any crash, failed assertion, leak,
# timeout or out-of-memory, and if a fuzz crate's Cargo.lock is stale.
#
# Needs only the stable toolchain and `cargo install cargo-fuzz --locked`:
# RUSTC_BOOTSTRAP=1 lets stable rustc take the -Z flags cargo-fuzz passes
# (sanitizer, coverage instrumentation). Long runs: see README.md here.
#
#   daemon/fuzz/smoke.sh                 # 20 s per target
#   FUZZ_SMOKE_SECONDS=5 daemon/fuzz/smoke.sh
#
# Corpora go to a temporary directory: the smoke test neither reads nor
# grows daemon/fuzz/corpus. A failing input is kept in
# <crate>/fuzz/artifacts/smoke/ and named in the output.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds="${FUZZ_SMOKE_SECONDS:-20}"
export RUSTC_BOOTSTRAP=1

log() { printf '\n==> %s\n' "$*"; }

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "cargo-fuzz not found: cargo install cargo-fuzz --locked" >&2
  exit 1
fi
host="$(rustc -vV | sed -n 's/^host: //p')"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Builds every target of the fuzz crate in $1: release (-O) with debug
# assertions and overflow checks (-a, which -O alone turns off), and
# AddressSanitizer (cargo-fuzz's default), so that arithmetic on a peer's
# sizes that would wrap fails here instead of passing silently.
build() {
  log "build $1 (cargo fuzz build -O -a)"
  (cd "$1" && cargo fuzz build -O -a)
  if git rev-parse --git-dir >/dev/null 2>&1 && ! git diff --quiet -- "$1/Cargo.lock"; then
    echo "$1/Cargo.lock changed in the build: commit the updated lock file" >&2
    exit 1
  fi
}

# Runs target $2 of the fuzz crate in $1 from corpus $3 for $seconds.
run() {
  local crate=$1 target=$2 corpus=$3
  local artifacts="$crate/artifacts/smoke/" out="$work/$target.log"
  mkdir -p "$corpus" "$artifacts"
  log "run $crate $target for ${seconds}s from $(find "$corpus" -type f | wc -l) seeds"
  if ! "$crate/target/$host/release/$target" "$corpus" \
    -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts" -print_final_stats=1 >"$out" 2>&1; then
    tail -n 60 "$out" >&2
    echo "FAILED: $crate $target (the input is in $artifacts)" >&2
    exit 1
  fi
  grep -E '^#[0-9]+ +DONE|stat::number_of_executed_units' "$out" || true
}

# The seeds binary writes every target's seeds, whichever crate the
# target lives in (each fuzz crate sits beside the parsers it feeds).
build daemon/fuzz
"daemon/fuzz/target/$host/release/seeds" "$work/seeds"
for crate in daemon/fuzz wire/fuzz context/fuzz proxy/fuzz; do
  [ "$crate" = daemon/fuzz ] || build "$crate"
  for target in $(cd "$crate" && cargo fuzz list); do
    [ "$target" = seeds ] && continue
    run "$crate" "$target" "$work/seeds/$target"
  done
done

build codec/fuzz
# decode_frame: the stored test vectors, as they are (mode byte 0) and
# with checksums fixed after mutation (1).
mkdir -p "$work/codec/decode_frame" "$work/codec/roundtrip"
for frames in codec/testdata/vectors/*.frames; do
  name="$(basename "$frames" .frames)"
  { printf '\000'; cat "$frames"; } >"$work/codec/decode_frame/$name-0"
  { printf '\001'; cat "$frames"; } >"$work/codec/decode_frame/$name-1"
done
# Inputs that once failed a target, kept so that it never passes by chance
# without meeting them again.
for dir in codec/fuzz/regressions/*/; do
  target="$(basename "$dir")"
  mkdir -p "$work/codec/$target"
  cp "$dir"* "$work/codec/$target/"
done
for target in $(cd codec/fuzz && cargo fuzz list); do
  run codec/fuzz "$target" "$work/codec/$target"
done

log "every fuzz target ran ${seconds}s without a failure"
