"""--emulate with --pkb-root: a PKB checkout's root on the candidate's path, its references and its
input factory used; builds made before the clock and never counted against a step's limit."""

from __future__ import annotations

import hashlib
import os
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest
from emulate_helpers import EmulatedCandidate

from pkb.emulate import emulated_evaluate
from pkb.emulate.records import emulate_records, prebuild_before_the_clock
from pkb.eval.options import EvalOptions

# A small PKB-shaped checkout of our own: problem 901 exists only there.
REFERENCE = '''
import torch
import torch.distributed as dist


def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out * 2
'''

FACTORY = '''
import torch


def create_input_tensor(rank, world_size, problem_id, shape, dtype, trial=0, device=None):
    # marked values: rank + 1 + 10 * trial, so a test can tell these inputs from any other
    return (torch.full((4, 8), float(rank + 1 + 10 * trial), dtype=dtype, device=device),)
'''

HELPER = '''
def scale():
    return 2
'''

CANDIDATE = '''
import torch
import torch.distributed as dist

from utils.pkb_side_helper import scale  # importable only with PKB's root on the path


def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out * scale()
'''


def _pkb_root(tmp_path: Path) -> Path:
    root = tmp_path / "pkb"
    (root / "reference").mkdir(parents=True)
    (root / "utils").mkdir()
    (root / "reference" / "901_doubled_sum.py").write_text(textwrap.dedent(REFERENCE))
    (root / "utils" / "__init__.py").write_text("")
    (root / "utils" / "input_output_tensors.py").write_text(textwrap.dedent(FACTORY))
    (root / "utils" / "pkb_side_helper.py").write_text(textwrap.dedent(HELPER))
    return root


@pytest.fixture(autouse=True)
def _forget_utils():
    """PKB's `utils` package is imported in the test process by the in-process runs."""
    yield
    for name in [m for m in sys.modules if m == "utils" or m.startswith("utils.")]:
        sys.modules.pop(name)


def test_pkb_root_gives_path_reference_and_inputs(tmp_path):
    root = _pkb_root(tmp_path)
    cand = tmp_path / "solutions_cuda_fp32_h100_8_x_y" / "901_doubled_sum_cuda.py"
    cand.parent.mkdir()
    cand.write_text(textwrap.dedent(CANDIDATE))
    wrong = cand.parent / "901_doubled_sum_wrong_cuda.py"
    wrong.write_text(textwrap.dedent(CANDIDATE).replace("out * scale()", "out * 3"))
    options = EvalOptions(trials=2, dtype="float32", pkb_root=str(root), store_path=str(tmp_path / "s.sqlite"),
                          work_dir=str(tmp_path / "w"))
    recs = [EmulatedCandidate(cand, 901, "doubled_sum"), EmulatedCandidate(wrong, 901, "doubled_sum")]
    emulate_records(recs, 4, options, device="cpu")
    good, bad = recs[0].evaluation, recs[1].evaluation
    assert good["status"] == "ran" and good["correct"], good
    assert good["problem_stem"] == "901_doubled_sum"
    assert bad["outcome"] == "wrong_result", bad
    # the values compared are PKB's factory's: sum over 4 ranks of (rank + 1) = 10, doubled
    first = bad["trials"][0]["ranks"][0]["first_mismatches"][0]
    assert first["expected"] == pytest.approx(20.0) and first["got"] == pytest.approx(30.0), first


