"""Library collectives a candidate can run while the counter's wrappers see none: captured into a
CUDA graph and replayed. The bookkeeping is driven on CPU through stand-in graph classes shaped
like torch's (a Python class whose methods call its C++ base's); the real capture is the GPU
hostile candidate's (corpus/hostile/, needs_gpu)."""

from __future__ import annotations

import pytest
import torch

from pkb.eval import guard
from pkb.eval.graph_replays import UNSEEN_CAPTURE, GraphLedger, graph_classes


class StandInGraphBase:
    """Plays torch._C._CUDAGraph: capture and replay do nothing here."""

    def capture_begin(self, pool=None, capture_error_mode="global"):
        pass

    def capture_end(self):
        pass

    def replay(self):
        pass


class StandInGraph(StandInGraphBase):
    """Plays torch.cuda.CUDAGraph: each method calls the base's, as torch's does."""

    def capture_begin(self, pool=None, capture_error_mode="global"):
        super().capture_begin(pool=pool, capture_error_mode=capture_error_mode)

    def capture_end(self):
        super().capture_end()

    def replay(self):
        super().replay()


def _all_reduce_without_a_group():
    import torch.distributed as dist

    try:
        dist.all_reduce(torch.ones(2))  # no process group: raises after the wrapper saw the call
    except Exception:
        pass


@pytest.fixture
def counter(monkeypatch):
    monkeypatch.setattr(guard, "graph_classes", lambda: [StandInGraph, StandInGraphBase], raising=False)
    c = guard.DistCounter()
    c.install()
    try:
        yield c
    finally:
        c.uninstall()
    assert "_pkb_counted" not in vars(vars(StandInGraph)["replay"])


def test_a_graph_that_captured_a_collective_at_set_up_counts_it_at_every_replay(counter):
    graph = StandInGraph()
    graph.capture_begin()  # at import: the counter is not active
    _all_reduce_without_a_group()
    graph.capture_end()
    assert counter.total == 0
    counter.active = True
    for _ in range(3):
        graph.replay()  # the subclass's replay calls the base's: one replay each
    assert counter.counts == {"all_reduce": 3}
    _all_reduce_without_a_group()  # after capture_end: an eager call, in no graph
    graph.replay()
    assert counter.counts == {"all_reduce": 5}


def test_a_graph_of_the_candidates_own_kernels_counts_nothing(counter):
    own, library = StandInGraph(), StandInGraph()
    own.capture_begin()
    torch.ones(4).add_(1)
    own.capture_end()
    library.capture_begin()
    _all_reduce_without_a_group()
    library.capture_end()
    counter.active = True
    own.replay()
    StandInGraphBase.replay(own)  # the base class called directly is a replay all the same
    assert counter.counts == {}
    StandInGraphBase.replay(library)
    assert counter.counts == {"all_reduce": 1}


def test_a_replay_of_a_graph_whose_capture_was_never_seen_counts_as_unknown_content(counter):
    graph = StandInGraph()
    StandInGraphBase.capture_begin.__wrapped__(graph)  # the original, past the wrapper
    counter.active = True
    graph.replay()
    assert counter.counts == {UNSEEN_CAPTURE: 1} and counter.total == 1


def test_replays_count_only_while_active_and_a_recapture_starts_clean(counter):
    graph = StandInGraph()
    graph.capture_begin()
    _all_reduce_without_a_group()
    _all_reduce_without_a_group()
    graph.capture_end()
    graph.replay()  # the harness's own replay (inactive): not the candidate's
    assert counter.counts == {}
    counter.active = True
    graph.replay()
    assert counter.counts == {"all_reduce": 2}
    counter.active = False
    graph.capture_begin()  # captured again: only what this capture holds
    graph.capture_end()
    counter.active = True
    graph.replay()
    assert counter.counts == {"all_reduce": 2}


def test_putting_the_graph_methods_back_is_tampering(counter):
    snapshot = guard.HarnessSnapshot()
    assert snapshot.changed() == []
    StandInGraph.replay = vars(StandInGraph)["replay"].__wrapped__
    assert "cuda.StandInGraph.replay" in snapshot.changed()
    snapshot.restore()
    assert snapshot.changed() == []


def test_the_ledger_forgets_a_collected_graph():
    ledger = GraphLedger()
    graph = StandInGraph()
    ledger.begin(graph)
    ledger.note("all_reduce")
    ledger.end(graph)
    assert ledger.replayed(graph) == {"all_reduce": 1}
    key = id(graph)
    del graph
    assert key not in ledger.captured


