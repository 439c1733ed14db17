"""The ranks' traces of one launch merged into one chrome trace (written beside them by the capture).

    merge_rank_traces({0: "rank0.trace.json.gz", 1: "rank1.trace.json.gz"}, "merged.trace.json.gz")

The merged trace opens in Perfetto (ui.perfetto.dev) or chrome://tracing: each rank is one process
(pid = rank, named "rank N"); its CPU threads and GPU streams become that process's threads, named
after where they came from ("cpu 1234/1235", "gpu 0 stream 7"). Flow ids are offset per rank so
launch arrows stay within their rank. Reads the ranks' Kineto traces (profiling.trace.read_json).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from profiling.capture import write_chrome_trace
from profiling.trace import GPU_CATS, read_json

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
