"""`python -m pkb.eval PATH... [options]`: evaluate candidate files or folders, one line each.

Exit status:
  0  every candidate was evaluated (whatever its outcome: a hang, a crash or a suspect candidate
     is an evaluation like any other), or taken from the store
  1  some candidates could not be evaluated because of the harness or the environment (status
     not_run: no CUDA device for a CUDA candidate, a reference that failed, an unknown problem,
     too few GPUs) or the evaluation itself failed; the others are still in the store
  2  usage error (bad options, a path that does not exist), or a store this run cannot use (in use
     by another run, of a newer schema version)
"""

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
    ap.add_argument("--timeout", type=float, default=600.0, dest="timeout_s", help="limit of one launch (s)")
    ap.add_argument("--import-timeout", type=float, default=300.0, dest="import_timeout_s", help="limit of the candidate's import (s)")
    ap.add_argument("--compile-timeout", type=float, default=900.0, dest="compile_timeout_s", help="limit of one JIT build (s)")
    ap.add_argument("--call-timeout", type=float, default=120.0, dest="call_timeout_s", help="limit of one call (s)")
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--groups", type=int, default=None)
    ap.add_argument("--scale", default="small", choices=("small", "large"))
    ap.add_argument("--store", default="pkb_eval.sqlite", dest="store_path")
    ap.add_argument("--work-dir", default="pkb_eval_work")
    ap.add_argument("--pkb-root", default=None)
    ap.add_argument("--problem", type=int, default=None, metavar="ID", help="every candidate given answers problem ID (when its file name says nothing usable)")
    ap.add_argument("--problem-file", action="append", default=[], metavar="ID=PATH", help="a problem module from a file")
    ap.add_argument("--json", action="store_true", help="print each evaluation as a JSON line")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        ap.error(f"no such file or folder: {', '.join(missing)}")  # exits 2

    problem_files = {}
    for item in args.problem_file:
        pid, _, path = item.partition("=")
        problem_files[int(pid)] = str(Path(path).resolve())
    options = EvalOptions(
        world_size=args.world_size, trials=args.trials, dtype=args.dtype, backend=args.backend,
        timeout_s=args.timeout_s, warmup=args.warmup, iters=args.iters, groups=args.groups,
        store_path=args.store_path, work_dir=args.work_dir, scale=args.scale, pkb_root=args.pkb_root,
        problem_files=problem_files, problem=args.problem,
        import_timeout_s=args.import_timeout_s, compile_timeout_s=args.compile_timeout_s, call_timeout_s=args.call_timeout_s,
    )
    from pkb.roots import corpus_root

    records = []
    for p in args.paths:
        base = corpus_root([p])  # what load_corpus makes record paths relative to
        for rec in load_corpus(p):
            if args.problem is not None and (rec.problem_id is None or p.is_file()):
                from problems import names

                rec.problem_id, rec.problem_name = args.problem, names().get(args.problem, rec.problem_name)
            if rec.parse_status == "too_large" and not rec.source:
                try:  # the corpus reader stops at its size limit; the evaluation runs the file
                    rec.source = (base / rec.path).read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    pass
            records.append(rec)
    from pkb.store import Store, StoreError

    try:  # held for the whole run: a second run on this store is refused before anything launches
        held = Store(options.store_path, lock=True)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return _evaluate_all(records, options, args.json)
    finally:
        held.close()


def _evaluate_all(records: list, options, as_json: bool) -> int:
    from pkb.eval import evaluate

    not_evaluated = 0
    for rec in records:
        try:
            evaluate([rec], options)  # one at a time, so each line prints as its result lands
        except Exception as exc:  # the harness failed on this one; say so and go on
            rec.evaluation = {"status": "not_run", "outcome": "", "subtype": "", "reason": f"evaluation failed: {type(exc).__name__}: {exc}"}
        ev = rec.evaluation
        if ev.get("status") not in ("ran", "skipped_cached"):
            not_evaluated += 1
        if as_json:
            print(json.dumps({"path": rec.path, "sha256": rec.sha256, **ev}, default=str), flush=True)
        else:
            speed = f" {ev['speedup']:.3g}x" if ev.get("speedup") else ""
            print(f"{rec.path}: {ev['status']} {ev.get('outcome') or '-'} {ev.get('subtype') or ''}{speed} {ev.get('reason', '')}", flush=True)
    if not_evaluated:
        from pkb.eval.not_run import summary_lines

        print("\n".join(summary_lines(records)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
