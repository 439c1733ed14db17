"""Corpus throughput: candidates per hour, ours against PKB's own loop, and the static passes at
--jobs 1 against --jobs N, in one run.

    python bench/corpus_throughput.py --pkb-root PKB --static            # static part only (CPU)
    python bench/corpus_throughput.py --pkb-root PKB --eval -n 1         # eval part (GPU machine)
    python bench/corpus_throughput.py --pkb-root PKB --static --eval -n 1 --pkb-files 3

The eval part takes a set of real files (default: problems 1, 2, 3, 4, 7, 12, 13, 16 of the three
CUDA models, 24 files) and runs `pkb-analyze eval --jobs auto --pkb-root PKB` on all of them on
cold build caches. PKB's loop (`run_local.py --mode eval`, one file after another, each with its
own build) is measured on the first --pkb-files of the same set; since that loop is sequential,
its time for the whole set is the measured mean per file times the number of files (the per-file
spread is printed so the extrapolation can be judged). The static part copies every solution file
of PKB's run trees (383 at dab08304) into a scratch tree and runs `pkb-analyze analyze` with
--jobs 1 and --jobs N, each on a fresh cache, checking the records are identical.
"""

from __future__ import annotations

import argparse
import json
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
SAMPLE_PROBLEMS = (1, 2, 3, 4, 7, 12, 13, 16)
CUDA_MODELS = ("anthropic_claude-opus-4-7", "google_gemini-3-pro-preview", "openai_gpt-5.5")


def solution_files(pkb_root: Path) -> list[Path]:
    return sorted(p for tree in sorted(pkb_root.glob("solutions_*")) if tree.is_dir() for p in tree.glob("*.py"))


def sample_files(pkb_root: Path, problems: tuple[int, ...]) -> list[Path]:
    out = []
    for tree in sorted(pkb_root.glob("solutions_cuda_*")):
        if not any(tree.name.endswith(m) for m in CUDA_MODELS):
            continue
        for p in sorted(tree.glob("*.py")):
            m = re.match(r"(\d+)_", p.name)
            if m and int(m.group(1)) in problems:
                out.append(p)
    return out


def copy_tree(files: list[Path], dest: Path) -> Path:
    """The files under their run-tree folder names (model and backend come from those)."""
    for f in files:
        (dest / f.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest / f.parent.name / f.name)
    return dest


def cli(args: list[str], env: dict | None = None, timeout: float | None = None) -> tuple[float, subprocess.CompletedProcess]:
    cmd = [sys.executable, "-c", "from pkb.cli import main; main()", *args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p), **(env or {})}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - t0, proc


def cpu_seconds() -> float:
    t = os.times()
    return t.children_user + t.children_system


def comparable(jsonl: Path) -> list[dict]:
    """static.jsonl without the pass clocks (the one field two runs never share)."""
    out = []
    for line in jsonl.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        for p in d.get("passes", []):
            p.pop("seconds", None)
        out.append(d)
    return out


def _spin(n: int) -> int:
    s = 0
    for i in range(n):
        s += i * i
    return s


def parallel_capacity(jobs: int, n: int = 10_000_000) -> float:
    """What the machine gives now: a perfectly parallel loop's speedup at `jobs` processes (a
    shared machine's other load takes its share; our ratio is bounded by this one)."""
    from concurrent.futures import ProcessPoolExecutor

    t0 = time.perf_counter()
    for _ in range(jobs):
        _spin(n)
    serial = time.perf_counter() - t0
    t0 = time.perf_counter()
    with ProcessPoolExecutor(jobs) as pool:
        list(pool.map(_spin, [n] * jobs))
    return serial / (time.perf_counter() - t0)


