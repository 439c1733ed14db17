"""Wall time to evaluate one problem and one candidate (5 trials with timing): ours against PKB's
`run_local.py` on the same machine in the same run.

    python bench/eval_overhead.py --pkb-root /path/to/ParallelKernelBench --world-size 4
    python bench/eval_overhead.py --world-size 2          # ours only (PKB not given)
    python bench/eval_overhead.py --pkb-root PKB --warm   # then once more on warm build caches

PKB starts two torchrun jobs per trial (reference, candidate) and every rank JIT-compiles into
its own cache; ours starts one launch for all trials with one shared build cache. Both sides get
the same candidate, trials, warm-up and timed iterations, and cold build caches (each side its
own fresh TORCH_EXTENSIONS_DIR). With --warm both sides run a second time on the caches their
first run filled: that pass measures the harness without the JIT build, which costs both sides
the same nvcc time. Kernel-time agreement compares the per-iteration CUDA-event times (PKB's
clock): PKB's slowest-rank mean against our slowest-rank event median, for the reference and the
candidate.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# "  trial 0: match | ref 0.123 ms | cuda 0.100 ms | speedup 1.23x"
_PKB_TRIAL = re.compile(r"trial (\d+): (\w+) \| ref ([\d.]+) ms \| \S+ ([\d.]+) ms \| speedup ([\d.]+)x")


def default_candidate(problem: int, tmp: Path, pkb_root: str | None) -> Path:
    """The problem's own reference, written out as a candidate (no CUDA build: a pure baseline)."""
    if pkb_root:
        ref = sorted((Path(pkb_root) / "reference").glob(f"{problem}_*.py"))[0]
        text, stem = ref.read_text(encoding="utf-8"), ref.stem
    else:
        import problems

        p = problems.get(problem)
        text, stem = Path(p.module.__file__).read_text(encoding="utf-8"), p.spec.stem
    out = tmp / "solutions" / f"{stem}_cuda.py"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


def run_ours(args: argparse.Namespace, candidate: Path, tmp: Path, tag: str = "cold", profile: bool = False) -> dict:
    from pkb.corpus import read_candidate
    from pkb.eval import EvalOptions, evaluate

    work = tmp / "ours_work"
    # a second pass keeps the build cache (work/extensions) and nothing else of the first
    shutil.rmtree(work / "jobs", ignore_errors=True)
    options = EvalOptions(
        world_size=args.world_size,
        trials=args.trials,
        dtype=args.dtype,
        warmup=args.warmup,
        iters=args.iters,
        timeout_s=args.timeout,
        store_path=str(tmp / f"ours_{tag}.sqlite"),
        work_dir=str(work),
        pkb_root=args.pkb_root,
        pkb_shape=tuple(args.shape),
        profile=profile,
    )
    rec = read_candidate(candidate)
    t0 = time.perf_counter()
    evaluate([rec], options)
    wall = time.perf_counter() - t0
    ev = rec.evaluation
    ref_ev, cand_ev = _slowest_event(ev, "reference"), _slowest_event(ev, "candidate")
    compile_s = max((r.get("compile_s") or 0.0 for r in ev.get("ranks", [])), default=0.0)
    means = {side: _slowest_event(ev, side, "mean_ms") for side in ("reference", "candidate")}
    return {"wall_s": wall, "evaluation": ev, "reference_ms": ref_ev, "candidate_ms": cand_ev, "compile_s": compile_s, "mean_ms": means,
            "profile": rec.profile}


def _slowest_event(ev: dict, side: str, stat: str = "median_ms", clocks: tuple[str, ...] = ("pipelined", "event", "wall")) -> float | None:
    """The slowest rank's figure of the first of `clocks` each rank has: by default the events-only
    one, the back-to-back intervals (PKB's loop), else the isolated events, else (CPU) the host clock."""
    vals = []
    for r in ev.get("ranks", []):
        stats = (r.get("timing") or {}).get(side) or {}
        clock = next((stats[c] for c in clocks if stats.get(c)), None)
        if clock:
            vals.append(clock[stat])
    return max(vals) if vals else None


