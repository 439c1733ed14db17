"""What the evaluation calls: one hook inside each rank, one summary in the parent.

Inside a rank (pkb.eval.worker, after timing, on matched candidates):

    from profiling.hooks import profile_candidate
    info = profile_candidate(lambda: self.solution(*groups[0]), job_dir=job.job_dir, rank=self.rank)
    rep.result["profile"] = info        # plain JSON: status, backend, path, wall_s, error

It never raises: a profiling failure is reported in `info`, never blamed on the candidate. The
backend is the job's profile_backend, else PKB_PROFILE_BACKEND, else `kineto`: `cupti` (a separate
launch: one CUPTI subscriber per process, see profiling.capture) or `nvtx` (the calls inside their
NVTX ranges and nothing recorded: for ncu or nsys around the rank, see pkb.eval.ncu).

In the parent, once the ranks are done:

    record.profile = summarize_job(job_dir, comm_kernel_names(record), sol_bytes)
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable

from pkb.eval.job import PROFILE_DIR  # one name for the harness and the capture


def profile_dir(job_dir: str | Path) -> Path:
    return Path(job_dir) / PROFILE_DIR


def profile_candidate(
    fn: Callable[[], Any],
    *,
    job_dir: str | Path,
    rank: int,
    calls: int = 3,
    warmup: int = 2,
    backend: str | None = None,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Profile `calls` calls of fn (after `warmup` unprofiled ones) into <job_dir>/profile/."""
    backend = backend or os.environ.get("PKB_PROFILE_BACKEND", "kineto")
    info: dict[str, Any] = {"status": "failed", "backend": backend, "path": None, "calls": calls, "warmup": warmup, "wall_s": 0.0, "error": None}
    t0 = time.perf_counter()
    try:
        from profiling import capture, ranges

        out = profile_dir(job_dir)
        if backend == "nvtx":
            # Ranges only, for a profiler outside the process (ncu's --nvtx-include, nsys).
            capture.warm_up(fn, warmup)
            with ranges.enabled(record_function=False):
                capture.ranged_calls(fn, calls)
            info.update(status="ok")
        elif backend == "cupti":
            path = capture.capture_cupti(fn, calls=calls, warmup=warmup, out_path=out, rank=rank)
            if path is None:
                info.update(status="skipped", error="cupti-python not importable")
        else:
            path = capture.capture_kineto(fn, calls=calls, warmup=warmup, out_path=out, rank=rank, meta=meta)
        if path is not None:
            info.update(status="ok", path=str(path))
    except BaseException as exc:  # noqa: BLE001 - profiling must not take the rank down
        if isinstance(exc, KeyboardInterrupt):
            raise
        info["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        info["traceback"] = traceback.format_exc()[-4000:]
    info["wall_s"] = time.perf_counter() - t0
    return info


def rank_traces(job_dir: str | Path) -> dict[int, Path]:
    """rank -> trace file found in <job_dir>/profile/ (Kineto first, else CUPTI JSON lines)."""
    found: dict[int, Path] = {}
    d = profile_dir(job_dir)
    if not d.is_dir():
        return found
    for pattern in ("rank*.trace.json.gz", "rank*.trace.json", "rank*.cupti.jsonl"):
        for p in sorted(d.glob(pattern)):
            digits = "".join(ch for ch in p.name[4:].split(".")[0] if ch.isdigit())
            if digits and int(digits) not in found:
                found[int(digits)] = p
    return found


def summarize_job(
    job_dir: str | Path,
    comm_kernel_names: Iterable[str] = (),
    sol_bytes: float | None = None,
    *,
    link_GBps: float | None = None,
    timeline_png: bool = False,
) -> dict[str, Any]:
    """record.profile: {"ranks": [summary of rank 0, rank 1, ...], "merged_trace": path, ...}."""
    from profiling.analyze import NVLINK4_GBPS, profile_summary
    from profiling.trace import load_cupti_jsonl, load_trace

    names = list(comm_kernel_names)
    traces = rank_traces(job_dir)
    out: dict[str, Any] = {"ranks": [], "errors": [], "merged_trace": None, "timeline_png": None}
    loaded = {}
    for r, p in sorted(traces.items()):
        try:
            t = load_cupti_jsonl(p, rank=r) if p.name.endswith(".jsonl") else load_trace(p, rank=r)
            loaded[r] = t
            out["ranks"].append(profile_summary(t, names, sol_bytes, link_GBps=link_GBps or NVLINK4_GBPS))
        except Exception as exc:
            out["errors"].append({"rank": r, "path": str(p), "error": f"{type(exc).__name__}: {exc}"[:1000]})
    kineto = {r: p for r, p in traces.items() if not p.name.endswith(".jsonl")}
    if kineto:
        try:
            from profiling.timeline import merge_rank_traces

            out["merged_trace"] = str(merge_rank_traces(kineto, profile_dir(job_dir) / "merged.trace.json.gz"))
        except Exception as exc:
            out["errors"].append({"rank": None, "path": "merged", "error": str(exc)[:1000]})
    if timeline_png and 0 in loaded:
        try:
            from profiling.timeline import plot_call

            out["timeline_png"] = str(plot_call(loaded[0], 1 if out["ranks"] and out["ranks"][0]["n_calls"] > 1 else 0, profile_dir(job_dir) / "rank0_call.png", names))
        except Exception as exc:
            out["errors"].append({"rank": 0, "path": "timeline", "error": str(exc)[:1000]})
    return out
