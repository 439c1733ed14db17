"""Exit codes and validation: choices checked before anything starts (exit 2), an evaluation that
could not run something exits 1 saying how many and why (in process and as `python -m pkb eval`),
a loose file is told to give its problem, and `python -m pkb.eval` says what to run instead."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pkb.eval.not_run import hint, summary_lines
from pkb.record import CandidateRecord
from cli_runner import run_cli

ROOT = Path(__file__).resolve().parents[1]
GOOD = (
    "import torch\nimport torch.distributed as dist\n\n"
    "@torch.no_grad()\ndef solution(tensor):\n    out = tensor.clone()\n    dist.all_reduce(out)\n    return out\n"
)


@pytest.mark.parametrize("bad", [
    ["--backend", "foo"], ["--scale", "huge"], ["--dtype", "int3"], ["--world-size", "0"], ["--trials", "0"],
    ["--timeout", "0"], ["--iters", "-1"],
])
def test_eval_choices_are_checked_before_anything_starts(tmp_path, capsys, bad):
    (tmp_path / "1_allreduce_good.py").write_text(GOOD)
    out = tmp_path / "out"
    code, cap = run_cli(["eval", str(tmp_path / "1_allreduce_good.py"), "--out", str(out), *bad], tmp_path, capsys)
    assert code == 2, cap
    assert bad[0] in cap.err
    assert not out.exists()  # nothing was written, nothing launched


def test_pkb_root_without_references_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "1_allreduce_good.py").write_text(GOOD)
    code, cap = run_cli(["eval", str(tmp_path / "1_allreduce_good.py"), "--out", str(tmp_path / "o"),
                         "--pkb-root", str(tmp_path)], tmp_path, capsys)
    assert code == 2 and "no reference/ folder" in cap.err


def test_not_run_summary_counts_each_reason_whole_with_what_to_do():
    recs = []
    for i, reason in enumerate(["no problem id (the file name does not start with '<id>_')"] * 2
                               + ["no CUDA device: this candidate compiles CUDA (load_inline)", ""]):
        r = CandidateRecord(path=f"f{i}.py")
        r.evaluation = {"status": "not_run", "reason": reason}
        recs.append(r)
    ok = CandidateRecord(path="ok.py")
    ok.evaluation = {"status": "ran", "outcome": "wrong_result"}
    lines = summary_lines([*recs, ok])
    assert lines[0] == "4 of 5 candidates could not be evaluated:"
    text = "\n".join(lines)
    assert "2 x no problem id (the file name does not start with '<id>_') (e.g. f0.py)" in text
    assert "--problem ID" in text and "CUDA GPU" in text and "no reason recorded" in text
    assert summary_lines([ok]) == []
    assert hint("something new") == ""


def test_loose_file_exits_1_and_says_to_give_its_problem(tmp_path, capsys):
    # a name that matches no problem (`allreduce_mine.py` is matched to 1_allreduce as a variant)
    loose = tmp_path / "mine.py"
    loose.write_text(GOOD)
    code, cap = run_cli(["eval", str(loose), "--out", str(tmp_path / "o"), "--world-size", "2"], tmp_path, capsys)
    assert code == 1
    assert "1 of 1 candidates could not be evaluated" in cap.err
    assert "no reference matches 'mine' by name or id" in cap.err and "--problem ID" in cap.err
    # the same as a process of its own (`python -m pkb` is `pkb-analyze`): the exit status reaches the shell
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PKB_CACHE_DIR": str(tmp_path / "cache")}
    res = subprocess.run([sys.executable, "-m", "pkb", "eval", str(loose), "--out", str(tmp_path / "o2"),
                          "--world-size", "2"], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 1, res.stderr
    assert "1 of 1 candidates could not be evaluated" in res.stderr and "--problem ID" in res.stderr


def test_the_old_module_names_the_command_to_run_instead(tmp_path, monkeypatch):
    from pkb.eval.__main__ import equivalent

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-m", "pkb.eval", "c/1_a.py", "--json", "--groups", "2"], cwd=tmp_path,
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2 and res.stdout == ""
    assert "pkb-analyze eval c/1_a.py --output-format jsonl --groups 2" in res.stderr
    (tmp_path / "pkb_eval.sqlite").write_text("")
    monkeypatch.chdir(tmp_path)  # where the old default store is looked up
    assert equivalent(["x.py"])[-2:] == ["--store", "pkb_eval.sqlite"]
    assert equivalent(["x.py", "--store", "mine.sqlite"]) == ["pkb-analyze", "eval", "x.py", "--store", "mine.sqlite"]


def test_cuda_candidate_on_cpu_exits_1_with_the_reason(tmp_path, capsys):
    src = ROOT / "corpus" / "solutions_cuda_bf16_h100_8_pkb_sample-b" / "3_broadcast_cuda.py"
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "3_broadcast_cuda.py").write_text(src.read_text())
    code, cap = run_cli(["eval", str(tmp_path / "c"), "--out", str(tmp_path / "o"), "--world-size", "2"], tmp_path, capsys)
    if "could not be evaluated" not in cap.err:
        pytest.skip("a CUDA device is present here: the candidate ran")
    assert code == 1 and "no CUDA device" in cap.err and "what to do" in cap.err


def test_problem_option_lets_a_loose_file_run(tmp_path, capsys):
    loose = tmp_path / "allreduce_mine.py"
    loose.write_text(GOOD)
    out = tmp_path / "o"
    code, cap = run_cli(["eval", str(loose), "--out", str(out), "--problem", "1", "--world-size", "2", "--trials", "1",
                         "--warmup", "1", "--iters", "0", "--timeout", "240"], tmp_path, capsys)
    assert code == 0, cap.err
    rec = json.loads((out / "eval.jsonl").read_text().splitlines()[0])
    assert rec["problem_id"] == 1 and rec["evaluation"]["status"] == "ran"
