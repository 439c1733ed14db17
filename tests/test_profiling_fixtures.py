"""The analyzers against figures read by hand off real H200 traces (profiling/record_fixtures.py).

Skipped until tests/fixtures/traces/ holds the recorded traces and hand_figures.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiling.analyze import per_call
from profiling.trace import load_trace

HERE = Path(__file__).resolve().parent
TRACES = HERE / "fixtures" / "traces"
FIGURES = TRACES / "hand_figures.json"

pytestmark = pytest.mark.skipif(not FIGURES.is_file(), reason="tests/fixtures/traces/ not recorded yet (run profiling/record_fixtures.py on a GPU)")


def _programs() -> list[str]:
    if not FIGURES.is_file():
        return []
    return sorted(json.loads(FIGURES.read_text())["programs"])


@pytest.fixture(scope="module")
def figures() -> dict:
    return json.loads(FIGURES.read_text())["programs"]


@pytest.fixture(scope="module")
def analyzed(figures) -> dict:
    out = {}
    for name, p in figures.items():
        if "trace" in p:
            out[name] = per_call(load_trace(TRACES / p["trace"]), p["comm_kernel_names"], p["sol_bytes"]).set_index("call")
    return out


# Recorded on the H200: all six programs (sm_store_flags on 2026-12-03, after its flags moved into
# the signal pads; hand_figures.json's note says why it came a day later).
RECORDED_ON_GPU = {"ce_allgather", "sm_load", "sm_store_flags", "nccl_collectives", "multi_stream", "host_sync"}


def test_recorded_programs(figures):
    ok = {n for n, p in figures.items() if "trace" in p}
    assert ok >= RECORDED_ON_GPU, {n: p.get("error") for n, p in figures.items()}
    for n, p in figures.items():
        assert "trace" in p or p.get("error"), n  # a program is either recorded or says why not
    for n in ok:
        assert (TRACES / figures[n]["trace"]).stat().st_size < 1 << 20


@pytest.mark.parametrize("name", _programs())
def test_analyzer_matches_hand_figures(name, figures, analyzed):
    p = figures[name]
    if "trace" not in p:
        pytest.skip(f"{name} was not recorded on the GPU: {p.get('error', '')[:120]}")
    df = analyzed[name]
    assert sorted(df.index) == [c["call"] for c in p["calls"]]
    for hand in p["calls"]:
        got = df.loc[hand["call"]]
        assert got["kernels"] == hand["kernels"], (name, hand["call"])
        assert got["launches"] == hand["launches"], (name, hand["call"])
        assert got["host_syncs"] == hand["syncs"], (name, hand["call"])
        assert got["ce_bytes"] == pytest.approx(hand["ce_bytes"], rel=0.01)
        assert got["gpu_span_us"] == pytest.approx(hand["gpu_span_us"], rel=0.03, abs=0.05)
        assert got["comm_us"] == pytest.approx(hand["comm_us"], rel=0.03, abs=0.05)
        if hand["overlap_share"] is None:
            assert got["overlap_share"] is None or got["overlap_share"] != got["overlap_share"]  # None/NaN
        else:
            assert got["overlap_share"] == pytest.approx(hand["overlap_share"], abs=0.03)


def test_what_each_program_should_show(figures, analyzed):
    """Behaviour by construction of the programs (not by reading the analyzer's code)."""
    if "host_sync" in analyzed:
        assert (analyzed["host_sync"]["host_syncs"] >= 3).all()  # two .item() + one synchronize
    if "multi_stream" in analyzed:
        assert (analyzed["multi_stream"]["ce_bytes"] >= 256 << 20).all()
        # Measured, not assumed: on the H200 the side-stream copy overlapped the GEMM in only
        # one of three calls (about 2% of its time); the analyzer must see that one.
        assert analyzed["multi_stream"]["overlap_share"].max() > 0
    if "sm_load" in analyzed:
        assert (analyzed["sm_load"]["comm_kernels"] >= 1).all()
    if "sm_store_flags" in analyzed:
        # one kernel stores into the peers' buffers and signals: communication on the SMs, no copy
        df = analyzed["sm_store_flags"]
        assert (df["comm_kernels"] == 1).all() and (df["ce_bytes"] == 0).all() and (df["host_syncs"] == 0).all()
    if "ce_allgather" in analyzed:
        assert (analyzed["ce_allgather"]["ce_bytes"] >= 2 * (8 << 20) * 4).all()


def test_cupti_capture_of_the_gpu_check_workload():
    """profiling.gpu_check's CUPTI capture on the H200, read back by load_cupti_jsonl. By the
    workload's construction each call launches a bf16 matmul, the float cast and the sum (3
    kernels), copies 64 MiB device to device on a copy engine, and syncs once for `.item()`."""
    from profiling.trace import load_cupti_jsonl

    t = load_cupti_jsonl(TRACES / "gpu_check.cupti.jsonl.gz")
    assert t.meta["nvtx_backend"] == "torch.cuda.nvtx"
    assert t.ranges["name"].tolist() == [f"pkb:candidate_call[{i}]" for i in range(3)]
    df = per_call(t, [], None).set_index("call")
    assert sorted(df.index) == [0, 1, 2]
    assert (df["kernels"] == 3).all() and (df["launches"] == 3).all()
    assert (df["ce_bytes"] == 64 << 20).all()
    assert (df["host_syncs"] == 1).all() and (df["dtoh_copies"] == 1).all()
    # Measured, not assumed: the same-device 64 MiB copy was submitted on the stream's compute
    # channel (1), the 4-byte device-to-host copy of `.item()` on an async-copy channel (2).
    channels = {(r["copy_kind"], int(r["bytes"])): r["args"].get("channel_type") for _, r in t.memcpys.iterrows()}
    assert channels == {("DtoD", 64 << 20): 1, ("DtoH", 4): 2}
    assert len(t.memcpys) == 6