def test_a_checkouts_namespace_utils_wins_over_our_stand_in_already_imported(tmp_path, monkeypatch):
    """PKB's `utils` has no __init__.py; once our stand-in `utils` package (a regular one) was put
    on the path for an earlier candidate of this process, loading a checkout's problem must still
    give the checkout's input factory."""
    import importlib

    import torch

    from pkb.eval import problem_source
    from pkb.eval.shims import CANDIDATE_PATH

    root = _pkb_root(tmp_path)
    (root / "utils" / "__init__.py").unlink()  # as in PKB: a namespace package
    monkeypatch.setattr(sys, "path", [CANDIDATE_PATH, *sys.path])
    for name in [m for m in sys.modules if m == "utils" or m.startswith("utils.")]:
        monkeypatch.delitem(sys.modules, name)
    assert "candidate_path" in importlib.import_module("utils").__file__  # our stand-in is cached
    src = problem_source.load({"kind": "pkb", "id": 901, "root": str(root), "stem": "901_doubled_sum"},
                              "float32", "small", None)
    (x,) = src.make_inputs(2, 4, 1, "cpu", torch.float32)
    assert float(x[0, 0]) == 13.0  # rank + 1 + 10 * trial: the checkout's factory
    assert CANDIDATE_PATH not in sys.path


def test_without_pkb_root_the_pkb_only_problem_is_not_found(tmp_path):
    _pkb_root(tmp_path)
    cand = tmp_path / "901_doubled_sum_cuda.py"
    cand.write_text(textwrap.dedent(CANDIDATE))
    options = EvalOptions(trials=1, dtype="float32", store_path=str(tmp_path / "s.sqlite"), work_dir=str(tmp_path / "w"))
    rec = EmulatedCandidate(cand, 901, "doubled_sum")
    emulate_records([rec], 2, options, device="cpu")
    assert rec.evaluation["status"] == "not_run" and "901" in rec.evaluation["reason"]


def test_pkb_references_run_without_no_grad(tmp_path):
    """PKB's worker calls references without torch.no_grad; one that takes a gradient must run."""
    root = _pkb_root(tmp_path)
    (root / "reference" / "901_doubled_sum.py").write_text(textwrap.dedent('''
        import torch
        import torch.distributed as dist


        def solution(tensor):
            w = torch.ones_like(tensor, requires_grad=True)
            (w * tensor).sum().backward()  # fails under no_grad: nothing requires grad
            out = tensor.clone()
            dist.all_reduce(out)
            return out * 2
        '''))
    from pkb.eval import problem_source

    ref = problem_source.resolve(901, "doubled_sum", EvalOptions(pkb_root=str(root)))
    cand = tmp_path / "901_doubled_sum_cuda.py"
    cand.write_text(textwrap.dedent(CANDIDATE))
    rec = emulated_evaluate(cand, ref.job_problem, 2, trials=1, device="cpu", dtype="float32")
    assert rec["correct"], rec


SLOW_BUILD = '''
import torch
import torch.distributed as dist
from torch.utils import cpp_extension

_ext = None


def solution(tensor):
    global _ext
    if _ext is None:  # a lazy build on the first call, as PKB's _get_ext() helpers do
        _ext = cpp_extension.load_inline(name="slow_ext", cpp_sources="int f() { return 1; }")
    out = tensor.clone()
    dist.all_reduce(out)
    return out
'''


def test_a_build_inside_a_call_is_not_counted_by_the_step_limit(tmp_path, monkeypatch):
    from torch.utils import cpp_extension

    def slow_load_inline(*args, **kwargs):  # stands in for a 3 s nvcc build
        time.sleep(3.0)
        return types.SimpleNamespace()

    monkeypatch.setattr(cpp_extension, "load_inline", slow_load_inline)
    cand = tmp_path / "1_allreduce_slow_build.py"
    cand.write_text(textwrap.dedent(SLOW_BUILD))
    rec = emulated_evaluate(cand, 1, 2, trials=1, device="cpu", dtype="float32", call_timeout_s=1.0)
    assert rec["correct"], rec
    builds = rec["emulation"]["builds"]
    assert len(builds) == 2 and max(b["seconds"] + b["waited_s"] for b in builds) >= 3.0
    # and a build past its own limit still ends the step
    rec = emulated_evaluate(cand, 1, 2, trials=1, device="cpu", dtype="float32", call_timeout_s=1.0, build_timeout_s=1.0)
    assert (rec["outcome"], rec["subtype"]) == ("hang", "timeout"), rec


