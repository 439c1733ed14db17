"""Nsight Compute on request: a second launch of a correct candidate's job, each rank under ncu.

    record.profile["ncu"] = ncu_pass(job, kernels)

The evaluation's own launch never runs under ncu (its timings would not be the candidate's). This
one has one trial, no timing, and a profile phase whose calls only open their NVTX ranges
(profile_backend "nvtx"), so ncu's --nvtx-include picks the second call's kernels,
pkb:candidate_call[1], past first-call effects. The rank spawner starts `ncu ... python -m worker` per
rank (profiling.capture.run_ncu_command builds the ncu part: clocks unlocked, --communicator
when several ranks, one report per rank). Where ncu refuses some metrics on this machine (the
one-GPU H200 has no NVLink counters), the launch runs once more without them and the summary says
which were dropped.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from pkb.eval.job import JobSpec, launcher_log_path
from profiling.hooks import PROFILE_DIR

# What a reader of the summary wants per kernel, from the counters NCU_METRICS asks for.
_FIGURES = {
    "duration_ns": ("gpu__time_duration.sum", 1.0),
    "nvlink_rx_bytes": ("nvlrx__bytes.sum", 1.0),
    "nvlink_tx_bytes": ("nvltx__bytes.sum", 1.0),
    "peer_l2_bytes": ("lts__t_sectors_srcunit_tex_aperture_peer.sum", 32.0),  # SM requests to a peer's memory
    "peer_l2_read_bytes": ("lts__t_sectors_srcunit_tex_aperture_peer_op_read.sum", 32.0),
    "peer_l2_write_bytes": ("lts__t_sectors_srcunit_tex_aperture_peer_op_write.sum", 32.0),
    "dram_bytes": ("dram__bytes.sum", 1.0),
    "sm_throughput_pct": ("sm__throughput.avg.pct_of_peak_sustained_elapsed", 1.0),
    "tma_load_bytes": ("l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum", 1.0),
    "tma_store_bytes": ("l1tex__m_l1tex2xbar_write_bytes_mem_global_op_tma_st.sum", 1.0),
    "tma_instructions": ("sm__sass_inst_executed_op_tma.sum", 1.0),
}
NCU_JOB_SUFFIX = "_ncu"
REPORT_STEM = "ncu"


def ncu_job(job: JobSpec, kernels: Iterable[str], metrics: Sequence[str], ncu: str = "ncu") -> JobSpec:
    """The job to launch under ncu: same candidate and problem, its own directory."""
    from profiling import capture

    job_dir = Path(job.job_dir + NCU_JOB_SUFFIX).resolve()
    report = job_dir / PROFILE_DIR / REPORT_STEM
    run = capture.run_ncu_command([], kernels, report, world_size=job.world_size, metrics=metrics, ncu=ncu)
    return replace(
        job, job_dir=str(job_dir), trials=1, iters=0, profile=True, profile_backend="nvtx", rank_wrapper=run.argv,
        # every kernel runs intercepted and the chosen ones replayed: give the calls room
        call_timeout_s=job.call_timeout_s * 4,
    )


def ncu_pass(job: JobSpec, kernels: Iterable[str] = (), *, metrics: Iterable[str] | None = None, ncu: str = "ncu", python: str | None = None) -> dict[str, Any]:
    """Launch the job under ncu and read its reports: {"status", "kernels": [...], ...}."""
    from pkb.eval.launcher import launch
    from profiling import capture

    names = sorted({k for k in kernels if k})
    out: dict[str, Any] = {"status": "failed", "kernels_asked": names, "unavailable_metrics": [], "reports": [], "kernels": [], "error": None}
    exe = shutil.which(ncu)
    if exe is None:
        out.update(status="skipped", error=f"{ncu} not found on PATH")
        return out
    wanted = list(capture.NCU_METRICS if metrics is None else metrics)
    dropped: list[str] = []
    while True:  # ends: each rerun drops at least one metric
        spec = ncu_job(job, names, wanted, exe)
        result = launch(spec, python)
        text = _launch_log(spec)
        refused = capture.refused_metrics(text, result.returncode, wanted)
        if not refused:
            break
        dropped += [capture.metric_base(m) for m in refused]
        wanted = [m for m in wanted if m not in refused]
    out["unavailable_metrics"] = sorted(set(dropped))
    out["metrics"] = wanted
    out["job_dir"] = spec.job_dir
    reports = sorted((Path(spec.job_dir) / PROFILE_DIR).glob(f"{REPORT_STEM}*.ncu-rep"))
    out["reports"] = [str(p) for p in reports]
    if result.timed_out:
        out["error"] = f"the launch under ncu passed its {spec.timeout_s:.0f} s limit"
    elif not reports:
        out["error"] = "ncu wrote no report" + (f" (exit {result.returncode}): " + _last_errors(text) if result.returncode else "")
    for rep in reports:
        try:
            df = capture.load_ncu_report(rep, ncu=exe)
        except Exception as exc:  # noqa: BLE001 - one unreadable report is reported, not raised
            out["error"] = f"{rep.name}: {type(exc).__name__}: {exc}"[:1000]
            continue
        out["kernels"] += kernel_rows(df, rank=_report_rank(rep))
    if out["kernels"]:
        out["status"] = "ok"
    elif reports and not out["error"]:
        out.update(status="empty", error="no kernel matched" + (f" {', '.join(names)}" if names else "") + " inside the second candidate call's range")
    return out


def kernel_rows(df: Any, rank: int | None = None) -> list[dict[str, Any]]:
    """One plain row per profiled kernel: its name, the raw metrics and the figures of _FIGURES."""
    rows = []
    if df is None or getattr(df, "empty", True):
        return rows
    for _, r in df.iterrows():
        row: dict[str, Any] = {"rank": rank, "kernel": str(r.get("Kernel Name") or r.get("Function Name") or "")}
        for figure, (metric, scale) in _FIGURES.items():
            v = r.get(metric)
            row[figure] = float(v) * scale if isinstance(v, (int, float)) and v == v else None
        row["metrics"] = {m: (float(v) if isinstance(v, (int, float)) else v) for m, v in r.items() if "__" in str(m)}
        rows.append(row)
    return rows


def _report_rank(path: Path) -> int | None:
    m = re.search(r"rank(\d+)", path.name)
    return int(m.group(1)) if m else 0


def _launch_log(job: JobSpec) -> str:
    """The spawner's whole log, where the ranks' ncu lines land (the launch result keeps only its
    tail, and ncu names refused metrics at the start)."""
    try:
        return launcher_log_path(job.job_dir).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _last_errors(text: str) -> str:
    errs = [ln.strip() for ln in text.splitlines() if "==ERROR==" in ln or "rror" in ln]
    return " | ".join(errs[-4:])[:1500]
