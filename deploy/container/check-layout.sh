#!/usr/bin/env bash
# Builds the file layout deploy/container/Containerfile produces, without a
# container engine (none runs on the project's machines, and no image registry
# is reachable: README.md here), and runs the binaries from it:
#   1. the build stage's `cargo build --release --locked ...` (read from the
#      Containerfile) of tlcd and tlcctl, on the host;
#   2. a rootfs tree in deploy/container/rootfs (or $1) with the runtime
#      stage's own files: /usr/local/bin/{tlcd,tlcctl,tlc-iptables}, stripped,
#      mode 0755;
#   3. `tlcd --version`, `tlcctl --version` and `tlc-iptables --help` from that
#      tree, as UID 1337 when run as root (the image's USER), and the
#      Containerfile's COPY/USER/ENTRYPOINT lines checked against the tree;
#      its build stage must copy the whole context, of which .dockerignore
#      may leave out no file git tracks (ignored.py).
# The Debian base (iptables, ca-certificates) is not assembled: the host's
# libraries and iptables stand in for it.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
rootfs=${1:-$here/rootfs}
bin=$rootfs/usr/local/bin
fail() { echo "check-layout.sh: FAIL: $*" >&2; exit 1; }

# The build stage's own command, read from the Containerfile, so that what
# the host builds here and what the image builds cannot drift apart.
cf=$here/Containerfile
build=$(sed -n 's/^RUN \(cargo build [^&\\]*\).*/\1/p' "$cf" | head -n 1 | sed 's/ *$//')
[ -n "$build" ] || fail "Containerfile: no 'RUN cargo build ...' in the build stage"
case "$build" in
  *--locked*) ;;
  *) fail "Containerfile: cargo build without --locked" ;;
esac
echo "== $build (the Containerfile's build stage)"
read -r -a build_args <<<"$build"
(cd "$root" && "${build_args[@]}") || fail "cargo build failed"
target=$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

echo "== assemble $rootfs"
rm -rf "$rootfs"
install -D -m 0755 "$target/release/tlcd" "$bin/tlcd"
install -D -m 0755 "$target/release/tlcctl" "$bin/tlcctl"
install -D -m 0755 "$root/deploy/iptables.sh" "$bin/tlc-iptables"
if command -v strip >/dev/null; then strip "$bin/tlcd" "$bin/tlcctl"; fi
(cd "$rootfs" && find . -type f -printf '%m %10s %p\n' | sort -k3)

# The Containerfile must make exactly these files, and run tlcd as 1337.
grep -q '^USER 1337:1337$' "$cf" || fail "Containerfile: USER 1337:1337 missing"
grep -q '^ENTRYPOINT \["/usr/local/bin/tlcd"\]$' "$cf" || fail "Containerfile: ENTRYPOINT [\"/usr/local/bin/tlcd\"] missing"
grep -q 'deploy/iptables.sh /out/usr/local/bin/tlc-iptables' "$cf" || fail "Containerfile: tlc-iptables not copied from deploy/iptables.sh"
for b in tlcd tlcctl; do
  grep -q "target/release/$b .*/out/usr/local/bin/$b" "$cf" || fail "Containerfile: $b not installed to /usr/local/bin"
done
# The build stage builds from the whole context, and the context leaves out
# no file git tracks: what a fresh clone builds, the image builds.
grep -q '^COPY \. \.$' "$cf" || fail "Containerfile: the build stage does not copy the whole context (COPY . .)"
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  left_out=$(git -C "$root" ls-files | python3 "$here/ignored.py" "$root/.dockerignore") ||
    fail ".dockerignore cannot be read"
  [ -z "$left_out" ] || fail ".dockerignore leaves out tracked files the build needs: $(head -n 5 <<<"$left_out" | tr '\n' ' ')"
fi

# As the image's user where we can be it (root can drop to 1337; others run as themselves).
as_user=()
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  as_user=(setpriv --reuid=1337 --regid=1337 --clear-groups)
  chmod 0755 "$rootfs" "$rootfs/usr" "$rootfs/usr/local" "$bin"
fi
run() { echo "\$ ${1#"$rootfs"} ${*:2}" >&2; "${as_user[@]}" "$@"; }

echo "== run from the tree${as_user:+ as UID 1337}"
v=$(run "$bin/tlcd" --version) || fail "tlcd --version failed"; echo "$v"
[[ $v == "tlcd "* ]] || fail "tlcd --version printed '$v'"
run "$bin/tlcctl" --version || fail "tlcctl --version failed"
# tlc-iptables --help prints its usage and exits 2 (as without arguments).
set +e; out=$(run "$bin/tlc-iptables" --help 2>&1); rc=$?; set -e
echo "$out"
if [ "$rc" != 2 ] || ! grep -q 'apply  --tf-ports' <<<"$out"; then
  fail "tlc-iptables --help: exit $rc, no usage"
fi
echo "== check-layout.sh: ok ($rootfs)"
