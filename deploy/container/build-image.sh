#!/usr/bin/env bash
# Builds the tlcd image from deploy/container/Containerfile on a machine that
# reaches no image registry, only Debian's archive and crates.io, and runs it:
#   1. the binaries: deploy/container/check-layout.sh (cargo build --release
#      --locked on the host, the tree in deploy/container/rootfs), unless
#      --rootfs-ready says that tree is already there;
#   2. the base: `debootstrap --variant=minbase bookworm`, trimmed as
#      debian:bookworm-slim is (no docs, man pages, locales, apt lists or
#      cached .debs, and the dpkg/apt settings that keep it so), imported as
#      localhost/debian:bookworm-slim; the debootstrap tree and its tarball are
#      cached in .tools/containers/ and reused;
#   3. `buildah bud` of the Containerfile with BASE_IMAGE=localhost/debian:bookworm-slim
#      and BINARIES=prebuilt: the runtime stage (apt-get install iptables
#      ca-certificates, COPY, USER, ENTRYPOINT) runs as written;
#   4. checks in the image, each with `podman run --network none`: the
#      entrypoint's `tlcd --version` and `tlcctl --version` as the image's USER,
#      `id -u` = 1337 and `id -g` = 1337, /usr/sbin/iptables and
#      /usr/local/bin/tlc-iptables present, iptables' own --version;
#      `tlc-iptables apply` as the init container runs it (root, only
#      NET_ADMIN and NET_RAW, in the container's own network namespace) and
#      its nat rules; the image's User/Entrypoint/ExposedPorts as podman
#      inspects them; its size.
# Options:
#   --save FILE     also write the image as a docker-archive tarball (podman save)
#   --tag TAG       image name (default ghcr.io/tlc-project/tlcd:0.1.0)
#   --rootfs-ready  do not run check-layout.sh; deploy/container/rootfs must exist
#   --fresh-base    debootstrap again even if the cached base exists
# Needs root and Debian's buildah, podman and debootstrap. Every byte of
# container storage, runtime state and configuration stays under
# .tools/containers/ (CONTAINERS_STORAGE_CONF, CONTAINERS_CONF,
# CONTAINERS_REGISTRIES_CONF point there); no network, image or file outside it
# is created, and the containers run with --network none.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tools=$root/.tools/containers
tag=ghcr.io/tlc-project/tlcd:0.1.0
base_tag=localhost/debian:bookworm-slim
save=""
rootfs_ready=0
fresh_base=0
fail() { echo "build-image.sh: FAIL: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --save) save=${2:?--save needs a file}; shift 2 ;;
    --tag) tag=${2:?--tag needs a name}; shift 2 ;;
    --rootfs-ready) rootfs_ready=1; shift ;;
    --fresh-base) fresh_base=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) fail "unknown argument $1 (--help)" ;;
  esac
done
[ "$(id -u)" = 0 ] || fail "needs root (rootful buildah/podman, debootstrap)"
for t in buildah podman debootstrap; do
  command -v "$t" >/dev/null || fail "$t not found: apt-get install --no-install-recommends buildah podman debootstrap"
done

t0=$SECONDS
step_start=$SECONDS
timings=()
step() { echo; echo "== $*"; step_start=$SECONDS; step_name=$1; }
done_step() { timings+=("$(printf '%-10s %4ss' "$step_name" $((SECONDS - step_start)))"); }

# --- container tooling confined to .tools/containers --------------------------
mkdir -p "$tools/storage" "$tools/run" "$tools/tmp"
cat >"$tools/storage.conf" <<EOF
# Written by deploy/container/build-image.sh: this project's own image store.
[storage]
driver = "overlay"
graphroot = "$tools/storage"
runroot = "$tools/run"
EOF
cat >"$tools/containers.conf" <<EOF
# Written by deploy/container/build-image.sh.
[containers]
netns = "none"
[engine]
tmp_dir = "$tools/tmp"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$tools/tmp/events.log"
EOF
# No registry is reachable or needed: resolve nothing anywhere.
cat >"$tools/registries.conf" <<EOF
unqualified-search-registries = []
EOF
export CONTAINERS_STORAGE_CONF=$tools/storage.conf
export CONTAINERS_CONF=$tools/containers.conf
export CONTAINERS_REGISTRIES_CONF=$tools/registries.conf
# buildah's and podman's temporary files (default /var/tmp).
export TMPDIR=$tools/tmp
# chroot: the RUN steps run without an OCI runtime or cgroups. The default,
# oci, runs them with crun, which fails here as podman run does below ("cgroups
# in hybrid mode not supported"); BUILDAH_ISOLATION=oci BUILDAH_RUNTIME=runc works too.
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}

# --- 1. binaries ---------------------------------------------------------------
step binaries "deploy/container/check-layout.sh (host cargo build --release --locked; tree in deploy/container/rootfs)"
if [ "$rootfs_ready" = 1 ]; then
  echo "(--rootfs-ready: taking deploy/container/rootfs as it is)"