def test_torchs_graph_classes_are_wrapped_and_put_back():
    classes = graph_classes()
    assert torch.cuda.CUDAGraph in classes
    before = {m: vars(torch.cuda.CUDAGraph)[m] for m in ("capture_begin", "capture_end", "replay")}
    c = guard.DistCounter()
    try:
        c.install()
        assert all(getattr(vars(torch.cuda.CUDAGraph)[m], "_pkb_counted", False) for m in before)
    finally:
        c.uninstall()
    assert all(vars(torch.cuda.CUDAGraph)[m] is fn for m, fn in before.items())


# ---- symmetric memory's ready-made collectives ---------------------------------------------------


def _symm_mem_operators() -> set[str]:
    try:
        import torch.distributed._symmetric_memory  # noqa: F401  (defines the fused_* operators)
    except Exception:
        pass
    return {n for n in torch._C._dispatch_get_all_op_names() if n.startswith("symm_mem::")}


def test_every_symm_mem_operator_of_this_torch_is_named_a_transfer_or_not():
    from pkb.collectives import MOVES_DATA, SYMM_MEM_NOT_TRANSFERS, SYMM_MEM_OPS

    present = _symm_mem_operators()
    if not present:
        pytest.skip("this torch has no symmetric memory operators")
    assert not set(SYMM_MEM_OPS) & SYMM_MEM_NOT_TRANSFERS
    assert present <= set(SYMM_MEM_OPS) | SYMM_MEM_NOT_TRANSFERS, sorted(present - set(SYMM_MEM_OPS) - SYMM_MEM_NOT_TRANSFERS)
    assert set(SYMM_MEM_OPS.values()) <= MOVES_DATA


def test_the_counter_hooks_every_symm_mem_transfer_at_the_dispatcher():
    from pkb.collectives import SYMM_MEM_OPS

    present = _symm_mem_operators() & set(SYMM_MEM_OPS)
    if not present:
        pytest.skip("this torch has no symmetric memory operators")
    c = guard.DistCounter()
    try:
        c.install()
        assert present <= set(c.dispatcher_ops), sorted(present - set(c.dispatcher_ops))
        for op in present:
            assert torch._C._dispatch_has_kernel_for_dispatch_key(op, guard.DISPATCH_KEY), op
        assert set(guard.dispatcher_hook_lines()) >= present  # watched for removal like the c10d ones
    finally:
        c.uninstall()
    assert not any(torch._C._dispatch_has_kernel_for_dispatch_key(op, guard.DISPATCH_KEY) for op in present)


@pytest.fixture
def symm_mem_stand_ins():
    """CPU kernels for two symm_mem operators that have none in a CPU build (the real ones need
    symmetric memory on GPUs): each returns its input, so a call reaches the counter's kernel
    at BackendSelect and then the stand-in below it."""
    if not {"symm_mem::one_shot_all_reduce", "symm_mem::two_shot_all_reduce_"} <= _symm_mem_operators():
        pytest.skip("this torch lacks the symm_mem all-reduce operators")
    if torch._C._dispatch_has_kernel_for_dispatch_key("symm_mem::one_shot_all_reduce", "CPU"):
        pytest.skip("this torch has a CPU kernel of its own there")
    lib = torch.library.Library("symm_mem", "IMPL")
    lib.impl("one_shot_all_reduce", lambda x, reduce_op, group_name: x.clone(), "CPU")
    lib.impl("two_shot_all_reduce_", lambda x, reduce_op, group_name: x, "CPU")
    try:
        yield
    finally:
        lib._destroy()


def test_a_symm_mem_all_reduce_is_counted_as_a_library_all_reduce(symm_mem_stand_ins):
    c = guard.DistCounter()
    try:
        c.install()
        x = torch.ones(4)
        torch.ops.symm_mem.one_shot_all_reduce(x, "sum", "0")  # inactive: the harness's, not counted
        assert c.counts == {}
        c.active = True
        out = torch.ops.symm_mem.one_shot_all_reduce(x, "sum", "0")
        assert torch.equal(out, x)  # handed on, with its arguments, to the kernel below
        with torch.inference_mode():
            torch.ops.symm_mem.two_shot_all_reduce_(x, "sum", "0")
        assert c.counts == {"all_reduce": 2} and c.total == 2
    finally:
        c.uninstall()


