"""eval --jobs: builds first in the CPU pool, then launches in slots; the launch finds its build done."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_eval_support import quick_options, run_eval, write_candidate

from pkb.eval import Environment, plan_slots
from pkb.eval.options import EvalOptions, config_key

# Problem 1 (all-reduce) with a C++ extension built lazily inside the first call (pybind11 only:
# seconds to compile, no torch headers, no CUDA).
LAZY_EXT = '''
from torch.utils.cpp_extension import load_inline

SRC = """#include <pybind11/pybind11.h>
int scale_of(int x) { return x; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scale_of", &scale_of); }
"""
_ext = None


def _get_ext():
    global _ext
    if _ext is None:
        _ext = load_inline("jobs_lazy_ext", cpp_sources=SRC, with_cuda=False, no_implicit_headers=True)
    return _ext


@torch.no_grad()
def solution(x):
    out = x.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out * _get_ext().scale_of(1)
'''


def test_eval_prebuilds_then_the_launch_loads_the_build(tmp_path):
    cand = write_candidate(tmp_path / "cands", "1_allreduce_lazy.py", LAZY_EXT)
    builds = tmp_path / "builds"
    options = quick_options(tmp_path, jobs=0, iters=0, build_dir=str(builds))
    [rec] = run_eval([cand], options)
    ev = rec.evaluation
    assert ev["outcome"] == "correct" or ev.get("correct"), ev
    pre = ev["details"]["prebuild"]
    assert pre["ok"] and not pre["cached"] and len(pre["builds"]) == 1, pre
    [so] = (builds / pre["builds"][0]).glob("*.so")
    # built by the prebuild (its result file was written after the .so), never rebuilt by the ranks
    assert so.stat().st_mtime <= Path(pre["log"]).with_suffix(".json").stat().st_mtime
    assert [d.name for d in builds.iterdir() if d.name.startswith("jobs_lazy_ext")] == pre["builds"]
    assert all(r["compile_s"] is not None for r in ev["ranks"])


def env(device: str, count: int, ws: int) -> Environment:
    return Environment(device, "nccl" if device == "cuda" else "gloo", count, ws, "tag")


@pytest.mark.parametrize(
    "count, ws, iters, mode, jobs, expected",
    [
        (8, 2, 100, "exclusive", 0, ["0,1"]),  # timed: alone on the node
        (8, 2, 100, "shared", 0, ["0,1", "2,3", "4,5", "6,7"]),
        (8, 2, 0, "exclusive", 0, ["0,1", "2,3", "4,5", "6,7"]),  # untimed: packed
        (1, 1, 0, "exclusive", 0, ["0"] * 4),  # world size 1: several launches on one GPU
        (8, 1, 100, "shared", 3, ["0", "1", "2"]),  # --jobs caps
        (8, 2, 100, "exclusive", 1, ["0,1"]),
    ],
)
def test_gpu_slots(monkeypatch, count, ws, iters, mode, jobs, expected):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    options = EvalOptions(iters=iters, timing_mode=mode, jobs=jobs)
    assert plan_slots(options, env("cuda", count, ws)) == expected


def test_slots_follow_visible_devices_and_cpu_jobs(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert plan_slots(EvalOptions(iters=0, jobs=0), env("cuda", 4, 2)) == ["4,5", "6,7"]
    assert plan_slots(EvalOptions(jobs=3), env("cpu", 0, 2)) == ["", "", ""]


def test_shared_timing_is_its_own_configuration():
    kw = dict(problem_id=1, world_size=1, backend="nccl", dtype="bfloat16")
    exclusive = config_key(options=EvalOptions(), **kw)
    assert exclusive != config_key(options=EvalOptions(timing_mode="shared"), **kw)
    assert config_key(options=EvalOptions(iters=0), **kw) == config_key(options=EvalOptions(iters=0, timing_mode="shared"), **kw)


def test_screening_packs_correctness_and_times_only_the_correct(tmp_path, monkeypatch):
    import pkb.eval as ev
    from test_eval_support import REFERENCE, allreduce_then

    real_plan = ev.plan_slots
    # a node where untimed launches pack two at a time and a timed one runs alone (as on a GPU)
    monkeypatch.setattr(ev, "plan_slots", lambda options, env: ["", ""] if options.iters == 0 else [""])
    good = write_candidate(tmp_path / "c", "1_allreduce_good.py", REFERENCE)
    wrong = write_candidate(tmp_path / "c", "1_allreduce_short.py", allreduce_then("return out[:-1]"))
    options = quick_options(tmp_path, jobs=0, iters=3)
    good_rec, wrong_rec = run_eval([good, wrong], options)
    assert "screened" in wrong_rec.evaluation["details"]
    assert (wrong_rec.evaluation["outcome"], wrong_rec.evaluation["subtype"]) == ("wrong_result", "shape_mismatch")
    assert "screened" not in good_rec.evaluation["details"] and good_rec.evaluation["correct"]
    assert good_rec.evaluation["timing_mode"] == "exclusive"
    assert all(r["timing"] for r in good_rec.evaluation["ranks"])  # its timed launch ran
    jobs = sorted(p.name.rsplit("-", 1)[-1] for p in (tmp_path / "work" / "jobs").iterdir())
    assert jobs.count("screen") == 2 and len(jobs) == 3
    monkeypatch.setattr(ev, "plan_slots", real_plan)
    again = run_eval([good, wrong], options)  # stored under the timed configuration: nothing relaunched
    assert all(r.evaluation["status"] == "skipped_cached" for r in again)


def test_untimed_launches_start_while_other_builds_run(tmp_path, monkeypatch):
    # A candidate without a build lands before a slow build of another finishes: launches are not
    # held back until the last build (on the H200, 24 real files waited 180 s for two build waves).
    import threading
    import time

    import pkb.eval.build as build
    from test_eval_support import REFERENCE

    from pkb.corpus import read_candidate
    from pkb.eval import evaluate

    plain = write_candidate(tmp_path / "c", "1_allreduce_plain.py", REFERENCE)
    lazy = write_candidate(tmp_path / "c", "1_allreduce_lazy.py", LAZY_EXT)
    first_landed = threading.Event()
    built_at: list[float] = []
    real_prebuild = build.prebuild

    def slow_prebuild(path, opts, timeout_s):
        first_landed.wait(timeout=90)  # a sequential run never sets it: the test then fails below
        result = real_prebuild(path, opts, timeout_s)
        built_at.append(time.monotonic())
        return result

    monkeypatch.setattr(build, "prebuild", slow_prebuild)
    landed_at: dict[str, float] = {}

    def on_result(rec, evaluation, ranks):
        landed_at[Path(rec.path).name] = time.monotonic()
        first_landed.set()

    records = [read_candidate(plain), read_candidate(lazy)]
    evaluate(records, quick_options(tmp_path, jobs=0, iters=0, build_dir=str(tmp_path / "builds")), on_result=on_result)
    assert all(r.evaluation.get("correct") for r in records), [r.evaluation.get("reason") for r in records]
    assert landed_at["1_allreduce_plain.py"] < built_at[0] < landed_at["1_allreduce_lazy.py"]
    assert records[1].evaluation["details"]["prebuild"]["ok"]
