"""Ranges, Kineto capture on CPU, the one-subscriber rule, ncu command lines and CSV, hooks, timelines."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from profiling import capture, ranges
from profiling.analyze import candidate_calls, per_call
from profiling.synthetic import KinetoBuilder
from profiling.trace import load_trace, read_json, trace_from_chrome


@pytest.fixture()
def fresh_owner(monkeypatch):
    monkeypatch.setattr(capture, "_OWNER", None)


def test_phase_is_a_shared_noop_when_off(monkeypatch):
    monkeypatch.setattr(ranges._state, "enabled", False)
    assert ranges.phase("pkb:setup") is ranges.phase("pkb:reference")


def _fake_nvtx_package(monkeypatch, calls: list, tag: str = "") -> None:
    """An `nvtx` module whose push/pop append (tag + "push"/"pop", name) to calls."""
    fake = types.ModuleType("nvtx")
    fake.push_range = lambda message=None, **kw: calls.append((tag + "push", message))
    fake.pop_range = lambda **kw: calls.append((tag + "pop", None))
    monkeypatch.setitem(sys.modules, "nvtx", fake)


def test_phase_pushes_nvtx_with_the_same_name(monkeypatch):
    import torch

    calls = []
    _fake_nvtx_package(monkeypatch, calls)
    monkeypatch.delattr(torch._C, "_nvtx", raising=False)  # as on a CPU build of torch
    monkeypatch.setattr(ranges._state, "nvtx", False)  # re-resolve
    with ranges.enabled():
        assert ranges.nvtx_backend() == "nvtx"
        with ranges.phase(ranges.candidate_call(1)):
            with ranges.phase(ranges.trial(0)):
                pass
    assert calls == [("push", "pkb:candidate_call[1]"), ("push", "pkb:trial[0]"), ("pop", None), ("pop", None)]
    monkeypatch.setattr(ranges._state, "nvtx", False)


def test_torch_nvtx_is_preferred_where_torch_has_it(monkeypatch):
    """CUPTI records torch.cuda.nvtx's ranges as MARKERs and not the nvtx package's (H200)."""
    import torch
    import torch.cuda.nvtx as tn

    calls = []
    _fake_nvtx_package(monkeypatch, calls, tag="package ")
    monkeypatch.setattr(torch._C, "_nvtx", object(), raising=False)
    monkeypatch.setattr(tn, "range_push", lambda msg: calls.append(("push", msg)))
    monkeypatch.setattr(tn, "range_pop", lambda: calls.append(("pop", None)))
    monkeypatch.setattr(ranges._state, "nvtx", False)
    with ranges.enabled():
        assert ranges.nvtx_backend() == "torch.cuda.nvtx"
        with ranges.phase(ranges.candidate_call(0)):
            pass
    assert calls == [("push", "pkb:candidate_call[0]"), ("pop", None)]  # no probe range, no package call
    monkeypatch.setattr(ranges._state, "nvtx", False)


def test_ncu_include_escapes_the_stack_anchors():
    assert ranges.ncu_include("pkb:candidate_call[12]") == r"regex:pkb:candidate_call\[12\]/"
    assert ranges.ncu_include("pkb:setup") == "regex:pkb:setup/"


def test_parse_name():
    assert ranges.parse_name("pkb:candidate_call[12]") == ("candidate_call", 12)
    assert ranges.parse_name("pkb:setup") == ("setup", None)
    assert ranges.parse_name("aten::mm") is None


def test_capture_kineto_on_cpu(tmp_path, fresh_owner):
    import torch

    a = torch.randn(64, 64)
    seen = []

    def fn():
        seen.append(1)
        return a @ a

    path = capture.capture_kineto(fn, calls=3, warmup=2, out_path=tmp_path, rank=1, meta={"candidate": "x"})
    assert path.name == "rank1.trace.json.gz" and path.stat().st_size > 0
    assert len(seen) == 5
    data = read_json(path)
    assert data["pkb"]["rank"] == 1 and data["pkb"]["calls"] == 3 and data["pkb"]["candidate"] == "x"
    t = load_trace(path)
    assert t.rank == 1
    assert candidate_calls(t)["index"].tolist() == [0, 1, 2]
    ev = t.events
    mm = ev[ev["name"] == "aten::mm"]
    assert len(mm) == 3  # warm-up calls are not in the trace
    assert capture.cupti_owner() == "kineto"
    assert not ranges.is_enabled() or ranges._state.enabled  # restored


def test_one_cupti_subscriber_per_process(fresh_owner):
    capture._claim("kineto")
    capture._claim("kineto")  # the same backend again is fine
    with pytest.raises(capture.BackendConflict):
        capture._claim("cupti")


def test_capture_cupti_without_cupti_python(tmp_path, fresh_owner, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupti", None)  # import fails
    with pytest.warns(UserWarning, match="cupti-python"):
        assert capture.capture_cupti(lambda: None, out_path=tmp_path) is None
    assert capture.cupti_owner() is None  # nothing claimed


def test_trim_keeps_only_profiled_calls():
    b = KinetoBuilder()
    b.kernel("warmup_kernel", -50, -40, 5)
    b.cpu_range("pkb:candidate_call[0]", 0, 50)
    b.gpu_range("pkb:candidate_call[0]", 5, 60)
    b.kernel("k", 10, 20, 40)
    b.cpu_op("aten::outside", 80, 5)
    out = capture.trim_chrome_trace(b.to_dict())
    names = {e.get("name") for e in out["traceEvents"]}
    assert "warmup_kernel" not in names and "aten::outside" not in names
    assert {"k", "cudaLaunchKernel", "pkb:candidate_call[0]", "ac2g", "process_name"} <= names
    t = trace_from_chrome(out)
    assert per_call(t).loc[0, "kernels"] == 1


# ---- ncu -------------------------------------------------------------------------------------------


def test_ncu_command_single_rank():
    run = capture.run_ncu_command(["python", "cand.py"], ["void pkb_gather<float>(float*)", "pkb_push"], "out/rep")
    a = run.argv
    assert a[0] == "ncu" and a[-2:] == ["python", "cand.py"]
    assert a[a.index("--clock-control") + 1] == "none"
    # brackets are ncu's stack anchors: the include is a regex (the plain form matched nothing on the H200)
    assert "--nvtx" in a and a[a.index("--nvtx-include") + 1] == r"regex:pkb:candidate_call\[1\]/"
    assert a[a.index("-k") + 1] == "regex:^(pkb_gather|pkb_push)$"
    metrics = a[a.index("--metrics") + 1].split(",")
    assert {"nvlrx__bytes.sum", "nvltx__bytes.sum", "lts__t_sectors_aperture_peer.sum", "lts__t_sectors_srcunit_tex_aperture_peer.sum"} <= set(metrics)
    assert "--communicator" not in a and run.report == "out/rep" and run.returncode is None
    assert run.env["PKB_PROFILE_RANGES"] == "1"


def test_ncu_command_several_ranks():
    run = capture.run_ncu_command(["python", "-m", "w"], ["k"], "rep", world_size=4)
    a = run.argv
    assert a[a.index("--communicator") + 1] == "tcp" and a[a.index("--communicator-num-peers") + 1] == "4"
    assert run.report == "rep_rank%q{RANK}" and a[a.index("-o") + 1] == run.report


def test_kernel_base_name():
    assert capture.kernel_base_name("void ns::pkb_gather<float, 4>(float const*, int)") == "pkb_gather"
    assert capture.kernel_base_name("c10d::symmetric_memory::barrier_kernel(unsigned int**)") == "barrier_kernel"


NCU_CSV = '''==PROF== Connected to process 123
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","nvlrx__bytes.sum","lts__t_sectors_aperture_peer.sum","gpu__time_duration.sum"
"","","","","","","","","","","","byte","sector","nsecond"
"0","123","python3.11","h","pkb_gather","1","7","(128, 1, 1)","(132, 1, 1)","0","9.0","1,048,576","32,768","12,345"
"1","123","python3.11","h","pkb_push","1","7","(128, 1, 1)","(132, 1, 1)","0","9.0","0","n/a","5.5"
'''


def test_read_ncu_csv(tmp_path):
    df = capture.read_ncu_csv(NCU_CSV)
    assert df["Kernel Name"].tolist() == ["pkb_gather", "pkb_push"]
    assert df["nvlrx__bytes.sum"].tolist() == [1048576, 0]
    assert df["lts__t_sectors_aperture_peer.sum"].isna().tolist() == [False, True]
    assert df["gpu__time_duration.sum"].iloc[1] == 5.5
    assert df.attrs["units"]["nvlrx__bytes.sum"] == "byte"
    p = tmp_path / "raw.csv"
    p.write_text(NCU_CSV)
    assert len(capture.read_ncu_csv(p)) == 2


# ---- hooks -------------------------------------------------------------------------------------------


def test_profile_candidate_and_summarize_job(tmp_path, fresh_owner):
    import torch

    from profiling.hooks import profile_candidate, summarize_job

    a = torch.randn(32, 32)
    info = profile_candidate(lambda: a @ a, job_dir=tmp_path, rank=0, calls=2, warmup=1)
    assert info["status"] == "ok" and info["backend"] == "kineto", info
    assert json.loads(json.dumps(info))
    prof = summarize_job(tmp_path, [], sol_bytes=1 << 20)
    assert [r["rank"] for r in prof["ranks"]] == [0] and prof["ranks"][0]["n_calls"] == 2
    assert prof["merged_trace"] and not prof["errors"]
    json.dumps(prof, allow_nan=False)


def test_profile_candidate_never_raises(tmp_path, fresh_owner):
    from profiling.hooks import profile_candidate

    def boom():
        raise ValueError("candidate exploded")

    info = profile_candidate(boom, job_dir=tmp_path, rank=0)
    assert info["status"] == "failed" and "candidate exploded" in info["error"]


# ---- timelines -------------------------------------------------------------------------------------


def test_merge_rank_traces(tmp_path):
    from profiling.merge import merge_rank_traces

    per_rank = {}
    for r in (0, 1):
        b = KinetoBuilder()
        b.cpu_range("pkb:candidate_call[0]", 0, 50)
        b.kernel(f"k{r}", 1, 10, 5)
        per_rank[r] = b.to_dict()
    out = merge_rank_traces(per_rank, tmp_path / "m.json.gz")
    data = read_json(out)
    evs = data["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in evs if e.get("name") == "process_name"}
    assert procs == {0: "rank 0", 1: "rank 1"}
    assert {e["pid"] for e in evs} == {0, 1}
    flow_ids = [e["id"] for e in evs if e.get("ph") == "s"]
    assert len(flow_ids) == len(set(flow_ids)) == 2
    threads = {e["args"]["name"] for e in evs if e.get("name") == "thread_name"}
    assert "gpu 0 stream 7" in threads and any(t.startswith("cpu ") for t in threads)
    kernels = {e["name"]: e["pid"] for e in evs if e.get("cat") == "kernel"}
    assert kernels == {"k0": 0, "k1": 1}


def test_plot_call_png(tmp_path):
    from profiling.timeline import plot_call

    b = KinetoBuilder()
    b.cpu_range("pkb:candidate_call[0]", 0, 50)
    b.kernel("ncclDevKernel_X", 1, 10, 20, stream=7)
    b.kernel("gemm", 2, 12, 20, stream=9)
    b.memcpy("DtoD", 3, 35, 5, 1024, stream=13)
    out = plot_call(trace_from_chrome(b.to_dict()), 0, tmp_path / "c.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


def test_unavailable_metrics_from_ncu_output():
    out = ("==PROF== Connected to process 562 (/usr/bin/python3.12)\n"
           "==ERROR== Unable to access the following 8 metrics: nvlrx__bytes.avg, nvlrx__bytes.max, nvlrx__bytes.min, "
           "nvlrx__bytes.sum, nvltx__bytes.avg, nvltx__bytes.max, nvltx__bytes.min, nvltx__bytes.sum.\n\n"
           "==ERROR== Failed to profile \"nvjet_sm90\" in process 562\n")
    assert capture.unavailable_metrics(out) == ["nvlrx__bytes", "nvltx__bytes"]
    assert capture.unavailable_metrics("==PROF== Report: x.ncu-rep\n") == []


def test_ncu_runs_again_without_the_metrics_it_cannot_access(monkeypatch):
    seen = []

    def fake_run(argv, **kw):
        metrics = argv[argv.index("--metrics") + 1]
        seen.append(metrics)
        if "nvltx__bytes" in metrics:
            return types.SimpleNamespace(returncode=9, stdout="==ERROR== Unable to access the following 2 metrics: nvltx__bytes.sum, nvlrx__bytes.sum.\n", stderr="")
        return types.SimpleNamespace(returncode=0, stdout="==PROF== Report: rep.ncu-rep\n", stderr="")

    monkeypatch.setattr(capture.subprocess, "run", fake_run)
    run = capture.run_ncu_command(["python", "x.py"], [], "rep", execute=True)
    assert run.returncode == 0 and run.unavailable_metrics == ["nvlrx__bytes", "nvltx__bytes"]
    assert len(seen) == 2 and "nvltx__bytes" not in seen[1] and "lts__t_sectors_aperture_peer.sum" in seen[1]


def test_runtime_records_get_their_api_name_from_the_cbid():
    from profiling.capture import _record_dict

    rec = types.SimpleNamespace(kind=5, cbid=211, correlation_id=3, start=1, end=2)
    d = _record_dict(rec, {5: "RUNTIME"}, {"RUNTIME": {211: "cudaLaunchKernel_v7000"}, "DRIVER": {}})
    assert d["name"] == "cudaLaunchKernel_v7000"
    assert "name" not in _record_dict(rec, {5: "RUNTIME"}, {"RUNTIME": {}, "DRIVER": {}})


def test_ncu_does_not_retry_when_the_missing_metrics_are_not_ones_it_asked_for(monkeypatch):
    calls = []

    def fake_run(argv, **kw):
        calls.append(argv)
        return types.SimpleNamespace(returncode=9, stdout="==ERROR== Unable to access the following 1 metrics: foo__bar.sum.\n", stderr="")

    monkeypatch.setattr(capture.subprocess, "run", fake_run)
    run = capture.run_ncu_command(["python", "x.py"], [], "rep", execute=True)
    assert run.returncode == 9 and len(calls) == 1


def test_the_tma_counters_asked_for_told_a_bulk_copy_from_an_sm_copy_on_the_h200():
    """tests/fixtures/ncu/tma_check.json: profiling.tma_check's reading of two 16 MiB copies."""
    import json

    import pandas as pd

    from pkb.eval.ncu import kernel_rows

    fx = json.loads((Path(__file__).parent / "fixtures" / "ncu" / "tma_check.json").read_text())
    tma = [m for m in capture.NCU_METRICS if "tma" in m]
    assert len(tma) == 3 and set(tma) <= set(fx["telling_apart"])
    df = pd.DataFrame([{"Kernel Name": k, **v} for k, v in fx["kernels"].items()])
    rows = {r["kernel"]: r for r in kernel_rows(df)}
    bulk, sm = rows["tma_bulk_copy"], rows["sm_copy"]
    assert bulk["tma_load_bytes"] == bulk["tma_store_bytes"] == fx["copy_bytes"]
    assert bulk["tma_instructions"] == 2 * fx["copy_bytes"] // (16 << 10)  # one bulk load and one bulk store per block
    assert sm["tma_load_bytes"] == sm["tma_store_bytes"] == sm["tma_instructions"] == 0
    assert fx["unknown_metric_returncode"] == 0  # ncu skips a name it does not know; the column is just absent


def test_tma_metric_names_reads_ncu_query_metrics_lines():
    from profiling.tma_check import tma_metric_names

    text = ("Chip gh100\n---- ----\nMetric Name     Metric Type     Metric Unit     Metric Description\n"
            "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld       Counter         byte            # of bytes read\n"
            "                                                                                      UBLKCP.G.S, UTMAREDG\n"
            "dram__bytes                                              Counter         byte            # of bytes\n"
            "sm__pipe_tma_cycles_active                               Counter         cycle           # of cycles\n")
    assert tma_metric_names(text) == ["l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum", "sm__pipe_tma_cycles_active.sum"]
