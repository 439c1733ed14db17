"""The evaluation, the emulation and the diagnosis name a wrong result by one order
(pkb.taxonomy.WRONG_RESULT_PRIORITY): the same evidence gets the same subtype from each."""

import pytest

torch = pytest.importorskip("torch")

from pkb.diagnose.wrong import WrongCase, diagnose_wrong  # noqa: E402
from pkb.emulate.evaluate import case_subtype, overall_subtype  # noqa: E402
from pkb.eval.outcome import wrong_result_subtype  # noqa: E402
from pkb.taxonomy import WRONG_RESULT_PRIORITY, most_telling, overall_wrong_result  # noqa: E402

MATCHED = {"matched": True, "shape_ok": True, "dtype_ok": True, "nan_inf": 0, "sentinel": 0}
WRONG = {**MATCHED, "matched": False, "max_violation": 1e6}


def test_unwritten_outranks_a_peer_hypothesis_everywhere():
    # one case: the poison survived in some elements, and the output also looks like a stale answer
    cmp = {**WRONG, "sentinel": 5}
    assert case_subtype(cmp, [{"name": "stale", "peers": []}]) == "unwritten"
    assert wrong_result_subtype({0: [cmp]}) == "unwritten"
    assert most_telling(["stale", "unwritten"]) == "unwritten"


def test_a_dominant_subtype_in_one_case_decides_in_every_stage():
    # two cases scaled by the world size, one with NaN: the NaN decides (nothing about data movement
    # can be read from it), whether the cases are counted by the emulation or by the diagnosis
    assert overall_subtype(["scaled", "scaled", "nan_inf"]) == "nan_inf"
    expected = torch.arange(1.0, 65.0)
    cases = [
        WrongCase(trial=0, rank=0, world_size=2, expected=expected, got=expected * 2),
        WrongCase(trial=1, rank=0, world_size=2, expected=expected, got=expected * 2),
        WrongCase(trial=2, rank=0, world_size=2, expected=expected, got=torch.full_like(expected, float("nan"))),
    ]
    diagnosis = diagnose_wrong({"trials": [], "details": {}}, cases=cases, tolerance=(1e-3, 1e-3))
    per_case = [c["subtype"] for c in diagnosis["cases"]]
    assert diagnosis["subtype"] == "nan_inf", (diagnosis["subtype"], per_case)
    assert wrong_result_subtype({0: [{**WRONG}, {**WRONG}, {**WRONG, "nan_inf": 64}]}) == "nan_inf"


def test_ties_go_to_the_more_telling_subtype():
    assert overall_wrong_result(["tolerance", "local_only"]) == "local_only"
    assert overall_subtype(["unwritten", "stale"]) == "unwritten"
    assert overall_wrong_result(["stale", "stale", "unwritten"]) == "stale"  # most common first


def test_a_problem_hypothesis_outside_the_vocabulary_ranks_as_problem_specific():
    assert most_telling(["ring_order_swapped", "nondeterministic"]) == "ring_order_swapped"
    assert most_telling(["ring_order_swapped", "tail_only"]) == "tail_only"
    assert "problem_specific" in WRONG_RESULT_PRIORITY


def test_rank_subset_only_when_nothing_more_telling_holds():
    right, wrong = [{**MATCHED}], [{**WRONG}]
    assert wrong_result_subtype({0: right, 1: wrong}) == "rank_subset"
    assert wrong_result_subtype({0: right, 1: [{**WRONG, "sentinel": 3}]}) == "unwritten"
