"""reports.export: our outcomes in PKB's per-trial format and KernelBench's record, and the CLI command."""

import csv
import io
import json

from typer.testing import CliRunner

from pkb.cli import app
from pkb.record import CandidateRecord
from reports.export import export_kernelbench, export_pkb, fast_p, render


def _rec(path, outcome, subtype="", trials=(), ref_ms=None, cand_ms=None, status="ran"):
    rec = CandidateRecord(path=path, problem_id=3)
    speedup = ref_ms / cand_ms if ref_ms and cand_ms else None
    rec.evaluation = {"status": status, "outcome": outcome, "subtype": subtype, "speedup": speedup, "device": "cpu", "backend": "gloo",
                      "world_size": 2, "reason": "boom" if outcome in ("compile_error", "hang") else "", "problem_stem": "3_all_reduce",
                      "trials": [{"trial": i, "matched": m} for i, m in enumerate(trials)],
                      "details": {"reference_ms": ref_ms, "candidate_ms": cand_ms}}
    return rec


RECORDS = [
    _rec("a.py", "faster", trials=(True, True), ref_ms=2.0, cand_ms=1.0),
    _rec("b.py", "wrong_result", "scaled", trials=(True, False, False)),
    _rec("c.py", "compile_error", "cuda_syntax"),
    _rec("d.py", "hang", "timeout"),
    _rec("e.py", "suspect", "cached_output", trials=(True,), ref_ms=2.0, cand_ms=0.5),
    _rec("f.py", "", status="not_run"),
]


def test_pkb_trials_follow_outcomes():
    by = {p["solution"]: p for p in export_pkb(RECORDS)}
    assert "f.py" not in by  # never evaluated: neither harness has a word for it
    assert [t["result"] for t in by["a.py"]["trials"]] == ["match", "match"] and by["a.py"]["all_ok"]
    assert by["a.py"]["trials"][0]["speedup"] == 2.0
    # PKB stops at the first mismatching trial
    assert [t["result"] for t in by["b.py"]["trials"]] == ["match", "tensor_mismatch"] and not by["b.py"]["all_ok"]
    assert by["b.py"]["trials"][-1]["early_stop"] == "mismatch"
    for failed in ("c.py", "d.py"):
        assert [t["result"] for t in by[failed]["trials"]] == ["no_artifacts"]
    assert by["e.py"]["pkb_analyze"]["outcome"] == "suspect" and by["a.py"]["pkb_analyze"]["hardware"] == "cpu gloo"


def test_kernelbench_rows_and_fast_p():
    by = {r["candidate"]: r for r in export_kernelbench(RECORDS)}
    assert (by["a.py"]["compiled"], by["a.py"]["correctness"], by["a.py"]["runtime"], by["a.py"]["speedup"]) == (True, True, 1.0, 2.0)
    assert not by["c.py"]["compiled"] and "compilation_error" in by["c.py"]["metadata"]
    assert by["d.py"]["compiled"] and not by["d.py"]["correctness"] and by["d.py"]["metadata"]["runtime_error"].startswith("hang/timeout")
    assert by["b.py"]["metadata"]["correctness_trials"] == "(1 / 3)"
    # a suspect candidate's 4x is not counted as a correct speedup
    assert not by["e.py"]["correctness"] and by["e.py"]["speedup"] == -1.0
    rows = list(by.values())
    assert fast_p(rows, 1.0) == 1 / 5 and fast_p(rows, 2.0) == 0.0


def test_render_csv_reads_back():
    rows = list(csv.DictReader(io.StringIO(render(RECORDS, "kernelbench"))))
    assert [r["candidate"] for r in rows] == ["a.py", "b.py", "c.py", "d.py", "e.py"]
    assert json.loads(rows[2]["metadata"])["pkb_analyze_outcome"] == "compile_error"


def test_cli_export(tmp_path):
    (tmp_path / "static.jsonl").write_text("".join(json.dumps(r.to_json_line()) + "\n" for r in RECORDS), encoding="utf-8")
    runner = CliRunner()
    res = runner.invoke(app, ["export", str(tmp_path), "--format", "pkb"])
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert [p["solution"] for p in lines] == ["a.py", "b.py", "c.py", "d.py", "e.py"]
    out = tmp_path / "kb.csv"
    assert runner.invoke(app, ["export", str(tmp_path), "--format", "kernelbench", "--to", str(out)]).exit_code == 0
    assert out.read_text().startswith("problem_id,candidate,compiled")
    assert runner.invoke(app, ["export", str(tmp_path), "--format", "foo"]).exit_code == 2
    assert runner.invoke(app, ["export", str(tmp_path / "nope"), "--format", "pkb"]).exit_code == 2
