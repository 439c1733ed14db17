"""Loading traces: Kineto chrome JSON (.json / .json.gz), Nsight Systems SQLite, CUPTI JSON lines."""

from __future__ import annotations

import gzip
import json
import sqlite3

import numpy as np
import pytest

from profiling import analyze
from profiling.synthetic import KinetoBuilder
from profiling.trace import load_cupti_jsonl, load_nsys_sqlite, load_trace, memcpy_name


def _sample() -> dict:
    b = KinetoBuilder()
    b.cpu_range("pkb:candidate_call[0]", 0, 50)
    b.gpu_range("pkb:candidate_call[0]", 5, 40)
    b.kernel("my_kernel(float*)", 1, 10, 5, stream=7)
    b.memcpy("PtoP", 2, 20, 4, 4096, stream=13, src=0, dst=1)
    b.host_sync("cudaStreamSynchronize", 30, 10)
    return b.to_dict()


def test_json_and_gz_load_the_same(tmp_path):
    data = _sample()
    p1, p2 = tmp_path / "t.json", tmp_path / "t.json.gz"
    p1.write_text(json.dumps(data))
    p2.write_bytes(gzip.compress(json.dumps(data).encode()))
    a, b = load_trace(p1), load_trace(p2)
    assert len(a.events) == len(b.events) > 0
    assert a.events.drop(columns=["args"]).equals(b.events.drop(columns=["args"]))


def test_fields(tmp_path):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_sample()))
    t = load_trace(p, rank=3)
    assert t.rank == 3 and t.meta["source"] == "kineto"
    k = t.kernels.iloc[0]
    assert k["stream"] == 7 and k["device"] == 0 and k["end"] == pytest.approx(k["ts"] + 5)
    m = t.memcpys.iloc[0]
    assert m["copy_kind"] == "PtoP" and m["bytes"] == 4096 and m["src_device"] == 0 and m["dst_device"] == 1
    assert m["correlation"] == t.runtime[t.runtime["name"] == "cudaMemcpyAsync"]["correlation"].iloc[0]
    assert len(t.syncs) == 1
    r = t.ranges
    assert set(r["side"]) == {"cpu", "gpu"}
    assert (r["phase"] == "candidate_call").all() and (r["index"] == 0).all()
    assert set(t.flows["ph"]) == {"s", "f"}


def test_robust_to_missing_fields(tmp_path):
    data = [
        {"ph": "X", "name": "no_args_kernel", "cat": "kernel", "ts": "12.5", "pid": 0, "tid": 7},  # bare list, string ts, no dur
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": 20, "dur": 1, "pid": 0, "tid": 7, "args": None},
        {"ph": "i", "name": "marker", "ts": 3, "pid": 1, "tid": 1, "s": "t"},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        {"ph": "C", "name": "counter", "ts": 1, "pid": 0, "args": {"x": 1}},
        "not an event",
    ]
    p = tmp_path / "bare.json"
    p.write_text(json.dumps(data))
    t = load_trace(p)
    assert len(t.events) == 3
    k = t.kernels.iloc[0]
    assert k["ts"] == 12.5 and k["dur"] == 0 and k["stream"] == 7 and np.isnan(k["correlation"])
    assert np.isnan(t.memcpys.iloc[0]["bytes"])
    assert t.ranges.empty and t.flows.empty


def test_gzip_detected_by_content(tmp_path):
    p = tmp_path / "trace.json"  # gzip bytes behind a .json name
    p.write_bytes(gzip.compress(json.dumps(_sample()).encode()))
    assert len(load_trace(p).kernels) == 1


# ---- nsys SQLite -------------------------------------------------------------------------------------

# Column names as in Nsight Systems' SQLite export schema (nsys export --type sqlite).
NSYS_SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT NOT NULL, end INT NOT NULL, deviceId INT NOT NULL,
  contextId INT NOT NULL, streamId INT NOT NULL, correlationId INT, globalPid INT, demangledName INT NOT NULL,
  shortName INT NOT NULL, mangledName INT, gridX INT, gridY INT, gridZ INT, blockX INT, blockY INT, blockZ INT,
  registersPerThread INT, staticSharedMemory INT, dynamicSharedMemory INT);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT NOT NULL, end INT NOT NULL, deviceId INT NOT NULL,
  contextId INT NOT NULL, streamId INT NOT NULL, correlationId INT, globalPid INT, bytes INT NOT NULL,
  copyKind INT NOT NULL, deprecatedSrcId INT, srcKind INT, dstKind INT, srcDeviceId INT, srcContextId INT,
  dstDeviceId INT, dstContextId INT, migrationCause INT, graphNodeId INT, virtualAddress INT);
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INT NOT NULL, end INT NOT NULL, deviceId INT NOT NULL,
  contextId INT NOT NULL, streamId INT NOT NULL, correlationId INT, globalPid INT, syncType INT NOT NULL, eventId INT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT NOT NULL, end INT NOT NULL, eventClass INT NOT NULL,
  globalTid INT, correlationId INT, nameId INT NOT NULL, returnValue INT NOT NULL, callchainId INT);
