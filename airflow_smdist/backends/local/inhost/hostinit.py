"""The init process of one simulated host: ``python -I -S hostinit.py <fd>``, its spec's JSON read from ``fd``.

A SageMaker instance runs the training container; the container ends when its entry point ends, taking
every process it started with it (daemons included), and nothing of it outlives the job. This program
gives a simulated host the same lifetime. It uses the standard library only and runs isolated (``-I -S``),
so nothing of the Airflow worker (its ``PYTHONPATH``, its packages) reaches the host through it.

* ``isolation: "namespace"``: it is started by ``unshare --mount --uts --net --pid --ipc --fork`` and is
  PID 1 of the host's PID namespace. It gives the host a root file system of its own, as a container has
  (:func:`setup_namespace`): the machine's system directories and what the job needs of the worker, read-only;
  its directory on ``/opt/ml`` and a private ``/tmp`` writable; no job root, no other job, no AIRFLOW_HOME, no
  worker virtualenv or checkout (README: "What a job can reach"). It binds the job's ``hosts`` file on
  ``/etc/hosts``, sets the host name (``algo-N``), limits the host's processes to a container's
  capabilities, tells the supervisor it is ready (the supervisor then plugs the host into the job's bridge)
  and waits for the go. When it exits, the kernel ends every other process of the namespace.
* ``isolation: "none"`` (the fallback): it makes itself the child subreaper, so processes that
  double-fork or ``setsid`` stay its descendants, and ends them all when the entry point ends.

Either way it runs the entry point with ``execve`` semantics (no shell: environment names with ``-`` or
``.`` such as ``SM_HP_LEARNING-RATE`` survive), forwards SIGTERM/SIGINT to every process of the host, and
ends the host when the *lifeline* pipe from the supervisor closes (the supervisor died, even by kill -9).
It exits with the entry point's status (128 + N when a signal N ended it).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import time

TYPE_CHECKING = False  # typing's own, without importing typing in every host's init (mypy reads it so)
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any

_PR_SET_CHILD_SUBREAPER = 36
_PR_CAPBSET_DROP = 24
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 1, 2, 4, 8, 32
_MS_BIND, _MS_REC = 4096, 16384
_MNT_DETACH = 2
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_SYS_MOUNT_SETATTR, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = 442, 0x8000, 1
#: the capabilities a host's processes keep: Docker's default set, which SageMaker's containers run with (no
#: CAP_SYS_ADMIN, so no mount, no remount of what is read-only; no CAP_DAC_READ_SEARCH, so no open_by_handle_at
#: escape; no CAP_SYS_PTRACE, CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_NET_ADMIN, ...)
#: (CHOWN ... SETFCAP, as Docker lists them; _pivot drops SYS_CHROOT, 18, where it falls back to chroot)
_KEPT_CAPS: tuple[int, ...] = (0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 27, 29, 31)
_LAST_CAP = 63
#: a container's view of the machine: these, read-only; everything else of the worker is absent
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: the worker's own credentials under /etc (a container's /etc is its image's): empty in a host's view
ETC_MASKED = ("shadow", "shadow-", "gshadow", "gshadow-", "ssh", "sudoers", "sudoers.d", "security/opasswd")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
#: as Docker: parts of /proc a container reads but never writes, and parts it does not see
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
PROC_MASKED = ("kcore", "keys", "timer_list", "sched_debug", "latency_stats", "kallsyms")
_libc = ctypes.CDLL(None, use_errno=True)


def _fail(what: str) -> None:
    err = ctypes.get_errno()
    raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None = None, flags: int = 0, data: str | None = None) -> None:
    if _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                   data.encode() if data else None) != 0:
        _fail(f"mount {source} on {target}")


def _read_only(target: str) -> None:
    """Make the bind mount on ``target`` read-only, with every mount below it (mount_setattr, Linux >= 5.12;
    else a remount of the top, which is what older kernels allow)."""
    attr = (ctypes.c_uint64 * 4)(_MOUNT_ATTR_RDONLY, 0, 0, 0)
    if _libc.syscall(_SYS_MOUNT_SETATTR, -100, target.encode(), _AT_RECURSIVE, ctypes.byref(attr),
                     ctypes.sizeof(attr)) == 0:
        return
    _mount("none", target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID)


def _bind(fd: int, target: str, *, read_only: bool, is_dir: bool) -> None:
    """Bind what ``fd`` (an O_PATH descriptor opened before anything was covered) names on ``target``."""
    if is_dir:
        os.makedirs(target, exist_ok=True)
    elif not os.path.lexists(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "w").close()  # a mount point for a file
    _mount(f"/proc/self/fd/{fd}", target, None, _MS_BIND | _MS_REC)
    if read_only:
        _read_only(target)


def _opened(paths: list[str]) -> list[tuple[str, int, bool]]:
    """(path, O_PATH fd, is a directory) of each existing path, opened before anything is covered."""
    return [(path, os.open(path, os.O_PATH), os.path.isdir(path)) for path in sorted(set(paths))
            if os.path.exists(path)]


def _sized(options: str, size: int | None) -> str:
    """tmpfs mount options, with a fixed size where the host has one (a write past it: ENOSPC)."""
    return f"{options},size={size}" if size else options


def _new_dev(root: str, shm_size: int | None = None) -> None:
    """A container's /dev: a few character devices, a private /dev/shm (of ``shm_size`` bytes where given) and
    /dev/pts; no disk, no host device."""
    dev = root + "/dev"
    os.makedirs(dev, exist_ok=True)
    _mount("tmpfs", dev, "tmpfs", _MS_NOSUID | _MS_NOEXEC, "mode=755,size=64k")
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            open(f"{dev}/{name}", "w").close()  # a mount point
            _mount(f"/dev/{name}", f"{dev}/{name}", None, _MS_BIND)
    for name in (n for n in os.listdir("/dev") if n.startswith("nvidia")):  # a GPU, as the GPU instance has it
        open(f"{dev}/{name}", "w").close()  # a mount point
        _mount(f"/dev/{name}", f"{dev}/{name}", None, _MS_BIND)
    for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx")):
        os.symlink(target, f"{dev}/{link}")
    os.makedirs(f"{dev}/shm")
    _mount("tmpfs", f"{dev}/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, _sized("mode=1777", shm_size))
    os.makedirs(f"{dev}/pts")
    try:
        _mount("devpts", f"{dev}/pts", "devpts", _MS_NOSUID | _MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    except OSError:
        pass  # no pseudo-terminals then: a training script rarely needs one


def _new_proc_and_sys(root: str) -> None:
    """/proc of the host's PID namespace (its own processes only), with Docker's read-only and masked parts;
    a read-only /sys of the host's network namespace."""
    proc = root + "/proc"
    os.makedirs(proc, exist_ok=True)
    _mount("proc", proc, "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    for name in PROC_READ_ONLY:
        if os.path.exists(f"{proc}/{name}"):
            _mount(f"{proc}/{name}", f"{proc}/{name}", None, _MS_BIND | _MS_REC)
            _read_only(f"{proc}/{name}")
    for name in PROC_MASKED:
        _mask(f"{proc}/{name}")
    os.makedirs(root + "/sys", exist_ok=True)
    try:
        _mount("sysfs", root + "/sys", "sysfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    except OSError:
        _mount("/sys", root + "/sys", None, _MS_BIND | _MS_REC)
        _read_only(root + "/sys")


def _mask(target: str) -> None:
    """``target`` empty in the host's view: /dev/null on a file, an empty read-only tmpfs on a directory."""
    if os.path.isdir(target) and not os.path.islink(target):
        _mount("tmpfs", target, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_RDONLY, "mode=755,size=4k")
    elif os.path.isfile(target) and not os.path.islink(target):
        _mount("/dev/null", target, None, _MS_BIND)


def _system(root: str) -> None:
    """The machine's system directories, read-only, at their places (merged-/usr links as links)."""
    for path in SYSTEM:
        if os.path.islink(path):
            os.symlink(os.readlink(path), root + path)
        elif os.path.isdir(path):
            os.makedirs(root + path)
            _mount(path, root + path, None, _MS_BIND | _MS_REC)
            _read_only(root + path)
    for name in ETC_MASKED:
        _mask(f"{root}/etc/{name}")
    resolv = os.path.realpath("/etc/resolv.conf")  # a link into /run (systemd-resolved) is followed
    if not resolv.startswith(("/etc/", "/usr/")) and os.path.isfile(resolv):
        _bind(os.open(resolv, os.O_PATH), root + resolv, read_only=True, is_dir=False)


def _pivot(root: str) -> None:
    """Make ``root`` the host's ``/`` and drop the worker's tree from the namespace (pivot_root(".", ".") then a
    lazy unmount of the old root, as runc does); where pivot_root fails, chroot (CAP_SYS_CHROOT is dropped then,
    so the job cannot chroot its way out)."""
    os.chdir(root)
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is not None and _libc.syscall(number, b".", b".") == 0:
        if _libc.umount2(b".", _MNT_DETACH) != 0:
            _fail("umount2 of the worker's root")
    else:
        os.chroot(".")
        global _KEPT_CAPS
        _KEPT_CAPS = tuple(c for c in _KEPT_CAPS if c != 18)
    os.chdir("/")


def drop_capabilities() -> None:
    """Limit every process this host starts to :data:`_KEPT_CAPS` (the bounding set: root's capabilities after
    ``execve`` are what it holds)."""
    for cap in range(_LAST_CAP + 1):
        if cap not in _KEPT_CAPS and _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == 22:  # EINVAL: past the kernel's last capability
                break
            _fail(f"prctl(PR_CAPBSET_DROP, {cap})")


def setup_namespace(spec: dict[str, Any]) -> None:
    """A new root for the host, as a container's: the machine's system directories and what the job needs of
    the worker (``ro``: its runtime, the interpreter, the provider's in-job code, the job's own files) read-only;
    its directory on ``/opt/ml``, ``rw`` paths (the job's layer) and a private root file system (``/tmp``,
    ``/root``: the container's writable layer, gone with the host) writable; ``hide``: empty in its view. Then
    the host name, and the capabilities a container keeps."""
    ro, rw = _opened(list(spec.get("ro") or [])), _opened(list(spec.get("rw") or []))
    host = os.open(spec["host_dir"], os.O_PATH)
    hosts_file = os.open(spec["etc_hosts"], os.O_PATH) if spec.get("etc_hosts") else None
    root = "/tmp"  # the host's root file system is a tmpfs mounted here, then pivoted to
    # its size: the host's writable storage (bounds.tmpfs_bytes), so /tmp and /root fill up as a volume does
    _mount("tmpfs", root, "tmpfs", _MS_NOSUID | _MS_NODEV, _sized("mode=755", spec.get("tmpfs_size")))
    _system(root)
    views = ([(path, fd, is_dir, True) for path, fd, is_dir in ro]
             + [(path, fd, is_dir, False) for path, fd, is_dir in rw])
    for path, fd, is_dir, read_only in sorted(views, key=lambda v: (v[0].count("/"), v[0])):
        _bind(fd, root + path, read_only=read_only, is_dir=is_dir)
        os.close(fd)
    for path in spec.get("hide") or []:
        _mask(root + path)
    _bind(host, root + "/opt/ml", read_only=False, is_dir=True)
    if hosts_file is not None:
        _bind(hosts_file, root + "/etc/hosts", read_only=True, is_dir=False)
    for path, mode in (("/tmp", 0o1777), ("/var/tmp", 0o1777), ("/root", 0o700), (spec.get("home") or "/root", 0o700)):
        os.makedirs(root + path, exist_ok=True)
        os.chmod(root + path, mode)
    _new_dev(root, spec.get("tmpfs_size"))
    if spec.get("tmpfs_size"):
        _SIZED.extend([("/tmp", spec["tmpfs_size"]), ("/dev/shm", spec["tmpfs_size"])])
    _new_proc_and_sys(root)
    _pivot(root)
    name = spec["hostname"].encode()
    if _libc.sethostname(name, len(name)) != 0:  # socket.sethostname's call, without importing socket
        _fail(f"sethostname {spec['hostname']}")
    drop_capabilities()


def descendants() -> list[int]:
    """Every live process below this one (orphans reparent to us: PID 1 or child subreaper)."""
    me = os.getpid()
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                parent[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {me}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier and p not in found}
        found |= frontier
    return sorted(found)


def signal_all(sig: int) -> None:
    for pid in descendants():
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def reap(main_pid: int) -> int | None:
    """Reap every exited child; the entry point's wait status once it has exited."""
    status = None
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == main_pid:
            status = st


def exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


#: the host's bounded file systems (path, bytes): its root file system (/tmp, /root) and /dev/shm
_SIZED: list[tuple[str, int]] = []
#: how a line of the host's log says one of them is full (the supervisor puts it in the failure reason)
FULL_PREFIX = "No space left on device: the host's "


def say_full() -> None:
    """Say which of the host's bounded file systems is full (a write's error names no path)."""
    for path, size in _SIZED:
        st = os.statvfs(path)
        if st.f_bavail * st.f_frsize < 2**20:
            print(f"{FULL_PREFIX}{path} is full ({size // 2**20} MiB: the instance's volume here, VolumeSizeInGB "
                  "at most half the host's memory)", flush=True)


def end_host(code: int) -> None:
    """The container stops: whatever the entry point left behind is killed, as Docker does."""
    if code:
        say_full()
    signal_all(signal.SIGKILL)
    deadline = time.time() + 5
    while descendants() and time.time() < deadline:
        reap(-1)
        time.sleep(0.01)
    sys.stdout.flush()
    os._exit(code)


def wait_for_go(lifeline: int) -> None:
    if os.read(lifeline, 1) != b"g":  # the supervisor went away before the host was ready
        os._exit(125)


def read_spec(fd: int) -> dict[str, Any]:
    """The host's spec, from the file descriptor the supervisor passed (never on the command line: it holds
    the script's arguments); closed, so the script does not inherit it."""
    with os.fdopen(fd, "rb") as f:
        spec: dict[str, Any] = json.loads(f.read())
    return spec


def main() -> None:
    spec = read_spec(int(sys.argv[1]))
    lifeline, ready = spec["lifeline"], spec.get("ready")
    os.set_inheritable(lifeline, False)
    if spec["isolation"] == "namespace":
        setup_namespace(spec)
    else:
        _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if ready is not None:
        os.write(ready, b"r")
        os.close(ready)
    import subprocess  # while the supervisor plugs the host in: not before the host is ready

    wait_for_go(lifeline)
    terminated: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        terminated.append(signum)
        signal_all(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        main_proc = subprocess.Popen(spec["argv"], cwd=spec["cwd"], stdin=subprocess.DEVNULL)
    except OSError as e:
        print(f"hostinit: cannot run {spec['argv'][0]!r}: {e}", flush=True)
        os._exit(127 if isinstance(e, FileNotFoundError) else 126)
    watch(main_proc.pid, lifeline)


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid`` (readable once it exits), or None where the kernel has none (Linux < 5.3)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def watch(main_pid: int, lifeline: int) -> None:
    """Reap children until the entry point exits (woken at once by its pidfd; orphans are reaped at least every
    50 ms), or until the supervisor's end of the lifeline closes; then end the host."""
    poller = select.poll()
    poller.register(lifeline, select.POLLIN | select.POLLHUP)
    exited = _pidfd(main_pid)
    if exited is not None:
        poller.register(exited, select.POLLIN)
    while True:
        status = reap(main_pid)
        if status is not None:
            end_host(exit_code(status))
        ready = {fd for fd, _event in poller.poll(50)}
        if lifeline in ready and not os.read(lifeline, 1):  # the supervisor is gone: so is this host
            end_host(137)


if __name__ == "__main__":
    main()