def static_part(pkb_root: Path, jobs: int, tmp: Path, ptx: bool, repeat: int = 1, every: int = 1) -> dict:
    """--jobs 1 and --jobs N alternately `repeat` times (a shared machine's load changes between
    runs; alternating spreads it over both), each on a fresh cache; the ratio of the medians."""
    files = solution_files(pkb_root)[::every]
    tree = copy_tree(files, tmp / "static_tree")
    walls: dict[int, list[float]] = {1: [], jobs: []}
    capacity: list[float] = []
    records: dict[int, list[dict]] = {}
    for i in range(repeat):
        capacity.append(parallel_capacity(jobs))
        print(f"machine now: a perfectly parallel loop runs {capacity[-1]:.2f}x faster on {jobs} processes", flush=True)
        for n in (1, jobs):
            out, cache = tmp / f"static_j{n}_{i}", tmp / f"cache_j{n}_{i}"
            c0, load0 = cpu_seconds(), os.getloadavg()[0]
            wall, proc = cli(["analyze", str(tree), "--static-only", "-q", "--jobs", str(n), "--cache-dir", str(cache), "-o", str(out),
                              "--ptx" if ptx else "--no-ptx"])
            if proc.returncode != 0:
                raise SystemExit(f"analyze --jobs {n} failed:\n{proc.stderr[-3000:]}")
            walls[n].append(wall)
            recs = comparable(out / "static.jsonl")
            if records.setdefault(n, recs) != recs:
                raise SystemExit(f"analyze --jobs {n}: two runs gave different records")
            print(f"static --jobs {n} (run {i + 1}): {len(recs)} files, {wall:.1f} s wall, {cpu_seconds() - c0:.1f} s CPU "
                  f"(load average before: {load0:.1f})", flush=True)
            shutil.rmtree(cache, ignore_errors=True)
    med = {n: statistics.median(w) for n, w in walls.items()}
    same = records[1] == records[jobs]
    ratio = med[1] / med[jobs]
    print(f"static: {len(files)} solution files; median --jobs 1 {med[1]:.1f} s, --jobs {jobs} {med[jobs]:.1f} s over {repeat} "
          f"alternating run(s): {ratio:.2f}x; records {'identical' if same else 'DIFFERENT'}; the machine's parallel "
          f"capacity meanwhile {statistics.median(capacity):.2f}x (a perfectly parallel loop)")
    return {"files": len(files), "ratio": ratio, "identical": same, "walls": walls, "capacity": capacity}


_PKB_TRIAL = re.compile(r"trial (\d+): (\w+)")


def pkb_finds(pkb_root: Path, f: Path) -> bool:
    """Whether PKB's run_local finds this file: it looks for `<reference stem>_<backend>.py` of the
    problem's id, so a file named otherwise (`12_gemm_allgather_cuda.py` for reference
    `12_allgather_gemm.py`, or the shifted ids from 34 on) is refused before anything runs."""
    m = re.match(r"(\d+)_", f.name)
    if not m:
        return False
    backend = f.stem.rsplit("_", 1)[-1]
    return any(f.name == f"{ref.stem}_{backend}.py" for ref in (pkb_root / "reference").glob(f"{m.group(1)}_*.py"))


def pkb_one(pkb_root: Path, f: Path, world_size: int, tmp: Path, timeout: float) -> dict:
    """PKB's run_local.py on one file, its own cold build cache, as its loop runs each file."""
    m = re.match(r"(\d+)_", f.name)
    backend = f.stem.rsplit("_", 1)[1]
    cmd = [sys.executable, "run_local.py", "--mode", "eval", "--problem", m.group(1) if m else "0", "--solution", backend,
           "--solutions-dir", str(f.parent.resolve()), "--nproc-per-node", str(world_size), "--trials", "5", "--measure-perf",
           "--logs-dir", str((tmp / "pkb_logs").resolve())]
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str((tmp / "pkb_ext" / f.stem).resolve())}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, check=False, cwd=pkb_root, env=env, capture_output=True, text=True, timeout=timeout)
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-400:]
    except subprocess.TimeoutExpired:
        rc, tail = None, "timed out"
    return {"file": f.name, "wall_s": time.perf_counter() - t0, "returncode": rc, "tail": tail}


