"""Differential diagnosis of wrong results, on outputs built by hand from the real problems.

No launch: each test draws every rank's inputs with the problem's own make_inputs, computes the
right answer with its global_reference, breaks it the way one hypothesis says, and checks the
diagnosed subtype and the figure that supports it.
"""

from __future__ import annotations

import json

import pytest
import torch

import problems
from pkb.diagnose.wrong import WrongCase, diagnose_case, diagnose_wrong
from pkb.eval.job import JobSpec
from pkb.eval.poison import filled_with_sentinel

PROBLEMS = (1, 2, 7, 12)
SIZES = (2, 4)
RANK = 1
TRIAL = 1


def world(pid: int, ws: int, trial: int = TRIAL):
    p = problems.get(pid)
    inputs = [p.module.make_inputs(r, ws, trial, "cpu", "float32") for r in range(ws)]
    expected = p.module.global_reference(inputs, ws)
    return p, inputs, expected


def run(pid: int, ws: int, got, **kw):
    p, inputs, expected = world(pid, ws)
    case = WrongCase(trial=kw.pop("trial", TRIAL), rank=RANK, world_size=ws, expected=expected[RANK], got=got, inputs_per_rank=inputs, **kw)
    return diagnose_case(case, p.module, p.spec.tolerances["float32"])


def held(d, name):
    return [h for h in d["held"] if h["subtype"] == name]


def prediction(pid: int, ws: int, name: str, peers=None):
    p, inputs, expected = world(pid, ws)
    for h in p.module.hypotheses(inputs, expected[RANK], None, RANK, ws):
        if h["name"] == name and (peers is None or h.get("peers") == peers):
            return h["tensor"]
    raise LookupError(name)


@pytest.mark.parametrize("ws", SIZES)
@pytest.mark.parametrize("pid", PROBLEMS)
def test_local_only(pid, ws):
    d = run(pid, ws, prediction(pid, ws, "local_only"))
    assert d["subtype"] == "local_only"
    assert held(d, "local_only")[0]["figure"].startswith(f"max |got - rank_{RANK}_alone| = ")


@pytest.mark.parametrize("pid", PROBLEMS)
def test_missing_peer_names_the_peer(pid):
    d = run(pid, 4, prediction(pid, 4, "missing_peer", [2]))
    assert d["subtype"] == "missing_peer"
    (h,) = [h for h in held(d, "missing_peer") if h.get("peers") == [2]]
    assert "expected_without_peer_2" in h["figure"] and h["matching"] == h["numel"]
    assert not held(d, "local_only")


@pytest.mark.parametrize("pid", PROBLEMS)
def test_two_missing_peers_are_found_together(pid):
    _, _, expected = world(pid, 4)
    both = prediction(pid, 4, "missing_peer", [0]) + prediction(pid, 4, "missing_peer", [3]) - expected[RANK]
    d = run(pid, 4, both)
    assert d["subtype"] == "missing_peer"
    assert [h["peers"] for h in held(d, "missing_peer")] == [[0, 3]]


@pytest.mark.parametrize("pid", PROBLEMS)
def test_missing_the_only_peer_is_local_only(pid):
    peer = 1 - RANK
    d = run(pid, 2, prediction(pid, 2, "missing_peer", [peer]))
    assert d["subtype"] == "local_only"  # at world size 2 no peer data arrived at all


@pytest.mark.parametrize("ws", SIZES)
@pytest.mark.parametrize("pid", PROBLEMS)
def test_tail_only(pid, ws):
    _, _, expected = world(pid, ws)
    got = expected[RANK].clone()
    got.view(-1)[-37:] = 0
    d = run(pid, ws, got)
    assert d["subtype"] == "tail_only"
    assert "all 37 mismatches lie in the last 37" in held(d, "tail_only")[0]["figure"]


