"""pkb-analyze on ParallelKernelBench's own generated solutions, end to end.

    python bench/real_corpus.py --pkb-root PATH [--sample N] [--emulate N] [--seed S] [--out DIR]
                                [--ptx] [--sample-backend cuda] [--skip-eval]

1. Static: the static passes (the pipeline `pkb-analyze` runs) over every file of every
   `solutions_*` tree under PATH, on the CPU: files read, files whose passes failed (the tool's
   failures), wall time.
2. Where a CUDA device is present (and unless --skip-eval): a sample of the files (default 60,
   `--sample-backend` trees only, CUDA by default), stratified by model and problem category
   (problems/catalog.py), drawn with a seeded generator and written to OUT/sampling.json, is
   evaluated by `pkb-analyze eval --pkb-root PATH` at world size 1 and, with --emulate N, under
   N emulated ranks. Each prints its wall time, its harness failures (records whose failure is
   the tool's, listed; the target is 0) and the paper-column table beside the PKB blog's figures
   (reports/paper_table.py), also written as CSV.
OUT/summary.json holds every figure printed. Exit status 1 when a harness failure was seen.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reports import paper_table  # noqa: E402

# not_run reasons that state a limit of the machine or the problem, not a failure of the tool
MACHINE_LIMITS = re.compile(
    r"multicast|needs? (at least )?\d+ ranks|needs world size >= ?\d|min(imum)?[_ ]world[_ ]size|below the problem's minimum|"
    r"no CUDA device|not co-resident|co-residen",
    re.I,
)
# failures that say the tool's environment, not the candidate, was at fault
TOOL_FAULTS = re.compile(
    r"No module named '?utils|cannot import name '?compile_cuda_extension|no reference|reference failed|"
    r"evaluation failed|emulation refused|lock file|waiting for lock",
    re.I,
)


def solution_trees(pkb_root: Path) -> list[Path]:
    return sorted(p for p in pkb_root.glob("solutions_*") if p.is_dir())


def harness_failure(evaluation: dict[str, Any]) -> str | None:
    """Why this evaluation is the tool's failure rather than a verdict on the candidate, or None."""
    if not evaluation:
        return None
    reason = str(evaluation.get("reason") or "")
    details = evaluation.get("details") if isinstance(evaluation.get("details"), dict) else {}
    text = " ".join([reason, str(details.get("error") or ""), str(details.get("stderr_tail") or "")[-2000:]])
    if evaluation.get("status") == "not_run":
        return None if MACHINE_LIMITS.search(reason) else f"not_run: {reason[:160]}"
    if evaluation.get("status") not in (None, "", "ran", "skipped_cached"):
        return f"status {evaluation.get('status')}: {reason[:160]}"
    if TOOL_FAULTS.search(text):
        return f"{evaluation.get('outcome')}/{evaluation.get('subtype')}: {TOOL_FAULTS.search(text).group(0)}"
    return None


def problem_group(rec: Any) -> str:
    """The catalog category of a record's problem: by name first, the id only when the name is unknown."""
    from problems import catalog

    entry = catalog.by_name(rec.problem_name or "") or catalog.entries().get(rec.problem_id or -1)
    return (getattr(entry, "category", None) or "unknown") if entry else "unknown"


def stratified_sample(records: list[Any], n: int, seed: int) -> tuple[list[Any], dict[str, Any]]:
    """`n` records, stratified by (run tree, problem category): every stratum gets its share of n
    by size (largest remainders), at least one where n allows; drawn with random.Random(seed)."""
    strata: dict[str, list[Any]] = defaultdict(list)
    for rec in sorted(records, key=lambda r: r.path):
        strata[f"{rec.run_tree or '(none)'}|{problem_group(rec)}"].append(rec)
    total = sum(len(v) for v in strata.values())
    n = min(n, total)
    quota = {k: n * len(v) / total for k, v in strata.items()}
    take = {k: int(q) for k, q in quota.items()}
    if n >= len(strata):
        for k in take:
            take[k] = max(take[k], 1)
    for k in sorted(quota, key=lambda k: quota[k] - int(quota[k]), reverse=True):
        if sum(take.values()) >= n:
            break
        if take[k] < len(strata[k]):
            take[k] += 1
    while sum(take.values()) > n:  # the minimum of one per stratum overshot: trim the largest
        k = max(take, key=lambda k: (take[k], k))
        take[k] -= 1
    rng = random.Random(seed)
    chosen = []
    for k in sorted(strata):
        chosen += rng.sample(strata[k], min(take[k], len(strata[k])))
    plan = {"seed": seed, "requested": n, "population": total,
            "strata": {k: {"files": len(strata[k]), "sampled": min(take[k], len(strata[k]))} for k in sorted(strata)},
            "files": sorted(r.path for r in chosen)}
    return sorted(chosen, key=lambda r: r.path), plan


