"""Starting one container of a pod the way a container runtime would, without one.

No container engine runs on the project's machines, so each container is
made from the pieces a runtime would use, each of them real:

- **network**: the pod's network namespace (`ip netns exec`), shared by all
  its containers, as in Kubernetes;
- **file system**: a root of its own, entered with `chroot` inside a
  private mount namespace (`unshare --mount`): the host's /usr (the image's
  base: Debian, like the Containerfile's `debian:bookworm-slim`), the
  image's own files on top, the pod's /etc/hosts and /etc/hostname, a /run
  and /tmp of its own, and the manifest's volumeMounts at their paths,
  read-only where the manifest says so, the root itself read-only with
  `readOnlyRootFilesystem`;
- **identity**: `runAsUser`/`runAsGroup` and the capability set the
  runtime would give (`setpriv`: the runtime's default set, minus `drop`,
  plus `add`; `allowPrivilegeEscalation: false` is no_new_privs);
- **memory**: `resources.limits.memory` as a memory cgroup's limit, which is
  where tlcd reads the limit it sizes its bounds from;
- **hostname**: the pod's name (`unshare --uts`).

What an image is: `Image`. The tlcd image is the file tree
`deploy/container/check-layout.sh` assembles (its /usr/local/bin); the
training image is a stand-in (the host's Python environment with
TensorFlow, and the training program's folder at /app) since the
manifests' own is a placeholder.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from manifest import Container, Pod

# What containerd and CRI-O give a container that asks for nothing else.
DEFAULT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID",
                "SETFCAP", "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"]
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Host files every root gets under /etc (bound read-only): the dynamic
# loader's cache, users, name service and TLS roots, and the alternatives
# Debian's iptables is reached through.
ETC_FROM_HOST = ["ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf",
                 "host.conf", "gai.conf", "protocols", "services", "ssl", "ca-certificates",
                 "alternatives", "localtime"]


@dataclass
class Image:
    """What a container's image contributes: files on top of the base, and defaults."""

    name: str
    layers: list[tuple[Path, str]]  # (host directory, path in the container)
    entrypoint: list[str] = field(default_factory=list)
    user: int = 0
    group: int = 0
    path: str = DEFAULT_PATH
    # Host paths visible at the same path (the stand-in's Python environment).
    same_path: list[Path] = field(default_factory=list)


def capabilities(container: Container) -> list[str]:
    """The capability bounding set the runtime would give."""
    caps = [] if "ALL" in container.cap_drop else [c for c in DEFAULT_CAPS if c not in container.cap_drop]
    caps += [c for c in container.cap_add if c not in caps]
    return caps


class MemoryCgroup:
    """A cgroup v1 memory group below this process's own, with a limit."""

    def __init__(self, name: str, limit: int | None):
        self.path: Path | None = None
        self.error = ""
        if limit is None:
            return
        own = ""
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):
                own = path.lstrip("/")
        base = Path("/sys/fs/cgroup/memory")
        if not (base / own / "memory.limit_in_bytes").exists():
            self.error = "no cgroup v1 memory controller at /sys/fs/cgroup/memory"
            return
        path = base / own / "tlc-kube" / name
        try:
            path.mkdir(parents=True, exist_ok=True)
            (path / "memory.limit_in_bytes").write_text(str(limit))
            self.path = path
        except OSError as err:
            self.error = f"cannot make memory cgroup {path}: {err}"

    def remove(self) -> None:
        """Removes the group (once its processes are gone)."""
        if self.path is not None:
            try:
                self.path.rmdir()
            except OSError:
                pass


def mount_script(root: Path, image: Image, mounts: list[tuple[Path, str, bool]], read_only_root: bool,
                 etc_files: dict[str, Path]) -> list[str]:
    """Shell lines that build the container's root inside a private mount namespace."""
    q = shlex.quote
    lines = ["set -eu", f"R={q(str(root))}", 'mount --bind "$R" "$R"']

    def bind(source: Path | str, target: str, read_only: bool) -> None:
        lines.append(f'mount --rbind {q(str(source))} "$R"{q(target)}')
        if read_only:
            lines.append(f'mount -o remount,bind,ro "$R"{q(target)}')

    for top in ("usr", "opt"):
        bind(f"/{top}", f"/{top}", True)
    for name in ("proc", "dev", "sys"):
        lines.append(f'mount --rbind /{name} "$R"/{name}')
    lines.append('mount -t tmpfs -o mode=755 tmpfs "$R"/run')
    lines.append('mount -t tmpfs -o mode=1777 tmpfs "$R"/tmp')
    for host_path in image.same_path:
        lines.append(f'mkdir -p "$R"{q(str(host_path))}')
        bind(host_path, str(host_path), True)
    for host_dir, target in image.layers:
        bind(host_dir, target, True)
    for name, source in etc_files.items():
        bind(source, f"/etc/{name}", True)
    # Volumes after everything else, shallow paths first (a mount inside a
    # mounted volume needs the outer one in place), all made read-only only
    # once every one is in place: the mount point of a volume inside another
    # is made in the outer one's files, as runc does.
    ordered = sorted(mounts, key=lambda m: m[1].count("/"))
    for source, target, _ in ordered:
        lines.append(f'mkdir -p "$R"{q(target)}')
        bind(source, target, False)
    for _, target, read_only in ordered:
        if read_only:
            lines.append(f'mount -o remount,bind,ro "$R"{q(target)}')
    if read_only_root:
        lines.append('mount -o remount,bind,ro "$R"')
    return lines