from pkb.eval.build import candidate_build_root as real_candidate_build_root  # noqa: E402
from pkb.eval.build import hidden_from_builds as real_hidden_from_builds  # noqa: E402


class _FakeBuild:
    """Stands in for pkb.eval.build (its API: build_root, BuildOptions, prebuild_many -> BuildResults)."""

    def __init__(self, order: list[str]) -> None:
        self.calls: list[tuple] = []
        self.order = order

    def build_root(self, out=None):
        return Path("/tmp/pkb-test-builds")

    class BuildOptions:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    hidden_from_builds = staticmethod(real_hidden_from_builds)  # the real one: what the run hides
    candidate_build_root = staticmethod(real_candidate_build_root)  # the real one: each file's own folder

    def prebuild_many(self, paths, options, jobs=None, timeout_s=900.0):
        self.calls.append(([Path(p) for p in paths], options, timeout_s))
        self.order.append("prebuild")
        return {Path(p): types.SimpleNamespace(ok=True, seconds=1.5, error="", log_path="", cached=False) for p in paths}


CUDA_SOURCE = '''
import torch
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="x", cpp_sources="", cuda_sources="__global__ void k() {}")


def solution(tensor):
    return tensor
'''


def test_prebuild_runs_before_the_run_into_the_directory_the_run_routes_to(tmp_path, monkeypatch):
    import pkb.emulate.isolate
    import pkb.eval

    cand = tmp_path / "901_doubled_sum_cuda.py"
    cand.write_text(textwrap.dedent(CUDA_SOURCE))
    order: list[str] = []
    fake = _FakeBuild(order)
    monkeypatch.setitem(sys.modules, "pkb.eval.build", fake)
    monkeypatch.setattr(pkb.eval, "build", fake, raising=False)
    jobs = []

    def fake_run_child(job, job_dir, **kw):  # no GPU here: what the run would be given is enough
        order.append("run")
        jobs.append(job)
        return {"status": "ran", "outcome": "wrong_result", "subtype": "local_only", "details": {"multicast_reads": 0}}

    monkeypatch.setattr(pkb.emulate.isolate, "run_child", fake_run_child)
    root = _pkb_root(tmp_path)
    options = EvalOptions(trials=1, compile_timeout_s=123.0, pkb_root=str(root), store_path=str(tmp_path / "s.sqlite"),
                          work_dir=str(tmp_path / "w"))
    second = cand.with_name("901_doubled_sum_again_cuda.py")
    second.write_text(textwrap.dedent(CUDA_SOURCE) + "\n# another file\n")
    recs = [EmulatedCandidate(cand, 901, "doubled_sum"), EmulatedCandidate(second, 901, "doubled_sum")]
    emulate_records(recs, 2, options, device="cuda")
    rec = recs[0]
    assert order == ["prebuild", "run", "run"], rec.evaluation  # every build before the first run
    (paths, opts, timeout), = fake.calls
    assert [p.read_text() for p in paths] == [cand.read_text(), second.read_text()] and timeout == 123.0
    assert str(opts.root) == "/tmp/pkb-test-builds"  # prebuild_many puts each file under its own folder
    assert [j["build_root"] for j in jobs] == [str(real_candidate_build_root(opts.root, hashlib.sha256(p.read_bytes()).hexdigest()))
                                               for p in (cand, second)]
    assert opts.hidden == [str(tmp_path / "s.sqlite"), str(tmp_path / "w")]  # the builds' imports do not see the store
    assert opts.extra_sys_path == jobs[0]["extra_sys_path"] == [str(root.resolve())]
    assert rec.evaluation["details"]["prebuild"]["seconds"] == 1.5
    assert rec.evaluation["outcome"] == "wrong_result" and rec.evaluation["emulated"]
    assert prebuild_before_the_clock([cand], options, "cpu") == {}  # no build on the CPU world


