"""`python -m pkb.eval PATH... [options]`: evaluate candidate files or folders, one line each."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from pkb.corpus import load_corpus
    from pkb.eval import EvalOptions, evaluate

    ap = argparse.ArgumentParser(prog="python -m pkb.eval", description=__doc__)
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--world-size", type=int, default=None)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--dtype", default=None)
    ap.add_argument("--backend", default="auto", choices=("auto", "nccl", "gloo"))
    ap.add_argument("--timeout", type=float, default=600.0, dest="timeout_s")
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--groups", type=int, default=None)
    ap.add_argument("--scale", default="small", choices=("small", "large"))
    ap.add_argument("--store", default="pkb_eval.sqlite", dest="store_path")
    ap.add_argument("--work-dir", default="pkb_eval_work")
    ap.add_argument("--pkb-root", default=None)
    ap.add_argument("--problem-file", action="append", default=[], metavar="ID=PATH", help="a problem module from a file")
    ap.add_argument("--json", action="store_true", help="print each evaluation as a JSON line")
    args = ap.parse_args(argv)

    problem_files = {}
    for item in args.problem_file:
        pid, _, path = item.partition("=")
        problem_files[int(pid)] = str(Path(path).resolve())
    options = EvalOptions(
        world_size=args.world_size, trials=args.trials, dtype=args.dtype, backend=args.backend,
        timeout_s=args.timeout_s, warmup=args.warmup, iters=args.iters, groups=args.groups,
        store_path=args.store_path, work_dir=args.work_dir, scale=args.scale, pkb_root=args.pkb_root,
        problem_files=problem_files,
    )
    records = [rec for p in args.paths for rec in load_corpus(p)]
    for rec in records:
        evaluate([rec], options)  # one at a time, so each line prints as its result lands
        ev = rec.evaluation
        if args.json:
            print(json.dumps({"path": rec.path, "sha256": rec.sha256, **ev}, default=str), flush=True)
        else:
            speed = f" {ev['speedup']:.3g}x" if ev.get("speedup") else ""
            print(f"{rec.path}: {ev['status']} {ev.get('outcome') or '-'} {ev.get('subtype') or ''}{speed} {ev.get('reason', '')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
