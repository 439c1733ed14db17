"""The init process of a candidate's sandbox (PID 1 of its PID namespace), run as a plain script
(`python -I -S sandbox_init.py REPORT_FD -- torchrun ...`, no package import).

As the namespace's init it cannot be signalled from inside the sandbox (the kernel drops every
signal a namespace member sends to an init without a handler, SIGKILL included), and undumpable
it cannot be traced nor its /proc files opened by the candidate's processes. It starts the
command, reaps orphans, and when the command exits it names every process still alive in the
namespace (what the candidate left behind), kills them and reports both on REPORT_FD, a pipe to
the harness that no other process of the sandbox holds. When it exits, the kernel kills whatever
is left in the namespace.
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
    cmd = sys.argv[sys.argv.index("--") + 1 :]
    os.set_inheritable(fd, False)
    report = os.fdopen(fd, "w", buffering=1)
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
