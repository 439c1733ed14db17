"""Start the ranks of one launch on this host, as torchrun's local agent would, without its cost.

    python rank_spawner.py WORLD_SIZE MASTER_ADDR MASTER_PORT -- COMMAND...

Each rank runs COMMAND in a session of its own with torch's environment (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT...); rank 0 hosts the rendezvous store there. When a rank
exits with an error the others are stopped (SIGTERM, SIGKILL after a grace), and the failures are
printed in torchrun's table (rank, exit code, pid) for the launcher to read; the exit status is 1
then, 0 when every rank exits 0. A SIGTERM or SIGINT to this process is passed on to the ranks.

Run as a script: torchrun's agent imports torch (about 2 s of CPU for each launch) only to
supervise processes that import it again. Where COMMAND is `python -m MODULE ARGS` of this
interpreter and there are two ranks or more, torch is imported here once and each rank is a fork
of this process that runs MODULE as `__main__`: nothing has touched CUDA yet, so a fork is as
clean as a new process, and a two-rank launch on CPU costs about a tenth less CPU
(bench/rank_fork.py), a little more wall time on an idle machine. PKB_RANK_FORK=0 (the launcher's
default for NCCL launches), another interpreter, a wrapper in front (ncu) or a thread here makes
each rank a process of its own.
"""

from __future__ import annotations

import os
import runpy
import signal
import subprocess
import sys
import time
import traceback

POLL_S = 0.05
STOP_GRACE_S = 3.0


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


class ForkedRank:
    """A rank forked from this process, with the part of Popen's interface the spawner uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def forked_module(command: list[str]) -> str | None:
    """MODULE of `python -m MODULE ...` run by this very interpreter, when ranks may be forked."""
    if os.environ.get("PKB_RANK_FORK", "1") == "0" or len(command) < 3 or command[1] != "-m":
        return None
    if os.path.realpath(command[0]) != os.path.realpath(sys.executable):
        return None
    return command[2]


def preload() -> bool:
    """Import what every rank imports first (torch), once; False where forking would be unsafe."""
    sys.path[0] = os.getcwd()  # as `python -m` sets it: not this script's folder
    try:
        import torch  # kept in sys.modules for the forked ranks
        import torch.distributed  # noqa: F401
    except Exception:
        return False
    if torch.cuda.is_initialized():
        return False  # CUDA does not survive a fork
    # A Python thread would not survive the fork (a lock it held stays held in the child). The
    # native pool numpy's OpenBLAS starts at import stops and restarts itself around a fork
    # (pthread_atfork), as every fork of a numpy process relies on.
    import threading

    return threading.active_count() == 1


def run_forked(env: dict[str, str], module: str, args: list[str]) -> None:
    """In the forked child: become the rank (its session, environment, signals), run MODULE as
    `__main__`, and leave with its exit status, never returning to the spawner's loop."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [module, *args]
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the rank's error, printed as python would
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def start_ranks(command: list[str], world_size: int, addr: str, port: str) -> list[subprocess.Popen | ForkedRank]:
    # one rank gains nothing from sharing an import, and its fork costs copied pages
    module = forked_module(command) if world_size > 1 else None
    if module is None or not preload():
        return [subprocess.Popen(command, env=rank_env(rank, world_size, addr, port), start_new_session=True)
                for rank in range(world_size)]
    ranks = []
    for rank in range(world_size):
        env = rank_env(rank, world_size, addr, port)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            run_forked(env, module, command[3:])
        ranks.append(ForkedRank(pid))
    return ranks


def failure_table(failed: list[tuple[int, subprocess.Popen | ForkedRank]]) -> str:
    rows = []
    for i, (rank, p) in enumerate(failed):
        code = p.returncode
        why = f"Signal {-code} ({signal.Signals(-code).name}) received by PID {p.pid}" if code < 0 and -code in signal.valid_signals() else "exited with an error"
        rows.append(f"[{i}]:\n  time      : {time.strftime('%Y-%m-%d_%H:%M:%S')}\n  host      : localhost\n"
                    f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {code} (pid: {p.pid})\n"
                    f"  error_file: <N/A>\n  traceback : {why}")
    return "rank failures (first observed first):\n" + "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        print("usage: rank_spawner.py WORLD_SIZE MASTER_ADDR MASTER_PORT -- COMMAND...", file=sys.stderr)
        return 2
    world_size, addr, port, command = int(argv[0]), argv[1], argv[2], argv[4:]
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    procs = start_ranks(command, world_size, addr, port)
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
