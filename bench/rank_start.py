"""What a launch's ranks cost to start: forked from a spawner that imported torch once, against
each rank started by exec and importing torch itself, in the same run.

    python bench/rank_start.py [--world-size 2] [--pairs 5] [--trials 2]

Evaluates one pure-PyTorch candidate (problem 1's reference, written out as a candidate) once per
launch, alternating the two ways of starting the ranks (`pkb.eval.launcher.RANK_PRELOAD` set or
emptied), and prints, for each, the median wall seconds and CPU seconds (this process's waited-for
descendants: spawner, ranks, sandbox) per launch, and forked / exec ratios. On CPU the ranks use
gloo; with a GPU, NCCL and world size at most the GPUs present.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one_launch(candidate: Path, work: Path, world_size: int, trials: int, backend: str) -> tuple[float, float, str]:
    """(wall s, CPU s, outcome) of one evaluation: one launch of the candidate's ranks."""
    from pkb.corpus import read_candidate
    from pkb.eval import EvalOptions, evaluate

    if work.exists():
        shutil.rmtree(work)
    rec = read_candidate(candidate, root=candidate.parent)
    options = EvalOptions(world_size=world_size, trials=trials, dtype="float32", backend=backend,
                          warmup=1, iters=3, store_path=str(work / "store.sqlite"), work_dir=str(work / "jobs"), jobs=1)
    cpu0, t0 = children_cpu_s(), time.monotonic()
    evaluate([rec], options)
    return time.monotonic() - t0, children_cpu_s() - cpu0, str(rec.evaluation.get("outcome") or rec.evaluation.get("status"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=5, help="exec/forked launch pairs, alternating")
    ap.add_argument("--trials", type=int, default=2)
    args = ap.parse_args(argv)
    import torch

    from pkb.eval import launcher

    gpu = torch.cuda.is_available() and torch.cuda.device_count() >= args.world_size
    backend = "nccl" if gpu else "gloo"
    preload = launcher.RANK_PRELOAD
    with tempfile.TemporaryDirectory() as tmp:
        candidate = Path(tmp) / "1_allreduce_torch.py"
        shutil.copy(REPO / "corpus" / "reference" / "1_allreduce.py", candidate)
        runs: dict[str, list[tuple[float, float, str]]] = {"exec": [], "forked": []}
        one_launch(candidate, Path(tmp) / "warm", args.world_size, args.trials, backend)  # page cache, .pyc
        for i in range(args.pairs):
            for mode in (("exec", "forked") if i % 2 == 0 else ("forked", "exec")):
                launcher.RANK_PRELOAD = preload if mode == "forked" else ()
                runs[mode].append(one_launch(candidate, Path(tmp) / mode, args.world_size, args.trials, backend))
        launcher.RANK_PRELOAD = preload
    print(f"{args.pairs} launches each, world size {args.world_size}, {backend}, {args.trials} trials per launch")
    med = {}
    for mode, rows in runs.items():
        wall, cpu = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
        med[mode] = (wall, cpu)
        outcomes = sorted({r[2] for r in rows})
        print(f"  {mode:6s}  wall median {wall:6.2f} s (min {min(r[0] for r in rows):.2f}, max {max(r[0] for r in rows):.2f})"
              f"  CPU median {cpu:6.2f} s  outcomes {outcomes}")
    print(f"forked / exec: wall {med['forked'][0] / med['exec'][0]:.2f}, CPU {med['forked'][1] / med['exec'][1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
