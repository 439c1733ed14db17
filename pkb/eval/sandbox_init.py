"""The init process of a candidate's sandbox (PID 1 of its PID namespace), run as a plain script
(`python -I -S sandbox_init.py REPORT_FD -- python rank_spawner.py ...`, no package import).

As the namespace's init it cannot be signalled from inside the sandbox (the kernel drops every
signal a namespace member sends to an init without a handler, SIGKILL included), and undumpable
it cannot be traced nor its /proc files opened by the candidate's processes. It starts the
command, reaps orphans, and when the command exits it names every process still alive in the
namespace (what the candidate left behind), kills them and reports both on REPORT_FD, a pipe to
the harness that no other process of the sandbox holds. When it exits, the kernel kills whatever
is left in the namespace.

Under `unshare` (root, a private mount namespace from --mount-proc) it is also the one that walls
the launch in before starting it, as bubblewrap does (`--enclose SPEC`): the whole tree read-only,
a fresh /tmp and a minimal /dev, /proc writable only in the processes' own entries, the store
and the work folder hidden, the job's folders bound back (writable) and the paths the ranks read
bound back read-only; then every capability dropped from what its children can hold, so a root candidate can neither undo the mounts nor write through DAC.
"""

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_DUMPABLE = 4
MAX_NAMED = 64
PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, PR_SET_NO_NEW_PRIVS = 24, 47, 4, 38
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC = 1, 2, 4, 4096, 16384
SYS_MOUNT_SETATTR = 442  # x86_64 and the generic table (aarch64) alike
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")


def _others() -> dict[int, str]:
    """pid -> command line of every process of this namespace but this one (zombies left out)."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
            if state in (b"Z", b"X"):
                continue
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except (OSError, IndexError):
            continue
        out[int(name)] = cmd[:200]
    return out


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc().mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags, data.encode() if data else None),
           f"mount {source} on {target}")


def _set_readonly(path: str, readonly: bool) -> None:
    attr = _MountAttr(MOUNT_ATTR_RDONLY if readonly else 0, 0 if readonly else MOUNT_ATTR_RDONLY, 0, 0)
    _check(_libc().syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)),
           f"mount_setattr {path}")


def _bind_from(fd: int, target: str, is_dir: bool, readonly: bool) -> None:
    """Bind what `fd` (an O_PATH descriptor taken before the covering mounts) points at onto
    `target`, creating the mount point inside a tmpfs where needed."""
    if is_dir:
        os.makedirs(target, exist_ok=True)
    elif not os.path.exists(target):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
    _set_readonly(target, readonly)


def _reopen_proc() -> None:
    """/proc writable again for the processes' own entries, read-only for the machine's.

    The CUDA driver names its threads at init (/proc/<pid>/task/<tid>/comm): under a read-only
    /proc cuInit fails with error 304 and no rank sees a GPU. The machine-wide entries (sys,
    sysrq-trigger, driver, irq, ...) stay read-only, each bound over itself, as bubblewrap does:
    a root candidate without capabilities still owns their files."""
    _set_readonly("/proc", False)
    for name in sorted(os.listdir("/proc")):
        path = f"/proc/{name}"
        if name.isdigit() or os.path.islink(path):  # self, thread-self, mounts, net: into a process's own
            continue
        _mount(path, path, None, MS_BIND | MS_REC)
        _set_readonly(path, True)


def enclose(spec: dict) -> None:
    """The mounts, in bubblewrap's order (later ones cover earlier ones)."""
    import glob

    keep = [(p, False) for p in spec.get("readonly", [])] + [(p, True) for p in spec.get("writable", [])]
    devices = [f"/dev/{d}" for d in DEVICES] + sorted(glob.glob("/dev/nvidia*"))
    fds = {}
    for path, _ in keep:
        if os.path.exists(path):
            fds[path] = os.open(path, os.O_PATH)
    dev_fds = {d: os.open(d, os.O_PATH) for d in devices if os.path.exists(d)}
    _set_readonly("/", True)
    _reopen_proc()
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "mode=755")
    for d, fd in dev_fds.items():
        _bind_from(fd, d, os.path.isdir(f"/proc/self/fd/{fd}"), False)  # /dev/nvidia-caps is a folder
    os.makedirs("/dev/shm")
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{name}")
    for path in spec.get("hidden", []):
        if os.path.isdir(path):
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=755")
        else:
            for f in (path, path + "-wal", path + "-shm", path + "-journal", path + ".lock"):
                if os.path.exists(f):
                    _mount("/dev/null", f, None, MS_BIND)
    for path, writable in keep:
        fd = fds.get(path)
        if fd is not None:
            _bind_from(fd, path, os.path.isdir(f"/proc/self/fd/{fd}"), not writable)
    for fd in [*fds.values(), *dev_fds.values()]:
        os.close(fd)
    os.chdir(os.getcwd())  # through the new mounts: the old directory is read-only now


def drop_capabilities() -> None:
    """Nothing the init starts can hold a capability: root's exec gets only the bounding set,
    emptied here, and the inheritable and ambient sets are cleared."""
    libc = _libc()
    cap = 0
    while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
        cap += 1
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    _check(libc.capget(header, data), "capget")
    data[2] = data[5] = 0  # inheritable, both words
    _check(libc.capset(header, data), "capset")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> int:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    fd = int(sys.argv[1])
    split = sys.argv.index("--")
    cmd = sys.argv[split + 1 :]
    os.set_inheritable(fd, False)
    report = os.fdopen(fd, "w", buffering=1)
    if "--enclose" in sys.argv[:split]:
        try:
            enclose(json.loads(sys.argv[sys.argv.index("--enclose") + 1]))
            drop_capabilities()
            report.write(json.dumps({"enclosed": True}) + "\n")
        except Exception as exc:  # half-made mounts: nothing is launched in them (an environment failure)
            report.write(json.dumps({"enclosed": False, "enclose_error": f"{type(exc).__name__}: {exc}"[:300]}) + "\n")
            report.close()
            return 125
    child = subprocess.Popen(cmd, start_new_session=True, close_fds=True)
    report.write(json.dumps({"started": child.pid}) + "\n")
    while True:  # reap orphans while the command runs
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            code = 255
            break
        if pid == child.pid:
            code = os.waitstatus_to_exitcode(status)
            break
    report.write(json.dumps({"exit": code}) + "\n")
    named: dict[int, str] = {}
    for _ in range(50):  # a stray may fork while it is being killed
        others = _others()
        if not others:
            break
        for pid, cmd_line in others.items():
            named.setdefault(pid, cmd_line)
        try:
            os.kill(-1, signal.SIGKILL)  # from init: every other process of the namespace
        except ProcessLookupError:
            pass
        time.sleep(0.02)
        _reap()
    strays = [{"pid": p, "cmdline": c} for p, c in sorted(named.items())][:MAX_NAMED]
    report.write(json.dumps({"strays": strays, "stray_count": len(named)}) + "\n")
    report.close()
    return code if 0 <= code < 256 else 128 + (-code)


if __name__ == "__main__":
    sys.exit(main())
