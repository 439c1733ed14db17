"""Profiles are findable: the ranks' recorded traces merged for Perfetto, frames as parquet, paths said."""

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd

from pkb.record import CandidateRecord
from profiling.analyze import classify_gpu, per_call
from profiling.hooks import profile_dir, profile_locations, summarize_job
from profiling.trace import load_trace

TRACES = Path(__file__).parent / "fixtures" / "traces"
RANK_FILES = {0: "nccl_collectives.trace.json.gz", 1: "multi_stream.trace.json.gz"}


def _job(tmp_path: Path) -> Path:
    d = profile_dir(tmp_path)
    d.mkdir(parents=True)
    for rank, name in RANK_FILES.items():
        shutil.copy(TRACES / name, d / f"rank{rank}.trace.json.gz")
    return tmp_path


def test_summarize_job_writes_merged_trace_and_frames(tmp_path):
    prof = summarize_job(_job(tmp_path), [])
    assert not prof["errors"], prof["errors"]
    merged = json.loads(gzip.open(prof["merged_trace"]).read())
    procs = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e.get("name") == "process_name"}
    assert procs == {0: "rank 0", 1: "rank 1"}  # one Perfetto process per rank

    calls, kernels = pd.read_parquet(prof["calls_parquet"]), pd.read_parquet(prof["kernels_parquet"])
    for rank, name in RANK_FILES.items():
        trace = load_trace(TRACES / name, rank=rank)
        mine = calls[calls["rank"] == rank]
        assert mine["call"].tolist() == per_call(trace)["call"].tolist()
        assert len(kernels[kernels["rank"] == rank]) == len(classify_gpu(trace))
    assert {"name", "kind", "ts", "dur", "call", "stream"} <= set(kernels.columns)
    # dict-valued figures travel as JSON text (parquet wants one type a column)
    assert calls["gpu_busy_us"].dtype == "float64" and isinstance(json.loads(calls["comm_by_source_us"].iloc[0]), dict)


def test_profile_locations_say_where_and_how(tmp_path):
    rec = CandidateRecord(path="solutions/3_x.py")
    rec.profile = summarize_job(_job(tmp_path), [])
    quiet = CandidateRecord(path="not_profiled.py")
    lines = profile_locations([quiet, rec])
    assert lines[0] == f"solutions/3_x.py: traces in {profile_dir(tmp_path)}"
    assert rec.profile["merged_trace"] in lines[1] and "ui.perfetto.dev" in lines[1]
    assert rec.profile["kernels_parquet"] in lines[2]
    assert not any("not_profiled" in line for line in lines)


def test_kernel_page_says_how_to_open_the_merged_trace(tmp_path):
    from reports.kernel_page import timeline_img

    rec = CandidateRecord(path="a.py")
    rec.profile = {"ranks": [], "merged_trace": str(tmp_path / "merged.trace.json.gz")}
    html, _ = timeline_img(rec)
    assert "merged.trace.json.gz" in html and "ui.perfetto.dev" in html and "Open trace file" in html
    rec.profile = {}
    assert "perfetto" not in timeline_img(rec)[0]
