"""The diagnosis on what a real evaluation left (the rank spawner, gloo on CPU, world size 2).

One evaluate() call for all candidates: each is wrong in one way, the worker saves what the
diagnosis needs (the failing rank's tensors, the previous trial's answer, the other ranks'
inputs, a repeat of trial 0) and diagnose() names the subtype with its figure.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_eval_support import allreduce_then, quick_options, run_eval, write_candidate

from pkb.diagnose.explain import check_citations, diagnose

CANDIDATES = {
    "local_only": "def solution(x):\n    return x.clone()\n",
    # answers every call with its first answer: right in trial 0, stale afterwards
    "stale": (
        "_first = []\n\n"
        "@torch.no_grad()\n"
        "def solution(x):\n"
        "    out = x.clone()\n"
        "    dist.all_reduce(out)\n"
        "    if not _first:\n"
        "        _first.append(out)\n"
        "    return _first[0].clone()\n"
    ),
    "nondeterministic": allreduce_then("out.view(-1)[torch.randint(0, out.numel(), (3,))] += 1.0\nreturn out"),
    "tail_only": allreduce_then("out.view(-1)[-5:] = 0\nreturn out"),
    "scaled": allreduce_then("return out * dist.get_world_size()"),
}


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("diag_eval")
    paths = [write_candidate(tmp / "cands", f"1_{name}.py", body) for name, body in CANDIDATES.items()]
    records = run_eval(paths, quick_options(tmp, timeout_s=180.0, trials=3))
    for rec in records:
        diagnose(rec)
    return {Path(r.path).stem.removeprefix("1_"): r for r in records}


@pytest.mark.parametrize("name", list(CANDIDATES))
def test_subtype_from_real_evaluation(diagnosed, name):
    rec = diagnosed[name]
    assert rec.evaluation["outcome"] == "wrong_result", rec.evaluation.get("reason")
    assert rec.diagnosis["subtype"] == name, rec.diagnosis["wrong"]
    assert check_citations(rec) == []


def test_worker_saved_what_the_diagnosis_needs(diagnosed):
    rec = diagnosed["stale"]
    tensors = Path(rec.evaluation["job_dir"]) / "tensors"
    assert sorted(p.name for p in tensors.glob("trial*_rank*.pt")) == [f"trial{t}_rank{r}.pt" for t in (1, 2) for r in (0, 1)]
    repeat = [e["repeat"] for t in rec.evaluation["trials"] if t["trial"] == 0 for e in t["ranks"]]
    assert repeat and all(r["equal"] for r in repeat)
    noisy = diagnosed["nondeterministic"]
    assert any(e["repeat"]["equal"] is False for t in noisy.evaluation["trials"] if t["trial"] == 0 for e in t["ranks"])


def test_explanation_cites_the_figure(diagnosed):
    expl = diagnosed["local_only"].diagnosis["explanation"]
    assert expl["headline"].startswith("gives a wrong result (local_only): max |got - rank_")
    assert any(e["kind"] == "diagnosis" and "local_only held" in e["text"] for e in expl["evidence"])
    assert expl["fixes"], "a wrong result always gets advice"