@pytest.mark.parametrize("ws", SIZES)
@pytest.mark.parametrize("pid", PROBLEMS)
def test_scaled_by_world_size(pid, ws):
    _, _, expected = world(pid, ws)
    d = run(pid, ws, expected[RANK] * ws)
    assert d["subtype"] == "scaled"
    h = held(d, "scaled")[0]
    assert h["factor"] == pytest.approx(ws) and h["factor_name"].startswith("world size")


@pytest.mark.parametrize("ws", SIZES)
@pytest.mark.parametrize("pid", PROBLEMS)
def test_stale_equals_the_previous_trial(pid, ws):
    _, _, previous = world(pid, ws, trial=TRIAL - 1)
    d = run(pid, ws, previous[RANK].clone(), previous_expected=previous[RANK], previous_trial=TRIAL - 1)
    assert d["subtype"] == "stale"
    assert "expected_of_trial_0" in held(d, "stale")[0]["figure"]


@pytest.mark.parametrize("ws", SIZES)
@pytest.mark.parametrize("pid", PROBLEMS)
def test_nondeterministic(pid, ws):
    _, _, expected = world(pid, ws)
    got = expected[RANK].clone()
    flat = got.view(-1)
    flat[torch.tensor([0, 5, flat.numel() // 2])] += 0.5  # scattered, not a tail, not a factor
    d = run(pid, ws, got, trial=0, repeat={"equal": False, "differing": 3, "max_abs_diff": 0.5})
    assert d["subtype"] == "nondeterministic"
    assert "differs in 3 elements" in held(d, "nondeterministic")[0]["figure"]


@pytest.mark.parametrize("pid", PROBLEMS)
def test_unwritten(pid):
    _, _, expected = world(pid, 2)
    got = expected[RANK].clone()
    n = got.numel() // 2
    got.view(-1)[:n] = filled_with_sentinel((n,), got.dtype)
    d = run(pid, 2, got)
    assert d["subtype"] == "unwritten"
    assert held(d, "unwritten")[0]["count"] == n


@pytest.mark.parametrize("pid", PROBLEMS)
def test_nan_inf(pid):
    _, _, expected = world(pid, 2)
    got = expected[RANK].clone()
    got.view(-1)[3] = float("nan")
    got.view(-1)[4] = float("inf")
    d = run(pid, 2, got)
    assert d["subtype"] == "nan_inf"
    assert held(d, "nan_inf")[0]["count"] == 2


@pytest.mark.parametrize("pid", PROBLEMS)
def test_tolerance(pid):
    p, _, expected = world(pid, 2)
    atol, rtol = p.spec.tolerances["float32"]
    got = expected[RANK].clone()
    flat = got.view(-1)
    flat[:5] += 3 * (atol + rtol * flat[:5].abs())  # three tolerances off on the first elements
    d = run(pid, 2, got)
    assert d["subtype"] == "tolerance"
    assert 2.5 < held(d, "tolerance")[0]["max_violation"] < 3.5


def test_problem_specific_hypothesis():
    d = run(2, 4, prediction(2, 4, "wrong_order"))
    assert d["subtype"] == "problem_specific"
    assert [h["name"] for h in d["held"]] == ["wrong_order"]


def test_shape_mismatch_stops_the_tests():
    _, _, expected = world(1, 2)
    d = run(1, 2, expected[RANK][:-1])
    assert d["subtype"] == "shape_mismatch" and len(d["held"]) == 1


def test_garbage_holds_nothing_and_says_what_was_tried():
    _, _, expected = world(1, 4)
    d = run(1, 4, torch.randn(expected[RANK].shape, generator=torch.Generator().manual_seed(3)))
    assert d["subtype"] == "" and not d["held"]
    tried = {h["name"] for h in d["rejected"]}
    assert {"local_only", "missing_peer", "scaled", "tail_only"} <= tried


# ---- from a job directory, as the evaluation leaves it ---------------------------------------


def _job_dir(tmp_path, pid: int, ws: int, wrong_rank: int, got, save_peers: bool):
    """The files the worker writes for one wrong trial: job.json, tensors/trial1_rank<r>.pt and,
    for the ranks that were right, tensors/inputs_trial1_rank<r>.pt."""
    p, inputs, expected = world(pid, ws)
    _, _, previous = world(pid, ws, trial=0)
    job_dir = tmp_path / "job"
    (job_dir / "tensors").mkdir(parents=True)
    JobSpec(job_dir=str(job_dir), candidate_path="x.py", candidate_sha256="0" * 64, problem={"kind": "registry", "id": pid},
            world_size=ws, backend="gloo", device="cpu", dtype="float32", trials=2).write()
    saved = job_dir / "tensors" / f"trial1_rank{wrong_rank}.pt"
    torch.save({"rank": wrong_rank, "inputs": list(inputs[wrong_rank]), "expected": expected[wrong_rank], "got": got,
                "previous_expected": previous[wrong_rank], "previous_trial": 0}, saved)
    if save_peers:
        for r in range(ws):
            if r != wrong_rank:
                torch.save({"rank": r, "trial": 1, "inputs": list(inputs[r])}, job_dir / "tensors" / f"inputs_trial1_rank{r}.pt")
    ranks = [{"rank": r, "matched": r != wrong_rank, "numel": expected[r].numel(), "mismatches": 0 if r != wrong_rank else 1,
              **({"saved": str(saved)} if r == wrong_rank else {})} for r in range(ws)]
    evaluation = {
        "status": "ran", "outcome": "wrong_result", "subtype": "", "world_size": ws, "job_dir": str(job_dir),
        "trials": [{"trial": 0, "matched": True, "ranks": [{"rank": r, "matched": True, "repeat": {"equal": True}} for r in range(ws)]},
                   {"trial": 1, "matched": False, "ranks": ranks}],
        "details": {"wrong_ranks": [wrong_rank], "right_ranks": [r for r in range(ws) if r != wrong_rank]},
    }
    json.dumps(evaluation)  # the real shape is plain JSON
    return evaluation, inputs, expected


@pytest.mark.parametrize("save_peers", [True, False])
def test_diagnose_from_job_dir_missing_peer(tmp_path, save_peers):
    ws = 4
    got = prediction(7, ws, "missing_peer", [3])
    evaluation, _, _ = _job_dir(tmp_path, 7, ws, RANK, got, save_peers)
    d = diagnose_wrong(evaluation)
    assert d["subtype"] == "missing_peer"
    assert "rank_subset" in d["held"]  # ranks 0, 2, 3 were right
    assert any("expected_without_peer_3" in e["figure"] for e in d["evidence"])
    regenerated = any("regenerated" in n for n in d["notes"])
    assert regenerated is (not save_peers)
    json.dumps(d)


def test_diagnose_from_job_dir_stale(tmp_path):
    _, _, previous = world(12, 2, trial=0)
    evaluation, _, _ = _job_dir(tmp_path, 12, 2, 0, previous[0].clone(), True)
    d = diagnose_wrong(evaluation)
    assert d["subtype"] == "stale"


def test_rank_subset_when_no_content_hypothesis_holds(tmp_path):
    _, _, expected = world(1, 2)
    got = expected[0].clone()
    got.view(-1)[:4] += 1.0
    evaluation, _, _ = _job_dir(tmp_path, 1, 2, 0, got, True)
    d = diagnose_wrong(evaluation)
    assert d["subtype"] == "rank_subset"
    assert d["evidence"][0]["figure"] == "ranks [1] right on every trial; ranks [0] wrong"


def test_without_tensors_only_the_numbers_speak():
    evaluation = {"status": "ran", "outcome": "wrong_result", "subtype": "unwritten", "world_size": 2,
                  "trials": [{"trial": 0, "matched": False, "ranks": [{"rank": 0, "matched": False, "numel": 100, "sentinel": 40},
                                                                      {"rank": 1, "matched": False, "numel": 100, "sentinel": 40}]}]}
    d = diagnose_wrong(evaluation)
    assert d["subtype"] == "unwritten"
    assert d["evidence"][0]["figure"].startswith("40 of 100 elements still hold the allocator poison")
