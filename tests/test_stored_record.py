"""The whole record stored (issue 16): the static part, the profile and the diagnosis go to the
store as they are produced, and `report` and `explain` read them, running a stage again only when
nothing is stored for its part or --rerun asks, and saying so. No launch here: the evaluation and
the profile (a recorded trace of tests/fixtures/traces/) are put in the store directly; the
launch that records a real CPU profile and reports it is tests/test_cli.py's profile test."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pkb.record import LATER_PARTS, CandidateRecord
from pkb.store import RECORD_PARTS_TABLE, SCHEMA, SCHEMA_VERSION, Store
from cli_runner import run_cli

TRACE = Path(__file__).parent / "fixtures" / "traces" / "ce_allgather.trace.json.gz"
GOOD = ("import torch\nimport torch.distributed as dist\n\n"
        "@torch.no_grad()\ndef solution(tensor):\n    out = tensor.clone()\n    dist.all_reduce(out)\n    return out\n")


@pytest.fixture
def analyzed(tmp_path, capsys):
    """(the candidate file, the run folder of `pkb-analyze analyze --static-only`, its static line)."""
    d = tmp_path / "c"
    d.mkdir()
    f = d / "1_allreduce_good.py"
    f.write_text(GOOD)
    out = tmp_path / "out"
    code, cap = run_cli(["analyze", str(f), "--static-only", "--no-ptx", "--out", str(out), "-q"], tmp_path, capsys)
    assert code == 0, cap.err
    line = json.loads((out / "static.jsonl").read_text().splitlines()[0])
    return f, out, line


def _evaluation(key: str) -> dict:
    return {"status": "ran", "outcome": "slower", "subtype": "", "speedup": 0.8, "correct": True, "world_size": 2,
            "backend": "gloo", "device": "cpu", "dtype": "float32", "config_key": key, "details": {}}


def _profile() -> dict:
    from profiling.analyze import profile_summary
    from profiling.trace import load_trace

    return {"ranks": [profile_summary(load_trace(TRACE, rank=0))], "errors": [], "merged_trace": None, "timeline_png": None}


def _store_evaluation(out: Path, line: dict, key: str, *, profile: bool, headline: str = "") -> None:
    """An evaluation under `key` as pkb.eval stores it, with a profile and a diagnosis whose headline is `headline`."""
    from pkb.diagnose.explain import diagnose

    rec = CandidateRecord.from_json_line(line)
    rec.evaluation = _evaluation(key)
    with Store(out / "pkb_eval.sqlite", lock=True) as store:
        store.write_evaluation(line["sha256"], key, 1, rec.evaluation)
        if profile:
            rec.profile = _profile()
            store.write_part(line["sha256"], key, "profile", rec.profile)
        if headline:
            diagnose(rec)
            rec.diagnosis["explanation"]["headline"] = headline
            store.write_part(line["sha256"], key, "diagnosis", rec.diagnosis)


def _page(folder: Path) -> str:
    pages = list((folder / "kernels").glob("*.html"))
    assert len(pages) == 1, pages
    return pages[0].read_text()


def test_analyze_stores_the_static_part_and_its_diagnosis(analyzed, tmp_path, capsys):
    _, out, line = analyzed
    with Store(out / "pkb_eval.sqlite") as store:
        stored = store.part(line["sha256"], "", "static")
        diagnosis = store.part(line["sha256"], "", "diagnosis")  # '': of no evaluation
    assert stored == {k: v for k, v in line.items() if k not in LATER_PARTS}
    assert CandidateRecord.from_json_line(stored).to_json_line() == line  # nothing lost on the way back
    assert line["mechanism"][0]["label"] == "nccl"
    assert diagnosis["outcome"] == "" and diagnosis["explanation"]["headline"]
    # a report of the static-only run reads that diagnosis: nothing is made again
    code, cap = run_cli(["report", str(out), "--out", str(tmp_path / "rep")], tmp_path, capsys)
    assert code == 0, cap.err
    assert "static only" in cap.out and "diagnosis: stored (1)" in cap.out
    assert diagnosis["explanation"]["headline"] in _page(tmp_path / "rep").replace("&#x27;", "'").replace("&quot;", '"')


def test_report_shows_the_stored_profile_and_diagnosis(analyzed, tmp_path, capsys):
    _, out, line = analyzed
    _store_evaluation(out, line, "k1", profile=True, headline="HEADLINE-AS-STORED")
    code, cap = run_cli(["report", str(out), "--out", str(tmp_path / "rep")], tmp_path, capsys)
    assert code == 0, cap.err
    assert "diagnosis: stored (1)" in cap.out
    page = _page(tmp_path / "rep")
    assert "HEADLINE-AS-STORED" in page  # read back, not made again
    assert "no profile recorded" not in page and "no profile trace" not in page
    assert TRACE.name in page and 'alt="timeline of rank 0' in page
    # the whole stored record, read back as one, is a record of the published schema
    from pkb.schema import validate_line
    from reports.load import stored_record

    whole = stored_record(out / "pkb_eval.sqlite", line["sha256"])
    model = validate_line(whole.to_json_line())
    assert model.profile.ranks[0]["n_calls"] == whole.profile["ranks"][0]["n_calls"]
    assert model.diagnosis.explanation["headline"] == "HEADLINE-AS-STORED"
    # asked to: the diagnosis is made again from the record, and the output says so
    code, cap = run_cli(["report", str(out), "--out", str(tmp_path / "rep2"), "--rerun", "diagnosis"], tmp_path, capsys)
    assert code == 0, cap.err
    assert "1 made now (asked: --rerun diagnosis)" in cap.out
    assert "HEADLINE-AS-STORED" not in _page(tmp_path / "rep2")


def test_report_without_a_stored_profile_or_diagnosis_says_so(analyzed, tmp_path, capsys):
    _, out, line = analyzed
    _store_evaluation(out, line, "k1", profile=False)
    code, cap = run_cli(["report", str(out), "--out", str(tmp_path / "rep")], tmp_path, capsys)
    assert code == 0, cap.err
    assert "1 made now (none stored)" in cap.out
    page = _page(tmp_path / "rep")
    assert "no profile recorded (pkb-analyze eval --profile)" in page and "no profile trace for this candidate" in page


def test_parts_follow_the_evaluation_they_belong_to(analyzed):
    from reports.load import attach_store

    _, out, line = analyzed
    sha = line["sha256"]
    _store_evaluation(out, line, "k1", profile=True, headline="OF-K1")
    with Store(out / "pkb_eval.sqlite", lock=True) as store:
        assert store.part(sha, "k1", "profile") and store.part(sha, "k1", "diagnosis")
        store.write_evaluation(sha, "k2", 1, _evaluation("k2"))  # a later evaluation under another configuration
    rec = CandidateRecord.from_json_line(line)
    assert attach_store([rec], out / "pkb_eval.sqlite") == {"evaluation": 1, "profile": 0, "diagnosis": 0}
    assert rec.evaluation["config_key"] == "k2" and not rec.profile and not rec.diagnosis
    with Store(out / "pkb_eval.sqlite", lock=True) as store:
        store.write_evaluation(sha, "k1", 1, _evaluation("k1"))  # k1 run again: its old profile and diagnosis go
        assert store.part(sha, "k1", "profile") is None and store.part(sha, "k1", "diagnosis") is None
        assert store.part(sha, "", "static") is not None
        with pytest.raises(ValueError, match="unknown record part"):
            store.write_part(sha, "k1", "labels", {})


def test_explain_reads_the_stored_record_and_says_what_it_ran(analyzed, tmp_path, capsys, monkeypatch):
    f, out, line = analyzed
    monkeypatch.chdir(tmp_path)  # no store in the working folder
    stored = {k: v for k, v in line.items() if k not in LATER_PARTS}
    stored["findings"] = [{"rule": "PKB012", "name": "marker", "severity": "info", "message": "FINDING-AS-STORED",
                           "file": stored["path"], "line": 1}]
    with Store(out / "pkb_eval.sqlite", lock=True) as store:
        store.write_part(line["sha256"], "", "static", stored)
    _store_evaluation(out, line, "k1", profile=True, headline="HEADLINE-AS-STORED")
    code, cap = run_cli(["explain", str(f), "--store", str(out / "pkb_eval.sqlite")], tmp_path, capsys)
    assert code == 0, cap.err
    assert "FINDING-AS-STORED" in cap.out and "HEADLINE-AS-STORED" in cap.out and "slower" in cap.out
    assert "static passes run now" not in cap.out and "made now" not in cap.out
    assert "static, evaluation, profile, diagnosis" in cap.out  # what was read, said
    code, cap = run_cli(["explain", str(f), "--store", str(out / "pkb_eval.sqlite"), "--rerun", "static,diagnosis"], tmp_path, capsys)
    assert code == 0, cap.err
    assert "static passes run now (asked: --rerun static)" in cap.out and "made now (asked: --rerun diagnosis)" in cap.out
    assert "FINDING-AS-STORED" not in cap.out and "HEADLINE-AS-STORED" not in cap.out
    assert "slower" in cap.out  # the stored evaluation is still the one shown
    code, cap = run_cli(["explain", str(f)], tmp_path, capsys)  # no store anywhere
    assert code == 0, cap.err
    assert "static passes run now (no store found)" in cap.out and "Evaluation: none stored" in cap.out
    code, cap = run_cli(["explain", str(f), "--rerun", "profile"], tmp_path, capsys)
    assert code == 2 and "--rerun profile" in cap.err


def test_a_store_of_version_2_gains_record_parts_keeping_its_rows(tmp_path):
    path = tmp_path / "s.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA.replace(RECORD_PARTS_TABLE, ""))  # the tables of version 2
    conn.execute("INSERT INTO outcomes (sha256, config_key, status, outcome, details) VALUES (?,?,?,?,?)",
                 ("c" * 64, "k", "ran", "slower", "{}"))
    conn.execute("PRAGMA user_version=2")
    conn.commit()
    conn.close()
    with Store(path) as store:
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
        assert store.done("c" * 64, "k") and store.part("c" * 64, "k", "profile") is None
        store.write_part("c" * 64, "k", "profile", {"ranks": []})
        assert store.part("c" * 64, "k", "profile") == {"ranks": []}


def test_a_failing_diagnosis_never_stops_the_run_and_stores_nothing(tmp_path, capsys, monkeypatch):
    import pkb.diagnose.explain
    from pkb.cli import store_later_parts

    def broken(record):
        raise KeyError("no such figure")

    rec = CandidateRecord(path="1_allreduce_good.py", sha256="a" * 64, evaluation=_evaluation("k1"), profile={"ranks": []})
    with Store(tmp_path / "s.sqlite", lock=True) as store:
        monkeypatch.setattr(pkb.diagnose.explain, "diagnose", broken)
        store_later_parts(store, rec)
        assert store.part(rec.sha256, "k1", "diagnosis") is None
        assert store.part(rec.sha256, "k1", "profile") == {"ranks": []}  # what was produced is kept all the same
        monkeypatch.undo()
        store_later_parts(store, rec)
        assert store.part(rec.sha256, "k1", "diagnosis")["outcome"] == "slower"
    assert "diagnosis failed (KeyError" in capsys.readouterr().err
