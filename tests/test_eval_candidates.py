"""The real launcher end to end (the rank spawner, gloo on CPU) on candidates wrong in every way we detect.

All candidates of this module run in one `evaluate` call (two launches at a time), so the suite
pays a launch's start-up once per candidate and not per test.
"""

from __future__ import annotations

import os
import threading

import pytest
from test_eval_support import REFERENCE, allreduce_then, quick_options, run_eval, write_candidate

import problems
from pkb.store import Store

HANG_TIMEOUT_S = 30.0
RTOL = problems.get(1).spec.tolerances["float32"][1]

CANDIDATES = {
    "reference": (REFERENCE, True),
    "shape": (allreduce_then("return out[:-1]"), True),
    "dtype": (allreduce_then("return out.double()"), True),
    "nan": (allreduce_then("out[3, 5] = float('nan')\nreturn out"), True),
    "local_only": ("def solution(x):\n    return x.clone()\n", True),
    "rank_subset": (allreduce_then("if dist.get_rank() == 1:\n    out[0, :4] += 1.0\nreturn out"), True),
    # three tolerances off: outside atol/rtol, well within 10x of them
    "tolerance": (allreduce_then(f"return out * (1 + {3 * RTOL!r})"), True),
    "raises": ("def solution(x):\n    raise ValueError('deliberate failure in the candidate')\n", True),
    "no_solution": ("def compute(x):\n    return x\n", True),
    "arity": ("def solution(x, y):\n    return x\n", True),
    "syntax": ("def solution(x)\n    return x\n", True),
    "missing_module": ("import pkb_no_such_module_anywhere\n\ndef solution(x):\n    return x\n", True),
    # rank 0 waits on a barrier that rank 1 never reaches (rank 1 blocks without burning CPU)
    "hang": (
        "import threading\n\n"
        "def solution(x):\n"
        "    if dist.get_rank() == 1:\n"
        "        threading.Event().wait()\n"
        "    dist.barrier()\n"
        "    return x\n",
        True,
    ),
}

EXPECTED = {
    "shape": ("wrong_result", "shape_mismatch"),
    "dtype": ("wrong_result", "dtype_mismatch"),
    "nan": ("wrong_result", "nan_inf"),
    "local_only": ("wrong_result", ""),  # no evidence-free guess: the diagnosis stage tests hypotheses
    "rank_subset": ("wrong_result", "rank_subset"),
    "tolerance": ("wrong_result", "tolerance"),
    "raises": ("runtime_error", "python_exception"),
    "no_solution": ("load_error", "no_solution"),
    "arity": ("load_error", "signature_mismatch"),
    "syntax": ("compile_error", "python_syntax"),
    "missing_module": ("compile_error", "import_error"),
    "hang": ("hang", "timeout"),
}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eval_candidates")
    folder = tmp / "cands"
    paths = {name: write_candidate(folder, f"1_{name}.py", body, header) for name, (body, header) in CANDIDATES.items()}
    # The hang runs beside the others (its own store and a short limit); it costs no CPU while
    # it waits, and torch imports make two launches at a time no faster on two cores.
    hang_options = quick_options(tmp, timeout_s=HANG_TIMEOUT_S, store_path=str(tmp / "hang.sqlite"))
    hang_records: list = []
    hang = threading.Thread(target=lambda: hang_records.extend(run_eval([paths["hang"]], hang_options)))
    hang.start()
    options = quick_options(tmp, timeout_s=180.0, jobs=1)
    others = [n for n in CANDIDATES if n != "hang"]
    records = dict(zip(others, run_eval([paths[n] for n in others], options)))
    hang.join()
    records["hang"] = hang_records[0]
    return {"records": records, "options": options, "paths": paths, "tmp": tmp}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_wrong_candidate_gets_its_outcome(batch, name):
    ev = batch["records"][name].evaluation
    assert ev["status"] == "ran", ev["reason"]
    assert (ev["outcome"], ev["subtype"]) == EXPECTED[name], ev["reason"]
    assert ev["correct"] is False
    assert ev["speedup"] is None


