"""Analyzers: pure functions of a Trace (and the static pass's kernel labels).

    names = comm_kernel_names(record)                 # kernels the static pass says move peer data
    gpu   = classify_gpu(trace, names)                # every GPU event: comm | compute | copy | memset
    ev    = assign_calls(trace)                       # events tagged with their candidate call
    calls = per_call(trace, names, sol_bytes)         # one row per "pkb:candidate_call[i]"
    summary = profile_summary(trace, names, sol_bytes)  # -> record.profile["ranks"][r]

A candidate call is its CPU-side "pkb:candidate_call[i]" range. CPU events belong to the call whose
range holds them; GPU work belongs to the call that launched it, found by correlation id, else by
the `ac2g` flow events, else by the call's GPU-side range (gpu_user_annotation), else by the time
window of the GPU work that call launched (or, with no correlation at all, by the time between this
call's start and the next one's).

Communication is: NCCL kernels (`^nccl`), the symmetric-memory library's own kernels (names with
`symmetric_memory`, e.g. its barrier), the candidate's kernels the static pass labelled as moving
peer data (joined on the kernel name), and copy-engine copies (Memcpy PtoP/DtoD; a copy is `peer`
when CUPTI says PtoP or its source and destination devices differ). Everything else that runs on
the SMs is compute. Overlap = the share of communication time during which compute ran on the same
GPU on a different stream (interval intersection).
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from profiling.trace import GPU_CATS, RUNTIME_CATS, Trace

NVLINK4_GBPS = 450.0  # per direction per GPU (H100/H200 NVLink 4, 18 links)

PEER_MECHANISMS = frozenset({"sm_load", "sm_store", "sm_atomic", "tma", "nvls", "nvshmem", "copy_engine"})

NCCL_RE = re.compile(r"^(?:void\s+)?(?:[\w:]*::)?nccl", re.IGNORECASE)
SYMM_RE = re.compile(r"symmetric_memory|symm_mem", re.IGNORECASE)
CE_COPY_KINDS = ("DtoD", "PtoP")

LAUNCH_NAMES = frozenset(
    {
        "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernelMultiDevice",
        "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cudaGraphLaunch", "cuGraphLaunch",
    }
)
SYNC_CALL_NAMES = frozenset(
    {
        "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaThreadSynchronize",
        "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
    }
)
# Copies that return only when done: a host wait of their own.
BLOCKING_COPY_NAMES = frozenset({"cudaMemcpy", "cudaMemcpy2D", "cudaMemcpyPeer", "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyPeer"})
ALLOC_NAMES = frozenset(
    {
        "cudaMalloc", "cudaMallocAsync", "cudaMallocHost", "cudaHostAlloc", "cudaMallocManaged", "cudaMallocPitch",
        "cuMemAlloc", "cuMemAllocAsync", "cuMemAllocHost", "cuMemHostAlloc", "cuMemCreate", "cuMemMap",
        "cuMemAddressReserve", "cuMemAllocManaged",
    }
)
FREE_NAMES = frozenset({"cudaFree", "cudaFreeHost", "cudaFreeAsync", "cuMemFree", "cuMemRelease", "cuMemUnmap"})
SETUP_RE = re.compile(
    r"rendezvous|load_inline|cpp_extension|init_process_group|new_group|torch_compile|Torch-Compiled Region|"
    r"CompiledFunction|dynamo|inductor|nvrtc|cuModuleLoad|cuLibraryLoad|cudaIpcOpenMemHandle|cuMemImportFromShareableHandle",
    re.IGNORECASE,
)


def _api_name(name: str) -> str:
    return re.sub(r"_v\d+$", "", name or "")


# ---- static labels -> kernel names --------------------------------------------------------------


def comm_kernel_names(record: Any) -> list[str]:
    """Names of the kernels the static pass labelled as moving peer data.

    Takes a CandidateRecord, its to_data()/JSON-line dict, or a list of kernel reports.
    """
    kernels = getattr(record, "kernels", None)
    if kernels is None and isinstance(record, dict):
        kernels = record.get("kernels", [])
    if kernels is None:
        kernels = record if isinstance(record, list) else []
    out: list[str] = []
    for k in kernels:
        name = getattr(k, "name", None) if not isinstance(k, dict) else k.get("name")
        labels = getattr(k, "labels", None) if not isinstance(k, dict) else k.get("labels", k)
        mech = (labels or {}).get("mechanism", []) if isinstance(labels, dict) else []
        values = set()
        for lab in mech:
            if isinstance(lab, dict):
                values.add(lab.get("value") or lab.get("label"))
            else:
                values.add(getattr(lab, "value", lab))
        if name and values & PEER_MECHANISMS and name not in out:
            out.append(name)
    return out


def match_names(trace_names: pd.Series, static_names: Iterable[str]) -> pd.Series:
    """True where a trace kernel name is one of static_names (demangled, templated or bare).

    'pkb_gather' matches 'pkb_gather', 'void pkb_gather<float>(float*, int)' and
    'ns::pkb_gather(...)', but not 'pkb_gather2'.
    """
    names = [n for n in static_names if n]
    if not names or trace_names.empty:
        return pd.Series(False, index=trace_names.index)
    alts = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))
    rx = re.compile(rf"(?<![A-Za-z0-9_])(?:{alts})(?![A-Za-z0-9_])")
    return trace_names.astype(str).map(lambda s: bool(rx.search(s)))


# ---- intervals -------------------------------------------------------------------------------------


def union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted((float(s), float(e)) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(u: Sequence[tuple[float, float]]) -> float:
    return float(sum(e - s for s, e in u))


def intersect(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Intersection of two unions (each sorted, disjoint)."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


# ---- classification ----------------------------------------------------------------------------------


def classify_gpu(trace: Trace, comm_names: Iterable[str] = (), *, copies_as_comm: bool = True) -> pd.DataFrame:
    """The GPU events with `kind` (comm | compute | copy | memset), `comm_source`
    (nccl | symm_mem | candidate | copy_engine | ''), `peer` (copies) and `is_comm`."""
    g = trace.gpu.copy()
    g["kind"] = "compute"
    g["comm_source"] = ""
    g["peer"] = False
    if g.empty:
        g["is_comm"] = pd.Series(dtype=bool)
        return g
    is_k = g["cat"] == "kernel"
    names = g["name"].astype(str)
    nccl = is_k & names.map(lambda s: bool(NCCL_RE.search(s)))
    symm = is_k & ~nccl & names.map(lambda s: bool(SYMM_RE.search(s)))
    cand = is_k & ~nccl & ~symm & match_names(names, comm_names)
    g.loc[nccl, "comm_source"] = "nccl"
    g.loc[symm, "comm_source"] = "symm_mem"
    g.loc[cand, "comm_source"] = "candidate"
    g.loc[nccl | symm | cand, "kind"] = "comm"
    mc = g["cat"] == "gpu_memcpy"
    g.loc[mc, "kind"] = "copy"
    diff_dev = g["src_device"].notna() & g["dst_device"].notna() & (g["src_device"] != g["dst_device"])
    g.loc[mc, "peer"] = (g.loc[mc, "copy_kind"] == "PtoP") | diff_dev[mc]
    ce = mc & g["copy_kind"].isin(CE_COPY_KINDS)
    g.loc[ce, "comm_source"] = "copy_engine"
    g.loc[g["cat"] == "gpu_memset", "kind"] = "memset"
    g["is_comm"] = (g["kind"] == "comm") | (ce if copies_as_comm else False)
    return g


# ---- calls -------------------------------------------------------------------------------------------


def candidate_calls(trace: Trace) -> pd.DataFrame:
    """The CPU-side "pkb:candidate_call[i]" ranges (GPU-side ones where the CPU ones are missing)."""
    r = trace.ranges
    sel = r[(r["phase"] == "candidate_call") & (r["side"] == "cpu")]
    if sel.empty:
        sel = r[(r["phase"] == "candidate_call") & (r["side"] == "gpu")]
        sel = sel.groupby("index", as_index=False).agg(ts=("ts", "min"), end=("end", "max"), name=("name", "first"))
        sel["side"] = "gpu"
    sel = sel.sort_values("ts").drop_duplicates("index", keep="first")
    out = sel[["index", "name", "ts", "end"]].copy()
    out["index"] = out["index"].astype(int)
    out["dur"] = out["end"] - out["ts"]
    return out.reset_index(drop=True)


def _in_windows(ts: np.ndarray, starts: np.ndarray, ends: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """label of the window (sorted, disjoint) holding each ts, or NaN."""
    out = np.full(len(ts), np.nan)
    if len(starts) == 0 or len(ts) == 0:
        return out
    idx = np.searchsorted(starts, ts, side="right") - 1
    ok = (idx >= 0) & (ts <= ends[np.clip(idx, 0, None)])
    out[ok] = labels[idx[ok]]
    return out


def assign_calls(trace: Trace) -> pd.DataFrame:
    """trace.events with `call` (the candidate call index, NaN outside calls) and `call_via`."""
    ev = trace.events.copy()
    ev["call"] = np.nan
    ev["call_via"] = ""
    calls = candidate_calls(trace)
    if calls.empty or ev.empty:
        return ev
    starts, ends, labels = calls["ts"].to_numpy(float), calls["end"].to_numpy(float), calls["index"].to_numpy(float)
    gpu_side = ev["cat"].isin(GPU_CATS + ("cuda_sync", "gpu_user_annotation"))
    cpu = ~gpu_side
    ev.loc[cpu, "call"] = _in_windows(ev.loc[cpu, "ts"].to_numpy(float), starts, ends, labels)
    ev.loc[cpu & ev["call"].notna(), "call_via"] = "range"

    # 1. correlation id of the launching API call
    rt = ev[ev["cat"].isin(RUNTIME_CATS) & ev["call"].notna() & ev["correlation"].notna()]
    corr_map = dict(zip(rt["correlation"], rt["call"]))
    g = gpu_side & ev["correlation"].notna() & (ev["cat"] != "gpu_user_annotation")
    mapped = ev.loc[g, "correlation"].map(corr_map)
    ev.loc[mapped.index, "call"] = mapped
    ev.loc[mapped.dropna().index, "call_via"] = "correlation"

    # 2. ac2g flows: start at the launch (cpu), finish at the GPU event
    fl = trace.flows
    todo = gpu_side & ev["call"].isna() & (ev["cat"] != "gpu_user_annotation")
    if todo.any() and not fl.empty:
        s = fl[fl["ph"] == "s"]
        f = fl[fl["ph"].isin(("f", "t"))]
        s_call = dict(zip(s["id"], _in_windows(s["ts"].to_numpy(float), starts, ends, labels)))
        at = {(str(p), str(t), round(float(ts), 3)): s_call.get(i) for i, p, t, ts in zip(f["id"], f["pid"], f["tid"], f["ts"])}
        for idx in ev.index[todo]:
            c = at.get((str(ev.at[idx, "pid"]), str(ev.at[idx, "tid"]), round(float(ev.at[idx, "ts"]), 3)))
            if c is not None and not (isinstance(c, float) and math.isnan(c)):
                ev.at[idx, "call"] = c
                ev.at[idx, "call_via"] = "flow"

    # 3. the call's GPU-side range
    todo = gpu_side & ev["call"].isna() & (ev["cat"] != "gpu_user_annotation")
    gr = trace.ranges[(trace.ranges["phase"] == "candidate_call") & (trace.ranges["side"] == "gpu")]
    if todo.any() and not gr.empty:
        gr = gr.sort_values("ts")
        for idx in ev.index[todo]:
            t = ev.at[idx, "ts"]
            hit = gr[(gr["ts"] <= t) & (gr["end"] >= t)]
            if not hit.empty:
                ev.at[idx, "call"] = float(hit["index"].iloc[0])
                ev.at[idx, "call_via"] = "gpu_range"

    # 4. time windows: of the GPU work each call launched, else from its start to the next call's
    todo = gpu_side & ev["call"].isna() & (ev["cat"] != "gpu_user_annotation")
    if todo.any():
        have = ev[gpu_side & ev["call"].notna() & (ev["cat"] != "gpu_user_annotation")]
        win = have.groupby("call").agg(ts=("ts", "min"), end=("end", "max"))
        ws, we, wl = [], [], []
        for k, row in enumerate(calls.itertuples(index=False)):
            if float(row.index) in win.index:
                ws.append(win.at[float(row.index), "ts"])
                we.append(win.at[float(row.index), "end"])
            else:
                nxt = calls["ts"].iloc[k + 1] if k + 1 < len(calls) else math.inf
                ws.append(row.ts)
                we.append(nxt)
            wl.append(float(row.index))
        order = np.argsort(ws)
        ws_a, we_a, wl_a = np.array(ws)[order], np.array(we)[order], np.array(wl)[order]
        got = _in_windows(ev.loc[todo, "ts"].to_numpy(float), ws_a, we_a, wl_a)
        ev.loc[todo, "call"] = got
        ev.loc[todo & ev["call"].notna() & (ev["call_via"] == ""), "call_via"] = "window"
    # gpu-side ranges of a call are the call's own
    gra = ev["cat"] == "gpu_user_annotation"
    if gra.any():
        idxs = ev.loc[gra, "name"].map(lambda n: _range_index(n))
        ev.loc[gra, "call"] = idxs
        ev.loc[gra & ev["call"].notna(), "call_via"] = "range"
    return ev


def _range_index(name: str) -> float:
    from profiling.ranges import parse_name

    p = parse_name(name)
    return float(p[1]) if p and p[0] == "candidate_call" and p[1] is not None else np.nan


# ---- per-call figures ------------------------------------------------------------------------------


def overlap_share(gpu: pd.DataFrame) -> tuple[float | None, float, float]:
    """(share, comm_us, overlapped_us) of classified GPU events (classify_gpu rows) of one call.

    share = |union over comm events e of (e ∩ compute on the same device, other streams)| / |union of comm|.
    None when there is no communication.
    """
    comm_total = 0.0
    over_total = 0.0
    if gpu.empty:
        return None, 0.0, 0.0
    for _dev, d in gpu.groupby(gpu["device"].fillna(-1)):
        comm = d[d["is_comm"]]
        comp = d[d["kind"] == "compute"]
        comm_u = union(zip(comm["ts"], comm["end"]))
        comm_total += length(comm_u)
        if comm.empty or comp.empty:
            continue
        pieces: list[tuple[float, float]] = []
        comp_by_stream = {s: list(zip(x["ts"], x["end"])) for s, x in comp.groupby(comp["stream"].fillna(-1))}
        for s, ce in comm.groupby(comm["stream"].fillna(-1)):
            other = union(iv for st, ivs in comp_by_stream.items() if st != s for iv in ivs)
            pieces += intersect(union(zip(ce["ts"], ce["end"])), other)
        over_total += length(union(pieces))
    if comm_total <= 0:
        return None, 0.0, 0.0
    return over_total / comm_total, comm_total, over_total


def _gaps(u: list[tuple[float, float]], threshold: float) -> list[float]:
    return [b[0] - a[1] for a, b in zip(u, u[1:]) if b[0] - a[1] >= threshold]


def _nested_in(rows: pd.DataFrame, outer: pd.DataFrame) -> pd.Series:
    """True for rows (driver calls) that lie inside an outer (runtime) call on the same thread."""
    if rows.empty or outer.empty:
        return pd.Series(False, index=rows.index)
    res = []
    for r in rows.itertuples():
        o = outer[(outer["tid"].astype(str) == str(r.tid)) & (outer["ts"] <= r.ts) & (outer["end"] >= r.end)]
        res.append(not o.empty)
    return pd.Series(res, index=rows.index)


def _clean(v: Any) -> Any:
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return None if math.isnan(f) or math.isinf(f) else f
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def call_figures(
    ev: pd.DataFrame,
    gpu: pd.DataFrame,
    *,
    sol_bytes: float | None = None,
    link_GBps: float = NVLINK4_GBPS,
    gap_threshold_us: float = 1.0,
) -> dict[str, Any]:
    """The figures of one call: `ev` its events (assign_calls rows), `gpu` its classified GPU rows."""
    cpu = ev[~ev["cat"].isin(GPU_CATS + ("cuda_sync", "gpu_user_annotation"))]
    api = cpu[cpu["cat"].isin(RUNTIME_CATS)].copy()
    api["api"] = api["name"].map(_api_name)
    runtime, driver = api[api["cat"] == "cuda_runtime"], api[api["cat"] == "cuda_driver"]
    # Driver calls made from inside a runtime call are the same work counted twice.
    driver_own = driver[~_nested_in(driver, runtime)] if not driver.empty else driver
    own = pd.concat([runtime, driver_own])
    launches = own[own["api"].isin(LAUNCH_NAMES)]
    sync_calls = own[own["api"].isin(SYNC_CALL_NAMES)]
    blocking = own[own["api"].isin(BLOCKING_COPY_NAMES)]
    allocs = own[own["api"].isin(ALLOC_NAMES)]
    frees = own[own["api"].isin(FREE_NAMES)]
    setup = cpu[cpu["name"].astype(str).map(lambda s: bool(SETUP_RE.search(s)))]
    cuda_sync = ev[ev["cat"] == "cuda_sync"]

    work = gpu[gpu["cat"].isin(GPU_CATS)]
    busy_u = union(zip(work["ts"], work["end"]))
    span = (max(e for _, e in busy_u) - min(s for s, _ in busy_u)) if busy_u else 0.0
    busy = length(busy_u)
    gaps = _gaps(busy_u, gap_threshold_us)
    share, comm_us, over_us = overlap_share(work)
    copies = work[work["kind"] == "copy"]
    ce = copies[copies["copy_kind"].isin(CE_COPY_KINDS)]
    comp = work[work["kind"] == "compute"]
    by_source = {}
    for src, x in work[work["is_comm"]].groupby("comm_source"):
        by_source[src or "other"] = length(union(zip(x["ts"], x["end"])))
    achieved = (sol_bytes / span / 1e3) if (sol_bytes and span > 0) else None  # bytes/us -> GB/s
    out = {
        "cpu_us": None,  # per_call fills it from the call's range
        "gpu_span_us": span,
        "gpu_busy_us": busy,
        "comm_us": comm_us,
        "comm_by_source_us": by_source,
        "compute_us": length(union(zip(comp["ts"], comp["end"]))),
        "overlapped_us": over_us,
        "overlap_share": share,
        "copy_us": length(union(zip(copies["ts"], copies["end"]))),
        "copies": int(len(copies)),
        "copy_bytes": float(copies["bytes"].fillna(0).sum()),
        "ce_bytes": float(ce["bytes"].fillna(0).sum()),
        "peer_copy_bytes": float(copies.loc[copies["peer"].astype(bool), "bytes"].fillna(0).sum()),
        "kernels": int((work["cat"] == "kernel").sum()),
        "comm_kernels": int(((work["cat"] == "kernel") & work["is_comm"]).sum()),
        "launches": int(len(launches)),
        "host_syncs": int(len(sync_calls) + len(blocking)),
        "sync_calls": {k: int(v) for k, v in sync_calls["api"].value_counts().items()},
        "blocking_copies": int(len(blocking)),
        "cuda_sync_events": int(len(cuda_sync)),
        "cuda_sync_us": float(cuda_sync["dur"].sum()) if not cuda_sync.empty else 0.0,
        "dtoh_copies": int((copies["copy_kind"] == "DtoH").sum()),
        "allocations": int(len(allocs)),
        "frees": int(len(frees)),
        "setup_markers": sorted(set(setup["name"].astype(str)))[:10],
        "idle_us": max(0.0, span - busy),
        "max_gap_us": max(gaps) if gaps else 0.0,
        "n_gaps": len(gaps),
        "achieved_GBps": achieved,
        "link_share": (achieved / link_GBps) if (achieved is not None and link_GBps) else None,
    }
    return out


def per_call(
    trace: Trace,
    comm_names: Iterable[str] = (),
    sol_bytes: float | None = None,
    *,
    link_GBps: float = NVLINK4_GBPS,
    copies_as_comm: bool = True,
) -> pd.DataFrame:
    """One row per candidate call (see call_figures for the columns)."""
    comm_names = list(comm_names)
    ev = assign_calls(trace)
    gpu = classify_gpu(trace, comm_names, copies_as_comm=copies_as_comm)
    gpu["call"] = ev.loc[gpu.index, "call"]
    calls = candidate_calls(trace)
    rows = []
    for c in calls.itertuples(index=False):
        e = ev[ev["call"] == float(c.index)]
        g = gpu[gpu["call"] == float(c.index)]
        fig = call_figures(e, g, sol_bytes=sol_bytes, link_GBps=link_GBps)
        fig["cpu_us"] = float(c.dur)
        rows.append({"call": int(c.index), **fig})
    return pd.DataFrame(rows)


def kernel_table(trace: Trace, comm_names: Iterable[str] = (), top: int = 20) -> pd.DataFrame:
    gpu = classify_gpu(trace, comm_names)
    if gpu.empty:
        return pd.DataFrame(columns=["name", "kind", "comm_source", "count", "total_us"])
    t = (
        gpu.groupby(["name", "kind", "comm_source"], as_index=False)
        .agg(count=("dur", "size"), total_us=("dur", "sum"))
        .sort_values("total_us", ascending=False)
        .head(top)
    )
    return t.reset_index(drop=True)


_MEDIAN_KEYS = (
    "cpu_us", "gpu_span_us", "gpu_busy_us", "comm_us", "compute_us", "overlap_share", "copy_bytes", "ce_bytes",
    "peer_copy_bytes", "launches", "host_syncs", "cuda_sync_events", "dtoh_copies", "allocations", "idle_us",
    "max_gap_us", "achieved_GBps", "link_share",
)


def profile_summary(
    trace: Trace,
    comm_kernel_names: Iterable[str] = (),
    sol_bytes: float | None = None,
    *,
    link_GBps: float = NVLINK4_GBPS,
) -> dict[str, Any]:
    """The plain-JSON profile of one rank (what goes into record.profile["ranks"][r])."""
    names = list(comm_kernel_names)
    notes: list[str] = []
    calls = per_call(trace, names, sol_bytes, link_GBps=link_GBps)
    if calls.empty:
        notes.append("no pkb:candidate_call ranges in the trace")
    ev = assign_calls(trace)
    via = ev.loc[ev["cat"].isin(GPU_CATS) & ev["call"].notna(), "call_via"].value_counts().to_dict()
    unassigned = int((ev["cat"].isin(GPU_CATS) & ev["call"].isna()).sum())
    if via.get("window"):
        notes.append(f"{via['window']} GPU events assigned to calls by time window (no correlation)")
    if names:
        gpu = classify_gpu(trace, names)
        seen = set(gpu.loc[gpu["comm_source"] == "candidate", "name"])
        missing = [n for n in names if not any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(n)}(?![A-Za-z0-9_])", s) for s in seen)]
        if missing:
            notes.append("labelled peer kernels not seen in the trace: " + ", ".join(missing[:8]))
    median = {}
    for k in _MEDIAN_KEYS:
        if k in calls.columns:
            vals = pd.to_numeric(calls[k], errors="coerce").dropna()
            median[k] = float(vals.median()) if not vals.empty else None
    return _clean(
        {
            "source": trace.meta.get("source"),
            "path": trace.meta.get("path"),
            "rank": trace.meta.get("rank"),
            "n_calls": int(len(calls)),
            "calls": calls.to_dict(orient="records"),
            "median": median,
            "kernels": kernel_table(trace, names).to_dict(orient="records"),
            "comm_kernel_names": names,
            "sol_bytes": sol_bytes,
            "link_GBps": link_GBps,
            "assignment": {"via": {str(k): int(v) for k, v in via.items()}, "gpu_events_outside_calls": unassigned},
            "notes": notes,
        }
    )
