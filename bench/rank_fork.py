"""CPU and wall time of one evaluation launch with the ranks forked from the spawner (after one
import of torch) against the anchor, a process per rank (PKB_RANK_FORK=0), in the same run.

    python bench/rank_fork.py [--pairs 6] [--world-size 2]

Each pair evaluates the same pure-PyTorch all-reduce candidate on CPU (gloo, one trial, no timed
iterations) once each way, alternating which goes first. CPU is the whole machine's busy time
from /proc/stat while the command runs (the ranks live in a sandbox whose processes a parent's
rusage may not count), so run it on a quiet machine; wall is the command's. Prints the medians
and the fork/anchor ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CANDIDATE = (
    "import torch\nimport torch.distributed as dist\n\n"
    "@torch.no_grad()\ndef solution(tensor):\n    out = tensor.clone()\n    dist.all_reduce(out)\n    return out\n"
)


def busy_seconds() -> float:
    """Busy CPU seconds of the whole machine since boot (user, nice, system, irq, softirq)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def one_launch(work: Path, fork: bool, world_size: int, n: int) -> tuple[float, float]:
    out = work / f"out{n}"
    env = {**os.environ, "PKB_RANK_FORK": "1" if fork else "0", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "pkb", "eval", "1_allreduce_mine.py", "-o", str(out), "-n", str(world_size),
           "--trials", "1", "--warmup", "1", "--iters", "0", "--jobs", "1", "-q"]
    c0, t0 = busy_seconds(), time.monotonic()
    res = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    wall, cpu = time.monotonic() - t0, busy_seconds() - c0
    if res.returncode != 0 or '"status": "ran"' not in (out / "eval.jsonl").read_text():
        sys.exit(f"the launch did not run (fork={fork}): {res.stderr[-2000:]}")
    return cpu, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--world-size", type=int, default=2)
    args = ap.parse_args()
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="rank_fork_") as tmp:
        work = Path(tmp)
        (work / "1_allreduce_mine.py").write_text(CANDIDATE)
        n = 0
        for pair in range(args.pairs):
            for fork in ((True, False) if pair % 2 == 0 else (False, True)):
                runs[fork].append(one_launch(work, fork, args.world_size, n))
                n += 1
    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in runs.items()}
    print(f"world size {args.world_size}, {args.pairs} pairs, load average now {os.getloadavg()[0]:.2f}")
    print(f"{'':24} {'busy CPU s (median)':>20} {'wall s (median)':>16}")
    print(f"{'a process per rank':24} {med[False][0]:>20.2f} {med[False][1]:>16.2f}")
    print(f"{'forked ranks':24} {med[True][0]:>20.2f} {med[True][1]:>16.2f}")
    print(f"forked / per-process: CPU {med[True][0] / med[False][0]:.2f}, wall {med[True][1] / med[False][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