@pytest.mark.skipif(not os.environ.get("PKB_ROOT"), reason="set PKB_ROOT to a PKB checkout")
def test_real_pkb_files_reach_the_candidate_call_on_cpu():
    """With a PKB checkout: PKB's reference and inputs run on the virtual ranks and the candidate
    is called; on the CPU world it can then fail only for want of CUDA."""
    from pkb.eval import problem_source

    root = Path(os.environ["PKB_ROOT"])
    options = EvalOptions(pkb_root=str(root))
    files = sorted(root.glob("solutions_cuda_*/2_allgather_cuda.py")) + sorted(root.glob("solutions_cuda_*/3_broadcast_cuda.py"))
    assert files
    for f in files:
        ref = problem_source.resolve(int(f.name.split("_")[0]), f.name.split("_", 1)[1][: -len("_cuda.py")], options)
        rec = emulated_evaluate(f, ref.job_problem, 4, trials=1, device="cpu", run_cuda_candidates_on_cpu=True)
        errors = [r["error"] for r in rec["ranks"] if r.get("error")]
        assert errors and all(e["phase"] == "trial 0 candidate" for e in errors), (f, rec["reason"])
        text = " ".join(f"{e['type']} {e['message']}" for e in errors)
        assert any(w in text for w in ("CUDA", "cuda", ".so", "CUDA_HOME", "AssertionError")), (f, text)


def test_a_build_router_installed_before_the_run_stays_in_the_chain(monkeypatch):
    """route_builds patches load_inline before the candidate is imported; the emulation's own
    build wrapper goes on top of it, never around it to torch's original."""
    import functools

    from torch.utils import cpp_extension

    from pkb.emulate import patch
    from pkb.emulate.world import World

    routed_calls = []
    original = cpp_extension.load_inline

    @functools.wraps(original)  # sets __wrapped__, as a router built with functools would
    def routed(*args, **kwargs):
        routed_calls.append(kwargs.get("name"))
        return "built"

    monkeypatch.setattr(cpp_extension, "load_inline", routed)
    world = World(2, "cpu").start()
    try:
        with patch.installed(world):
            out = world.step(lambda ctx: cpp_extension.load_inline(name=f"ext{ctx.rank}", cpp_sources=""), phase="build")
    finally:
        world.close()
    assert [r.value for r in out.results] == ["built", "built"]
    assert sorted(routed_calls) == ["ext0", "ext1"]
    assert cpp_extension.load_inline is routed


def test_each_virtual_rank_has_its_own_reference_module(tmp_path):
    """Module-level state of a reference is per rank, as on real ranks (a process each): PKB's
    moe_ep_narrow caches its subgroups at module level, each rank its own list."""
    root = _pkb_root(tmp_path)
    (root / "reference" / "901_doubled_sum.py").write_text(textwrap.dedent('''
        import torch
        import torch.distributed as dist

        _FIRST_RANK = {}  # per world size: the rank that called first (in this module)


        def solution(tensor):
            mine = _FIRST_RANK.setdefault(dist.get_world_size(), dist.get_rank())
            out = tensor.clone()
            dist.all_reduce(out)
            return out + mine
    '''))
    cand = tmp_path / "901_doubled_sum_cuda.py"
    cand.write_text(textwrap.dedent('''
        import torch.distributed as dist


        def solution(tensor):
            out = tensor.clone()
            dist.all_reduce(out)
            return out + dist.get_rank()
    '''))
    options = EvalOptions(trials=1, dtype="float32", pkb_root=str(root), store_path=str(tmp_path / "s.sqlite"),
                          work_dir=str(tmp_path / "w"))
    rec = EmulatedCandidate(cand, 901, "doubled_sum")
    emulate_records([rec], 4, options, device="cpu")
    assert rec.evaluation["status"] == "ran" and rec.evaluation["correct"], rec.evaluation