def run_pkb(args: argparse.Namespace, candidate: Path, tmp: Path) -> dict:
    """PKB's run_local.py with its build cache under tmp (PKB adds rank_N below it)."""
    stem_backend = candidate.stem  # <id>_<name>_<backend>
    backend = stem_backend.rsplit("_", 1)[1]
    cmd = [
        sys.executable, "run_local.py", "--mode", "eval", "--problem", str(args.problem),
        "--solution", backend, "--solutions-dir", str(candidate.parent),
        "--nproc-per-node", str(args.world_size), "--trials", str(args.trials), "--measure-perf",
        "--dtype", args.dtype or "bfloat16", "--logs-dir", str(tmp / "pkb_logs"), "--m", str(args.shape[0]), "--n", str(args.shape[1]),
    ]
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp / "pkb_extensions")}
    if args.warmup != 500 or args.iters != 100:
        print("note: PKB's run_local.py has no warm-up/iteration flags; it uses 500/100", file=sys.stderr)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=args.pkb_root, capture_output=True, text=True, env=env, timeout=args.timeout * 2 * args.trials)
    wall = time.perf_counter() - t0
    trials = [
        {"trial": int(m[1]), "result": m[2], "ref_ms": float(m[3]), "sol_ms": float(m[4]), "speedup": float(m[5])}
        for m in _PKB_TRIAL.finditer(proc.stdout)
    ]
    return {"wall_s": wall, "returncode": proc.returncode, "trials": trials, "stdout_tail": proc.stdout[-3000:], "stderr_tail": proc.stderr[-3000:]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pkb-root", default=None, help="a ParallelKernelBench checkout (required for the PKB side)")
    ap.add_argument("--world-size", type=int, default=None, help="ranks (default: every GPU, 2 on CPU)")
    ap.add_argument("--problem", type=int, default=1)
    ap.add_argument("--candidate", type=Path, default=None, help="<id>_<name>_<backend>.py (default: the reference)")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--warmup", type=int, default=500, help="PKB's default")
    ap.add_argument("--iters", type=int, default=100, help="PKB's default")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--warm", action="store_true", help="a second pass of both sides on the build caches the first filled")
    ap.add_argument("--shape", type=int, nargs=2, default=[1024, 1024], metavar=("M", "N"),
                    help="PKB's --m/--n, on both sides (1024 1024 is PKB's default; at world size 1 its calls are launch-bound)")
    args = ap.parse_args(argv)

    from pkb.eval import EvalOptions, environment

    env = environment(EvalOptions(world_size=args.world_size))
    args.world_size = env.world_size
    with tempfile.TemporaryDirectory(prefix="pkb_eval_overhead_") as d:
        tmp = Path(d)
        candidate = args.candidate.resolve() if args.candidate else default_candidate(args.problem, tmp, args.pkb_root)
        print(f"problem {args.problem}, candidate {candidate.name}, world size {args.world_size}, {env.device}/{env.backend}, trials {args.trials}")
        rows = []
        for tag in ("cold", "warm") if args.warm else ("cold",):
            print(f"--- {tag} build caches")
            rows.append(one_pass(args, candidate, tmp, tag))
        print("builds  ours_s  ours_compile_s  PKB_s  PKB/ours")
        for tag, ours, pkb in rows:
            ratio = f"{pkb['wall_s'] / ours['wall_s']:.2f}x" if pkb else "n/a"
            print(f"{tag:6s} {ours['wall_s']:7.1f} {ours['compile_s']:15.1f} {pkb['wall_s'] if pkb else float('nan'):6.1f}  {ratio}")
    return 0


def one_pass(args: argparse.Namespace, candidate: Path, tmp: Path, tag: str) -> tuple[str, dict, dict | None]:
    from pkb.eval.timing import CLOCKS

    ours = run_ours(args, candidate, tmp, tag)
    ev = ours["evaluation"]
    print(f"ours: {ours['wall_s']:.1f} s wall ({ours['compile_s']:.1f} s in the JIT build), {ev['status']} {ev['outcome']} {ev.get('subtype') or ''}"
          f" speedup {_fmt(ev.get('speedup'))} (event clock {_fmt(ev.get('details', {}).get('speedup_event'))})")
    for side in ("reference", "candidate"):
        print(f"  {side} clocks (slowest rank, median ms): " + ", ".join(f"{c} {_fmt(_slowest_event(ev, side, clocks=(c,)), 4)}" for c in CLOCKS))
    if ev["status"] != "ran" or ev["outcome"] not in ("faster", "slower"):
        print(f"  reason: {ev.get('reason')}")
    if not args.pkb_root:
        print("PKB: not given (--pkb-root PATH runs PKB's run_local.py on the same candidate); ours only")
        return tag, ours, None
    pkb = run_pkb(args, candidate, tmp)
    print(f"PKB:  {pkb['wall_s']:.1f} s wall, exit {pkb['returncode']}, {len(pkb['trials'])} timed trials")
    for t in pkb["trials"]:
        print(f"  PKB trial {t['trial']}: {t['result']}, ref {t['ref_ms']:.4f} ms, candidate {t['sol_ms']:.4f} ms, speedup {t['speedup']:.3f}x")
    print(f"wall ratio PKB/ours ({tag} build caches): {pkb['wall_s'] / ours['wall_s']:.2f}x")
    if pkb["trials"]:
        pkb_ref = statistics.median(t["ref_ms"] for t in pkb["trials"])
        pkb_sol = statistics.median(t["sol_ms"] for t in pkb["trials"])
        print("kernel time (slowest rank, CUDA events back to back; PKB: mean per trial, median over trials; ours: median and mean of the intervals)")
        for side, theirs in (("reference", pkb_ref), ("candidate", pkb_sol)):
            med, mean = ours[f"{side}_ms"], ours["mean_ms"][side]
            print(f"  {side}: PKB {theirs:.4f} ms, ours median {_fmt(med, 4)} ms (ratio {_ratio(med, theirs)}), mean {_fmt(mean, 4)} ms (ratio {_ratio(mean, theirs)})")
        print(f"  speedup:   PKB {statistics.median(t['speedup'] for t in pkb['trials']):.3f}x, ours (event) {_fmt(ev.get('details', {}).get('speedup_event'))}")
    else:
        print("PKB produced no timed trial; its output ends with:")
        print(pkb["stdout_tail"][-1500:] or pkb["stderr_tail"][-1500:])
    return tag, ours, pkb


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _ratio(ours: float | None, theirs: float) -> str:
    return "n/a" if ours is None or not theirs else f"{ours / theirs:.3f} (ours/PKB)"


if __name__ == "__main__":
    sys.exit(main())
