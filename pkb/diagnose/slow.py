"""Causes of slowness (TAXONOMY's words), each only where static or measured evidence supports it.

Static evidence is a rule finding (PKB008-PKB012, PKB016) or a label with its own evidence;
measured evidence is a figure of record.profile (per-call medians of each rank's profile summary:
host syncs, launches, overlap share, achieved bytes per second against the link). A cause is
ranked by the time it costs per call where the profile measures it; otherwise its cost is
'unmeasured' and it sorts after the measured ones.

    diagnose_slow(record, has_compute=None) -> [{"cause", "cost_us", "cost", "evidence": [...]}]
"""

from __future__ import annotations

from typing import Any

from pkb.taxonomy import SLOWNESS_CAUSES

# Static findings -> the cause they evidence.
RULE_CAUSE = {
    "PKB008": "host_sync_in_hot_path",
    "PKB009": "setup_in_hot_path",
    "PKB010": "setup_in_hot_path",
    "PKB011": "setup_in_hot_path",
    "PKB012": "nccl_fallback",
    "PKB016": "extra_copies",
}
# Thresholds on measured per-call medians.
LAUNCHES_BOUND = 8  # at least this many launches per call...
LAUNCH_BOUND_IDLE_SHARE = 0.3  # ...with the GPU idle this share of the call's GPU span
SMALL_TRANSFER_BYTES = 64 * 1024  # mean bytes per copy under this is small
SMALL_TRANSFER_COPIES = 8
LOW_LINK_SHARE = 0.3  # achieved bytes/s under this share of the link's speed of light
SERIALIZED_OVERLAP = 0.1
LOW_OCCUPANCY = 0.25


def _finding_evidence(f: Any) -> dict[str, Any]:
    return {"kind": "finding", "rule": f.rule, "name": f.name, "file": f.file, "line": f.line, "snippet": f.snippet,
            "text": f"{f.rule} {f.name} at {f.file}:{f.line}: {f.message}"}


def _label_evidence(axis: str, value: str, ev: Any) -> dict[str, Any]:
    return {"kind": "label", "axis": axis, "label": value, "file": ev.file, "line": ev.line, "snippet": ev.snippet, "pass": ev.pass_name,
            "text": f"{axis} label {value} at {ev.file}:{ev.line} ({ev.pass_name} pass): {ev.snippet}"}


def _profile_evidence(rank: Any, key: str, value: Any, text: str) -> dict[str, Any]:
    return {"kind": "profile", "rank": rank, "key": f"median.{key}", "value": value, "text": f"rank {rank}: {text}"}


