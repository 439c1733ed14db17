"""Progress of `pkb-analyze eval`: a line per candidate as it lands when output is not a terminal,
Ctrl-C says what was saved, --force runs stored results again, and the limits are options."""

from pathlib import Path


import pkb.eval
from cli_runner import run_cli

GOOD = (
    "import torch\nimport torch.distributed as dist\n\n"
    "@torch.no_grad()\ndef solution(tensor):\n    out = tensor.clone()\n    dist.all_reduce(out)\n    return out\n"
)


def two_candidates(tmp_path: Path) -> Path:
    d = tmp_path / "c"
    d.mkdir()
    (d / "1_allreduce_a.py").write_text(GOOD)
    (d / "1_allreduce_b.py").write_text(GOOD)
    return d


def test_a_line_per_candidate_as_it_lands(tmp_path, capsys, monkeypatch):
    seen = []

    def fake_evaluate(records, options, on_result=None):
        for rec in records:
            # the line of the previous candidate is already out when the next one starts
            seen.append(capsys.readouterr().out)
            rec.evaluation = {"status": "ran", "outcome": "slower", "subtype": "", "speedup": 0.5, "wall_s": 2.0}
            on_result(rec, rec.evaluation, [])

    monkeypatch.setattr(pkb.eval, "evaluate", fake_evaluate)
    d = two_candidates(tmp_path)
    code, cap = run_cli(["eval", str(d), "--out", str(tmp_path / "o"), "--world-size", "2"], tmp_path, capsys)
    assert code == 0, cap.err
    assert "[1/2] 1_allreduce_a.py: slower 0.5x, 2.0 s" in seen[1]
    assert "[2/2] 1_allreduce_b.py: slower 0.5x, 2.0 s" in cap.out


def test_ctrl_c_says_what_was_saved(tmp_path, capsys, monkeypatch):
    calls = []

    def fake_evaluate(records, options, on_result=None):
        for rec in records:
            calls.append(1)
            if len(calls) == 2:
                raise KeyboardInterrupt
            rec.evaluation = {"status": "ran", "outcome": "faster", "speedup": 1.5}
            on_result(rec, rec.evaluation, [])

    monkeypatch.setattr(pkb.eval, "evaluate", fake_evaluate)
    d = two_candidates(tmp_path)
    code, cap = run_cli(["eval", str(d), "--out", str(tmp_path / "o"), "--world-size", "2"], tmp_path, capsys)
    assert code == 130
    assert "interrupted: 1 of 2 candidates were evaluated and saved" in cap.err and "resumes" in cap.err
    assert len((tmp_path / "o" / "eval.jsonl").read_text().splitlines()) == 1


def test_limits_and_force_reach_the_options(tmp_path, capsys, monkeypatch):
    got = []

    def fake_evaluate(records, options, on_result=None):
        got.append(options)
        for rec in records:
            rec.evaluation = {"status": "ran", "outcome": "faster", "speedup": 1.5}
            on_result(rec, rec.evaluation, [])

    monkeypatch.setattr(pkb.eval, "evaluate", fake_evaluate)
    d = two_candidates(tmp_path)
    code, cap = run_cli(["eval", str(d), "--out", str(tmp_path / "o"), "--import-timeout", "7", "--compile-timeout", "8",
                         "--call-timeout", "9", "--force"], tmp_path, capsys)
    assert code == 0, cap.err
    assert (got[0].import_timeout_s, got[0].compile_timeout_s, got[0].call_timeout_s, got[0].force) == (7, 8, 9, True)


def test_force_runs_a_stored_result_again(tmp_path, capsys):
    d = tmp_path / "c"
    d.mkdir()
    (d / "1_allreduce_a.py").write_text(GOOD)
    args = ["eval", str(d), "--out", str(tmp_path / "o"), "--world-size", "2", "--trials", "1", "--warmup", "1", "--iters", "0",
            "--timeout", "240"]
    code, cap = run_cli(args, tmp_path, capsys)
    assert code == 0 and "(stored result)" not in cap.out
    code, cap = run_cli(args, tmp_path, capsys)
    assert code == 0 and "[1/1] 1_allreduce_a.py: correct" in cap.out and "(stored result)" in cap.out
    code, cap = run_cli([*args, "--force"], tmp_path, capsys)
    assert code == 0 and "[1/1] 1_allreduce_a.py: correct" in cap.out and "(stored result)" not in cap.out


def test_the_line_names_a_guessed_problem_only_where_it_is_one():
    from pkb.record import CandidateRecord
    from reports.console import eval_line

    rec = CandidateRecord(path="c.py", problem_id=1)
    rec.evaluation = {"status": "ran", "outcome": "suspect", "subtype": "aliases_input"}

    def line(rule, file_id, agree, detail="d"):
        rec.problem_match = {"rule": rule, "file_id": file_id, "params_agree": agree, "stem": "1_allreduce", "detail": detail}
        return eval_line(rec, 1, 1)

    # an id in the name and the reference's name plus a suffix: parameter names alone make no guess
    assert line("name_variant", 1, False) == "[1/1] c.py: suspect (aliases_input)"
    assert line("exact_stem", 1, True) == "[1/1] c.py: suspect (aliases_input)"
    assert line("given", None, None) == "[1/1] c.py: suspect (aliases_input)"
    # no id in the name: matched by spelling, a guess however the parameters read
    assert line("fuzzy_name", None, True, "name similarity 0.86 to 'reduce'") == (
        "[1/1] c.py: suspect (aliases_input) (run as problem 1_allreduce, a guess: name similarity 0.86 to 'reduce'; "
        "--problem ID names it)")
    assert "a guess: d; its solution() parameters differ" in line("fuzzy_name", 1, False)