def run_static(pkb_root: Path, out: Path, ptx: bool, processes: int = 0) -> tuple[list[Any], dict[str, Any]]:
    from analyzer.pipeline import StaticAnalyzer, StaticOptions
    from pkb.corpus import discover

    files = [f for tree in solution_trees(pkb_root) for f in discover(tree)]
    t0 = time.perf_counter()
    processes = processes or len(os.sched_getaffinity(0))
    analyzer = StaticAnalyzer(StaticOptions(ptx=ptx, use_cache=False, processes=processes, jobs=processes))
    out.mkdir(parents=True, exist_ok=True)
    records = []
    with (out / "static.jsonl").open("w", encoding="utf-8") as jsonl:
        for rec in analyzer.analyze_files(files, pkb_root):
            jsonl.write(json.dumps(rec.to_json_line()) + "\n")
            records.append(rec)
    analyzer.close()
    wall = time.perf_counter() - t0
    failed_passes = [f"{r.path}: {p.name} {p.message[:120]}" for r in records for p in r.passes if p.status == "failed"]
    figures = {
        "files": len(files),
        "files_read": sum(r.parse_status == "ok" for r in records),
        "not_read": dict(Counter(r.parse_status for r in records if r.parse_status != "ok")),
        "by_tree": dict(Counter(r.run_tree for r in records)),
        "harness_failures": failed_passes,
        "wall_s": round(wall, 1),
        "ptx": ptx,
        "processes": processes,
    }
    return records, figures


def copy_sample(chosen: list[Any], pkb_root: Path, dest: Path) -> None:
    """The sampled files under their run-tree names, so model and problem read as in PKB."""
    if dest.exists():
        shutil.rmtree(dest)
    for rec in chosen:
        target = dest / rec.path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(pkb_root / rec.path, target)


def run_eval(sample_dir: Path, out: Path, pkb_root: Path, emulate: int | None,
             extra: list[str] = ()) -> tuple[list[Any], dict[str, Any]]:
    """`pkb-analyze eval` on the sample (its own process: what a user runs), then its records."""
    from reports.load import records_from_jsonl

    cmd = [sys.executable, "-c", "from pkb.cli import main; main()", "eval", str(sample_dir), "--out", str(out),
           "--pkb-root", str(pkb_root), "-q"]
    cmd += ["--emulate", str(emulate)] if emulate else ["--world-size", "1"]
    cmd += list(extra)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (out / "bench_eval.log").write_text(proc.stdout + "\n--- stderr\n" + proc.stderr, encoding="utf-8")
    jsonl = out / ("eval_emulated.jsonl" if emulate else "eval.jsonl")
    records = records_from_jsonl(jsonl) if jsonl.exists() else []
    failures = [f"{r.path}: {why}" for r in records if (why := harness_failure(r.evaluation))]
    if proc.returncode not in (0,) and not records:
        failures.append(f"pkb-analyze eval exited {proc.returncode}: {proc.stderr[-300:]}")
    figures = {"command": " ".join(cmd[3:]), "exit": proc.returncode, "records": len(records), "wall_s": round(wall, 1),
               "harness_failures": failures,
               "outcomes": dict(Counter(f"{r.evaluation.get('outcome') or r.evaluation.get('status')}/{r.evaluation.get('subtype') or ''}" for r in records))}
    return records, figures


def print_table(title: str, records: list[Any], csv_path: Path) -> list[dict[str, Any]]:
    rows = paper_table.model_rows(records)
    paper_table.write_csv(rows, csv_path)
    print(f"\n{title} (also {csv_path})")
    print(paper_table.markdown(rows))
    return rows