def test_a_handler_calling_a_symm_mem_collective_is_a_fallback():
    from pkb.eval.static_checks import static_flags

    src = (
        "import torch\n"
        "def solution(x, group_name):\n"
        "    try:\n"
        "        return ext.run(x)\n"
        "    except Exception:\n"
        "        return torch.ops.symm_mem.{call}\n"
    )
    assert [f["flag"] for f in static_flags(src.format(call="one_shot_all_reduce(x, 'sum', group_name)"))] == ["fallback_try_except"]
    for call in ("get_remote_tensors(x, group_name)", "memset32_(x, 0, 0, 1)"):  # the candidate moves the data, or nothing moves
        assert static_flags(src.format(call=call)) == [], call


# ---- NCCL / MPI through ctypes ----------------------------------------------------------------------

CTYPES_CANDIDATE = '''
import ctypes
import torch
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
__global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 1.f; }
void run(torch::Tensor x) { scale<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), x.numel()); }
"""
_ext = load_inline(name="scale", cpp_sources="", cuda_sources=SRC, functions=["run"])
_lib = ctypes.CDLL("LIBRARY")
_reduce = getattr(_lib, "nccl" + "AllReduce")


def solution(x):
    out = x.clone()
    _ext.run(out)
    _reduce(out.data_ptr(), out.data_ptr(), out.numel(), 7, 0, None, None)
    return out
'''


def _analyzed(tmp_path, src):
    from analyzer.pipeline import StaticAnalyzer, StaticOptions
    from pkb.corpus import read_candidate

    folder = tmp_path / "solutions_cuda_fp32_h100_8_x"
    folder.mkdir(exist_ok=True)
    path = folder / "1_allreduce_cuda.py"
    path.write_text(src)
    analyzer = StaticAnalyzer(StaticOptions(ptx=False, use_cache=False))
    try:
        return analyzer.analyze(read_candidate(path, tmp_path))
    finally:
        analyzer.close()


def test_a_collective_library_loaded_through_ctypes_is_the_nccl_mechanism_and_pkb012(tmp_path):
    """The entry point's name is built at run time: the load is the evidence."""
    rec = _analyzed(tmp_path, CTYPES_CANDIDATE.replace("LIBRARY", "libnccl.so.2"))
    load_line = CTYPES_CANDIDATE.splitlines().index('_lib = ctypes.CDLL("LIBRARY")') + 1
    mechanisms = {lab.value: lab for lab in rec.labels.get("mechanism", [])}
    assert "nccl" in mechanisms and mechanisms["nccl"].evidence[0].line == load_line
    assert "nccl_implicit" in {lab.value for lab in rec.labels.get("sync", [])}
    assert [(f.rule, f.line) for f in rec.findings if f.rule == "PKB012"] == [("PKB012", load_line)]
    other = _analyzed(tmp_path, CTYPES_CANDIDATE.replace("LIBRARY", "libcudart.so"))  # no collective library
    assert "nccl" not in {lab.value for lab in other.labels.get("mechanism", [])}
    assert not [f for f in other.findings if f.rule == "PKB012"]


def test_nccl_and_mpi_entry_points_called_through_a_handle_are_library_calls():
    from analyzer.python_pass import analyze_python

    src = (
        "import ctypes\n"
        "_nccl = ctypes.cdll.LoadLibrary('/opt/nccl/lib/libnccl.so.2')\n"
        "_mpi = ctypes.CDLL('libmpi.so.40')\n"
        "def solution(x):\n"
        "    _nccl.ncclAllReduce(1, 2, 3, 7, 0, None, None)\n"
        "    _nccl.ncclSend(1, 2)\n"
        "    _mpi.MPI_Allreduce(1)\n"
        "    _nccl.ncclGetVersion(None)\n"
        "    return x\n"
    )
    calls = {(c.category, c.qualname) for c in analyze_python(src, "c.py").calls}
    assert ("collective", "nccl.ncclAllReduce") in calls and ("p2p", "nccl.ncclSend") in calls
    assert ("collective", "mpi.MPI_Allreduce") in calls
    assert ("library_load", "ctypes.cdll.LoadLibrary('/opt/nccl/lib/libnccl.so.2')") in calls
    assert not any(q.endswith("ncclGetVersion") for _, q in calls)  # moves nothing


def test_a_handler_calling_nccl_through_ctypes_is_a_fallback():
    from pkb.eval.static_checks import static_flags

    src = "def solution(x):\n    try:\n        return ext.run(x)\n    except Exception:\n        _nccl.ncclAllReduce(1, 2, 3, 7, 0, None, None)\n        return x\n"
    assert [f["flag"] for f in static_flags(src)] == ["fallback_try_except"]