def eval_part(pkb_root: Path, files: list[Path], args: argparse.Namespace, tmp: Path) -> dict:
    result: dict = {"files": len(files)}
    wall = None
    walls: dict[int, float] = {}
    if args.ours:
        for i, bj in enumerate(dict.fromkeys(args.build_jobs)):  # each value once, on its own cold build cache
            walls[bj] = ours_eval(pkb_root, files, args, tmp, out_name="eval_out" if i == 0 else f"eval_out_bj{bj}", build_jobs=bj)
        wall = walls[args.build_jobs[0]]
        result.update(ours_wall_s=wall, ours_per_hour=len(files) / wall * 3600, ours_by_build_jobs=walls)
        if args.check_timing:
            # the correct ones again, each in a timed launch of its own alone on the node (--no-screen),
            # on the warm builds: the quiet reference for how the first run timed them
            correct = [f for f in files if f.resolve() in correct_files(tmp / "eval_out" / "eval.jsonl", files)]
            ours_eval(pkb_root, correct, args, tmp, out_name="eval_out_warm", build_jobs=args.build_jobs[0], builds="eval_out",
                      extra=("--no-screen",), tree_name="eval_tree_correct")
            result["timing_check"] = timing_check(tmp / "eval_out" / "eval.jsonl", tmp / "eval_out_warm" / "eval.jsonl")
    if args.pkb_files > 0:
        ws = args.world_size or 1
        runnable = [f for f in files if pkb_finds(pkb_root, f)]
        if len(runnable) < len(files):
            print(f"PKB: its loop finds a file only under its reference's exact name; {len(files) - len(runnable)} of "
                  f"{len(files)} files are named otherwise (e.g. {next(f.name for f in files if f not in runnable)}) and "
                  "are not measured on it", flush=True)
        tried = [pkb_one(pkb_root, f, ws, tmp, args.timeout) for f in runnable[: args.pkb_files]]
        for r in tried:
            print(f"PKB run_local: {r['file']}: {r['wall_s']:.1f} s (exit {r['returncode']})"
                  + ("" if r["returncode"] == 0 else f": not a measurement; its output ends: {r['tail'][-300:]!r}"), flush=True)
        # A run that failed (a missing file, a crash) says nothing about the loop's speed.
        measured = [r for r in tried if r["returncode"] == 0]
        result["pkb_failed"] = [r["file"] for r in tried if r["returncode"] != 0]
        if not measured:
            print("PKB: no file measured; no ratio", flush=True)
            return result
        mean = sum(r["wall_s"] for r in measured) / len(measured)
        pkb_total = mean * len(files)
        print(f"PKB: {len(measured)} of {len(files)} files measured, mean {mean:.1f} s per file (min "
              f"{min(r['wall_s'] for r in measured):.1f}, max {max(r['wall_s'] for r in measured):.1f}); its loop is one file after "
              f"another, so the set is extrapolated as mean x {len(files)} = {pkb_total:.0f} s: {len(files) / pkb_total * 3600:.0f} candidates/hour")
        result.update(pkb_mean_s=mean, pkb_total_s=pkb_total, pkb_measured=[r["file"] for r in measured])
        for bj, w in walls.items():
            print(f"ours (--build-jobs {bj}) / PKB: {pkb_total / w:.1f}x faster")
        if wall:
            result["speedup"] = pkb_total / wall
            result["speedup_by_build_jobs"] = {bj: pkb_total / w for bj, w in walls.items()}
    return result