CREATE TABLE NVTX_EVENTS (start INT NOT NULL, end INT, eventType INT NOT NULL, rangeId INT, category INT,
  color INT, text TEXT, globalTid INT, endGlobalTid INT, textId INT, domainId INT, uint64Value INT,
  int64Value INT, doubleValue REAL, uint32Value INT, int32Value INT, floatValue REAL, jsonTextId INT, jsonText TEXT);
"""


@pytest.fixture()
def nsys_db(tmp_path):
    p = tmp_path / "report.sqlite"
    con = sqlite3.connect(p)
    con.executescript(NSYS_SCHEMA)
    strings = {1: "void pkb_push<float>(float**, int)", 2: "pkb_push", 3: "cudaLaunchKernel_v7000",
               4: "cudaMemcpyAsync_v3020", 5: "cudaStreamSynchronize_v3020", 6: "pkb:candidate_call[1]", 7: "ncclDevKernel_AllGather_RING_LL(x)"}
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings.items())
    tid, pid = 281474976710657, 281474976710656
    us = 1000  # ns per us
    # NVTX push/pop range (eventType 59) with its text in StringIds (textId), and a mark (34) to ignore
    con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId) VALUES (?,?,?,?,?,?)", (0, 100 * us, 59, None, tid, 6))
    con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) VALUES (?,?,?,?,?)", (5 * us, None, 34, "mark", tid))
    rt = [(1 * us, 3 * us, 3, 11), (4 * us, 5 * us, 3, 12), (6 * us, 7 * us, 4, 13), (8 * us, 40 * us, 5, 14)]
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,0,?,?,?,0,0)", [(s, e, tid, c, n) for s, e, n, c in rt])
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start,end,deviceId,contextId,streamId,correlationId,globalPid,demangledName,shortName) VALUES (?,?,?,?,?,?,?,?,?)", (10 * us, 30 * us, 0, 1, 7, 11, pid, 1, 2))
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start,end,deviceId,contextId,streamId,correlationId,globalPid,demangledName,shortName) VALUES (?,?,?,?,?,?,?,?,?)", (12 * us, 20 * us, 0, 1, 9, 12, pid, 7, 7))
    # copyKind 2 = DtoH, srcKind 3 = device, dstKind 2 = pinned
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start,end,deviceId,contextId,streamId,correlationId,globalPid,bytes,copyKind,srcKind,dstKind,srcDeviceId,dstDeviceId) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", (31 * us, 32 * us, 0, 1, 7, 13, pid, 4, 2, 3, 2, 0, 0))
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (?,?,?,?,?,?,?,?,?)", (8 * us, 40 * us, 0, 1, 7, 14, pid, 3, 0))
    con.commit()
    con.close()
    return p


def test_nsys_sqlite_frames(nsys_db):
    t = load_nsys_sqlite(nsys_db, rank=0)
    assert t.meta["source"] == "nsys"
    k = t.kernels.sort_values("ts")
    assert k["name"].tolist() == ["void pkb_push<float>(float**, int)", "ncclDevKernel_AllGather_RING_LL(x)"]
    assert k["ts"].iloc[0] == pytest.approx(10.0) and k["dur"].iloc[0] == pytest.approx(20.0)  # ns -> us
    assert k["stream"].tolist() == [7, 9]
    m = t.memcpys.iloc[0]
    assert m["name"] == "Memcpy DtoH (Device -> Pinned)" and m["bytes"] == 4 and m["copy_kind"] == "DtoH"
    assert t.syncs["name"].tolist() == ["Stream Sync"]
    assert sorted(t.runtime["name"]) == ["cudaLaunchKernel", "cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize"]
    assert t.ranges["name"].tolist() == ["pkb:candidate_call[1]"] and t.ranges["index"].tolist() == [1]


def test_nsys_sqlite_through_the_analyzers(nsys_db):
    t = load_nsys_sqlite(nsys_db)
    df = analyze.per_call(t, ["pkb_push"]).set_index("call")
    c = df.loc[1]
    assert c["launches"] == 2 and c["host_syncs"] == 1 and c["dtoh_copies"] == 1
    assert c["comm_kernels"] == 2  # pkb_push by its static label, the NCCL one by name
    assert c["gpu_span_us"] == pytest.approx(22.0)
    assert c["comm_us"] == pytest.approx(20.0)
    assert c["overlap_share"] == pytest.approx(0.0)  # both kernels are communication: no compute to hide under


def test_nsys_missing_tables(tmp_path):
    p = tmp_path / "empty.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.close()
    t = load_nsys_sqlite(p)
    assert t.events.empty and t.ranges.empty


def test_memcpy_name():
    assert memcpy_name(10, 3, 3) == "Memcpy PtoP (Device -> Device)"
    assert memcpy_name(8, None, None) == "Memcpy DtoD"


# ---- CUPTI JSON lines --------------------------------------------------------------------------------


def test_cupti_jsonl(tmp_path):
    lines = [
        {"kind": "pkb_header", "rank": 2, "pid": 77},
        {"kind": 10, "kind_name": "MARKER", "id": 5, "flags": 2, "timestamp": 0, "name": "pkb:candidate_call[0]"},
        {"kind": 10, "kind_name": "MARKER", "id": 5, "flags": 4, "timestamp": 90_000},
        {"kind": 10, "kind_name": "CONCURRENT_KERNEL", "name": "k1", "start": 10_000, "end": 30_000, "device_id": 0, "stream_id": 7, "correlation_id": 3},
        {"kind": 1, "kind_name": "MEMCPY2", "copy_kind": 10, "src_kind": 3, "dst_kind": 3, "bytes": 1 << 20, "start": 30_000, "end": 40_000,
         "device_id": 0, "stream_id": 7, "correlation_id": 4, "src_device_id": 0, "dst_device_id": 1, "channel_type": 2},
        {"kind": 5, "kind_name": "RUNTIME", "name": "cudaLaunchKernel_v7000", "start": 1_000, "end": 2_000, "correlation_id": 3, "thread_id": 9, "process_id": 77},
        {"kind": 5, "kind_name": "RUNTIME", "name": "cudaMemcpyPeerAsync_v4000", "start": 2_500, "end": 3_000, "correlation_id": 4, "thread_id": 9, "process_id": 77},
    ]
    p = tmp_path / "rank2.cupti.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    t = load_cupti_jsonl(p)
    assert t.rank == 2 and t.meta["source"] == "cupti"
    m = t.memcpys.iloc[0]
    assert m["copy_kind"] == "PtoP" and m["args"]["channel_type"] == 2 and m["dst_device"] == 1
    assert t.ranges["name"].tolist() == ["pkb:candidate_call[0]"] and t.ranges["dur"].iloc[0] == pytest.approx(90.0)
    c = analyze.per_call(t).iloc[0]
    assert c["launches"] == 1 and c["peer_copy_bytes"] == 1 << 20 and c["gpu_span_us"] == pytest.approx(30.0)


def test_cupti_markers_without_flags_pair_in_arrival_order(tmp_path):
    """A capture whose marker records lost their flags: the named record of a pair is its start."""
    lines = [
        {"kind": 12, "kind_name": "MARKER", "id": 1, "timestamp": 1_000, "name": "pkb:candidate_call[0]", "thread_id": 4},
        {"kind": 12, "kind_name": "MARKER", "id": 1, "timestamp": 6_000, "name": ""},
        {"kind": 12, "kind_name": "MARKER", "id": 2, "timestamp": 7_000, "name": "pkb:candidate_call[1]"},
        {"kind": 12, "kind_name": "MARKER", "id": 2, "timestamp": 9_000, "name": ""},
    ]
    p = tmp_path / "rank0.cupti.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines))
    r = load_cupti_jsonl(p).ranges
    assert r["name"].tolist() == ["pkb:candidate_call[0]", "pkb:candidate_call[1]"]
    assert r["dur"].tolist() == pytest.approx([5.0, 2.0])


def test_cupti_record_fields_as_cupti_python_spells_them():
    """cupti-python's records: `flags_` for flags, a marker's thread inside object_id.pt."""
    from types import SimpleNamespace

    from profiling.capture import _record_dict

    rec = SimpleNamespace(kind=12, id=3, flags_=2, timestamp=5, name="pkb:trial[0]",
                          object_id=SimpleNamespace(pt=SimpleNamespace(process_id=77, thread_id=9)))
    d = _record_dict(rec, {12: "MARKER"})
    assert d["flags"] == 2 and d["kind_name"] == "MARKER" and d["process_id"] == 77 and d["thread_id"] == 9
