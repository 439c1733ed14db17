"""Profiling overhead: one evaluation with `--profile` against the same evaluation without, in one run.

    python bench/profile_overhead.py [--candidate FILE] [--world-size N] [--trials 2]

Three evaluations of one candidate through pkb.eval.evaluate, each a fresh launch with its own
store: a first one that fills the build cache (reported, not compared), then one without
profiling and one with it (EvalOptions(profile=True): the ranks' Kineto captures over a few calls
after warm-up, and the summary the diagnosis reads). Both compared runs find the extension built,
so the ratio is what profiling adds to an evaluation: the capture, the profiler's start-up in a
fresh rank, the trace export and its analysis. Target: under 1.3.

Default candidate: problem 1's reference written out as a candidate (pure PyTorch, runs on CPU).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.eval_overhead import default_candidate, run_ours  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--candidate", type=Path, default=None, help="<id>_<name>_<backend>.py (default: problem 1's reference)")
    ap.add_argument("--problem", type=int, default=1)
    ap.add_argument("--world-size", type=int, default=None, help="ranks (default: every GPU, 2 on CPU)")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args(argv)
    args.pkb_root = None
    args.shape = (1024, 1024)  # PKB_SHAPE; unused without a PKB checkout

    from pkb.eval import EvalOptions, environment

    env = environment(EvalOptions(world_size=args.world_size))
    args.world_size = env.world_size
    with tempfile.TemporaryDirectory(prefix="pkb_profile_overhead_") as d:
        tmp = Path(d)
        candidate = args.candidate.resolve() if args.candidate else default_candidate(args.problem, tmp, None)
        print(f"candidate {candidate.name}, world size {args.world_size}, {env.device}/{env.backend}, trials {args.trials}, "
              f"warm-up {args.warmup}, iters {args.iters}")
        first = run_ours(args, candidate, tmp, "build")
        plain = run_ours(args, candidate, tmp, "plain")
        profiled = run_ours(args, candidate, tmp, "profiled", profile=True)
    for name, r in (("build pass", first), ("without profiling", plain), ("with profiling", profiled)):
        ev = r["evaluation"]
        print(f"{name:18s} {r['wall_s']:7.1f} s  ({r['compile_s']:.1f} s in builds)  {ev['status']} {ev['outcome']} {ev.get('subtype') or ''}")
    prof = profiled.get("profile") or {}
    errors = prof.get("errors") or []
    captured = bool(prof) and not errors
    print(f"profile summary: {'ok' if captured else 'MISSING'}{'; errors: ' + '; '.join(map(str, errors))[:600] if errors else ''}")
    ratio = profiled["wall_s"] / plain["wall_s"] if plain["wall_s"] > 0 else float("inf")
    print(f"ratio with/without profiling: {ratio:.3f}  (target < 1.3)")
    return 0 if captured else 1


if __name__ == "__main__":
    sys.exit(main())