def speedups(jsonl: Path) -> dict[str, tuple[float, str]]:
    """Each correct, timed candidate's speedup and how it was timed: beside builds, at its screen's
    gate, or in a launch of its own."""
    out = {}
    for line in jsonl.read_text(encoding="utf-8").splitlines() if jsonl.exists() else []:
        rec = json.loads(line)
        ev = rec.get("evaluation") or {}
        details = ev.get("details") or {}
        if ev.get("correct") and ev.get("speedup"):
            how = ("timed beside builds" if details.get("timed_beside_builds")
                   else "timed at its gate" if details.get("timed_in_screen") else "timed in a launch of its own")
            out[rec["path"]] = (float(ev["speedup"]), how)
    return out


def correct_files(jsonl: Path, files: list[Path]) -> set[Path]:
    """The files (of `files`) whose copy in the run's tree (the record paths, folder/name) the run
    found correct."""
    correct = set(speedups(jsonl))
    return {f.resolve() for f in files if f"{f.parent.name}/{f.name}" in correct}


def timing_check(cold: Path, warm: Path) -> dict:
    """The first run's speedups (timed beside builds, at a screen's gate, or in a launch of their
    own) against a second run on warm builds in which each was timed in a launch of its own alone
    on the node: the ratio per candidate. Run-to-run spread is part of it; a disturbance by the
    builds or by the screens parked at their gates shows as that group's ratios drifting one way."""
    a, b = speedups(cold), speedups(warm)
    rows = [(p, a[p][0], b[p][0], a[p][1]) for p in sorted(a.keys() & b.keys())]
    for p, x, y, how in rows:
        name = f"{Path(p).parent.name.rsplit('_', 1)[-1]}/{Path(p).name}"  # the model, then the file
        print(f"  {name[-58:]:58s} first {x:7.3f}x  again {y:7.3f}x  ratio {x / y:5.3f}  ({how})")
    medians = {}
    for how in sorted({row[3] for row in rows}):
        rs = [x / y for _, x, y, h in rows if h == how]
        medians[how] = statistics.median(rs)
        print(f"timing check, {how}: {len(rs)} candidates, first/again speedup median {medians[how]:.3f} "
              f"(min {min(rs):.3f}, max {max(rs):.3f})", flush=True)
    return {"rows": rows, "medians": medians}


def timeline(jsonl: Path) -> None:
    """Where the wall time of one run went: each candidate's build and launch seconds (the record's
    details.prebuild and launch_wall_s), the builds' sum, and the timed launches' sum (a screen
    timed at its gate: its launch less its wait there, and the wait apart)."""
    recs = [json.loads(x) for x in jsonl.read_text().splitlines()] if jsonl.exists() else []
    builds, timed, waits = [], [], []
    for r in recs:
        ev = r.get("evaluation") or {}
        details = ev.get("details") or {}
        pre = details.get("prebuild") or {}
        if pre.get("seconds"):
            builds.append(float(pre["seconds"]))
        if ev.get("correct") and ev.get("launch_wall_s"):
            waited = float((details.get("timed_in_screen") or {}).get("waited_s") or 0.0)
            timed.append(float(ev["launch_wall_s"]) - waited)
            if "timed_in_screen" in details:
                waits.append(waited)
    if builds:
        print(f"  builds: {len(builds)}, {sum(builds):.0f} s in all, {statistics.median(builds):.1f} s median, {max(builds):.1f} s max")
    if timed:
        print(f"  timed launches: {len(timed)}, {sum(timed):.0f} s in all, {statistics.median(timed):.1f} s median, {max(timed):.1f} s max"
              + (f" ({len(waits)} timed in their screens, less {sum(waits):.0f} s waiting at their gates)" if waits else ""))


