"""`pkb-analyze eval` as the one evaluation command: several paths, the options the old
`python -m pkb.eval` had (--groups, --work-dir, --problem-file, JSON lines) reach the evaluation,
--problem names the files given as files, and a harness error ends in exit 1 with its reason.
The evaluation itself is replaced by a stand-in: these check the command line, not a launch."""

import json
from pathlib import Path

import pkb.eval
from cli_runner import run_cli

GOOD = "import torch\n\ndef solution(tensor):\n    return tensor.clone()\n"


def candidates(tmp_path: Path) -> tuple[Path, Path]:
    """A folder with a named candidate and a loose one, and a loose file outside it."""
    d = tmp_path / "c"
    d.mkdir()
    (d / "1_allreduce_a.py").write_text(GOOD)
    (d / "mine.py").write_text(GOOD)
    loose = tmp_path / "other.py"
    loose.write_text(GOOD)
    return d, loose


def record_options(monkeypatch, seen: list, fail_after: int | None = None):
    """evaluate() replaced: keeps the options and records; each candidate `ran` and slower, or a
    harness error after `fail_after` of them."""

    def fake_evaluate(records, options, on_result=None):
        seen.append((options, list(records)))
        for i, rec in enumerate(records):
            if i == fail_after:
                raise RuntimeError("boom in the harness")
            rec.evaluation = {"status": "ran", "outcome": "slower", "subtype": "", "speedup": 0.5}
            on_result(rec, rec.evaluation, [])

    monkeypatch.setattr(pkb.eval, "evaluate", fake_evaluate)


def test_several_paths_and_the_old_commands_options_reach_the_evaluation(tmp_path, capsys, monkeypatch):
    seen = []
    record_options(monkeypatch, seen)
    d, loose = candidates(tmp_path)
    spec = tmp_path / "my_problem.py"
    spec.write_text("PROBLEM = None\n")
    code, cap = run_cli(["eval", str(d), str(loose), "--out", str(tmp_path / "o"), "--groups", "3",
                         "--work-dir", str(tmp_path / "w"), "--problem-file", f"901={spec}", "--problem", "2"], tmp_path, capsys)
    assert code == 0, cap.err
    options, records = seen[0]
    assert (options.groups, options.work_dir, options.problem_files) == (3, str(tmp_path / "w"), {901: str(spec.resolve())})
    problem_of = {r.path: r.problem_id for r in records}
    # the file given as a file and the folder's loose one take --problem; a named one keeps its own
    assert problem_of == {"c/1_allreduce_a.py": 1, "c/mine.py": 2, "other.py": 2}
    # record paths are relative to the corpus root, which the evaluation is told (it reads files
    # the record does not carry from there, not from the working directory)
    assert all((Path(options.corpus_root) / r.path).is_file() for r in records)
    assert len((tmp_path / "o" / "eval.jsonl").read_text().splitlines()) == 3


def test_jsonl_output_is_the_records_alone(tmp_path, capsys, monkeypatch):
    record_options(monkeypatch, [])
    d, _ = candidates(tmp_path)
    out = tmp_path / "o"
    code, cap = run_cli(["eval", str(d), "--out", str(out), "--problem", "1", "--output-format", "jsonl"], tmp_path, capsys)
    assert code == 0, cap.err
    printed = cap.out.splitlines()
    assert printed == (out / "eval.jsonl").read_text().splitlines() and len(printed) == 2
    assert {json.loads(line)["evaluation"]["outcome"] for line in printed} == {"slower"}
    assert "evaluated 2 of 2" in cap.err  # the totals are still said, on stderr


def test_a_harness_error_exits_1_with_its_reason_and_keeps_what_landed(tmp_path, capsys, monkeypatch):
    record_options(monkeypatch, [], fail_after=1)
    d, _ = candidates(tmp_path)
    out = tmp_path / "o"
    code, cap = run_cli(["eval", str(d), "--out", str(out), "--problem", "1"], tmp_path, capsys)
    assert code == 1
    assert "1 of 2 candidates could not be evaluated" in cap.err
    assert "evaluation failed: RuntimeError: boom in the harness" in cap.err and "please report it" in cap.err
    statuses = [json.loads(line)["evaluation"]["status"] for line in (out / "eval.jsonl").read_text().splitlines()]
    assert statuses == ["ran", "not_run"]


def test_bad_problem_file_and_missing_path_are_usage_errors_before_anything_is_written(tmp_path, capsys, monkeypatch):
    seen = []
    record_options(monkeypatch, seen)
    d, _ = candidates(tmp_path)
    out = tmp_path / "o"
    for bad in (["--problem-file", "x=y.py"], ["--problem-file", f"7={tmp_path / 'absent.py'}"], [str(tmp_path / "absent")]):
        code, cap = run_cli(["eval", str(d), "--out", str(out), *bad], tmp_path, capsys)
        assert code == 2 and "error:" in cap.err, (bad, cap.err)
    assert not out.exists() and not seen
