"""A rank process's own plumbing before any candidate code exists in it: its output to its own log
files, death with its parent, the job's secret taken and deleted, and a private scratch folder as
working directory, HOME and TMPDIR."""

from __future__ import annotations

import os
import signal
import sys

from pkb.eval.job import key_path, log_paths


def redirect_output(job_dir: str, rank: int) -> None:
    """This rank's stdout/stderr (C-level writes included) go to its own files."""
    out, err = log_paths(job_dir, rank)
    for fd, path in ((1, out), (2, err)):
        f = open(path, "ab", buffering=0)
        os.dup2(f.fileno(), fd)
        f.close()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)  # type: ignore[attr-defined]
        except Exception:
            pass


def die_with_parent(exit_if_orphaned: bool = False) -> None:
    """If the parent dies (SIGKILL of the evaluator), this process must not live on: a rank or an
    emulation child (pkb.eval.sandbox keeps a copy: it imports nothing of the project).
    `exit_if_orphaned`: exit now if the parent is already gone (reparented to pid 1); only where
    the parent cannot be pid 1 itself (a rank's parent is the spawner; the evaluator may be a
    container's first process)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        if exit_if_orphaned and os.getppid() == 1:
            os._exit(1)
    except Exception:
        pass


def take_key(job_dir: str, rank: int) -> str | None:
    """The job's secret, read and deleted before any candidate code exists in this process
    (every rank does this before the rendezvous, so no candidate can read a peer's copy)."""
    path = key_path(job_dir, rank)
    try:
        key = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    try:
        path.unlink()
    except OSError:
        pass
    return key or None


def short_tmpdir(scratch: str, rank: int) -> str:
    """A private TMPDIR with a short path.

    torch's symmetric memory binds a Unix socket at $TMPDIR/symm_mem-<pid>; a socket path has at
    most 107 bytes, and past that bind fails ("Failed to bind socket: Invalid argument", seen on
    the H200 with a job directory under a long output folder). So the scratch TMPDIR lives under
    /tmp, and the scratch folder records where, for the launcher's clean-up.
    """
    import atexit
    import shutil
    import tempfile

    tmp = tempfile.mkdtemp(prefix=f"pkb-r{rank}-", dir="/tmp" if os.path.isdir("/tmp") else None)
    with open(os.path.join(scratch, "tmpdir.txt"), "w", encoding="utf-8") as fh:
        fh.write(tmp)
    atexit.register(shutil.rmtree, tmp, True)
    return tmp


def enter_scratch(job_dir: str, rank: int) -> None:
    """The candidate's working directory, HOME and TMPDIR: a scratch folder of this rank."""
    scratch = os.path.join(job_dir, "scratch", f"rank{rank}")
    os.makedirs(scratch, exist_ok=True)
    tmp = short_tmpdir(scratch, rank)
    os.environ["HOME"] = scratch
    for name in ("TMPDIR", "TEMP", "TMP"):
        os.environ[name] = tmp
    import tempfile

    tempfile.tempdir = tmp
    os.chdir(scratch)
