"""eval --jobs: builds first in the CPU pool, then launches in slots; the launch finds its build done."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from test_eval_support import REFERENCE, quick_options, run_eval, write_candidate

from pkb.eval import Environment, plan_slots
from pkb.eval.build import candidate_build_root
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
    own = candidate_build_root(builds, rec.evaluation.get("candidate_sha256") or hashlib.sha256(cand.read_bytes()).hexdigest())
    [so] = (own / pre["builds"][0]).glob("*.so")
    # built by the prebuild (its result file was written after the .so), never rebuilt by the ranks
    assert so.stat().st_mtime <= Path(pre["log"]).with_suffix(".json").stat().st_mtime
    assert [d.name for d in own.iterdir() if d.name.startswith("jobs_lazy_ext")] == pre["builds"]
    assert [d.name for d in builds.iterdir()] == ["candidates"]  # nothing outside the candidates' own folders
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
    beside = config_key(options=EvalOptions(timing_mode="beside-builds"), **kw)
    assert beside not in (exclusive, config_key(options=EvalOptions(timing_mode="shared"), **kw))


def test_screening_packs_correctness_and_times_only_the_correct(tmp_path, monkeypatch):
    import pkb.eval as ev
    from test_eval_support import allreduce_then

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
    assert "timed_in_screen" in good_rec.evaluation["details"]  # timed at its gate, in the same launch
    jobs = sorted(p.name.rsplit("-", 1)[-1] for p in (tmp_path / "work" / "jobs").iterdir())
    assert jobs == ["screen", "screen"]
    monkeypatch.setattr(ev, "plan_slots", real_plan)
    again = run_eval([good, wrong], options)  # stored under the timed configuration: nothing relaunched
    assert all(r.evaluation["status"] == "skipped_cached" for r in again)


def test_untimed_launches_start_while_other_builds_run(tmp_path, monkeypatch):
    # A candidate without a build lands before a slow build of another finishes: launches are not
    # held back until the last build (on the H200, 24 real files waited 180 s for two build waves).
    import threading
    import time

    import pkb.eval.build as build
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


def test_cpu_split_keeps_cores_for_a_timed_launch(monkeypatch):
    from pkb.eval import schedule

    monkeypatch.setattr(schedule.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert schedule.cpu_split("cuda", 1) == (tuple(range(14)), (14, 15))
    assert schedule.cpu_split("cuda", 2) == (tuple(range(12)), (12, 13, 14, 15))
    assert schedule.cpu_split("cuda", 8) == ((), ())  # 16 cores for 8 ranks: the builds keep them all
    assert schedule.cpu_split("cpu", 1) == ((), ())


class _Feed:
    """Stands in for schedule.BuildFeed: `first` ready at once, `second` once `release` is set (or
    after about three seconds of waiting), one build outstanding until then."""

    def __init__(self, first, second, release):
        self.items, self.release, self.outstanding, self.builds_done = (first, second), release, 1, False

    def __iter__(self):
        yield self.items[0]
        for _ in range(30):
            if self.release.is_set():
                break
            self.release.wait(0.1)
            yield None
        self.outstanding = 0
        yield self.items[1]


def _screened_run(monkeypatch, timed_cpus):
    import threading
    from dataclasses import replace
    from types import SimpleNamespace

    import pkb.eval.outcome as outcome
    from pkb.eval import Pending, schedule
    from pkb.eval.job import JobSpec

    monkeypatch.setattr(outcome, "decide", lambda result, job: {"correct": result.correct})
    job = JobSpec(job_dir="j", candidate_path="c.py", candidate_sha256="", problem={}, world_size=1, backend="nccl",
                  device="cuda", dtype="bfloat16", trials=1, iters=10)
    pendings = {name: Pending(replace(job, job_dir=name), {}, name, "key", 1, 0.0) for name in ("a", "b")}
    release = threading.Event()
    events: list[tuple] = []

    def launch(p, gate):
        screen = p.job.job_dir.endswith("-screen")
        events.append((p.job.job_dir, "screen" if screen else "timed", feed.outstanding, list(p.job.cpus)))
        assert p.job.timing_gate == (gate is not None) and (p.job.iters > 0) == (not screen or gate is not None)
        correct = p.job.job_dir.startswith("a")
        if not screen:
            release.set()
        elif gate is not None and correct:  # its ranks wait at the gate, as pkb.eval.worker's do
            gate.waiting.set()
            release.set()
            assert gate.granted.wait(10), "never granted"
            gate.opened_ns = 1
            events.append((p.job.job_dir, "timing in its screen", feed.outstanding, list(p.job.cpus)))
        return SimpleNamespace(ranks=[], correct=correct)

    feed = _Feed(("rec-a", pendings["a"]), ("rec-b", pendings["b"]), release)
    decided = {}
    schedule.run_screened(feed, ["0", "0"], "0", timed_cpus, launch,
                          lambda p, result, rec: {"timed": p.job.iters > 0, **p.evaluation.get("details", {})},
                          lambda rec, ev, ranks: decided.__setitem__(rec, ev))
    return events, decided


def test_a_timed_launch_runs_beside_the_builds_on_cores_of_its_own(monkeypatch):
    events, decided = _screened_run(monkeypatch, (14, 15))
    # a was screened correct and timed while b's build was still running, on the kept cores
    assert events[:2] == [("a-screen", "screen", 1, []), ("a", "timed", 1, [14, 15])], events
    assert events[2][:2] == ("b-screen", "screen")
    assert decided["rec-a"]["timed"] and decided["rec-a"]["timed_beside_builds"] == {"builds": 1, "cores": [14, 15]}
    assert "screened" in decided["rec-b"] and not decided["rec-b"]["timed"]


def test_without_cores_to_keep_a_correct_screen_times_at_its_gate_after_the_last_build(monkeypatch):
    events, decided = _screened_run(monkeypatch, ())
    # a parks at its gate; b's screen still starts (a build is outstanding, so a may not time yet);
    # a is let through only once b's build has landed and b's screen is over: no second launch
    assert [e[:2] for e in events] == [("a-screen", "screen"), ("b-screen", "screen"), ("a-screen", "timing in its screen")], events
    assert events[2][2] == 0
    assert decided["rec-a"]["timed"] and "timed_in_screen" in decided["rec-a"] and "timed_beside_builds" not in decided["rec-a"]
    assert "screened" in decided["rec-b"]


def test_no_screen_starts_while_a_parked_candidate_waits_for_the_node(monkeypatch):
    # Every build has landed and three screens run. a reaches its gate while b and c still run;
    # c ends and frees a slot, but d's screen must wait: a is let through once b is done too, and
    # d starts only after a has timed (else the node would never be a's alone).
    import threading
    import time
    from dataclasses import replace
    from types import SimpleNamespace

    import pkb.eval.outcome as outcome
    from pkb.eval import Pending, schedule
    from pkb.eval.job import JobSpec

    monkeypatch.setattr(outcome, "decide", lambda result, job: {"correct": result.correct})
    job = JobSpec(job_dir="j", candidate_path="c.py", candidate_sha256="", problem={}, world_size=1, backend="nccl",
                  device="cuda", dtype="bfloat16", trials=1, iters=10)
    items = [(f"rec-{n}", Pending(replace(job, job_dir=n), {}, n, "key", 1, 0.0)) for n in "abcd"]
    events: list[str] = []
    lock = threading.Lock()

    def note(what):
        with lock:
            events.append(what)

    def launch(p, gate):
        name = p.job.job_dir[0]
        note(f"{name} screen")
        if name == "a":
            time.sleep(0.2)  # its correctness trials
            gate.waiting.set()
            assert gate.granted.wait(10), "never granted"
            gate.opened_ns = 1
            note("a timing")
        else:
            time.sleep({"b": 0.8, "c": 0.4, "d": 0.0}[name])
            note(f"{name} done")
        return SimpleNamespace(ranks=[], correct=name == "a")

    class Ready:
        outstanding, builds_done = 0, True

        def __iter__(self):
            return iter(items)

    decided = {}
    schedule.run_screened(Ready(), ["0", "0", "0"], "0", (), launch, lambda p, result, rec: dict(p.evaluation.get("details", {})),
                          lambda rec, ev, ranks: decided.__setitem__(rec, ev))
    assert events.index("c done") < events.index("b done") < events.index("a timing") < events.index("d screen"), events
    assert "timed_in_screen" in decided["rec-a"] and all("screened" in decided[f"rec-{n}"] for n in "bcd")


def test_builds_run_on_the_cores_they_are_given(tmp_path, monkeypatch):
    from pkb.eval.build import BuildOptions, prebuild

    cand = write_candidate(tmp_path / "c", "1_allreduce_cores.py",
                           'import os\nopen(os.environ["PKB_TEST_CORES_FILE"], "w").write(repr(sorted(os.sched_getaffinity(0))))\n')
    # its own build folder: what the prebuild's sandbox lets it write
    seen = candidate_build_root(tmp_path / "builds", hashlib.sha256(cand.read_bytes()).hexdigest()) / "cores.txt"
    seen.parent.mkdir(parents=True)
    monkeypatch.setenv("PKB_TEST_CORES_FILE", str(seen))
    prebuild(cand, BuildOptions(root=tmp_path / "builds", cpus=(0,)))
    assert seen.read_text() == "[0]"