def gpu_present() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available() and torch.cuda.device_count() > 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pkb-root", type=Path, required=True, help="a ParallelKernelBench checkout (solutions_* trees, reference/)")
    ap.add_argument("--sample", type=int, default=60, help="files to evaluate on the GPU (stratified by model and problem category)")
    ap.add_argument("--emulate", type=int, default=None, help="also evaluate the sample under N emulated ranks")
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--sample-backend", default="cuda", help="only trees of this backend are sampled ('' for all)")
    ap.add_argument("--out", type=Path, default=Path("real-corpus-out"))
    ap.add_argument("--ptx", action="store_true", help="run the PTX pass too (needs nvcc; about 4x slower)")
    ap.add_argument("--skip-eval", action="store_true", help="static only, even with a GPU (the sample is still drawn: OUT/sampling.json)")
    ap.add_argument("--include-problems", default="",
                    help="problem ids (1,2,3) whose files of the sampled trees are always evaluated; the sample draws the rest")
    ap.add_argument("--jobs", type=int, default=0, help="processes for the static passes (0: the cores)")
    ap.add_argument("--eval-args", default="",
                    help="more options for both `pkb-analyze eval` runs, e.g. '--iters 0 --trials 2' (correctness only)")
    args = ap.parse_args(argv)
    root = args.pkb_root.resolve()
    if not solution_trees(root):
        print(f"error: no solutions_* trees under {root}", file=sys.stderr)
        return 2
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"pkb_root": str(root), "argv": sys.argv[1:], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}

    records, static = run_static(root, out / "static", args.ptx, args.jobs)
    summary["static"] = static
    not_read = ", ".join(f"{k} {v}" for k, v in sorted(static["not_read"].items()))
    print(f"static: {static['files']} files read in {len(static['by_tree'])} trees, one record each; "
          f"{static['files_read']} parsed" + (f" (the others: {not_read}, the files' own defects)" if not_read else "")
          + f"; harness failures {len(static['harness_failures'])}; wall {static['wall_s']} s (ptx {'on' if args.ptx else 'off'})")
    for tree, n in sorted(static["by_tree"].items()):
        print(f"  {tree}: {n}")
    for line in static["harness_failures"][:20]:
        print(f"  harness failure: {line}")
    summary["static_table"] = print_table("static only: files per model (no verdicts)", records, out / "paper_table_static.csv")

    # The sample is drawn (and OUT/sampling.json written) with or without a GPU, so a later run
    # can be planned around it (bench/h200_session.sh's ws1rest evaluates the files outside it).
    pool = [r for r in records if r.parse_status == "ok" and (not args.sample_backend or r.backend == args.sample_backend)]
    fixed_ids = {int(x) for x in args.include_problems.split(",") if x.strip()}
    fixed = [r for r in pool if r.problem_id in fixed_ids]
    rest = [r for r in pool if r.problem_id not in fixed_ids]
    drawn, plan = stratified_sample(rest, max(0, args.sample - len(fixed)), args.seed)
    chosen = sorted(fixed + drawn, key=lambda r: r.path)
    plan["always_included"] = {"problems": sorted(fixed_ids), "files": sorted(r.path for r in fixed)}
    plan["files"] = [r.path for r in chosen]
    (out / "sampling.json").write_text(json.dumps(plan, indent=1), encoding="utf-8")
    summary["sampling"] = {k: v for k, v in plan.items() if k != "files"}
    print(f"\nsample: {len(chosen)} of {plan['population']} files, {len(plan['strata'])} strata, seed {args.seed} (OUT/sampling.json)")
    if args.skip_eval or not gpu_present():
        print("\nno CUDA device" if not gpu_present() else "\n--skip-eval", "- evaluation and emulation not run")
    else:
        copy_sample(chosen, root, out / "sample")
        runs = [("eval_ws1", None)] + ([(f"emulate_{args.emulate}", args.emulate)] if args.emulate else [])
        for name, emulate in runs:
            recs, figures = run_eval(out / "sample", out / name, root, emulate, shlex.split(args.eval_args))
            summary[name] = figures
            print(f"\n{name}: {figures['records']} records, exit {figures['exit']}, wall {figures['wall_s']} s, "
                  f"harness failures {len(figures['harness_failures'])}")
            for line in figures["harness_failures"][:30]:
                print(f"  harness failure: {line}")
            summary[name]["table"] = print_table(f"{name}: our columns beside the paper's", recs, out / f"paper_table_{name}.csv")
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str), encoding="utf-8")
    print(f"\nwrote {out / 'summary.json'}")
    failures = len(static["harness_failures"]) + sum(len(summary[k]["harness_failures"]) for k in summary if k.startswith(("eval_", "emulate_")))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