def prepare_root(root: Path, etc_dir: Path) -> dict[str, Path]:
    """The directories a root needs before anything is mounted on it; returns /etc's binds."""
    for name in ("usr", "opt", "proc", "dev", "sys", "run", "tmp", "etc", "var/tmp", "root", "app"):
        (root / name).mkdir(parents=True, exist_ok=True)
    for link, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"),
                         ("lib64", "usr/lib64"), ("var/run", "../run")):
        if not (root / link).is_symlink():
            (root / link).symlink_to(target)
    binds = {}
    for name in ETC_FROM_HOST:
        host = Path("/etc") / name
        if host.exists():
            target = root / "etc" / name
            if host.is_dir():
                target.mkdir(exist_ok=True)
            else:
                target.touch()
            binds[name] = host
    for name in ("hosts", "hostname", "resolv.conf"):
        (root / "etc" / name).touch()
        binds[name] = etc_dir / name
    return binds


def expand(text: str, env: dict[str, str]) -> str:
    """`text` with $(VAR) replaced by env's VAR, as the kubelet does in
    command and args: an unknown $(VAR) stays as written, $$ is one $."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def resolve_env(env: dict[str, str], pod: Pod, pod_ip: str) -> dict[str, str]:
    """The container's env with fieldRefs and $(VAR) references resolved as the kubelet does."""
    fields = {"metadata.name": pod.name, "metadata.namespace": pod.namespace, "status.podIP": pod_ip}
    resolved: dict[str, str] = {}
    for name, value in env.items():
        if value.startswith("$(fieldRef:"):
            value = fields[value[len("$(fieldRef:"):-1]]
        for ref, ref_value in resolved.items():
            value = value.replace(f"$({ref})", ref_value)
        resolved[name] = value
    return resolved


def launch_command(netns: str, pod: Pod, container: Container, image: Image, root: Path,
                   etc_dir: Path, volumes: dict[str, Path], pod_ip: str, cgroup: MemoryCgroup | None,
                   extra_args: list[str]) -> tuple[list[str], str]:
    """The command that starts `container`, and the script it runs (written by the caller)."""
    etc_binds = prepare_root(root, etc_dir)
    mounts = []
    for mount in container.mounts:
        if mount.volume not in volumes:
            raise ValueError(f"pod {pod.name} container {container.name}: no volume '{mount.volume}'")
        mounts.append((volumes[mount.volume], mount.path, mount.read_only))
    lines = mount_script(root, image, mounts, container.read_only_root, etc_binds)
    if cgroup is not None and cgroup.path is not None:
        # `ip netns exec` gave the namespace a sysfs of its own, without the
        # host's cgroup mounts: mount the memory hierarchy again, as a
        # runtime does, so that the container sees its limit where tlcd
        # looks for it (/proc/self/cgroup's path under it).
        lines += ['mount -t tmpfs -o mode=755 cgroup "$R"/sys/fs/cgroup',
                  'mkdir "$R"/sys/fs/cgroup/memory',
                  'mount -t cgroup -o memory,ro cgroup "$R"/sys/fs/cgroup/memory']
    lines.append(f"hostname {shlex.quote(pod.name)}")

    uid = container.run_as_user if container.run_as_user is not None else image.user
    gid = container.run_as_group if container.run_as_group is not None else (image.group if uid else 0)
    caps = capabilities(container)
    cap_list = ",".join(["-all"] + [f"+{c.lower()}" for c in caps])
    setpriv = ["setpriv", f"--bounding-set={cap_list}", f"--inh-caps={cap_list}" if uid == 0 else "--inh-caps=-all"]
    if uid != 0:
        setpriv += [f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    if container.no_new_privs:
        setpriv.append("--no-new-privs")

    env = {"PATH": image.path, "HOSTNAME": pod.name, "HOME": "/root" if uid == 0 else "/"}
    own_env = resolve_env(container.env, pod, pod_ip)
    env.update(own_env)
    # The kubelet expands $(VAR) in command and args from the container's
    # env; $$ is a literal $. The image's entrypoint is taken as it is.
    written = [expand(a, own_env) for a in container.command + container.args]
    argv = (written if container.command else image.entrypoint + written) + extra_args
    if not argv:
        raise ValueError(f"pod {pod.name} container {container.name}: no command and no image entrypoint")
    workdir = container.working_dir or "/"
    inside = setpriv + ["--", "env", "-i", "-C", workdir] + [f"{k}={v}" for k, v in env.items()] + argv
    lines.append('exec chroot "$R" ' + shlex.join(inside))
    script = "\n".join(lines) + "\n"
    command = ["ip", "netns", "exec", netns, "unshare", "--mount", "--uts", "--propagation", "private",
               "/bin/sh", str(root.parent / "start.sh")]
    return command, script


def write_script(root: Path, script: str) -> None:
    """Puts the script launch_command's command runs beside the root."""
    (root.parent / "start.sh").write_text(script)


def start(command: list[str], script: str, root: Path, log: Path, cgroup: MemoryCgroup) -> subprocess.Popen:
    """Writes the script beside the root and starts the container, its output to `log`,
    in `cgroup` from its first instruction on (joined before exec)."""
    write_script(root, script)
    procs = cgroup.path / "cgroup.procs" if cgroup.path is not None else None

    def join_cgroup() -> None:
        if procs is not None:
            procs.write_text(str(os.getpid()))

    out = open(log, "ab", buffering=0)
    try:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, env={"PATH": os.environ.get("PATH", DEFAULT_PATH)},
                                preexec_fn=join_cgroup)
    finally:
        out.close()
