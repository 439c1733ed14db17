"""A profile read once into pandas frames: Kineto chrome traces, Nsight Systems SQLite, CUPTI JSON lines.

    trace = load_trace("rank0.trace.json.gz")     # Kineto (torch.profiler) export
    trace = load_nsys_sqlite("report.sqlite")      # nsys export --type sqlite
    trace = load_cupti_jsonl("rank0.cupti.jsonl")  # profiling.capture.capture_cupti

All three give the same frames, times in microseconds on the source's own clock:

events  one row per complete event: name, cat, ph, ts, dur, end, pid, tid, stream, device,
        correlation, external_id, bytes, copy_kind, src_device, dst_device, args (dict).
        cat uses Kineto's words: kernel, gpu_memcpy, gpu_memset, cuda_runtime, cuda_driver,
        cuda_sync, cpu_op, user_annotation, gpu_user_annotation, python_function, ...
ranges  the record_function / NVTX ranges: name, side (cpu | gpu), ts, end, dur, pid, tid,
        stream, device, phase, index (phase/index parsed from "pkb:<phase>[<index>]").
flows   Kineto flow events (ph s/f/t), the `ac2g` ones tie a launch to its GPU work: id, ph,
        cat, ts, pid, tid.
meta    source, path, rank, and whatever the source carries (deviceProperties, distributedInfo,
        the "pkb" block capture_kineto writes).

Missing fields are NaN/None, never an exception: a trace from another torch version loads.
"""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from profiling.ranges import parse_name

EVENT_COLUMNS = [
    "name", "cat", "ph", "ts", "dur", "end", "pid", "tid", "stream", "device", "correlation",
    "external_id", "bytes", "copy_kind", "src_device", "dst_device", "args",
]
RANGE_COLUMNS = ["name", "side", "ts", "end", "dur", "pid", "tid", "stream", "device", "phase", "index"]
FLOW_COLUMNS = ["id", "ph", "cat", "ts", "pid", "tid"]

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
RANGE_CATS = ("user_annotation", "gpu_user_annotation")

_MEMCPY_KIND_RE = re.compile(r"Memcpy\s+(\w+)")


@dataclass
class Trace:
    events: pd.DataFrame
    ranges: pd.DataFrame
    flows: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    def of_cat(self, *cats: str) -> pd.DataFrame:
        return self.events[self.events["cat"].isin(cats)]

    @property
    def kernels(self) -> pd.DataFrame:
        return self.of_cat("kernel")

    @property
    def memcpys(self) -> pd.DataFrame:
        return self.of_cat("gpu_memcpy")

    @property
    def gpu(self) -> pd.DataFrame:
        return self.of_cat(*GPU_CATS)

    @property
    def runtime(self) -> pd.DataFrame:
        return self.of_cat(*RUNTIME_CATS)

    @property
    def syncs(self) -> pd.DataFrame:
        return self.of_cat("cuda_sync")

    @property
    def rank(self) -> int | None:
        r = self.meta.get("rank")
        return int(r) if r is not None else None


# ---- helpers ------------------------------------------------------------------------------------


def _num(v: Any) -> float:
    if v is None or isinstance(v, bool):
        return np.nan
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return np.nan


