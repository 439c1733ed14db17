"""Analyzers on synthetic Kineto traces whose figures are worked out by hand in the comments."""

from __future__ import annotations

import json

import pytest

from profiling import analyze
from profiling.synthetic import KinetoBuilder
from profiling.trace import trace_from_chrome

SM_LOAD = "void pkb_sm_load_gather<float>(long const*, float*, int)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
BARRIER = "c10d::symmetric_memory::barrier_kernel(unsigned int**, unsigned long, int, int, unsigned long)"
ELEMWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, float*)"


def build(correlation_args: bool = True, flows: bool = True) -> dict:
    b = KinetoBuilder(correlation_args=correlation_args, flows=flows)
    # Before the calls (warmup left-overs): must not count.
    b.kernel(GEMM, -150, -140, 20)
    # call 0: [0, 100]
    b.cpu_range("pkb:candidate_call[0]", 0, 100)
    b.runtime("cudaMalloc", 3, 1)
    b.kernel(SM_LOAD, 5, 20, 40, stream=7)  # comm (static label), [20, 60] on stream 7
    b.kernel(GEMM, 10, 30, 50, stream=9)  # compute, [30, 80] on stream 9
    b.memcpy("DtoD", 12, 60, 10, 1 << 20, stream=7)  # copy engine, [60, 70] on stream 7
    b.host_sync("cudaStreamSynchronize", 85, 10)
    # comm union [20, 70] = 50 us; compute on another stream over it: [30, 70] = 40 us -> 0.8
    # call 1: [200, 300]
    b.cpu_range("pkb:candidate_call[1]", 200, 100)
    b.cpu_op("c10d::allreduce_", 201, 5)
    b.kernel(NCCL, 202, 210, 30, stream=11)  # [210, 240]
    b.kernel(ELEMWISE, 204, 250, 10, stream=7)  # compute [250, 260]
    b.kernel(BARRIER, 206, 262, 2, stream=7, api="cuLaunchKernel")  # [262, 264]
    b.memcpy("PtoP", 208, 270, 10, 2 << 20, stream=7, src=0, dst=1)  # peer [270, 280]
    b.memcpy("DtoH", 210, 282, 1, 4, stream=7)  # .item(): [282, 283]
    b.host_sync("cudaStreamSynchronize", 212, 75)
    b.runtime("cudaDeviceSynchronize", 290, 5)
    return b.to_dict()


@pytest.fixture(scope="module")
def trace():
    return trace_from_chrome(build(), path="synthetic", rank=0)


def test_calls_found(trace):
    calls = analyze.candidate_calls(trace)
    assert calls["index"].tolist() == [0, 1]
    assert calls["dur"].tolist() == [100, 100]


def test_per_call_figures(trace):
    df = analyze.per_call(trace, ["pkb_sm_load_gather"], sol_bytes=1 << 20).set_index("call")
    c0, c1 = df.loc[0], df.loc[1]
    assert c0["gpu_span_us"] == pytest.approx(60)
    assert c0["comm_us"] == pytest.approx(50)
    assert c0["overlap_share"] == pytest.approx(0.8)
    assert c0["launches"] == 2
    assert c0["allocations"] == 1
    assert c0["host_syncs"] == 1 and c0["cuda_sync_events"] == 1
    assert c0["ce_bytes"] == 1 << 20 and c0["peer_copy_bytes"] == 0
    assert c0["comm_kernels"] == 1 and c0["kernels"] == 2
    assert c0["achieved_GBps"] == pytest.approx((1 << 20) / 60 / 1e3)
    assert c0["link_share"] == pytest.approx(c0["achieved_GBps"] / 450.0)
    # call 1: comm = nccl 30 + barrier 2 + PtoP 10; nothing overlaps it
    assert c1["comm_us"] == pytest.approx(42)
    assert c1["overlap_share"] == pytest.approx(0.0)
    assert c1["comm_by_source_us"] == {"nccl": 30, "symm_mem": 2, "copy_engine": 10}
    assert c1["peer_copy_bytes"] == 2 << 20
    assert c1["dtoh_copies"] == 1
    assert c1["host_syncs"] == 2  # one stream sync (.item()) + one device sync
    assert c1["launches"] == 3  # two cudaLaunchKernel + one cuLaunchKernel
    assert c1["gpu_span_us"] == pytest.approx(73)
    assert c1["gpu_busy_us"] == pytest.approx(53)
    assert c1["idle_us"] == pytest.approx(20)
    assert c1["max_gap_us"] == pytest.approx(10) and c1["n_gaps"] == 4


def test_without_static_labels_the_custom_kernel_is_compute(trace):
    df = analyze.per_call(trace, [], sol_bytes=None).set_index("call")
    # only the DtoD copy [60, 70] is communication now, and the GEMM covers all of it
    assert df.loc[0, "comm_us"] == pytest.approx(10)
    assert df.loc[0, "overlap_share"] == pytest.approx(1.0)
    assert df.loc[0, "achieved_GBps"] is None or df.loc[0, "achieved_GBps"] != df.loc[0, "achieved_GBps"]


@pytest.mark.parametrize("corr,flows,via", [(False, True, "flow"), (False, False, "window")])
def test_fallbacks_give_the_same_figures(trace, corr, flows, via):
    t2 = trace_from_chrome(build(correlation_args=corr, flows=flows))
    ev = analyze.assign_calls(t2)
    gpu = ev[ev["cat"].isin(("kernel", "gpu_memcpy"))]
    assert set(gpu["call_via"]) - {""} == {via}
    a = analyze.per_call(trace, ["pkb_sm_load_gather"]).set_index("call")
    b = analyze.per_call(t2, ["pkb_sm_load_gather"]).set_index("call")
    for col in ("gpu_span_us", "comm_us", "overlap_share", "ce_bytes", "kernels"):
        assert b[col].tolist() == pytest.approx(a[col].tolist()), col
    # the warm-up kernel before call 0 stays outside every call
    assert ev.loc[(ev["cat"] == "kernel") & (ev["ts"] < 1_000_000), "call"].isna().all()


