#!/usr/bin/env bash
# Builds deploy/container/Containerfile as its header documents it, with no
# build argument: the build stage compiles tlcd and tlcctl from the whole
# context, the runtime stage takes them. On a machine that reaches no image
# registry the two base images are made here and tagged with the names the
# Containerfile's defaults give, so the build itself is the documented one:
#   docker.io/library/debian:bookworm-slim  build-image.sh's debootstrapped
#                                           base (run build-image.sh first);
#   docker.io/library/rust:1.95-bookworm    that base with gcc, libc6-dev and
#                                           ca-certificates from Debian (and
#                                           the host's own CAs, for an egress
#                                           proxy), and the host's Rust
#                                           toolchain in /usr/local/rust;
# then `buildah bud -f deploy/container/Containerfile .` from a fresh clone of
# HEAD (the context a user has; .dockerignore applies), and the image's
# `tlcd --version` and `tlcctl --version`. The build stage fetches crates
# from crates.io, so it needs that network. Several minutes on 2 cores.
#
#   deploy/container/build-image.sh && deploy/container/build-stage.sh
#
# Needs root, Debian's buildah and podman. Storage is build-image.sh's, under
# .tools/containers/.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tools=$root/.tools/containers
base_tar=$tools/debian-bookworm/rootfs.tar
tag=localhost/tlcd:build-stage
fail() { echo "build-stage.sh: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (rootful buildah/podman)"
[ -s "$base_tar" ] || fail "no base at $base_tar: run deploy/container/build-image.sh first"
[ -s "$tools/storage.conf" ] || fail "no $tools/storage.conf: run deploy/container/build-image.sh first"
export CONTAINERS_STORAGE_CONF=$tools/storage.conf
export CONTAINERS_CONF=$tools/containers.conf
export CONTAINERS_REGISTRIES_CONF=$tools/registries.conf
export TMPDIR=$tools/tmp
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}

# The Containerfile's defaults, read from it: the names to stand in for.
cf=$here/Containerfile
rust_image=$(sed -n 's/^ARG RUST_IMAGE=//p' "$cf")
base_image=$(sed -n 's/^ARG BASE_IMAGE=//p' "$cf")
[ -n "$rust_image" ] && [ -n "$base_image" ] || fail "Containerfile: no RUST_IMAGE/BASE_IMAGE defaults"
toolchain=$(rustc --print sysroot)
version=$(rustc --version | awk '{print $2}')
case "$rust_image" in
  *:"${version%.*}"-*) ;;
  *) echo "build-stage.sh: note: the host's rustc is $version; $rust_image carries another (the stand-in takes the host's)" ;;
esac

echo "== $base_image: the debootstrapped base"
podman image rm -f "$base_image" >/dev/null 2>&1 || true
podman import --change 'CMD ["bash"]' "$base_tar" "$base_image" >/dev/null

echo "== $rust_image: the base, a C toolchain, and rustc $version from $toolchain"
podman image rm -f "$rust_image" >/dev/null 2>&1 || true
ctr=$(buildah from --pull=never "$base_image")
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah run --isolation "$BUILDAH_ISOLATION" --network host "$ctr" -- sh -c \
  'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev ca-certificates >/dev/null && rm -rf /var/lib/apt/lists/*'
# The host's own certificate authorities (an egress proxy's, where one
# stands between this machine and crates.io), so that cargo in the build
# stage reaches crates.io as the host does.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  buildah copy "$ctr" /usr/local/share/ca-certificates/ /usr/local/share/ca-certificates/ >/dev/null
  buildah run --isolation "$BUILDAH_ISOLATION" --network host "$ctr" -- update-ca-certificates >/dev/null
fi
for part in bin lib libexec; do
  [ -d "$toolchain/$part" ] && buildah copy "$ctr" "$toolchain/$part" "/usr/local/rust/$part" >/dev/null
done
buildah config --env PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env CARGO_HOME=/usr/local/cargo "$ctr"
buildah commit --quiet "$ctr" "$rust_image" >/dev/null
buildah rm "$ctr" >/dev/null
trap - EXIT

echo "== a fresh clone of HEAD, the context a user builds from"
context=$(mktemp -d "$tools/tmp/context.XXXXXX")
trap 'buildah rm --all >/dev/null 2>&1 || true; rm -rf "$context"' EXIT
git clone -q "$root" "$context/tlc"

echo "== buildah bud -f deploy/container/Containerfile . (no build argument)"
t0=$SECONDS
(cd "$context/tlc" && buildah bud --isolation "$BUILDAH_ISOLATION" --network host --pull=never \
  -f deploy/container/Containerfile -t "$tag" .) || fail "the documented build failed"
echo "built in $((SECONDS - t0)) s"

# buildah 1.28 leaves a working container for the `binaries` stage (a FROM
# without instructions), which keeps its layers mounted under .tools (and the
# checkout from being removed): every working container goes on exit, as in
# build-image.sh (this project's store only).
trap 'buildah rm --all >/dev/null 2>&1 || true; rm -rf "$context"' EXIT

echo "== the image's binaries (buildah run: no OCI runtime needed)"
ctr=$(buildah from --pull=never "$tag")
for b in tlcd tlcctl; do
  v=$(buildah run --isolation "$BUILDAH_ISOLATION" --network host "$ctr" -- "/usr/local/bin/$b" --version) ||
    fail "$b --version failed in the image"
  echo "$v"
  [[ $v == "$b "* ]] || fail "$b --version printed '$v'"
done
buildah rm --all >/dev/null || true
podman image prune -f >/dev/null || true
echo "build-stage.sh: ok: the Containerfile builds with its default arguments from a fresh clone"
