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


# Recorded on the H200: five of the six programs. sm_store_flags raised an illegal address there
# (its error is kept in hand_figures.json); it is reported, not hidden, by the test below.
RECORDED_ON_GPU = {"ce_allgather", "sm_load", "nccl_collectives", "multi_stream", "host_sync"}


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
    if "ce_allgather" in analyzed:
        assert (analyzed["ce_allgather"]["ce_bytes"] >= 2 * (8 << 20) * 4).all()