def ours_eval(pkb_root: Path, files: list[Path], args: argparse.Namespace, tmp: Path, out_name: str = "eval_out",
              build_jobs: int = 0, builds: str | None = None, extra: tuple[str, ...] = (), tree_name: str = "eval_tree") -> float:
    """One run of ours; `builds`: the run whose build cache it reuses (default: a cold one of its own);
    `extra`: more options for `eval`; `tree_name`: the folder the files are copied to."""
    tree = tmp / tree_name
    if not tree.exists():
        copy_tree(files, tree)
    out = tmp / out_name
    env = {"PKB_BUILD_DIR": str(tmp / f"builds_{builds or out_name}")}
    cmd = ["eval", str(tree), "--pkb-root", str(pkb_root), "--jobs", args.jobs, "-o", str(out), "-q", "--timing", args.timing,
           "--build-jobs", str(build_jobs), *extra]
    if args.world_size:
        cmd += ["-n", str(args.world_size)]
    wall, proc = cli(cmd, env=env)
    lines = [json.loads(x) for x in (out / "eval.jsonl").read_text().splitlines()] if (out / "eval.jsonl").exists() else []
    evaluated = sum(1 for r in lines if (r.get("evaluation") or {}).get("status") == "ran")
    ours_rate = len(files) / wall * 3600
    print(f"ours: {len(files)} files ({evaluated} ran) in {wall:.1f} s with --jobs {args.jobs} --build-jobs {build_jobs} "
          f"--timing {args.timing}: {ours_rate:.0f} candidates/hour (exit {proc.returncode})", flush=True)
    timeline(out / "eval.jsonl")
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
    return wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pkb-root", type=Path, required=True, help="PKB's initial commit (reference/, utils/, solutions_*/)")
    ap.add_argument("--static", action="store_true", help="static passes over every solution file, --jobs 1 against --jobs N")
    ap.add_argument("--eval", action="store_true", help="evaluate the sample (GPU machine), ours against PKB's run_local loop")
    ap.add_argument("--static-jobs", type=int, default=len(os.sched_getaffinity(0)), help="N of the static comparison (default: the cores)")
    ap.add_argument("--ptx", action="store_true", help="run the PTX pass (nvcc) in the static comparison")
    ap.add_argument("--repeat", type=int, default=1, help="static: alternating runs of each (the ratio of the medians)")
    ap.add_argument("--every", type=int, default=1, help="static: every k-th solution file only (a quicker sample)")
    ap.add_argument("--problems", default=",".join(map(str, SAMPLE_PROBLEMS)), help="problem numbers of the eval sample")
    ap.add_argument("--files", nargs="*", type=Path, default=None, help="explicit files for the eval part (instead of --problems)")
    ap.add_argument("--jobs", default="auto", help="ours: eval --jobs")
    ap.add_argument("--build-jobs", type=int, nargs="*", default=[0],
                    help="ours: eval --build-jobs; several values run ours once per value, in order (0: one build per core)")
    ap.add_argument("--timing", default="exclusive", choices=("exclusive", "beside-builds", "shared"))
    ap.add_argument("-n", "--world-size", type=int, default=1)
    ap.add_argument("--pkb-files", type=int, default=3, help="files PKB's loop is measured on (0: skip PKB)")
    ap.add_argument("--no-ours", dest="ours", action="store_false", help="eval: measure PKB's loop only")
    ap.add_argument("--timeout", type=float, default=1800.0, help="PKB: seconds per file")
    ap.add_argument("--check-timing", action="store_true",
                    help="eval: time the correct ones again on the warm builds, each in a launch of its own (--no-screen), "
                         "and compare each one's speedup with the first run's")
    ap.add_argument("--keep", type=Path, default=None, help="scratch folder to keep (default: a temporary one)")
    args = ap.parse_args(argv)
    if not (args.static or args.eval):
        ap.error("say --static, --eval or both")
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="pkb-throughput-"))
    tmp.mkdir(parents=True, exist_ok=True)
    summary = {}
    try:
        if args.static:
            summary["static"] = static_part(args.pkb_root, max(2, args.static_jobs), tmp, args.ptx, args.repeat, args.every)
        if args.eval:
            files = args.files or sample_files(args.pkb_root, tuple(int(x) for x in args.problems.split(",")))
            summary["eval"] = eval_part(args.pkb_root, files, args, tmp)
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(summary, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
