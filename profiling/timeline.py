"""Pictures of a profile: a merged multi-rank chrome trace, and a PNG timeline of one call.

    merge_rank_traces({0: "rank0.trace.json.gz", 1: "rank1.trace.json.gz"}, "merged.trace.json.gz")
    plot_call(trace, 1, "call1.png", comm_kernel_names)

The merged trace opens in Perfetto (ui.perfetto.dev) or chrome://tracing: each rank is one process
(pid = rank, named "rank N"); its CPU threads and GPU streams become that process's threads, named
after where they came from ("cpu 1234/1235", "gpu 0 stream 7"). Flow ids are offset per rank so
launch arrows stay within their rank.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from profiling.capture import write_chrome_trace
from profiling.trace import GPU_CATS, Trace, read_json

_FLOW_ID_STRIDE = 1 << 40


def merge_rank_traces(traces: Mapping[int, str | Path | dict[str, Any]], out_path: str | Path) -> Path:
    """One chrome trace with every rank's events under pid = rank (gzip when out_path ends .gz)."""
    events: list[dict[str, Any]] = []
    for rank, src in sorted(traces.items()):
        data = src if isinstance(src, dict) else read_json(src)
        evs = [e for e in data.get("traceEvents", []) if isinstance(e, dict)]
        gpu_pids = {e.get("pid") for e in evs if e.get("cat") in GPU_CATS + ("gpu_user_annotation",)}
        tids: dict[tuple[str, str], int] = {}
        names: dict[int, str] = {}

        def lane(pid: Any, tid: Any) -> int:
            key = (str(pid), str(tid))
            if key not in tids:
                tids[key] = len(tids) + 1
                names[tids[key]] = f"gpu {pid} stream {tid}" if pid in gpu_pids else f"cpu {pid}/{tid}"
            return tids[key]

        for e in evs:
            if e.get("ph") == "M":
                continue  # replaced by our own names below
            e2 = dict(e)
            e2["pid"] = int(rank)
            e2["tid"] = lane(e.get("pid"), e.get("tid"))
            if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), (int, float)):
                e2["id"] = int(rank) * _FLOW_ID_STRIDE + int(e["id"])
            events.append(e2)
        events.append({"ph": "M", "name": "process_name", "pid": int(rank), "tid": 0, "args": {"name": f"rank {rank}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": int(rank), "tid": 0, "args": {"sort_index": int(rank)}})
        for t, n in names.items():
            events.append({"ph": "M", "name": "thread_name", "pid": int(rank), "tid": t, "args": {"name": n}})
            # CPU lanes first, then the GPU streams
            events.append({"ph": "M", "name": "thread_sort_index", "pid": int(rank), "tid": t, "args": {"sort_index": (1000 if n.startswith("gpu") else 0) + t}})
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_chrome_trace({"traceEvents": events, "displayTimeUnit": "us", "pkb": {"ranks": sorted(int(r) for r in traces)}}, out)


COLORS = {"comm": "#d62728", "compute": "#1f77b4", "copy": "#2ca02c", "memset": "#7f7f7f", "range": "#9467bd"}


def plot_call(trace: Trace, call: int, out_png: str | Path, comm_kernel_names: Iterable[str] = (), *, title: str | None = None) -> Path:
    """PNG timeline of one candidate call: a lane per (device, stream), comm/compute/copies in three
    colours, the call's ranges on top. Headless (Agg)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from profiling.analyze import assign_calls, candidate_calls, classify_gpu

    ev = assign_calls(trace)
    gpu = classify_gpu(trace, comm_kernel_names)
    gpu["call"] = ev.loc[gpu.index, "call"]
    g = gpu[gpu["call"] == float(call)]
    calls = candidate_calls(trace)
    row = calls[calls["index"] == call]
    t_start = min([*g["ts"].tolist(), *row["ts"].tolist()]) if (len(g) or len(row)) else 0.0
    lanes = sorted({(int(d) if d == d else -1, int(s) if s == s else -1) for d, s in zip(g["device"], g["stream"])})
    fig_h = 1.2 + 0.45 * (len(lanes) + 1)
    fig, ax = plt.subplots(figsize=(11, fig_h))
    y_of = {lane: i for i, lane in enumerate(lanes)}
    for (d, s), sub in g.groupby([g["device"].fillna(-1).astype(int), g["stream"].fillna(-1).astype(int)]):
        y = y_of[(d, s)]
        for kind in ("compute", "comm", "copy", "memset"):
            x = sub[(sub["kind"] == kind) & ~sub["is_comm"]] if kind == "compute" else (sub[sub["is_comm"] & (sub["kind"] == "comm")] if kind == "comm" else sub[sub["kind"] == kind])
            if x.empty:
                continue
            ax.broken_barh(list(zip(x["ts"] - t_start, x["dur"].clip(lower=0.05))), (y - 0.35, 0.7), facecolors=COLORS[kind])
    ry = len(lanes)
    rr = trace.ranges[(trace.ranges["index"] == call) | (trace.ranges["phase"] != "candidate_call")]
    if not row.empty:
        r0 = row.iloc[0]
        rr = rr[(rr["end"] >= r0["ts"]) & (rr["ts"] <= max(r0["end"], g["end"].max() if len(g) else r0["end"]))]
    for r in rr.itertuples(index=False):
        ax.broken_barh([(r.ts - t_start, max(r.dur, 0.05))], (ry - 0.35, 0.7), facecolors=COLORS["range"], alpha=0.5 if r.side == "gpu" else 0.9)
        ax.text(r.ts - t_start, ry, f" {r.name}", va="center", fontsize=7, color="white" if r.side == "cpu" else "black", clip_on=True)
    ax.set_yticks(list(range(len(lanes) + 1)))
    ax.set_yticklabels([f"gpu{d} stream {s}" for d, s in lanes] + ["ranges"])
    ax.set_xlabel("us since the call's first event")
    ax.set_title(title or f"{Path(str(trace.meta.get('path') or 'trace')).name}: candidate call {call}", fontsize=9)
    ax.legend(handles=[Patch(color=COLORS[k], label=k) for k in ("comm", "compute", "copy", "range")], loc="upper right", fontsize=7, ncol=4)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
