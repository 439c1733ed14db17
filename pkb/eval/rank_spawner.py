"""Start the ranks of one launch on this host, as torchrun's local agent would, without its cost.

    python rank_spawner.py WORLD_SIZE MASTER_ADDR MASTER_PORT -- COMMAND...

Each rank runs COMMAND in a session of its own with torch's environment (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT...); rank 0 hosts the rendezvous store there. When a rank
exits with an error the others are stopped (SIGTERM, SIGKILL after a grace), and the failures are
printed in torchrun's table (rank, exit code, pid) for the launcher to read; the exit status is 1
then, 0 when every rank exits 0. A SIGTERM or SIGINT to this process is passed on to the ranks.

Standard library only, run as a script: torchrun's agent imports torch (about 2 s of CPU for
each launch) only to supervise processes that import it again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

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


def stop(procs: list[subprocess.Popen], grace_s: float = STOP_GRACE_S) -> None:
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


def failure_table(failed: list[tuple[int, subprocess.Popen]]) -> str:
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
    procs: list[subprocess.Popen] = []
    stopping: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for rank in range(world_size):
        procs.append(subprocess.Popen(command, env=rank_env(rank, world_size, addr, port), start_new_session=True))
    failed: list[tuple[int, subprocess.Popen]] = []
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
