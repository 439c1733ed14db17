"""The gate between a screening launch's correctness and its timing.

A screen (a correctness launch packed beside others on the GPUs) whose ranks all found it correct
does not exit: each rank enters the phase `GATE_PHASE` and waits there, its candidate loaded and
warm, until the harness creates the job directory's `timing_gate` file. The scheduler
(pkb.eval.schedule) opens the gate only when the node is the launch's alone (every other running
launch is finished or waiting at its own gate, and no build runs). The candidate is then timed
without a second process start, import, build load and correctness pass (on the H200 a timed
launch of its own took 10 to 14 s for a small problem, whose timed calls, 3000 a side at about
0.05 ms, need well under a second). That timing at the gate reads as in a launch of its own is
what `bench/corpus_throughput.py --check-timing` checks; it has not run on a GPU yet.

The harness owns the clock: the launcher pauses the launch's time limit while its ranks wait, and
a timing round that reached the harness before the gate opened (a candidate that skipped the
wait) is a timing problem, judged as tampering (pkb.eval.launcher.judge_rank_timing).

A known gap: a parked launch is not frozen. Its candidate's own threads run on, and one that keeps
the GPU busy while parked slows whichever launch is timing then (its reference and candidate
rounds alike, which alternate). Stopping parked launches (SIGSTOP, a cgroup freeze) was not tried:
it could not be checked on a GPU with NCCL's watchdogs.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

GATE_PHASE = "waiting for the GPUs"
GATE_FILE = "timing_gate"
RANK_POLL_S = 0.02


def gate_path(job_dir: str | Path) -> Path:
    return Path(job_dir) / GATE_FILE


def wait_at_gate(job_dir: str | Path) -> None:
    """In a rank: return once the harness has opened the gate."""
    path = gate_path(job_dir)
    while not path.exists():
        time.sleep(RANK_POLL_S)


class TimingGate:
    """One gated launch, between the launcher's thread (which sees its ranks arrive and opens the
    gate) and the scheduler (which grants it): `waiting` is set once every rank is at the gate,
    `grant()` asks the launcher to open it, `opened_ns` is when it did (time.monotonic_ns)."""

    def __init__(self) -> None:
        self.waiting = threading.Event()
        self.granted = threading.Event()
        self.opened_ns: int | None = None
        self.waited_s = 0.0  # the ranks' time at the gate, not counted against the launch's limit

    def grant(self) -> None:
        self.granted.set()

    @property
    def parked(self) -> bool:
        """Every rank is at the gate and the scheduler has not granted it yet."""
        return self.waiting.is_set() and not self.granted.is_set()

    def step(self, job_dir: str | Path, world_size: int, phases: list[Any]) -> bool:
        """Called by the launcher's loop with each rank's current phase (None: unreadable or
        forged). Opens the gate once granted; returns True while the launch is parked."""
        if self.opened_ns is not None:
            return False
        if self.granted.is_set():
            opened_ns = time.monotonic_ns()  # before the file: no honest round can precede it
            try:
                os.close(os.open(gate_path(job_dir), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
            except OSError:  # already there: the candidate made it (its early rounds show in `check`)
                pass
            self.opened_ns = opened_ns
            return False
        if not self.waiting.is_set() and len(phases) == world_size and all(p == GATE_PHASE for p in phases):
            self.waiting.set()
        return self.waiting.is_set()

    def check(self, rounds_by_rank: dict[int, list[dict[str, Any]]]) -> list[str]:
        """Timing that reached the harness before the gate opened: the candidate did not wait."""
        if self.opened_ns is None:
            return ["timing was measured, but the harness never opened the timing gate"] if any(rounds_by_rank.values()) else []
        early = sorted(r for r, msgs in rounds_by_rank.items()
                       if any(isinstance(m.get("arrived_ns"), int) and m["arrived_ns"] < self.opened_ns for m in msgs))
        return [f"rank {r}: timing rounds reached the harness before the timing gate opened (measured while other launches shared the GPUs)"
                for r in early]
