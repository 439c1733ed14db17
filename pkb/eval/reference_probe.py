"""A reference that fails at the world size asked: is that the problem's minimum world size?

Some references cannot run on one rank (a partner rank indexed from a list of peers, a mesh that
needs two dimensions): at world size 1 they raise (an IndexError, say) where they work at 2. That
is a fact about the problem, not "reference failed". When the reference check fails, the reference
alone (no candidate is loaded) is launched again at larger world sizes, on GPUs where enough are
visible and otherwise on CPU ranks with gloo, and the first world size where it runs is the
problem's minimum, with the failing line as the evidence.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

PROBE_WORLD_SIZES = (2, 4)
PROBE_TIMEOUT_S = 180.0


def needs_probe(evaluation: dict[str, Any]) -> bool:
    """A reference check that failed with a plain Python error (an IndexError, a shape assert);
    a device or communication failure (illegal address, out of memory, NCCL) says nothing about
    the world size, and a probe on CPU ranks would not repeat it."""
    from pkb.eval.classify import runtime_subtype

    check = (evaluation.get("details") or {}).get("reference_check")
    if evaluation.get("status") != "not_run" or not check or check.get("world_size") is None:
        return False
    return not runtime_subtype(f"{check.get('type')}: {check.get('message')}")


def probe_job(job: Any, world_size: int, gpus: int) -> Any:
    """The job's reference alone at `world_size`: on GPUs when enough are visible, else CPU/gloo."""
    on_gpu = job.device == "cuda" and gpus >= world_size
    return dataclasses.replace(
        job,
        job_dir=f"{job.job_dir}-refprobe-ws{world_size}",
        world_size=world_size,
        device="cuda" if on_gpu else "cpu",
        backend=job.backend if on_gpu else "gloo",
        reference_only=True,
        trials=1,
        iters=0,
        profile=False,
        rank_wrapper=[],
        visible_devices="" if not on_gpu else job.visible_devices,
        timeout_s=min(job.timeout_s, PROBE_TIMEOUT_S),
    )


def probe_min_world_size(job: Any, evaluation: dict[str, Any], launch: Callable[[Any], Any], gpus: int = 0) -> dict[str, Any]:
    """Launch the reference alone at each world size of PROBE_WORLD_SIZES above the failed one;
    rewrite the evaluation's reason when one runs. Returns what was probed (also in details)."""
    details = evaluation.setdefault("details", {})
    check = details["reference_check"]
    failed_ws = int(check["world_size"])
    probes: list[dict[str, Any]] = []
    found = None
    for ws in (w for w in PROBE_WORLD_SIZES if w > failed_ws):
        pj = probe_job(job, ws, gpus)
        result = launch(pj)
        ran = bool(result.ranks) and all(r.finished and (r.result or {}).get("reference_ran") for r in result.ranks)
        entry: dict[str, Any] = {"world_size": ws, "device": pj.device, "backend": pj.backend, "ran": ran}
        if not ran:
            err = next(((r.result or {}).get("error") for r in result.ranks if (r.result or {}).get("error")), None)
            entry["error"] = f"{err.get('type')}: {str(err.get('message'))[:300]}" if err else ("timed out" if result.timed_out else "no report")
        probes.append(entry)
        if ran:
            found = ws
            break
    details["reference_probes"] = probes
    where = check.get("where") or {}
    at = f" at {where['file']}:{where['line']} ({where.get('code', '')})" if where.get("file") else ""
    failure = f"{check.get('type')}: {check.get('message')}{at}"
    pid = (job.problem or {}).get("id")
    if found is not None:
        details["min_world_size"] = found
        evaluation["reason"] = (
            f"problem {pid} needs world size >= {found}: its reference fails at world size {failed_ws} "
            f"({failure}) and runs at world size {found} (reference alone, {probes[-1]['device']})"
        )
    else:
        tried = ", ".join(f"{p['world_size']} ({p.get('error', '')})" for p in probes) or "none"
        evaluation["reason"] = f"reference failed at world size {failed_ws} ({failure}); alone at world sizes {tried} it did not run either"
    return {"probes": probes, "min_world_size": found}