@pytest.fixture
def library_watch():
    from pkb.eval.library_loads import CollectiveLibraryWatch

    watch = CollectiveLibraryWatch()
    watch.install()
    try:
        yield watch
    finally:
        watch.uninstall()


def test_the_watch_records_a_collective_library_the_candidate_loads(library_watch, tmp_path):
    import ctypes
    import shutil

    import _json  # a shared object that is safe to load twice and call nothing in

    with pytest.raises(OSError):
        ctypes.CDLL("libnccl_pkb_absent.so.2")  # not there: the attempt is recorded all the same
    stand_in = tmp_path / "libnccl.so.2"
    shutil.copy(_json.__file__, stand_in)  # a collective library's file name on CPU
    ctypes.CDLL(str(stand_in))
    ctypes.CDLL(_json.__file__)  # no collective library: not recorded
    assert library_watch.records == [
        {"via": "ctypes", "library": "libnccl_pkb_absent.so.2", "loaded": False},
        {"via": "ctypes", "library": str(stand_in), "loaded": True},
    ]
    assert library_watch.loaded()


def test_the_watch_records_nccl_symbols_looked_up_in_any_library(library_watch):
    import ctypes

    process = ctypes.CDLL(None)  # the whole process: torch's own libnccl, where one is loaded
    for name in ("ncclAllReduce", "ncclGetVersion"):
        try:
            getattr(process, name)
        except AttributeError:
            pass  # no NCCL in this process: the lookup is recorded all the same
    assert {(r["symbol"], r["moves_data"]) for r in library_watch.records} == {("ncclAllReduce", True), ("ncclGetVersion", False)}
    assert library_watch.loaded()


def test_the_watchs_hooks_are_watched_and_put_back():
    import ctypes

    from pkb.eval.library_loads import CollectiveLibraryWatch

    real = ctypes._dlopen
    watch = CollectiveLibraryWatch()
    watch.install()
    try:
        snapshot = guard.HarnessSnapshot()
        assert snapshot.changed() == []
        ctypes._dlopen = real  # the hook dropped
        assert "ctypes._dlopen" in snapshot.changed()
        snapshot.restore()
        assert snapshot.changed() == []
    finally:
        watch.uninstall()
    assert ctypes._dlopen is real


def _launch_with(records):
    from pkb.eval.launcher import LaunchResult, RankReport

    stats = {"event": {"median_ms": 1.0}, "wall": {"median_ms": 1.1}}
    result = {
        "finished": True, "error": None, "trials": [{"trial": 0, "matched": True, "values_close": True}],
        "timed_checks": [{"trial": 0, "matched": True}], "refresh_check": {"matched": True},
        "timing": {"reference": stats, "candidate": stats}, "speed_floor": {"applies": False},
        "dist_calls": {"trials": 0, "timed": 0, "checks": 0, "names": {}}, "collective_libraries": records,
    }
    return LaunchResult(returncode=0, timed_out=False, wall_s=1.0, ranks=[RankReport(rank=r, phase="done", result={**result, "rank": r}) for r in range(2)])


def test_a_collective_library_loaded_confirms_a_fallback_and_a_custom_kernel_claim():
    from types import SimpleNamespace

    from pkb.eval.outcome import decide

    loaded = [{"via": "ctypes", "library": "libnccl.so.2", "loaded": True}]
    fallback = SimpleNamespace(static_flags=[{"flag": "fallback_try_except", "line": 3, "snippet": ""}], claims_custom_kernels=False)
    ev = decide(_launch_with(loaded), fallback)
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "fallback_path") and "libnccl.so.2" in ev["reason"]
    claims = SimpleNamespace(static_flags=[], claims_custom_kernels=True)
    ev = decide(_launch_with(loaded), claims)
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "calls_reference")
    # an attempt that failed moved nothing: a note, no accusation
    failed = [{"via": "ctypes", "library": "libnccl.so.2", "loaded": False}]
    ev = decide(_launch_with(failed), fallback)
    assert ev["outcome"] in ("faster", "slower", "tie") and ev["details"]["collective_libraries"] == failed
    # a plain NCCL baseline that calls the library through ctypes: its mechanism, not an offence
    ev = decide(_launch_with(loaded), SimpleNamespace(static_flags=[], claims_custom_kernels=False))
    assert ev["outcome"] != "suspect" and ev["details"]["collective_libraries"] == loaded
