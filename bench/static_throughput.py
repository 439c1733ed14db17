"""Static slice throughput: seconds per candidate, cold and warm, against `nvcc -ptx`.

    python bench/static_throughput.py [CORPUS] [--with-ptx]

Prints, for the candidates of CORPUS (default: the bundled corpus):
  - cold: median and p95 seconds per candidate with an empty cache (Python + clang passes,
    classification and rules; `--with-ptx` adds the PTX pass),
  - warm: wall time of a whole `pkb-analyze CORPUS` re-run on the unchanged corpus (the command,
    interpreter start included),
  - the anchor: `nvcc -ptx -arch=sm_90` on the same CUDA sources (with torch's headers, as a
    user's build would see them), median seconds per source, measured in this run,
and the ratios between them. Targets: cold median <= 0.5 s, warm re-run < 2 s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analyzer.pipeline import StaticAnalyzer, StaticOptions  # noqa: E402
from analyzer.ptx_pass import find_nvcc  # noqa: E402
from pkb.corpus import discover, read_candidate  # noqa: E402


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def cold_per_candidate(corpus: Path, ptx: bool) -> tuple[list[float], list]:
    times, records = [], []
    with tempfile.TemporaryDirectory() as cache:
        analyzer = StaticAnalyzer(StaticOptions(ptx=ptx, cache_dir=Path(cache), jobs=1))
        for path in discover(corpus):
            t0 = time.perf_counter()
            rec = analyzer.analyze(read_candidate(path, corpus))
            times.append(time.perf_counter() - t0)
            records.append(rec)
        analyzer.close()
    return times, records


def cli_wall(corpus: Path, cache: Path, out: Path) -> float:
    exe = Path(sys.executable).with_name("pkb-analyze")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from pkb.cli import main; main()"]
    t0 = time.perf_counter()
    subprocess.run([*cmd, str(corpus), "-q", "--out", str(out), "--cache-dir", str(cache)], check=True, capture_output=True)
    return time.perf_counter() - t0


def nvcc_anchor(records: list, nvcc: str) -> tuple[list[float], int]:
    """Seconds of `nvcc -ptx -arch=sm_90` per CUDA source, as the PTX pass runs it (the device
    code of the source, no torch headers), with an empty cache; sources that do not compile
    (a header this machine lacks) are counted apart, since a quick failure is not a compile."""
    from analyzer.ptx_pass import analyze_ptx

    times, failed = [], 0
    with tempfile.TemporaryDirectory() as cache:
        for rec in records:
            by_index = {c.source_index: c for c in rec.facts.cuda}
            for src in rec.facts.python.cuda_sources:
                t0 = time.perf_counter()
                ptx = analyze_ptx(src, by_index.get(src.index), rec.path, nvcc, Path(cache))
                if ptx.status == "ok" and ptx.entries:
                    times.append(time.perf_counter() - t0)
                elif ptx.status != "ok":
                    failed += 1
                # (status ok with no entries: a host-only source, nothing was compiled)
    return times, failed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", nargs="?", default=str(ROOT / "corpus"))
    ap.add_argument("--with-ptx", action="store_true", help="include the PTX pass in the cold figures")
    ap.add_argument("--anchor-sources", type=int, default=16, help="how many candidates' CUDA sources to time nvcc on (0: all)")
    args = ap.parse_args()
    corpus = Path(args.corpus)

    cold, records = cold_per_candidate(corpus, ptx=args.with_ptx)
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
        cold_cli = cli_wall(corpus, Path(cache), Path(out))
        warm_cli = cli_wall(corpus, Path(cache), Path(out))
    nvcc = find_nvcc()
    anchor: list[float] = []
    anchor_failed = 0
    if nvcc:
        with_cuda = [r for r in records if r.facts.python.cuda_sources]
        pick = with_cuda if args.anchor_sources == 0 else with_cuda[: args.anchor_sources]
        anchor, anchor_failed = nvcc_anchor(pick, nvcc)

    n = len(cold)
    med, p95 = statistics.median(cold), pct(cold, 0.95)
    print(f"corpus: {corpus} ({n} candidates, {sum(len(r.facts.python.cuda_sources) for r in records)} CUDA sources)")
    print(f"cold per candidate ({'with' if args.with_ptx else 'without'} PTX): median {med:.3f} s, p95 {p95:.3f} s   (target median <= 0.5 s)")
    print(f"whole command, cold cache: {cold_cli:.2f} s; warm re-run of the unchanged corpus: {warm_cli:.2f} s   (target < 2 s)")
    if anchor:
        a_med = statistics.median(anchor)
        print(f"anchor: nvcc -ptx -arch=sm_90 on the device code, median {a_med:.2f} s per source over {len(anchor)} sources that compiled ({anchor_failed} did not compile here and are left out)")
        print(f"ratio: static cold median / nvcc -ptx median = {med / a_med:.3f}  ({a_med / med:.0f}x cheaper than compiling)")
    else:
        print("anchor: nvcc not found, or no source compiled here; no ratio" + (f" ({anchor_failed} failed)" if anchor_failed else ""))
    print(f"ratio: warm re-run / cold run of the whole command = {warm_cli / cold_cli:.2f}")


if __name__ == "__main__":
    main()
