"""bench/real_corpus.py: its sampling, its harness-failure rule, and a static run over a tree of our own."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pkb.record import CandidateRecord

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import real_corpus  # noqa: E402


def _records():
    recs = []
    for tree, model, n in (("solutions_cuda_bf16_h100_8_openai_gpt-5.5", "gpt-5.5", 30),
                           ("solutions_cuda_bf16_h100_8_google_gemini-3-pro-preview", "gemini-3-pro-preview", 20)):
        for pid in range(1, n + 1):
            from problems import catalog

            name = catalog.entries()[pid].name
            recs.append(CandidateRecord(path=f"{tree}/{pid}_{name}_cuda.py", run_tree=tree, model=model, backend="cuda",
                                        problem_id=pid, problem_name=name))
    return recs


def test_sample_is_stratified_seeded_and_written_down():
    recs = _records()
    chosen, plan = real_corpus.stratified_sample(recs, 12, seed=3)
    again, _ = real_corpus.stratified_sample(list(reversed(recs)), 12, seed=3)
    assert [r.path for r in chosen] == [r.path for r in again] == plan["files"]
    assert len(chosen) == 12 and plan["population"] == 50 and plan["seed"] == 3
    assert sum(s["sampled"] for s in plan["strata"].values()) == 12
    models = {r.model for r in chosen}
    assert models == {"gpt-5.5", "gemini-3-pro-preview"}
    # shares follow stratum sizes; every stratum (tree x category) shows once the sample allows
    strata = len(plan["strata"])
    assert 12 < strata
    wide, wide_plan = real_corpus.stratified_sample(recs, strata + 3, seed=3)
    assert len(wide) == strata + 3 and all(s["sampled"] >= 1 for s in wide_plan["strata"].values())
    other, _ = real_corpus.stratified_sample(recs, 12, seed=4)
    assert [r.path for r in other] != [r.path for r in chosen]


def test_problem_group_reads_the_name_before_the_id():
    rec = CandidateRecord(path="x.py", problem_id=34, problem_name="ulysses_all_to_all_tensor_primitive")
    assert real_corpus.problem_group(rec) == "sequence_parallel"
    assert real_corpus.problem_group(CandidateRecord(path="y.py", problem_id=21, problem_name="")) == "training"


@pytest.mark.parametrize(("evaluation", "tool"), [
    ({"status": "ran", "outcome": "wrong_result", "subtype": "shape_mismatch"}, False),
    ({"status": "not_run", "reason": "needs multicast: multimem.ld_reduce at line 40"}, False),
    ({"status": "not_run", "reason": "problem 49 needs 2 ranks (min_world_size)"}, False),
    # the words the evaluation itself uses for a reference that cannot run at the world size asked
    ({"status": "not_run", "reason": "problem 71 needs world size >= 2: the reference exchanges boundaries"}, False),
    ({"status": "not_run", "reason": "reference failed: element 0 of tensors does not require grad"}, True),
    ({"status": "not_run", "reason": "no reference 88_*"}, True),
    ({"status": "ran", "outcome": "compile_error", "subtype": "import_error", "reason": "ModuleNotFoundError: No module named 'utils.cuda_helpers'"}, True),
    ({"status": "ran", "outcome": "compile_error", "subtype": "import_error", "reason": "No module named 'cutlass'"}, False),
    ({}, False),
])
def test_harness_failure_tells_the_tool_from_the_candidate(evaluation, tool):
    assert (real_corpus.harness_failure(evaluation) is not None) is tool


def test_static_run_over_a_tree_of_our_own(tmp_path, capsys, monkeypatch):
    tree = tmp_path / "pkb" / "solutions_cuda_bf16_h100_8_openai_gpt-5.5"
    tree.mkdir(parents=True)
    (tree / "1_allreduce_cuda.py").write_text("import torch\nimport torch.distributed as dist\n\ndef solution(tensor):\n"
                                              "    out = tensor.clone()\n    dist.all_reduce(out)\n    return out\n")
    (tree / "2_allgather_cuda.py").write_bytes(b"def solution(t):\n    return '\xff'\n")
    (tmp_path / "pkb" / "utils").mkdir()
    (tmp_path / "pkb" / "utils" / "helper.py").write_text("x = 1\n")  # not a candidate
    monkeypatch.setattr(real_corpus, "gpu_present", lambda: False)
    code = real_corpus.main(["--pkb-root", str(tmp_path / "pkb"), "--out", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert code == 0
    assert "static: 2 files read in 1 trees, one record each; 1 parsed (the others: not_utf8 1" in printed
    assert "harness failures 0" in printed
    assert "no CUDA device" in printed and "| gpt-5.5 | cuda | ours | 2 |" in printed and "paper (GPT-5.5)" in printed
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["static"]["files"] == 2 and summary["static"]["not_read"] == {"not_utf8": 1}