def test_reference_as_candidate_is_correct_and_timed(batch):
    ev = batch["records"]["reference"].evaluation
    assert ev["status"] == "ran", ev["reason"]
    assert ev["outcome"] in ("faster", "slower")
    assert ev["correct"] is True
    assert ev["speedup"] is not None and ev["speedup"] > 0
    assert ev["world_size"] == 2 and ev["backend"] == "gloo"
    assert [t["trial"] for t in ev["trials"]] == [0, 1, 2]
    assert all(t["matched"] and len(t["ranks"]) == 2 for t in ev["trials"])
    for rank in ev["ranks"]:
        assert rank["finished"] and rank["phase"] == "done"
        assert rank["timing"]["candidate"]["wall"]["n"] == 5
        assert rank["timing"]["reference"]["wall"]["median_ms"] > 0
        assert rank["timed_checks_matched"] and rank["refresh_matched"]
    assert (ev["outcome"] == "faster") == (ev["speedup"] >= 1.0)


def test_mismatch_details_locate_the_error(batch):
    ev = batch["records"]["rank_subset"].evaluation
    assert ev["details"]["wrong_ranks"] == [1] and ev["details"]["right_ranks"] == [0]
    rank1 = ev["trials"][0]["ranks"][1]
    assert rank1["mismatches"] == 4
    assert [m["coords"] for m in rank1["first_mismatches"]] == [[0, 0], [0, 1], [0, 2], [0, 3]]
    assert os.path.isfile(rank1["saved"])  # tensors kept for the diagnosis stage
    assert "saved" not in ev["trials"][0]["ranks"][0]  # nothing saved where it matched


def test_hang_names_the_stuck_ranks_and_is_killed_in_time(batch):
    ev = batch["records"]["hang"].evaluation
    stuck = {s["rank"]: s["phase"] for s in ev["details"]["stuck_ranks"]}
    assert stuck == {0: "trial 0 candidate", 1: "trial 0 candidate"}
    assert "killed" in ev["reason"], ev["reason"]  # a limit ended it (the launch's, or the call's: both 30 s here)
    from pkb.eval.sandbox import processes_of_job

    assert processes_of_job(ev["job_dir"]) == []  # rank pids are the sandbox's: look by job file


def test_runtime_error_keeps_the_failing_rank_and_its_log(batch):
    ev = batch["records"]["raises"].evaluation
    assert "deliberate failure" in ev["reason"]
    assert all("deliberate failure" in r["stderr_tail"] for r in ev["ranks"] if r["error"])


def test_store_has_one_outcome_per_candidate_and_trial_rows(batch):
    with Store(batch["options"].store_path) as store:
        outcomes = store.outcomes()
        assert len(outcomes) == len(CANDIDATES) - 1  # the hang has its own store
        assert outcomes["sha256"].is_unique
        ref_sha = batch["records"]["reference"].sha256
        trials = store.trials(ref_sha)
        assert len(trials[trials.kind == "trial"]) == 3 * 2
        assert len(trials[trials.kind == "timed"]) == 2 * 2  # one per input group per rank
        assert trials["matched"].all()
        timings = store.timings(ref_sha)
        assert set(timings.side) == {"reference", "candidate"} and set(timings["rank"]) == {0, 1}


def test_second_run_relaunches_nothing_and_an_edit_is_relaunched(batch, monkeypatch):
    import pkb.eval.launcher as launcher

    def no_launch(*a, **k):
        raise AssertionError("a finished candidate was launched again")

    options = batch["options"]
    paths = batch["paths"]
    monkeypatch.setattr(launcher, "launch", no_launch)
    again = run_eval([paths["reference"], paths["shape"]], options)
    assert [r.evaluation["status"] for r in again] == ["skipped_cached", "skipped_cached"]
    assert again[0].evaluation["outcome"] in ("faster", "slower")
    assert again[1].evaluation["subtype"] == "shape_mismatch"
    monkeypatch.undo()

    edited = paths["reference"].read_text() + "\n# edited: new content, new hash\n"
    paths["reference"].write_text(edited)
    calls = []
    real = launcher.launch
    monkeypatch.setattr(launcher, "launch", lambda *a, **k: calls.append(1) or real(*a, **k))
    rerun = run_eval([paths["reference"]], options)
    assert len(calls) == 1 and rerun[0].evaluation["status"] == "ran"
    assert rerun[0].evaluation["outcome"] in ("faster", "slower")