else
  "$here/check-layout.sh" "$here/rootfs"
fi
for b in tlcd tlcctl tlc-iptables; do
  [ -x "$here/rootfs/usr/local/bin/$b" ] || fail "deploy/container/rootfs/usr/local/bin/$b missing (run check-layout.sh)"
done
done_step

# --- 2. base -------------------------------------------------------------------
mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  # The mirror this machine's apt uses for bookworm (deb822 or one-line sources).
  mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
    awk '/^URIs:/ {u=$2} /^Suites:/ && / bookworm( |$)/ {print u; exit}')
  [ -n "$mirror" ] || mirror=$(grep -hs '^deb .* bookworm ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2; exit}')
  [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
fi
security_mirror=${DEBIAN_SECURITY_MIRROR:-${mirror%/debian}/debian-security}
basedir=$tools/debian-bookworm
base_tar=$basedir/rootfs.tar
step base "debootstrap --variant=minbase bookworm ($mirror), slimmed, imported as $base_tag"
if [ "$fresh_base" = 1 ] || [ ! -s "$base_tar" ]; then
  rm -rf "$basedir"
  mkdir -p "$basedir"
  debootstrap --variant=minbase bookworm "$basedir/rootfs" "$mirror" >"$basedir/debootstrap.log" 2>&1 ||
    { tail -20 "$basedir/debootstrap.log" >&2; fail "debootstrap failed (log: $basedir/debootstrap.log)"; }
  r=$basedir/rootfs
  # What debuerreotype does for debian:*-slim, in short: dpkg leaves out docs,
  # man pages and locales from now on; apt keeps no .debs and fetches no
  # translations; the tree drops what debootstrap left behind.
  cat >"$r/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
# as debian:bookworm-slim (debuerreotype's slimify)
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
EOF
  cat >"$r/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' >"$r/etc/apt/apt.conf.d/docker-no-languages"
  echo 'APT::AutoRemove::SuggestsImportant "false";' >"$r/etc/apt/apt.conf.d/docker-autoremove-suggests"
  # bookworm, bookworm-updates and bookworm-security, as the official image.
  rm -f "$r/etc/apt/sources.list"
  cat >"$r/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security_mirror
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  find "$r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "${r:?}"/usr/share/{info,linda,man,groff,locale}/* "${r:?}"/usr/share/lintian/overrides/* \
    "${r:?}"/var/cache/apt/archives/*.deb "${r:?}"/var/cache/apt/*.bin "${r:?}"/var/lib/apt/lists/* \
    "${r:?}"/var/log/* "${r:?}"/tmp/* "${r:?}"/dev/*
  # Host details debootstrap copied; the engine provides its own.
  : >"$r/etc/resolv.conf"
  : >"$r/etc/hostname"
  echo "bookworm: $(du -sh --apparent-size "$r" | cut -f1) after trimming"
  tar --numeric-owner --xattrs -C "$r" -cf "$base_tar.tmp" .
  mv "$base_tar.tmp" "$base_tar"
  rm -rf "$r"
else
  echo "(cached: $base_tar from $(date -r "$base_tar" '+%F %T'); --fresh-base to debootstrap again)"
fi
podman image rm -f "$base_tag" >/dev/null 2>&1 || true
podman import --change 'CMD ["bash"]' "$base_tar" "$base_tag" >/dev/null || fail "podman import of $base_tar failed"
done_step

# --- 3. image ------------------------------------------------------------------
step image "buildah bud -f deploy/container/Containerfile --build-arg BASE_IMAGE=$base_tag --build-arg BINARIES=prebuilt -t $tag"
buildah bud --isolation "$BUILDAH_ISOLATION" --network host --pull=never \
  --build-arg BASE_IMAGE="$base_tag" --build-arg BINARIES=prebuilt \
  -f "$here/Containerfile" -t "$tag" "$root" || fail "buildah bud failed"
done_step

# --- 4. checks -----------------------------------------------------------------
# podman run, as it can run here (README.md, "Built here"):
# - runc, not crun: crun 1.8 refuses this kernel's hybrid cgroup layout
#   ("cgroups in hybrid mode not supported, drop all controllers from
#   cgroupv2"), and --cgroups=disabled does not avoid that check (nor is it
#   possible with runc); runc puts the container (and conmon) in v1 cgroups
#   under /tlcd-image-check, removed again on exit;
# - nofile no higher than this shell's hard limit (20000 here): rootful podman
#   4.3 gives containers nofile 1048576 (also with --ulimit host), and raising
#   a hard limit needs CAP_SYS_RESOURCE, which this sandbox's bounding set
#   lacks ("error setting rlimit type 7: operation not permitted"); its nproc
#   default fails alike (type 6), so nproc gets 4096.
runtime=${PODMAN_RUNTIME:-}
if [ -z "$runtime" ] && command -v runc >/dev/null; then runtime=runc; fi
cgparent=/tlcd-image-check
cleanup_cgroups() {
  # conmon may still be leaving its cgroup when a check has just failed.
  local d left
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    left=0
    for d in /sys/fs/cgroup/*/"${cgparent#/}"/conmon /sys/fs/cgroup/*/"${cgparent#/}"; do
      [ -d "$d" ] || continue
      rmdir "$d" 2>/dev/null || left=1
    done
    [ "$left" = 0 ] && return 0
    sleep 0.5
  done
  echo "build-image.sh: cgroups left under $cgparent (rmdir them when empty)" >&2
}
trap cleanup_cgroups EXIT
nofile=$(ulimit -Hn); { [ "$nofile" = unlimited ] || [ "$nofile" -gt 1048576 ]; } && nofile=1048576
nproc=$(ulimit -Hu); { [ "$nproc" = unlimited ] || [ "$nproc" -gt 4096 ]; } && nproc=4096
step checks "run the image (podman${runtime:+ --runtime $runtime} run --network none)"
prun() {
  echo "\$ podman run $*" >&2
  podman ${runtime:+--runtime "$runtime"} run --rm --network none --cgroup-parent "$cgparent" \
    --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc" "$@"
}
v=$(prun "$tag" --version) || fail "tlcd --version (the entrypoint) failed in the image"
echo "$v"
[[ $v == "tlcd "* ]] || fail "tlcd --version printed '$v'"
c=$(prun --entrypoint /usr/local/bin/tlcctl "$tag" --version) || fail "tlcctl --version failed in the image"
echo "$c"
[[ $c == "tlcctl "* ]] || fail "tlcctl --version printed '$c'"
# shellcheck disable=SC2016 # expanded by the image's sh
ids=$(prun --entrypoint /bin/sh "$tag" -c 'echo "$(id -u) $(id -g)"') || fail "id failed in the image"
echo "uid gid: $ids"
[ "$ids" = "1337 1337" ] || fail "the image runs as '$ids', not 1337 1337"
prun --entrypoint /bin/sh "$tag" -c 'test -x /usr/sbin/iptables && test -x /usr/local/bin/tlc-iptables && ls -l /usr/local/bin && /usr/sbin/iptables --version' ||
  fail "/usr/sbin/iptables or /usr/local/bin/tlc-iptables missing in the image"
# The init container's job: tlc-iptables as root with only NET_ADMIN and
# NET_RAW (deploy/k8s), in the container's own network namespace (--network
# none: a new one with only lo; nothing on the host or in other namespaces).
nat=$(prun --user 0:0 --cap-drop all --cap-add NET_ADMIN,NET_RAW --entrypoint /bin/sh "$tag" \
  -c '/usr/local/bin/tlc-iptables apply --tf-ports 2222,2223 --uid 1337 >/dev/null && iptables -t nat -S') ||
  fail "tlc-iptables apply failed in the image (as root with NET_ADMIN, NET_RAW)"
echo "$nat"
for rule in '-A TLC_INBOUND -p tcp -m multiport --dports 2222,2223 -j REDIRECT --to-ports 17006' \
  '-A TLC_OUTBOUND -m owner --uid-owner 1337 -j RETURN' \
  '-A TLC_OUTBOUND -p tcp -m multiport --dports 2222,2223 -j REDIRECT --to-ports 17001'; do
  grep -qxF -- "$rule" <<<"$nat" || fail "after tlc-iptables apply in the image, no nat rule '$rule'"
done
meta=$(podman image inspect --format '{{.Config.User}}|{{json .Config.Entrypoint}}|{{json .Config.ExposedPorts}}' "$tag")
echo "config: $meta"
[[ $meta == '1337:1337|["/usr/local/bin/tlcd"]|'* ]] || fail "image config is '$meta'"
for p in 17001 17006 17090; do [[ $meta == *"\"$p/tcp\""* ]] || fail "port $p not exposed"; done
size=$(podman image inspect --format '{{.Size}}' "$tag")
done_step

if [ -n "$save" ]; then
  step save "podman save -o $save $tag"
  rm -f "$save"
  podman save --format docker-archive -o "$save" "$tag" || fail "podman save failed"
  ls -l "$save"
  done_step
fi

# buildah 1.28 leaves a working container for the `binaries` stage (a FROM
# without instructions), which keeps that stage's image; both go, with earlier
# builds' images (this project's store only: nothing else uses it).
buildah rm --all >/dev/null || true
podman image prune -f >/dev/null || true
echo
podman images --format '{{.Repository}}:{{.Tag}}  {{.ID}}  {{.Size}}' | grep -E "^($tag|$base_tag) " || true
echo "== timings"
printf '%s\n' "${timings[@]}"
printf '%-10s %4ss\n' total $((SECONDS - t0))
echo "== build-image.sh: ok: $tag, $v, $((size / 1000000)) MB ($size bytes)"