def _first(args: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in args and args[k] is not None:
            return args[k]
    return None


def _frame(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=columns)
    for c in ("ts", "dur", "end", "stream", "device", "correlation", "external_id", "bytes", "src_device", "dst_device", "index"):
        if c in df.columns:
            df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    return df


def _ranges_from_events(events: pd.DataFrame) -> pd.DataFrame:
    rows = []
    sel = events[events["cat"].isin(RANGE_CATS)]
    for r in sel.itertuples(index=False):
        parsed = parse_name(r.name)
        rows.append(
            {
                "name": r.name,
                "side": "gpu" if r.cat == "gpu_user_annotation" else "cpu",
                "ts": r.ts, "end": r.end, "dur": r.dur, "pid": r.pid, "tid": r.tid,
                "stream": r.stream, "device": r.device,
                "phase": parsed[0] if parsed else None,
                "index": parsed[1] if parsed and parsed[1] is not None else np.nan,
            }
        )
    return _frame(rows, RANGE_COLUMNS)


def memcpy_kind(name: str) -> str:
    """'DtoD', 'PtoP', 'DtoH', 'HtoD', ... from a Kineto/nsys memcpy name ('' when not one)."""
    m = _MEMCPY_KIND_RE.search(name or "")
    return m.group(1) if m else ""


# ---- Kineto chrome trace --------------------------------------------------------------------------


def read_text(path: str | Path) -> str:
    """A trace file's text, gunzipped when it is gzip, whatever the suffix says."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8", errors="replace")


def read_json(path: str | Path) -> dict[str, Any]:
    data = json.loads(read_text(path))
    if isinstance(data, list):  # the bare-array form of the chrome trace format
        data = {"traceEvents": data}
    return data


def trace_from_chrome(data: dict[str, Any], *, path: str = "", rank: int | None = None) -> Trace:
    """The frames of an already-loaded chrome trace dict (what load_trace parses)."""
    rows: list[dict[str, Any]] = []
    flows: list[dict[str, Any]] = []
    for ev in data.get("traceEvents", []) or []:
        if not isinstance(ev, dict):
            continue
        ph = ev.get("ph", "")
        cat = str(ev.get("cat", "") or "")
        if ph in ("s", "f", "t"):
            flows.append({"id": ev.get("id"), "ph": ph, "cat": cat, "ts": _num(ev.get("ts")), "pid": ev.get("pid"), "tid": ev.get("tid")})
            continue
        if ph not in ("X", "i", "I"):
            continue  # metadata (M), counters (C), async pairs: not needed here
        args = ev.get("args") or {}
        if not isinstance(args, dict):
            args = {}
        ts = _num(ev.get("ts"))
        dur = _num(ev.get("dur")) if ph == "X" else 0.0
        if np.isnan(dur):
            dur = 0.0
        name = str(ev.get("name", "") or "")
        gpu_side = cat in GPU_CATS or cat in ("gpu_user_annotation", "cuda_sync")
        device = _first(args, "device", "Device")
        stream = _first(args, "stream", "Stream")
        if gpu_side:
            if device is None and isinstance(ev.get("pid"), (int, float)):
                device = ev.get("pid")
            if stream is None and isinstance(ev.get("tid"), (int, float)):
                stream = ev.get("tid")
        kind = memcpy_kind(name) if cat == "gpu_memcpy" else ""
        rows.append(
            {
                "name": name, "cat": cat, "ph": "X" if ph == "X" else "i",
                "ts": ts, "dur": dur, "end": ts + dur,
                "pid": ev.get("pid"), "tid": ev.get("tid"),
                "stream": _num(stream), "device": _num(device),
                "correlation": _num(_first(args, "correlation", "correlationId", "Correlation")),
                "external_id": _num(_first(args, "External id", "external id", "External Id")),
                "bytes": _num(_first(args, "bytes", "Bytes", "size")),
                "copy_kind": kind,
                "src_device": _num(_first(args, "fromDevice", "srcDevice", "src_device", "src device")),
                "dst_device": _num(_first(args, "toDevice", "dstDevice", "dst_device", "dst device")),
                "args": args,
            }
        )
    events = _frame(rows, EVENT_COLUMNS)
    meta: dict[str, Any] = {"source": "kineto", "path": path}
    for key in ("deviceProperties", "distributedInfo", "baseTimeNanoseconds", "traceName", "schemaVersion", "pkb"):
        if key in data:
            meta[key] = data[key]
    if rank is None:
        rank = (data.get("pkb") or {}).get("rank")
        if rank is None:
            rank = (data.get("distributedInfo") or {}).get("rank")
    meta["rank"] = rank
    return Trace(events, _ranges_from_events(events), _frame(flows, FLOW_COLUMNS), meta)


def load_trace(path: str | Path, *, rank: int | None = None) -> Trace:
    """Parse a Kineto chrome trace (.json or .json.gz) once into frames."""
    return trace_from_chrome(read_json(path), path=str(path), rank=rank)


# ---- Nsight Systems SQLite --------------------------------------------------------------------------

# CUPTI enums (cupti_activity.h): memcpy kinds, memory kinds, synchronization types.
COPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH", 10: "PtoP"}
MEMORY_KINDS = {0: "Unknown", 1: "Pageable", 2: "Pinned", 3: "Device", 4: "Array", 5: "Managed", 6: "Device Static", 7: "Managed Static"}
SYNC_TYPES = {0: "Unknown Sync", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
NVTX_RANGE_TYPES = (59, 60, 70, 71)  # push/pop and start/end ranges (and their domain variants)
_API_SUFFIX = re.compile(r"_v\d+$")


def memcpy_name(copy_kind: int, src_kind: int | None, dst_kind: int | None) -> str:
    """Kineto's spelling, e.g. 'Memcpy DtoH (Device -> Pinned)'."""
    k = COPY_KINDS.get(int(copy_kind), "Unknown")
    if src_kind is None or dst_kind is None:
        return f"Memcpy {k}"
    return f"Memcpy {k} ({MEMORY_KINDS.get(int(src_kind), 'Unknown')} -> {MEMORY_KINDS.get(int(dst_kind), 'Unknown')})"


def _table(con: sqlite3.Connection, name: str) -> pd.DataFrame | None:
    found = con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone()
    if not found:
        return None
    return pd.read_sql_query(f'SELECT * FROM "{name}"', con)


def _col(df: pd.DataFrame, *names: str) -> pd.Series:
    for n in names:
        if n in df.columns:
            return df[n]
    return pd.Series([np.nan] * len(df), index=df.index, dtype=float)


def load_nsys_sqlite(path: str | Path, *, rank: int | None = None) -> Trace:
    """Read an `nsys export --type sqlite` file into the same frames (ns -> us)."""
    con = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True)
    try:
        strings: dict[int, str] = {}
        sid = _table(con, "StringIds")
        if sid is not None:
            strings = dict(zip(sid["id"].astype(int), sid["value"].astype(str)))

        def text(v: Any) -> str:
            if v is None or (isinstance(v, float) and np.isnan(v)):
                return ""
            if isinstance(v, str):
                return v
            return strings.get(int(v), str(v))

        rows: list[dict[str, Any]] = []

        def add(df: pd.DataFrame | None, cat: str, names: Iterable[str], extra: Any = None) -> None:
            if df is None or df.empty:
                return
            start = _col(df, "start").astype(float) / 1e3
            end = _col(df, "end").astype(float) / 1e3
            corr = _col(df, "correlationId")
            dev = _col(df, "deviceId")
            stream = _col(df, "streamId")
            pid = _col(df, "globalPid", "processId")
            tid = _col(df, "globalTid", "threadId")
            for i, (nm, s, e) in enumerate(zip(names, start, end)):
                row = {
                    "name": nm, "cat": cat, "ph": "X", "ts": s, "dur": e - s, "end": e,
                    "pid": pid.iloc[i] if cat not in GPU_CATS + ("cuda_sync",) else dev.iloc[i],
                    "tid": tid.iloc[i] if cat not in GPU_CATS + ("cuda_sync",) else stream.iloc[i],
                    "stream": stream.iloc[i], "device": dev.iloc[i], "correlation": corr.iloc[i],
                    "external_id": np.nan, "bytes": np.nan, "copy_kind": "", "src_device": np.nan,
                    "dst_device": np.nan, "args": {},
                }
                if extra is not None:
                    extra(row, df.iloc[i])
                rows.append(row)

        k = _table(con, "CUPTI_ACTIVITY_KIND_KERNEL")
        if k is not None:
            name_col = "demangledName" if "demangledName" in k.columns else ("shortName" if "shortName" in k.columns else "name")
            add(k, "kernel", [text(v) for v in _col(k, name_col)])
        m = _table(con, "CUPTI_ACTIVITY_KIND_MEMCPY")
        if m is not None:
            ck, sk, dk = _col(m, "copyKind"), _col(m, "srcKind"), _col(m, "dstKind")
            names = [
                memcpy_name(int(c) if not pd.isna(c) else 0, None if pd.isna(s) else int(s), None if pd.isna(d) else int(d))
                for c, s, d in zip(ck, sk, dk)
            ]

            def memcpy_extra(row: dict[str, Any], r: pd.Series) -> None:
                row["bytes"] = _num(r.get("bytes"))
                row["copy_kind"] = memcpy_kind(row["name"])
                row["src_device"] = _num(r.get("srcDeviceId"))
                row["dst_device"] = _num(r.get("dstDeviceId"))
                # nsys writes the source device's ids for same-device copies as well; Kineto only
                # gives from/to for peer copies: keep them only where they say something.
                if row["copy_kind"] != "PtoP" and row["src_device"] == row["dst_device"]:
                    row["src_device"] = row["dst_device"] = np.nan

            add(m, "gpu_memcpy", names, memcpy_extra)
        ms = _table(con, "CUPTI_ACTIVITY_KIND_MEMSET")
        if ms is not None:
            add(ms, "gpu_memset", ["Memset (Device)"] * len(ms), lambda row, r: row.update(bytes=_num(r.get("bytes"))))
        sy = _table(con, "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
        if sy is not None:
            add(sy, "cuda_sync", [SYNC_TYPES.get(int(v) if not pd.isna(v) else 0, "Unknown Sync") for v in _col(sy, "syncType")])
        for table, cat in (("CUPTI_ACTIVITY_KIND_RUNTIME", "cuda_runtime"), ("CUPTI_ACTIVITY_KIND_DRIVER", "cuda_driver")):
            rt = _table(con, table)
            if rt is not None:
                add(rt, cat, [_API_SUFFIX.sub("", text(v)) for v in _col(rt, "nameId", "name")])
        nv = _table(con, "NVTX_EVENTS")
        if nv is not None and not nv.empty:
            et = _col(nv, "eventType")
            keep = et.isna() | et.isin(NVTX_RANGE_TYPES)
            nv = nv[keep & _col(nv, "end").notna()]
            txt = _col(nv, "text")
            tid_ = _col(nv, "textId")
            names = [t if isinstance(t, str) and t else text(i) for t, i in zip(txt, tid_)]
            add(nv, "user_annotation", names)
    finally:
        con.close()
    events = _frame(rows, EVENT_COLUMNS)
    events = events.sort_values("ts", kind="stable").reset_index(drop=True)
    meta = {"source": "nsys", "path": str(path), "rank": rank}
    return Trace(events, _ranges_from_events(events), _frame([], FLOW_COLUMNS), meta)


# ---- CUPTI JSON lines (profiling.capture.capture_cupti) --------------------------------------------

_CUPTI_CATS = {
    "KERNEL": "kernel", "CONCURRENT_KERNEL": "kernel", "MEMCPY": "gpu_memcpy", "MEMCPY2": "gpu_memcpy",
    "MEMSET": "gpu_memset", "SYNCHRONIZATION": "cuda_sync", "RUNTIME": "cuda_runtime", "DRIVER": "cuda_driver",
}


def load_cupti_jsonl(path: str | Path, *, rank: int | None = None) -> Trace:
    """Read the JSON lines capture_cupti writes (snake_case CUPTI record fields, times in ns).

    MARKER records (NVTX through NVTX_INJECTION64_PATH) come as start/end pairs with one id; they
    become cpu ranges.
    """
    rows: list[dict[str, Any]] = []
    markers: dict[Any, dict[str, Any]] = {}
    header: dict[str, Any] = {}
    for line in read_text(path).splitlines():
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if r.get("kind") == "pkb_header":
            header = r
            continue
        kind = str(r.get("kind_name") or r.get("kind") or "").upper()
        if kind in ("MARKER", "MARKER_DATA"):
            if kind == "MARKER_DATA":
                continue
            mid = r.get("id")
            m = markers.setdefault(mid, {"name": "", "start": np.nan, "end": np.nan, "tid": None})
            name = r.get("name") or ""
            if name:
                m["name"] = name
            ts = _num(r.get("timestamp"))
            flags = r.get("flags")
            # CUpti_ActivityFlag: MARKER_START = 1 << 1, MARKER_END = 1 << 2 (instantaneous = 1 << 0).
            # Without flags, the pair's first record (the one with the name) is its start.
            if isinstance(flags, int) and flags & 6:
                m["start" if flags & 2 else "end"] = ts
            elif np.isnan(m["start"]):
                m["start"] = ts
            else:
                m["end"] = ts
            if r.get("thread_id") is not None:
                m["tid"] = r.get("thread_id")
            continue
        cat = _CUPTI_CATS.get(kind)
        if cat is None:
            continue
        s, e = _num(r.get("start")) / 1e3, _num(r.get("end")) / 1e3
        if cat == "gpu_memcpy":
            name = memcpy_name(int(r.get("copy_kind") or 0), r.get("src_kind"), r.get("dst_kind"))
        elif cat == "cuda_sync":
            name = SYNC_TYPES.get(int(r.get("type") or r.get("sync_type") or 0), "Unknown Sync")
        elif cat in RUNTIME_CATS:
            name = _API_SUFFIX.sub("", str(r.get("name") or r.get("cbid_name") or r.get("cbid") or ""))
        elif cat == "gpu_memset":
            name = "Memset (Device)"
        else:
            name = str(r.get("name") or "")
        gpu_side = cat in GPU_CATS or cat == "cuda_sync"
        rows.append(
            {
                "name": name, "cat": cat, "ph": "X", "ts": s, "dur": e - s, "end": e,
                "pid": r.get("device_id") if gpu_side else r.get("process_id"),
                "tid": r.get("stream_id") if gpu_side else r.get("thread_id"),
                "stream": _num(r.get("stream_id")), "device": _num(r.get("device_id")),
                "correlation": _num(r.get("correlation_id")), "external_id": np.nan,
                "bytes": _num(r.get("bytes")), "copy_kind": memcpy_kind(name) if cat == "gpu_memcpy" else "",
                "src_device": _num(r.get("src_device_id")), "dst_device": _num(r.get("dst_device_id")),
                "args": {k: r[k] for k in ("channel_type", "channel_id", "copy_kind") if k in r},
            }
        )
    for m in markers.values():
        if not np.isnan(m["start"]) and not np.isnan(m["end"]):
            s, e = m["start"] / 1e3, m["end"] / 1e3
            rows.append(
                {
                    "name": m["name"], "cat": "user_annotation", "ph": "X", "ts": s, "dur": e - s, "end": e,
                    "pid": header.get("pid"), "tid": m["tid"], "stream": np.nan, "device": np.nan,
                    "correlation": np.nan, "external_id": np.nan, "bytes": np.nan, "copy_kind": "",
                    "src_device": np.nan, "dst_device": np.nan, "args": {},
                }
            )
    events = _frame(rows, EVENT_COLUMNS).sort_values("ts", kind="stable").reset_index(drop=True)
    if rank is None:
        rank = header.get("rank")
    meta = {"source": "cupti", "path": str(path), "rank": rank, **{k: v for k, v in header.items() if k != "kind"}}
    return Trace(events, _ranges_from_events(events), _frame([], FLOW_COLUMNS), meta)
