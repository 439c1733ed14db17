"""Start the ranks of one launch on this host, as torchrun's local agent would, without its cost.

    python rank_spawner.py WORLD_SIZE MASTER_ADDR MASTER_PORT [--preload MOD,...] -- COMMAND...

Each rank runs COMMAND in a session of its own with torch's environment (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT...); rank 0 hosts the rendezvous store there. When a rank
exits with an error the others are stopped (SIGTERM, SIGKILL after a grace), and the failures are
printed in torchrun's table (rank, exit code, pid) for the launcher to read; the exit status is 1
then, 0 when every rank exits 0. A SIGTERM or SIGINT to this process is passed on to the ranks.

Run as a script, importing only the standard library itself: torchrun's agent imports torch (about
2 s of CPU for each launch) only to supervise processes that import it again. With --preload, the
spawner imports those modules once (torch: about 2 s of CPU), freezes them out of the collector
(gc.freeze: fewer pages copied after the fork) and forks each rank from itself, so the ranks start
with them imported instead of each importing them again; a rank then runs COMMAND's `-m MODULE` or
script in the forked process as `python` would run it (its own session, environment, argv,
`__main__`, signal dispositions and descriptors). Where COMMAND is not this interpreter running a
module or a script (a wrapper such as ncu), or a preload fails, each rank is started by exec as
without it.
"""

from __future__ import annotations

import gc
import os
import runpy
import signal
import subprocess
import sys
import time

POLL_S = 0.05
STOP_GRACE_S = 3.0
FORWARDED = (signal.SIGTERM, signal.SIGINT)  # passed on to the ranks


def rank_env(rank: int, world_size: int, addr: str, port: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank),
        "WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE": str(world_size), "ROLE_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": addr, "MASTER_PORT": port,
        "GROUP_WORLD_SIZE": "1", "ROLE_NAME": "default",
        "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
    })
    # as torchrun's agent: an NCCL error or watchdog timeout tears the rank down
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    return env


def stop(procs: list[subprocess.Popen | ForkedRank], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to every live rank's group, SIGKILL to what is left after the grace."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        live = [p for p in procs if p.poll() is None]
        if not live:
            return
        for p in live:
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        end = time.monotonic() + wait_s
        while time.monotonic() < end and any(p.poll() is None for p in live):
            time.sleep(POLL_S)


def failure_table(failed: list[tuple[int, subprocess.Popen | ForkedRank]]) -> str:
    rows = []
    for i, (rank, p) in enumerate(failed):
        code = p.returncode
        why = f"Signal {-code} ({signal.Signals(-code).name}) received by PID {p.pid}" if code < 0 and -code in signal.valid_signals() else "exited with an error"
        rows.append(f"[{i}]:\n  time      : {time.strftime('%Y-%m-%d_%H:%M:%S')}\n  host      : localhost\n"
                    f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code} (pid: {p.pid})\n"
                    f"  error_file: <N/A>\n  traceback : {why}")
    return "rank failures (first observed first):\n" + "\n".join(rows) + "\n"


def preload(modules: list[str]) -> list[int]:
    """Import `modules` as a rank's `python -m` would find them; the descriptors open before, which
    a rank started by exec would not inherit (close_fds), for the forked ranks to close."""
    inherited = []
    for fd in (int(name) for name in os.listdir("/proc/self/fd")):
        try:
            if fd > 2:
                os.fstat(fd)  # listdir's own descriptor is closed by now, and may be reused
                inherited.append(fd)
        except OSError:
            pass
    # sys.path[0] is this script's folder; a rank run with -m has the working directory there
    sys.path[0] = os.getcwd()
    for name in modules:
        __import__(name)
    gc.freeze()  # the imported objects are left out of the ranks' collections: fewer pages copied
    return inherited


def forkable(command: list[str]) -> list[str] | None:
    """argv of the module or script COMMAND runs, where COMMAND is this interpreter running one."""
    if len(command) < 2 or os.path.realpath(command[0]) != os.path.realpath(sys.executable):
        return None
    if command[1] == "-m" and len(command) > 2:
        return command[1:]
    return None if command[1].startswith("-") else command[1:]


class ForkedRank:
    """A rank forked from this process: Popen's pid, poll() and returncode."""

    def __init__(self, pid: int) -> None:
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its status is lost, so it counts as failed
                self.returncode = 255
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def run_forked_rank(env: dict[str, str], target: list[str], inherited: list[int]) -> int:
    """In the forked child: become what exec of COMMAND would have started, then run it."""
    os.setsid()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    for fd in inherited:
        try:
            os.close(fd)
        except OSError:
            pass
    os.environ.clear()
    os.environ.update(env)
    try:
        if target[0] == "-m":
            sys.argv = [target[1], *target[2:]]  # runpy puts the module's file in argv[0]
            runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(target)
            sys.path[0] = os.path.dirname(os.path.abspath(target[0]))
            runpy.run_path(target[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    return 0


USAGE = "usage: rank_spawner.py WORLD_SIZE MASTER_ADDR MASTER_PORT [--preload MOD,...] -- COMMAND..."


def main(argv: list[str]) -> int:
    modules: list[str] = []
    if len(argv) > 4 and argv[3] == "--preload":
        modules = [m for m in argv[4].split(",") if m]
        argv = argv[:3] + argv[5:]
    if len(argv) < 5 or argv[3] != "--":
        print(USAGE, file=sys.stderr)
        return 2
    world_size, addr, port, command = int(argv[0]), argv[1], argv[2], argv[4:]
    target = forkable(command) if modules else None
    inherited: list[int] = []
    if target is not None:
        try:
            inherited = preload(modules)
        except BaseException as exc:  # the ranks started by exec then meet and report the failure
            print(f"rank_spawner: preload failed ({type(exc).__name__}: {exc}); starting the ranks by exec", file=sys.stderr)
            target = None
    procs: list[subprocess.Popen | ForkedRank] = []
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)

    for signum in FORWARDED:
        signal.signal(signum, on_signal)
    for rank in range(world_size):
        env = rank_env(rank, world_size, addr, port)
        if target is None:
            procs.append(subprocess.Popen(command, env=env, start_new_session=True))
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        # blocked across the fork: a SIGTERM the child got before it resets the handler would
        # otherwise land in this process's handler there, and the rank would ignore it
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        pid = os.fork()
        if pid == 0:
            return run_forked_rank(env, target, inherited)  # the child leaves through sys.exit below
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        procs.append(ForkedRank(pid))
    failed: list[tuple[int, subprocess.Popen | ForkedRank]] = []
    while True:
        if stopping:
            stop(procs)
            return 128 + stopping[0]
        for rank, p in enumerate(procs):
            if p.poll() is not None and p.returncode != 0 and all(r != rank for r, _ in failed):
                failed.append((rank, p))
        if failed:
            stop(procs)  # a rank died: its peers would wait for it in their next collective
            sys.stderr.write(failure_table(failed))
            return 1
        if all(p.poll() is not None for p in procs):
            return 0
        time.sleep(POLL_S)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