def test_gpu_range_fallback():
    b = KinetoBuilder(correlation_args=False, flows=False)
    b.cpu_range("pkb:candidate_call[0]", 0, 10)
    b.gpu_range("pkb:candidate_call[0]", 20, 30)
    b.kernel(GEMM, 1, 25, 5)
    b.cpu_range("pkb:candidate_call[1]", 12, 5)  # a later call that starts before call 0's GPU work
    ev = analyze.assign_calls(trace_from_chrome(b.to_dict()))
    k = ev[ev["cat"] == "kernel"].iloc[0]
    assert k["call"] == 0 and k["call_via"] == "gpu_range"


def test_overlap_ignores_same_stream_and_other_devices():
    b = KinetoBuilder()
    b.cpu_range("pkb:candidate_call[0]", 0, 100)
    b.kernel(NCCL, 1, 10, 10, stream=7)
    b.kernel(GEMM, 2, 10, 10, stream=7)  # same stream: cannot overlap (and does not count)
    b.kernel(GEMM, 3, 10, 10, stream=9, device=1)  # other GPU
    df = analyze.per_call(trace_from_chrome(b.to_dict()))
    assert df.loc[0, "overlap_share"] == pytest.approx(0.0)


def test_driver_launch_inside_runtime_launch_counts_once():
    b = KinetoBuilder()
    b.cpu_range("pkb:candidate_call[0]", 0, 100)
    b.kernel(GEMM, 10, 20, 5)  # cudaLaunchKernel [10, 12]
    b.runtime("cuLaunchKernel", 10.5, 1.0, cat="cuda_driver")  # made from inside it
    assert analyze.per_call(trace_from_chrome(b.to_dict())).loc[0, "launches"] == 1


def test_match_names_word_boundaries():
    import pandas as pd

    s = pd.Series(["void pkb_gather<float>(float*)", "pkb_gather2(int)", "ns::pkb_gather(int)", "pkb_gather"])
    assert analyze.match_names(s, ["pkb_gather"]).tolist() == [True, False, True, True]
    assert not analyze.match_names(s, []).any()


def test_comm_kernel_names_from_record():
    from pkb.record import CandidateRecord, Evidence, KernelReport, Label

    ev = [Evidence("c.py", 1, "x", "clang")]
    rec = CandidateRecord(path="c.py")
    rec.kernels = [
        KernelReport("gather", "cuda", 1, labels={"mechanism": [Label("mechanism", "sm_load", ev)]}),
        KernelReport("scale", "cuda", 9, labels={"mechanism": [Label("mechanism", "none", ev)]}),
        KernelReport("push", "cuda", 20, labels={"mechanism": [Label("mechanism", "sm_store", ev)], "sync": [Label("sync", "device_flags", ev)]}),
    ]
    assert analyze.comm_kernel_names(rec) == ["gather", "push"]
    assert analyze.comm_kernel_names(rec.to_json_line()) == ["gather", "push"]


def test_profile_summary_is_plain_json(trace):
    s = analyze.profile_summary(trace, ["pkb_sm_load_gather", "never_launched"], sol_bytes=1 << 20)
    json.dumps(s, allow_nan=False)
    assert s["n_calls"] == 2 and s["rank"] == 0
    assert s["median"]["launches"] == pytest.approx(2.5)
    assert any("never_launched" in n for n in s["notes"])
    kinds = {k["name"]: k["kind"] for k in s["kernels"]}
    assert kinds[SM_LOAD] == "comm" and kinds[GEMM] == "compute"
    assert s["assignment"]["gpu_events_outside_calls"] == 1


def test_no_calls_is_a_note_not_an_error():
    b = KinetoBuilder()
    b.kernel(GEMM, 1, 2, 3)
    s = analyze.profile_summary(trace_from_chrome(b.to_dict()), [], None)
    assert s["n_calls"] == 0 and s["notes"]


def test_interval_helpers():
    u = analyze.union([(5, 7), (0, 2), (1, 3), (7, 8)])
    assert u == [(0, 3), (5, 8)]
    assert analyze.length(u) == 6
    assert analyze.intersect(u, [(2, 6)]) == [(2, 3), (5, 6)]


def test_record_fixtures_hand_figures_agree_with_the_analyzers():
    """The plain-Python figures record_fixtures writes and the analyzers agree on a known trace
    (so a disagreement on the real fixtures points at the trace, not at two conventions)."""
    import os

    before = dict(os.environ)
    from profiling import record_fixtures

    assert dict(os.environ) == before  # importing it changes nothing
    data = build()
    hand = {c["call"]: c for c in record_fixtures.hand_figures(data, ["pkb_sm_load_gather"])}
    df = analyze.per_call(trace_from_chrome(data), ["pkb_sm_load_gather"]).set_index("call")
    assert sorted(hand) == [0, 1]
    assert hand[0]["overlap_share"] == pytest.approx(0.8)
    for i, h in hand.items():
        assert df.loc[i, "kernels"] == h["kernels"]
        assert df.loc[i, "launches"] == h["launches"]
        assert df.loc[i, "host_syncs"] == h["syncs"]
        assert df.loc[i, "ce_bytes"] == h["ce_bytes"]
        assert df.loc[i, "comm_us"] == pytest.approx(h["comm_us"])
        assert df.loc[i, "gpu_span_us"] == pytest.approx(h["gpu_span_us"])
        assert df.loc[i, "overlap_share"] == pytest.approx(h["overlap_share"])
