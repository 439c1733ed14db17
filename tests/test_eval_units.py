"""The evaluation's pure parts, without launching: comparison, poison, classification, outcome
rules, CUDA detection, config keys, metrics against hand-computed values."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from pkb.eval.classify import classify_exception, compile_subtype
from pkb.eval.compare import compare_outputs
from pkb.eval.device_needs import cuda_requirement
from pkb.eval.launcher import LaunchResult, RankReport
from pkb.metrics import fast_p, geomean, pass_at_k, summarize
from pkb.eval.options import EvalOptions, config_key
from pkb.eval.outcome import decide, wrong_result_subtype
from pkb.eval.poison import filled_with_sentinel, sentinel_mask
from pkb.eval.timing import summarize as timing_summary

# ---- poison and comparison -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_sentinel_is_finite_and_recognised_in_every_float_dtype(dtype):
    t = filled_with_sentinel((4, 4), dtype)
    assert torch.isfinite(t).all()  # so `unwritten` is never confused with `nan_inf`
    assert sentinel_mask(t).all()
    assert not sentinel_mask(torch.randn(64, 64).to(dtype)).any()


def test_unwritten_output_is_counted_and_not_nan():
    expected = torch.randn(8, 8)
    got = expected.clone()
    got[4:] = filled_with_sentinel((4, 8), torch.float32)
    cmp = compare_outputs(expected, got, 1e-5, 1e-5)
    assert not cmp["matched"]
    assert cmp["sentinel"] == 32 and cmp["nan_inf"] == 0 and cmp["mismatches"] == 32
    assert cmp["leaves"][0]["first_mismatches"][0]["coords"] == [4, 0]
    assert wrong_result_subtype({0: [{**cmp, "trial": 0}]}) == "unwritten"


def test_comparison_numbers():
    expected = torch.tensor([[1.0, 2.0], [4.0, 0.0]])
    got = torch.tensor([[1.0, 2.5], [4.0, float("inf")]])
    cmp = compare_outputs(expected, got, 1e-3, 1e-3)
    assert cmp["mismatches"] == 2 and cmp["nan_inf"] == 1
    assert cmp["max_abs_err"] == pytest.approx(0.5) and cmp["max_rel_err"] == pytest.approx(0.25)
    assert [m["flat"] for m in cmp["leaves"][0]["first_mismatches"]] == [1, 3]
    # NaN where the reference has NaN is not a mismatch
    both = torch.tensor([float("nan"), 1.0])
    assert compare_outputs(both, both.clone(), 1e-5, 1e-5)["matched"]


def test_structure_shape_dtype_and_tuple_outputs():
    a = torch.ones(3)
    assert compare_outputs((a, a), (a, a), 0, 0)["matched"]
    assert not compare_outputs((a, a), (a,), 0, 0)["structure_ok"]
    assert not compare_outputs(a, torch.ones(4), 0, 0)["shape_ok"]
    cmp = compare_outputs(a, a.double(), 0, 0)
    assert not cmp["dtype_ok"] and not cmp["matched"] and cmp["values_close"]  # PKB would pass it


# ---- classification --------------------------------------------------------------------------------

NVCC_TEXTS = {
    "missing_header": "x.cu:1:10: fatal error: cuda/barrier_nope.h: No such file or directory",
    "undeclared_identifier": 'k.cu(12): error: identifier "blockIdxx" is undefined',
    "type_mismatch": 'k.cu(30): error: argument of type "float *" is incompatible with parameter of type "int *"',
    "undefined_symbol": "ImportError: /tmp/ext/x.so: undefined symbol: _Z6kernelPf",
    "arch_unsupported": "ptxas error   : Feature 'multimem.ld_reduce' requires .target sm_90 or higher",
    "cuda_syntax": 'k.cu(7): error: expected a ";"',
}
# Texts seen on PKB's generated files (H200, nvcc 13): each with the subtype the compiler's words give.
NVCC_TEXTS_SEEN = [
    ("type_mismatch", "ptxas /tmp/tmpxft_0-6_cuda.ptx, line 566; error   : Incorrect type '.f32' for operation '.max' in instruction 'multimem.ld_reduce'"),
    ("cuda_syntax", "cuda.cu(40): error: __host__ or __device__ annotation on lambda requires --extended-lambda nvcc flag"),
]


@pytest.mark.parametrize("subtype,line", NVCC_TEXTS_SEEN)
def test_compile_subtype_of_texts_seen_on_real_files(subtype, line):
    text = "Error building extension 'ext':\n[1/2] nvcc ...\n" + line + "\nninja: build stopped"
    assert compile_subtype(text) == subtype


@pytest.mark.parametrize("subtype", sorted(NVCC_TEXTS))
def test_compile_subtype_from_compiler_text(subtype):
    text = "Error building extension 'ext':\n[1/2] nvcc ...\n" + NVCC_TEXTS[subtype] + "\nninja: build stopped"
    assert compile_subtype(text) == subtype
    assert classify_exception(RuntimeError(text)) == ("compile_error", subtype)


def test_a_triton_compile_error_subclass_is_a_compile_error():
    # seen on an H100 (PKB's Gemini Triton 56): Triton refuses a `break` in a kernel, raising its
    # UnsupportedLanguageConstruct, a subclass of its CompilationError
    class CompilationError(Exception):
        pass

    class UnsupportedLanguageConstruct(CompilationError):
        pass

    exc = UnsupportedLanguageConstruct("at 41:16:\n                break\n                ^\nunsupported AST node type: Break")
    assert classify_exception(exc) == ("compile_error", "triton_syntax")


def test_a_missing_user_defined_conversion_is_a_type_mismatch():
    # seen on the H200 (a PKB Gemini file): c10's BFloat16 handed where __nv_bfloat16 is expected
    text = ("Error building extension 'ext':\n[1/2] nvcc ...\ncuda.cu(97): error: no suitable user-defined conversion from "
            '"const c10::BFloat16" to "__nv_bfloat16" exists\nninja: build stopped')
    assert classify_exception(RuntimeError(text)) == ("compile_error", "type_mismatch")


def test_runtime_classification():
    assert classify_exception(RuntimeError("CUDA error: an illegal memory access was encountered")) == ("runtime_error", "illegal_address")
    assert classify_exception(RuntimeError("CUDA error: misaligned address")) == ("runtime_error", "misaligned_address")
    assert classify_exception(RuntimeError("CUDA error: invalid configuration argument")) == ("runtime_error", "launch_config")
    assert classify_exception(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate")) == ("runtime_error", "out_of_memory")
    assert classify_exception(RuntimeError("NCCL error in: ProcessGroupNCCL.cpp, unhandled system error")) == ("runtime_error", "nccl_error")
    assert classify_exception(ValueError("the gloo of my own making")) == ("runtime_error", "python_exception")
    assert classify_exception(SyntaxError("bad")) == ("compile_error", "python_syntax")
    assert classify_exception(ModuleNotFoundError("No module named 'x'")) == ("compile_error", "import_error")
    err = RuntimeError("anything")
    assert classify_exception(err, during_build=True)[0] == "compile_error"


# ---- outcome rules ---------------------------------------------------------------------------------


def _trial(matched=True, **kw):
    base = {"matched": matched, "shape_ok": True, "dtype_ok": True, "structure_ok": True, "nan_inf": 0, "sentinel": 0, "max_violation": 0.0 if matched else 100.0, "values_close": matched, "trial": 0, "mismatches": 0 if matched else 1, "numel": 4, "max_abs_err": 0.0}
    base.update(kw)
    return base


def _timing(ms):
    stats = timing_summary([ms] * 5)
    return {"reference": {"event": None, "wall": timing_summary([1.0] * 5)}, "candidate": {"event": None, "wall": stats}}


def _launch(results, timed_out=False, rc=0):
    return LaunchResult(rc, timed_out, 1.0, [RankReport(r, (res or {}).get("phase", "done"), res) for r, res in enumerate(results)])


def _ok_rank(ms, **extra):
    return {"finished": True, "trials": [_trial()], "timing": _timing(ms), "timed_checks": [_trial(kind="timed")], "refresh_check": _trial(kind="refresh"), **extra}


def test_speedup_uses_the_slowest_rank_and_sets_faster_or_slower():
    faster = decide(_launch([_ok_rank(0.5), _ok_rank(0.25)]))
    assert faster["outcome"] == "faster" and faster["speedup"] == pytest.approx(2.0)
    slower = decide(_launch([_ok_rank(0.5), _ok_rank(4.0)]))
    assert slower["outcome"] == "slower" and slower["speedup"] == pytest.approx(0.25)


def test_the_reference_is_charged_its_time_before_the_candidate_loaded_where_it_was_slowed_after():
    # the reference's interleaved calls read 1.0 ms; timed before the candidate loaded, 0.25 ms on
    # rank 0 (a loaded candidate slowed it), 0.9 ms on rank 1 (within noise: the interleaved kept)
    ranks = [_ok_rank(0.5), _ok_rank(0.5)]
    ranks[0]["timing"]["reference_alone"] = {"event": None, "wall": timing_summary([0.25] * 5)}
    ranks[1]["timing"]["reference_alone"] = {"event": None, "wall": timing_summary([0.9] * 5)}
    ev = decide(_launch(ranks))
    # the slowest rank's reference: max(0.25, 1.0) = 1.0 ms against 0.5 ms
    assert ev["speedup"] == pytest.approx(2.0)
    assert ev["details"]["rank_times_ms"]["reference"] == {0: 0.25, 1: 1.0}
    assert ev["details"]["reference_alone"]["ranks_taken"] == {"0": 4.0}
    slowed = [_ok_rank(0.5), _ok_rank(0.5)]
    for r in slowed:
        r["timing"]["reference_alone"] = {"event": None, "wall": timing_summary([0.2] * 5)}
    ev = decide(_launch(slowed))
    assert ev["outcome"] == "slower" and ev["speedup"] == pytest.approx(0.4)  # faster 2x on the slowed reference


def test_wrong_on_timed_calls_or_after_refresh_is_suspect():
    cached = _ok_rank(0.5, timed_checks=[_trial(False, kind="timed")])
    ev = decide(_launch([cached, _ok_rank(0.5)]))
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "cached_output")
    mutating = _ok_rank(0.5, timed_checks=[_trial(False, kind="timed")], trials=[_trial(mutates_inputs=True)])
    assert decide(_launch([mutating, _ok_rank(0.5)]))["subtype"] == "aliases_input"
    stale = _ok_rank(0.5, refresh_check=_trial(False, kind="refresh"))
    ev = decide(_launch([stale, _ok_rank(0.5)]))
    assert (ev["outcome"], ev["subtype"], ev["correct"]) == ("suspect", "cached_output", False)


def test_error_precedence_prefers_the_cause_over_its_echo():
    echo = {"error": {"outcome": "runtime_error", "subtype": "nccl_error", "source": "candidate", "phase": "trial 0 candidate", "type": "RuntimeError", "message": "Connection closed by peer"}}
    cause = {"error": {"outcome": "runtime_error", "subtype": "illegal_address", "source": "candidate", "phase": "trial 0 candidate", "type": "RuntimeError", "message": "illegal memory access"}}
    ev = decide(_launch([echo, cause], rc=1))
    assert (ev["outcome"], ev["subtype"]) == ("runtime_error", "illegal_address")
    assert ev["details"]["failed_ranks"] == [0, 1]


def test_reference_failure_is_not_blamed_on_the_candidate():
    ref = {"error": {"outcome": "", "subtype": "", "source": "reference", "phase": "trial 0 reference", "type": "RuntimeError", "message": "x"}}
    ev = decide(_launch([ref, None], rc=1))
    assert ev["status"] == "not_run" and ev["outcome"] == "" and "reference failed" in ev["reason"]


def test_crash_without_report_is_a_runtime_error():
    ev = decide(_launch([_ok_rank(1.0), {"finished": False, "trials": [], "phase": "trial 0 candidate"}], rc=-11))
    assert ev["outcome"] == "runtime_error" and ev["details"]["crashed_ranks"][0]["rank"] == 1


def test_wrong_result_subtype_order():
    assert wrong_result_subtype({0: [_trial(False, shape_ok=False)], 1: [_trial(False, nan_inf=2)]}) == "shape_mismatch"
    assert wrong_result_subtype({0: [_trial()], 1: [_trial(False)]}) == "rank_subset"
    assert wrong_result_subtype({0: [_trial(False, max_violation=3.0)], 1: [_trial(False, max_violation=9.0)]}) == "tolerance"
    assert wrong_result_subtype({0: [_trial(False, max_violation=30.0)], 1: [_trial(False)]}) == ""


# ---- CUDA detection and config keys ---------------------------------------------------------------


def test_cuda_requirement_from_source():
    load_inline_src = "from torch.utils.cpp_extension import load_inline\nmod = load_inline(name='k', cpp_sources='', cuda_sources=SRC)\n"
    assert cuda_requirement(load_inline_src) == "no CUDA device: this candidate builds CUDA code (load_inline)"
    assert "cupy" in cuda_requirement("import cupy as cp\n")
    assert "triton" in cuda_requirement("import triton\nimport triton.language as tl\n")
    assert "symm_mem" in cuda_requirement("import torch.distributed._symmetric_memory as symm_mem\n")
    assert "compile_cuda_extension" in cuda_requirement("from utils.cuda_helpers import compile_cuda_extension\n")
    assert cuda_requirement("import torch\n# load_inline is mentioned only here\ndef solution(x):\n    return x\n") is None
    assert cuda_requirement("from torch.utils.cpp_extension import load_inline\nm = load_inline(name='c', cpp_sources=CPP, functions=['f'])\n") is None


def test_config_key_changes_with_what_changes_the_measurement():
    o = EvalOptions()
    k = config_key(problem_id=1, world_size=2, backend="gloo", dtype="float32", options=o)
    assert k == config_key(problem_id=1, world_size=2, backend="gloo", dtype="float32", options=EvalOptions(store_path="elsewhere.db"))
    assert k != config_key(problem_id=1, world_size=4, backend="gloo", dtype="float32", options=o)
    assert k != config_key(problem_id=2, world_size=2, backend="gloo", dtype="float32", options=o)
    assert k != config_key(problem_id=1, world_size=2, backend="gloo", dtype="bfloat16", options=o)
    assert k != config_key(problem_id=1, world_size=2, backend="gloo", dtype="float32", options=EvalOptions(iters=7))
    assert k != config_key(problem_id=1, world_size=2, backend="gloo", dtype="float32", options=EvalOptions(trials=2))


# ---- metrics ---------------------------------------------------------------------------------------


def test_pass_at_k_hand_computed():
    assert pass_at_k(10, 0, 1) == 0.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    # 1 - C(7,5)/C(10,5) = 1 - 21/252
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)
    assert pass_at_k(5, 1, 5) == 1.0
    assert pass_at_k(4, 2, 3) == 1.0  # fewer wrong samples than k


def test_fast_p_and_geomean_hand_computed():
    correct = [True, True, True, False]
    speed = [2.0, 0.5, 1.0, 5.0]
    assert fast_p(correct, speed, 0.0) == 0.75
    assert fast_p(correct, speed, 1.0) == 0.25  # strictly greater than p; the wrong 5x does not count
    assert geomean([2.0, 0.5, 8.0]) == pytest.approx(2.0)
    assert math.isnan(geomean([]))


def test_summarize_groups_per_problem_and_model():
    frame = pd.DataFrame(
        {
            "problem_id": [1, 1, 1, 1, 2, 2],
            "model": ["a", "a", "b", "b", "a", "b"],
            "outcome": ["faster", "slower", "wrong_result", "faster", "hang", "suspect"],
            "speedup": [2.0, 0.5, None, 8.0, None, 3.0],
        }
    )
    by_problem = summarize(frame, by="problem_id", ks=(1, 2), ps=(1.0,)).set_index("problem_id")
    assert by_problem.loc[1, "n"] == 4 and by_problem.loc[1, "correct"] == 3
    assert by_problem.loc[1, "pass@1"] == pytest.approx(0.75)
    assert by_problem.loc[1, "pass@2"] == pytest.approx(1.0)
    assert by_problem.loc[1, "fast_1"] == pytest.approx(0.5)
    assert by_problem.loc[1, "fast_1@2"] == pytest.approx(1 - 1 / 6)  # c=2 of n=4: 1 - C(2,2)/C(4,2)
    assert by_problem.loc[1, "geomean_speedup"] == pytest.approx(2.0)  # (2 * 0.5 * 8) ** (1/3)
    assert by_problem.loc[2, "correct"] == 0 and by_problem.loc[2, "pass@1"] == 0.0  # suspect does not count
    by_model = summarize(frame, by=["model"], ks=(1,), ps=(0.0,)).set_index("model")
    assert by_model.loc["a", "fast_0"] == pytest.approx(2 / 3)
    assert by_model.loc["b", "pass@1"] == pytest.approx(1 / 3)


def test_timing_interleaves_reference_and_candidate_in_alternating_order():
    from pkb.eval.timing import time_interleaved

    order: list[str] = []
    fns = {"reference": lambda x: order.append("r") or x, "candidate": lambda x: order.append("c") or x}
    out = time_interleaved(fns, [(torch.ones(2),), (torch.zeros(2),)], warmup=2, iters=4, rounds=4, device=torch.device("cpu"))
    assert "".join(order) == "rr" + "cc" + "rc" + "cr" + "rc" + "cr"  # warm-ups, then A B / B A rounds
    stats, last = out["candidate"]
    assert stats["wall"]["n"] == 4 and stats["groups"] == 2 and set(last) == {0, 1}


class _HostEvent:
    """torch.cuda.Event on the host clock: record() notes the time, elapsed_time() the gap."""

    def __init__(self, enable_timing: bool = False):
        self.t: float | None = None

    def record(self) -> None:
        import time

        self.t = time.perf_counter()

    def elapsed_time(self, other: "_HostEvent") -> float:
        return (other.t - self.t) * 1e3


def test_timing_on_cuda_runs_a_back_to_back_pass_and_an_isolated_pass(monkeypatch):
    """Each call charged ~2 ms: both passes sample every call, the back-to-back host clock is one
    figure per loop, and the charged time comes from the back-to-back pass."""
    import time

    from pkb.eval import timing

    monkeypatch.setattr(torch.cuda, "Event", _HostEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    calls: list[int] = []
    barriers: list[int] = []

    def fn(x):
        calls.append(int(x))
        time.sleep(0.002)
        return x

    groups = [(torch.tensor(g),) for g in range(3)]
    stats, last = timing.time_calls(fn, groups, warmup=1, iters=4, device=torch.device("cuda"), barrier=lambda: barriers.append(1), start=1)
    assert calls == [0] + [1, 2, 0, 1] * 2  # warm-up, back to back, isolated: same walk over groups
    assert len(barriers) == 2 and set(last) == {0, 1, 2}
    for clock in ("event", "wall", "pipelined"):
        assert stats[clock]["n"] == 4 and stats[clock]["median_ms"] >= 1.9, (clock, stats[clock])
    assert stats["pipelined_wall"]["n"] == 1 and stats["pipelined_wall"]["median_ms"] >= 1.9
    charged = timing.rank_time_ms(stats)
    assert charged == max(stats["pipelined"]["median_ms"], stats["pipelined_wall"]["median_ms"])
    assert timing.event_time_ms(stats) == stats["pipelined"]["median_ms"]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_finalizer_on_a_timed_output_runs_on_a_timed_clock(monkeypatch, device):
    """An output's finalizer (which could do the next call's work) runs while a clock runs: each
    isolated call's output is let go inside the next call's clock, the last one's on a clock
    added to its own call; kept outputs that later ones replace are let go only after the loop."""
    import time
    import weakref

    from pkb.eval import timing

    if device == "cuda":
        monkeypatch.setattr(torch.cuda, "Event", _HostEvent)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    finalized: list[int] = []

    def fn(x):
        out = x.clone()
        weakref.finalize(out, lambda: (time.sleep(0.05), finalized.append(1)))
        return out

    groups = [(torch.zeros(4),)]
    measured, _ = timing.time_calls(fn, groups, warmup=0, iters=3, device=torch.device(device), raw=True, keep_last=False)
    isolated = measured["wall_ns"]
    assert len(finalized) == 3 + (3 if device == "cuda" else 0)  # the back-to-back pass drops each output in its interval
    # the first call lets nothing go; the last, the one before it and its own (50 ms each)
    assert isolated[1] >= 50e6 and isolated[2] >= 100e6 and isolated[0] < isolated[2] - 50e6, isolated
    if device == "cuda":
        assert measured["event_ms"][2] >= 100 and min(measured["pipelined_ms"]) >= 50
    finalized.clear()
    retired: list = []
    _, last = timing.time_calls(fn, groups, warmup=0, iters=3, device=torch.device("cpu"), raw=True, retired=retired)
    assert len(retired) == 2 and finalized == []  # replaced kept outputs outlive the loop
    retired.clear()
    assert len(finalized) == 2 and list(last) == [0]


def test_rank_time_charges_the_back_to_back_pass_and_falls_back_to_the_isolated_clocks():
    from pkb.eval.timing import event_time_ms, rank_time_ms, summarize

    isolated = {"event": summarize([0.07] * 5), "wall": summarize([0.09] * 5)}
    assert rank_time_ms(isolated) == pytest.approx(0.09) and event_time_ms(isolated) == pytest.approx(0.07)
    # a side stream the events miss shows in the loop's host clock, and is charged
    both = {**isolated, "pipelined": summarize([0.04] * 5), "pipelined_wall": summarize([0.3])}
    assert rank_time_ms(both) == pytest.approx(0.3) and event_time_ms(both) == pytest.approx(0.04)
    cpu = {"event": None, "wall": summarize([1.0] * 3), "pipelined": None, "pipelined_wall": None}
    assert rank_time_ms(cpu) == pytest.approx(1.0) and event_time_ms(cpu) is None


def test_profile_check_flags_gpu_work_the_timing_did_not_charge():
    from pkb.eval.outcome import profile_agreement

    details = {"rank_times_ms": {"candidate": {0: 0.05, 1: 0.05}}}
    # rank 0: a long span (host gaps between launches) but little busy time agrees
    profile = {"ranks": [{"rank": 0, "median": {"gpu_busy_us": 45.0, "gpu_span_us": 400.0}}, {"rank": 1, "median": {"gpu_busy_us": 400.0}}]}
    check = profile_agreement(details, profile)
    assert [r["agrees"] for r in check["ranks"]] == [True, False] and check["agrees"] is False
    assert profile_agreement(details, {"ranks": [{"rank": 0, "median": {}}]}) is None
    assert profile_agreement(details, None) is None


def test_a_build_inside_a_call_runs_under_the_compile_limit_not_the_calls():
    """load_inline on a candidate's first call: the call's clock stops for the build."""
    import time
    from types import SimpleNamespace

    from pkb.eval.guard import Watchdog
    from pkb.eval.rank_report import BuildTracker

    expired = []
    wd = Watchdog(lambda where, limit: expired.append(where))
    phases = []
    rep = SimpleNamespace(current="trial 0 candidate", deadline=None, watchdog=wd, result={"compile_s": 0.0},
                          job=SimpleNamespace(compile_timeout_s=30.0))
    rep.phase = lambda name, limit_s=None, deadline=None: phases.append(name)
    slow_build = BuildTracker(rep).wrap(lambda: time.sleep(0.8) or "module")
    wd.start()
    wd.call_start("candidate", 0.4)
    assert slow_build() == "module"  # 0.8 s of build inside a 0.4 s call: not a hang
    assert not expired, expired
    assert wd.call_deadline is not None and wd.call_deadline - time.monotonic() > 0.2  # the call's time left is back
    time.sleep(0.7)  # past what the call had left: now it is a hang
    assert len(expired) == 1 and expired[0].endswith("one candidate call"), expired
    assert phases == ["compile", "trial 0 candidate"]


def test_bitwise_equal_takes_sparse_inputs():
    # PKB's spherical convolution hands the candidate a sparse tensor; the input-untouched check
    # must compare it, not fail the harness ("reshape is not implemented for sparse tensors").
    import torch

    from pkb.eval.tensors import bitwise_equal

    dense = torch.tensor([[0.0, 1.5], [2.0, 0.0]])
    a, b = dense.to_sparse(), dense.clone().to_sparse()
    assert bitwise_equal((a,), (b,))
    changed = dense.clone()
    changed[0, 1] = 3.0
    assert not bitwise_equal((a,), (changed.to_sparse(),))
    assert not bitwise_equal((a,), (dense,))  # a layout change is a change


def test_timed_calls_see_inputs_no_earlier_call_saw_but_the_checked_ones():
    """InputEdits through time_interleaved on CPU: every call of either side (warm-up included)
    sees content no earlier call saw, except the plain isolated calls (one drawn per group, and
    the last), which see the inputs as drawn; the output kept of each group is its drawn call's;
    afterwards the groups are as drawn. An answer kept by address is then stale on a checked
    call the candidate cannot foresee, and one kept by content never meets it."""
    from pkb.eval import timing
    from pkb.eval.timing import InputEdits, calls_per_group, time_interleaved

    groups = [(torch.randn(64, 8),), (torch.randn(64, 8),)]
    drawn = [g[0].clone() for g in groups]
    originals = {g: drawn[g].numpy().tobytes() for g in range(2)}
    seen: dict[str, list[tuple[int, bytes]]] = {"reference": [], "candidate": []}

    def recorder(side):
        def fn(x):
            g = next(i for i, grp in enumerate(groups) if grp[0] is x)
            seen[side].append((g, x.numpy().tobytes()))
            return x * 2 + len(seen[side])  # each call's answer its own
        return fn

    warmup, iters = 2, 7
    edits = InputEdits(groups, calls_per_group(len(groups), warmup, iters, 2, cuda=False))
    plain, checked = timing.plain_calls(len(groups), iters)
    out = time_interleaved({"reference": recorder("reference"), "candidate": recorder("candidate")}, groups,
                           warmup=warmup, iters=iters, rounds=3, device=torch.device("cpu"), edits=edits, plain=(plain, checked))
    assert iters - 1 in plain and len(checked) == 2 and {i % 2 for i in checked} == {0, 1} and checked <= plain
    for side, calls in seen.items():
        assert len(calls) == warmup + iters
        isolated = calls[warmup:]
        for i, (g, content) in enumerate(isolated):
            assert (content == originals[g]) == (i in plain), (side, i)
        assert all(content not in originals.values() for _, content in calls[:warmup])
    for g, o in out["candidate"][1].items():  # the drawn call's answer: 2x + its call count
        (i,) = [i for i in checked if i % 2 == g]
        assert torch.equal(o, drawn[g] * 2 + (warmup + i + 1)), (g, i, sorted(checked))
    everything = [c for calls in seen.values() for _, c in calls if c not in originals.values()]
    assert len(everything) == len(set(everything))  # no edited content twice, across both sides
    assert all(torch.equal(g[0], d) for g, d in zip(groups, drawn))
    # the ranks' picks give the same calls on every rank; each group's checked call is one of its own
    assert timing.plain_calls(3, 10, [7, 7, 7]) == timing.plain_calls(3, 10, [7, 7, 7])
    p, c = timing.plain_calls(3, 10, [0, 1, 5])
    assert c == {0, 4, 8} and p == {0, 4, 8, 9}


def test_edited_timed_calls_are_spot_checked_on_the_inputs_they_saw():
    """SpotChecks through time_interleaved on CPU: outputs of edited isolated calls copied as they
    return (at least one, at most the cap, none of a plain call); each call's inputs rebuilt from
    the drawn group and its logged edit are the ones it saw; an edit puts one of the tensor's own
    values at the edited position."""
    from pkb.eval import timing
    from pkb.eval.timing import InputEdits, SpotChecks, calls_per_group, time_interleaved

    groups = [(torch.randn(64, 8),), (torch.randn(32, 4),)]
    drawn = [g[0].clone() for g in groups]
    seen: dict[int, torch.Tensor] = {}
    calls = [0]

    def fn(x):
        calls[0] += 1
        if calls[0] > 1:  # past the warm-up: the isolated calls, numbered from 0
            seen[len(seen)] = x.clone()
        return x * 3

    iters = 9
    edits = InputEdits(groups, calls_per_group(2, 1, iters, 1, cuda=False))
    plain, checked = timing.plain_calls(2, iters)
    spot = SpotChecks(edits, expected=2, cap=4, edited_calls=iters - len(plain))
    time_interleaved({"candidate": fn}, groups, warmup=1, iters=iters, rounds=3, device=torch.device("cpu"),
                     edits=edits, plain=(plain, checked), spot=spot)
    assert set(spot.log) == set(range(iters)) - plain
    assert 1 <= len(spot.copies) <= 4 and not set(spot.copies) & plain
    for n, (g, i) in spot.log.items():
        rebuilt = (drawn[g].clone(),)
        edits.rebuild(rebuilt, g, i)
        assert torch.equal(rebuilt[0], seen[n]), n
        changed = (rebuilt[0] != drawn[g]).nonzero()
        assert len(changed) == 1 and bool((drawn[g] == rebuilt[0][tuple(changed[0])]).any())  # one of its own values
    for n, copy in spot.copies.items():
        assert torch.equal(copy, seen[n] * 3)
    assert all(torch.equal(g[0], d) for g, d in zip(groups, drawn))
    lone = SpotChecks(edits, expected=0, cap=4, edited_calls=3)  # never drawn: the last one taken
    edits.current = (0, 0)
    for n in range(3):
        if lone.decide(n):
            lone.copy(n, torch.ones(2))
    assert set(lone.copies) == {2}


def test_back_to_back_calls_are_spot_checked_on_cuda(monkeypatch):
    """On CUDA the back-to-back pass's calls (all edited) can be chosen too, keyed past
    BACK_TO_BACK_CALLS; each copy is the output of the inputs its call saw."""
    from pkb.eval import timing
    from pkb.eval.timing import BACK_TO_BACK_CALLS, InputEdits, SpotChecks, calls_per_group

    monkeypatch.setattr(torch.cuda, "Event", _HostEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    groups = [(torch.randn(16),), (torch.randn(8),)]
    drawn = [g[0].clone() for g in groups]
    seen: list[torch.Tensor] = []

    def fn(x):
        seen.append(x.clone())
        return x - 1

    edits = InputEdits(groups, calls_per_group(2, 0, 6, 1, cuda=True))
    spot = SpotChecks(edits, expected=100, cap=20, edited_calls=12)  # every edited call
    measured, _ = timing.time_calls(fn, groups, warmup=0, iters=6, device=torch.device("cuda"), raw=True, keep_last=False,
                                    edits=edits, plain={5}, spot=spot)
    back = sorted(n - BACK_TO_BACK_CALLS for n in spot.copies if n >= BACK_TO_BACK_CALLS)
    isolated = sorted(n for n in spot.copies if n < BACK_TO_BACK_CALLS)
    assert back == list(range(6)) and isolated == [0, 1, 2, 3, 4]  # the plain call 5 is not edited
    assert len(measured["pipelined_ms"]) == 6 and measured["pipelined_loop_ns"] > 0
    for n, copy in spot.copies.items():
        g, i = spot.log[n]
        rebuilt = (drawn[g].clone(),)
        edits.rebuild(rebuilt, g, i)
        assert torch.equal(copy, rebuilt[0] - 1), n


def test_the_plain_calls_outputs_are_copied_as_they_return():
    """time_interleaved's `returned`: a copy of each plain call's output taken at its return, so
    work a candidate finishes later (here: the next call writes into the previous output, as a
    thread or a finalizer would) is not in what the rank and the harness check."""
    from pkb.eval import timing
    from pkb.eval.timing import InputEdits, calls_per_group, time_interleaved

    groups = [(torch.zeros(16),), (torch.ones(16),)]
    handed: list[torch.Tensor] = []

    def late(x):
        if handed:
            handed[-1].add_(100.0)  # finishes the previous call's answer after it returned
        out = x * 2
        handed.append(out)
        return out

    plain, checked = timing.plain_calls(2, 6, [1, 1])
    returned: dict[str, dict[int, torch.Tensor]] = {}
    out = time_interleaved({"candidate": late}, groups, warmup=1, iters=6, rounds=2, device=torch.device("cpu"),
                           edits=InputEdits(groups, calls_per_group(2, 1, 6, 1, cuda=False)), plain=(plain, checked), returned=returned)
    assert set(returned["candidate"]) == plain == {2, 3, 5} and checked == {2, 3}
    for i in plain:  # as returned: 2x the drawn input, none of the later +100
        assert torch.equal(returned["candidate"][i], groups[i % 2][0] * 2)
    kept = out["candidate"][1]  # the checked calls' outputs themselves: finished by the next call
    assert torch.equal(kept[0], groups[0][0] * 2 + 100) and torch.equal(kept[1], groups[1][0] * 2 + 100)
