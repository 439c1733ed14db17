"""Profiling overhead: an evaluation's timing loop without and with a Kineto capture, in one run.

    python bench/profile_overhead.py [--iters 100] [--warmup 25] [--calls 3] [--size 2048]

pkb.eval exposes no profile option yet, so this times the candidate loop directly: the same
warm-up + timed calls as pkb.eval.timing.time_calls (per-call synchronize), once plain and once
followed by profiling.hooks.profile_candidate (warm-up 2, 3 profiled calls, export). Prints both
walls and their ratio (target: under 1.3). The workload is a matmul plus a copy (CUDA when there
is a GPU, else CPU), standing in for a candidate call.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=25)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--size", type=int, default=2048)
    args = ap.parse_args()

    import torch

    from profiling.hooks import profile_candidate
    from profiling.trace import load_trace

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    a = torch.randn(args.size, args.size, device=dev)
    src = torch.randn(args.size * args.size, device=dev)
    dst = torch.empty_like(src)

    def candidate():
        dst.copy_(src)
        return a @ a

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def timing_loop() -> float:
        t0 = time.perf_counter()
        for _ in range(args.warmup):
            candidate()
        sync()
        for _ in range(args.iters):
            candidate()
            sync()
        return time.perf_counter() - t0

    timing_loop()  # first-call effects (allocator, cuBLAS handles) out of both measurements
    plain = timing_loop()
    work = Path(tempfile.mkdtemp(prefix="pkb_prof_overhead_"))
    try:
        t0 = time.perf_counter()
        loop = timing_loop()
        info = profile_candidate(candidate, job_dir=work, rank=0, calls=args.calls, warmup=2)
        profiled = time.perf_counter() - t0
        t1 = time.perf_counter()
        n = len(load_trace(info["path"]).events) if info.get("path") else 0
        load_s = time.perf_counter() - t1
        # The same again in this process: Kineto/CUPTI are initialised now (a fresh rank pays
        # that once, which is what the first figure includes).
        t2 = time.perf_counter()
        loop2 = timing_loop()
        info2 = profile_candidate(candidate, job_dir=work / "warm", rank=0, calls=args.calls, warmup=2)
        warm = time.perf_counter() - t2
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratio = profiled / plain if plain > 0 else float("inf")
    print(f"device: {dev}, size {args.size}, warmup {args.warmup}, iters {args.iters}, profiled calls {args.calls}")
    print(f"eval loop without profiling: {plain:8.3f} s")
    print(f"eval loop with profiling:    {profiled:8.3f} s  (loop {loop:.3f} s + capture {info['wall_s']:.3f} s, status {info['status']})")
    print(f"ratio: {ratio:.3f}  (target < 1.3)   trace: {n} events, loaded in {load_s:.3f} s")
    print(f"again, profiler already initialised: {warm:.3f} s (loop {loop2:.3f} s + capture {info2['wall_s']:.3f} s), ratio {warm / plain:.3f}")
    return 0 if info["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
