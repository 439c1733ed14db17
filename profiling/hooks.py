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

# Where a profiled job's ranks write their traces. The harness (pkb.eval.job) takes this name from
# here and allows the folder in a job directory only when the job profiles, so a candidate cannot
# hide files under that name otherwise.
PROFILE_DIR = "profile"


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
    if loaded:
        try:
            out.update(write_frames(loaded, profile_dir(job_dir), names, sol_bytes))
        except Exception as exc:
            out["errors"].append({"rank": None, "path": "frames", "error": f"{type(exc).__name__}: {exc}"[:1000]})
    kineto = {r: p for r, p in traces.items() if not p.name.endswith(".jsonl")}
    if kineto:
        try:
            from profiling.merge import merge_rank_traces

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


def _parquet_safe(frame: Any) -> Any:
    """Dicts and lists (per-source times, sync calls, event args) as JSON text: parquet needs one type a column."""
    import json

    frame = frame.copy()
    for col in frame.columns:
        if frame[col].dtype == object and frame[col].map(lambda v: isinstance(v, (dict, list, tuple))).any():
            frame[col] = frame[col].map(lambda v: json.dumps(v, default=str) if v is not None else None)
    return frame


def write_frames(loaded: dict[int, Any], out_dir: str | Path, comm_kernel_names: Iterable[str] = (), sol_bytes: float | None = None) -> dict[str, str]:
    """Per-call and per-kernel frames of every rank, a `rank` column first (as HTA users expect frames).

    calls.parquet: one row per rank and candidate call (profiling.analyze.per_call's figures);
    kernels.parquet: one row per GPU kernel, copy or memset, with its call and kind (compute/comm).
    """
    import pandas as pd

    from profiling.analyze import assign_calls, classify_gpu, per_call

    names = list(comm_kernel_names)
    calls, kernels = [], []
    for rank, trace in sorted(loaded.items()):
        c = per_call(trace, names, sol_bytes)
        calls.append(c.assign(rank=rank)[["rank", *c.columns]])
        g = classify_gpu(trace, names)
        g["call"] = assign_calls(trace).loc[g.index, "call"]
        kernels.append(g.assign(rank=rank)[["rank", *g.columns]])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"calls_parquet": out_dir / "calls.parquet", "kernels_parquet": out_dir / "kernels.parquet"}
    _parquet_safe(pd.concat(calls, ignore_index=True)).to_parquet(paths["calls_parquet"], index=False)
    _parquet_safe(pd.concat(kernels, ignore_index=True)).to_parquet(paths["kernels_parquet"], index=False)
    return {k: str(v) for k, v in paths.items()}


def profile_locations(records: Iterable[Any]) -> list[str]:
    """Where `eval --profile` left each candidate's traces, and how to open them (said at the end of a run)."""
    lines = []
    for rec in records:
        prof = getattr(rec, "profile", None) or {}
        ranks = [r.get("path") for r in prof.get("ranks") or [] if r.get("path")]
        if not (ranks or prof.get("merged_trace")):
            continue
        folder = Path(prof.get("merged_trace") or ranks[0]).parent
        lines.append(f"{rec.path}: traces in {folder}")
        if prof.get("merged_trace"):
            lines.append(f"  every rank in one trace: {prof['merged_trace']} (ui.perfetto.dev, \"Open trace file\")")
        if prof.get("calls_parquet"):
            lines.append(f"  frames: {prof['calls_parquet']}, {prof['kernels_parquet']} (pandas.read_parquet)")
    return lines
