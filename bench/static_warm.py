"""Static analysis at corpus scale, the whole command: cold --jobs 1 against cold --jobs 2, and a
warm re-run against a cold run, measured in the same run.

    python bench/static_warm.py [PATH ...] [--pairs 3] [--warm 3] [--no-ptx]

PATH: candidate files or folders (default: the bundled corpus); a PKB checkout stands for its
solutions_* trees (the 383 generated files of PKB's initial commit). Each pair is a cold
`pkb-analyze analyze PATH --jobs 1` and a cold `--jobs 2`, back to back (empty cache each), so a
machine shared with other work disturbs both alike; the warm runs re-run the unchanged files on
the cache and output folder the last cold run left. Prints min and median wall seconds of each,
the ratios (jobs 1 / jobs 2, warm / cold), and whether every run's records (static.jsonl, the
passes' clocks aside) are identical, and each run's CPU seconds. Targets (issues 15, 17, 18): jobs-2 speed-up >= 1.6 on a 2-core
machine; warm about 1 s for the 383 files.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def targets(paths: list[str]) -> list[str]:
    out: list[str] = []
    for p in map(Path, paths):
        trees = sorted(d for d in p.glob("solutions_*") if d.is_dir()) if p.is_dir() else []
        out += [str(d) for d in trees] or [str(p)]
    return out


def command() -> list[str]:
    exe = Path(sys.executable).with_name("pkb-analyze")
    return [str(exe)] if exe.exists() else [sys.executable, "-c", "from pkb.cli import main; main()"]


def run(paths: list[str], out: Path, cache: Path, jobs: int, ptx: bool, cpu: list[float]) -> float:
    """Wall seconds of one command; its CPU seconds (its processes and theirs: the pool, nvcc)
    are appended to `cpu`, which says whether a slow pair was the work or the machine's other load."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    args = [*command(), "analyze", *paths, "--out", str(out), "--cache-dir", str(cache), "--jobs", str(jobs), "-q",
            "--static-only", *([] if ptx else ["--no-ptx"])]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(args, check=True, capture_output=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return wall


def records(out: Path) -> list[dict]:
    lines = []
    for line in (out / "static.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        for p in rec.get("passes", []):
            p.pop("seconds", None)  # a clock: the one field two runs never share
        lines.append(rec)
    return lines


def summary(name: str, values: list[float], cpu: list[float]) -> str:
    return (f"{name}: min {min(values):.2f} s, median {statistics.median(values):.2f} s  ({', '.join(f'{v:.2f}' for v in values)});"
            f" CPU s {', '.join(f'{c:.1f}' for c in cpu)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("paths", nargs="*", default=[str(ROOT / "corpus")])
    ap.add_argument("--pairs", type=int, default=3, help="cold --jobs 1 / --jobs 2 pairs, back to back")
    ap.add_argument("--warm", type=int, default=3, help="warm re-runs after the last cold run")
    ap.add_argument("--no-ptx", dest="ptx", action="store_false", help="leave the PTX pass (nvcc) out")
    args = ap.parse_args()
    paths = targets(args.paths)

    work = Path(tempfile.mkdtemp(prefix="pkb-static-bench-"))
    try:
        one, two, warm = [], [], []
        cpu: dict[str, list[float]] = {"one": [], "two": [], "warm": []}
        reference: list[dict] | None = None
        identical = True
        for i in range(args.pairs):
            for jobs, into, name in ((1, one, "one"), (2, two, "two")):
                cache, out = work / f"cache-{i}-{jobs}", work / f"out-{i}-{jobs}"
                into.append(run(paths, out, cache, jobs, args.ptx, cpu[name]))
                recs = records(out)
                reference = reference if reference is not None else recs
                identical &= recs == reference
        for _ in range(args.warm):  # on what the last cold run (--jobs 2) left
            warm.append(run(paths, out, cache, 2, args.ptx, cpu["warm"]))
            identical &= records(out) == reference
        n = len(reference or [])
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"files: {n} records from {', '.join(paths)} (PTX pass {'on' if args.ptx else 'off'}; {os.cpu_count()} cores here, "
          f"load average {os.getloadavg()[0]:.2f} at the end)")
    print(summary("cold --jobs 1", one, cpu["one"]))
    print(summary("cold --jobs 2", two, cpu["two"]))
    print(summary("warm re-run  ", warm, cpu["warm"]))
    pair_ratios = [a / b for a, b in zip(one, two)]
    print(f"ratio jobs 1 / jobs 2: of medians {statistics.median(one) / statistics.median(two):.2f}, of mins {min(one) / min(two):.2f}, "
          f"per pair {', '.join(f'{r:.2f}' for r in pair_ratios)}   (target >= 1.6 on 2 cores)")
    print(f"CPU busy per wall second, --jobs 2: {', '.join(f'{c / w:.2f}' for c, w in zip(cpu['two'], two))} of 2 cores"
          " (near 2 only when both workers had both cores throughout; other work on the machine lowers it)")
    print(f"ratio warm / cold (jobs 2): of medians {statistics.median(warm) / statistics.median(two):.3f}, of mins {min(warm) / min(two):.3f}")
    print(f"records identical across every run (clocks aside): {'yes' if identical else 'NO'}")


if __name__ == "__main__":
    main()