def rank_medians(profile: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """(rank, per-call medians) of each profiled rank."""
    out = []
    for i, summary in enumerate((profile or {}).get("ranks") or []):
        med = summary.get("median") or {}
        if summary.get("n_calls"):
            out.append((summary.get("rank", i), med))
    return out


def _worst(meds: list[tuple[Any, dict[str, Any]]], key: str, low: bool = False) -> tuple[Any, float] | None:
    vals = [(r, m[key]) for r, m in meds if isinstance(m.get(key), (int, float))]
    if not vals:
        return None
    return min(vals, key=lambda x: x[1]) if low else max(vals, key=lambda x: x[1])


def diagnose_slow(record: Any, has_compute: bool | None = None) -> list[dict[str, Any]]:
    causes: dict[str, dict[str, Any]] = {}

    def add(cause: str, evidence: dict[str, Any], cost_us: float | None = None) -> None:
        assert cause in SLOWNESS_CAUSES, cause
        c = causes.setdefault(cause, {"cause": cause, "cost_us": None, "evidence": []})
        c["evidence"].append(evidence)
        if cost_us is not None:
            c["cost_us"] = max(c["cost_us"] or 0.0, float(cost_us))

    # ---- static evidence ----
    for f in record.findings:
        if f.rule in RULE_CAUSE:
            add(RULE_CAUSE[f.rule], _finding_evidence(f))
    for lab in record.labels.get("mechanism", []):
        if lab.value == "nccl" and lab.evidence:
            add("nccl_fallback", _label_evidence("mechanism", "nccl", lab.evidence[0]))
        if lab.value == "host_staging" and lab.evidence:
            add("extra_copies", _label_evidence("mechanism", "host_staging", lab.evidence[0]))
    if has_compute:
        overlap = record.labels.get("overlap", [])
        if [lab.value for lab in overlap] == ["none"] and overlap[0].evidence:
            add("serialized", _label_evidence("overlap", "none", overlap[0].evidence[0]))

    # ---- measured evidence ----
    meds = rank_medians(record.profile)
    w = _worst(meds, "host_syncs")
    if w and w[1] >= 1:
        wait = _worst(meds, "cuda_sync_us")
        add("host_sync_in_hot_path", _profile_evidence(w[0], "host_syncs", w[1], f"{w[1]:g} host syncs per call (median)"),
            wait[1] if wait and wait[1] > 0 else None)
    w = _worst(meds, "allocations")
    if w and w[1] >= 1:
        add("setup_in_hot_path", _profile_evidence(w[0], "allocations", w[1], f"{w[1]:g} device allocations per call (median)"))
    for r, summary in enumerate((record.profile or {}).get("ranks") or []):
        calls = summary.get("calls") or []
        nccl = [c.get("comm_by_source_us", {}).get("nccl") for c in calls if isinstance(c.get("comm_by_source_us"), dict)]
        nccl = sorted(v for v in nccl if isinstance(v, (int, float)) and v > 0)
        if nccl:
            med = nccl[len(nccl) // 2]
            add("nccl_fallback", _profile_evidence(summary.get("rank", r), "comm_by_source_us.nccl", med, f"NCCL kernels run {med:.3g} us per call (median)"), med)
        markers = sorted({m for c in calls for m in (c.get("setup_markers") or [])})
        if markers:
            add("setup_in_hot_path", {"kind": "profile", "rank": summary.get("rank", r), "key": "calls[].setup_markers", "value": markers[:5],
                                      "text": f"rank {summary.get('rank', r)}: set-up work inside the timed call: {', '.join(markers[:5])}"})
    if has_compute:
        w = _worst(meds, "overlap_share", low=True)
        comm, comp = _worst(meds, "comm_us"), _worst(meds, "compute_us")
        if w and w[1] is not None and w[1] < SERIALIZED_OVERLAP and comm and comp and comm[1] > 0 and comp[1] > 0:
            hidden = min(comm[1], comp[1])  # what perfect overlap could hide
            add("serialized", _profile_evidence(w[0], "overlap_share", w[1], f"only {w[1]:.0%} of communication time overlaps compute ({comm[1]:.3g} us comm, {comp[1]:.3g} us compute per call)"),
                hidden * (1 - w[1]))
    w = _worst(meds, "launches")
    if w and w[1] >= LAUNCHES_BOUND:
        med = dict(meds)[w[0]]
        span, idle = med.get("gpu_span_us"), med.get("idle_us")
        if isinstance(span, (int, float)) and span > 0 and isinstance(idle, (int, float)) and idle / span >= LAUNCH_BOUND_IDLE_SHARE:
            add("launch_bound", _profile_evidence(w[0], "launches", w[1], f"{w[1]:g} launches per call with the GPU idle {idle:.3g} of {span:.3g} us"), idle)
    for r, summary in enumerate((record.profile or {}).get("ranks") or []):
        calls = summary.get("calls") or []
        if not calls:
            continue
        c = calls[len(calls) // 2]
        n, b = c.get("copies") or 0, c.get("copy_bytes") or 0.0
        if n >= SMALL_TRANSFER_COPIES and b / n < SMALL_TRANSFER_BYTES:
            add("small_transfers", _profile_evidence(summary.get("rank", r), "copies", n, f"{n} copies of {b / n / 1024:.3g} KiB on average in call {c.get('call')}"), c.get("copy_us"))
        if (c.get("dtoh_copies") or 0) > 0:
            add("extra_copies", _profile_evidence(summary.get("rank", r), "dtoh_copies", c["dtoh_copies"], f"{c['dtoh_copies']} device-to-host copies in call {c.get('call')}"), c.get("copy_us"))
    w = _worst(meds, "link_share", low=True)
    if w and w[1] is not None and w[1] < LOW_LINK_SHARE:
        med = dict(meds)[w[0]]
        span = med.get("gpu_span_us")
        gbps = med.get("achieved_GBps")
        add("low_link_utilization", _profile_evidence(w[0], "link_share", w[1], f"achieved {gbps:.3g} GB/s, {w[1]:.0%} of the link's speed of light"),
            span * (1 - w[1]) if isinstance(span, (int, float)) else None)
    ncu = (record.profile or {}).get("ncu") or {}
    # Nsight Compute rows, where captured: pkb.eval.ncu stores {"status", "kernels": [row, ...]}
    for item in (ncu.get("kernels") or []) if isinstance(ncu, dict) else ncu:
        occ = item.get("achieved_occupancy") if isinstance(item, dict) else None
        if isinstance(occ, (int, float)) and occ < LOW_OCCUPANCY:
            dur_ns = item.get("duration_ns")
            add("low_occupancy", {"kind": "profile", "key": "ncu.achieved_occupancy", "value": occ, "kernel": item.get("kernel"),
                                  "text": f"kernel {item.get('kernel')}: achieved occupancy {occ:.0%} (ncu)"},
                item.get("duration_us") or (dur_ns / 1000 if isinstance(dur_ns, (int, float)) else None))

    out = list(causes.values())
    for c in out:
        c["cost"] = f"{c['cost_us']:.3g} us per call" if c["cost_us"] is not None else "unmeasured"
        c["measured"] = any(e["kind"] == "profile" for e in c["evidence"])
    out.sort(key=lambda c: (c["cost_us"] is None, -(c["cost_us"] or 0.0), SLOWNESS_CAUSES.index(c["cause"])))
    return out
