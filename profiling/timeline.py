"""A picture of a profile: the PNG timeline of one candidate call, drawn from a parsed trace.

    plot_call(trace, 1, "call1.png", comm_kernel_names)

Pure rendering (a profiling.trace.Trace in, a PNG out), so the views draw stored traces with it;
merging the ranks' traces into one is the capture's side (profiling.merge).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from profiling.trace import Trace


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
