"""The real-label scorer (bench/real_labels.py) on tiny labels and fake records of our own.

No PKB checkout is needed: records are dicts in the static.jsonl layout, written here.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_scorer():
    spec = importlib.util.spec_from_file_location("bench_real_labels", ROOT / "bench" / "real_labels.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


rl = _load_scorer()

LABELS_A = """
["tree_a/1_allreduce_cuda.py"]
problem = "1_allreduce"
mechanism = ["nvls"]
sync = ["device_flags", "host_sync"]
ordering = ["release_acquire"]
overlap = ["n/a"]
fallback = ["sm_load"]
defects = [
  { rule = "PKB017", line = 40, why = "byte offset before a 32-bit atomic" },
  { rule = "PKB008", line = 100, why = "dist.barrier every call" },
  { rule = "other", line = 7, why = "returns the input when group is None" },
]

["tree_a/2_allgather_cuda.py"]
problem = "2_allgather"
mechanism = ["sm_load"]
sync = ["symm_barrier"]
overlap = ["n/a"]
defects = []
"""

LABELS_B = """
["tree_b/12_gemm_allgather_cuda.py"]
problem = "12_allgather_gemm"
mechanism = ["sm_load"]
sync = ["symm_barrier"]
overlap = ["fused_kernel"]
defects = [{ rule = "PKB019", line = 50 }]
"""


def _label(value, *notes):
    return {"label": value, "evidence": [{"file": "f.py", "line": 1, "snippet": "", "pass_name": "python", "note": n} for n in notes or ("",)]}


def _finding(rule, line, message="msg"):
    return {"rule": rule, "name": "x", "severity": "warning", "message": message, "file": "f.py", "line": line}


def _record(path, mechanism=(), sync=(), overlap=(), findings=()):
    return {"path": path,
            "mechanism": [m if isinstance(m, dict) else _label(m) for m in mechanism],
            "sync": [_label(s) for s in sync],
            "overlap": [_label(o) for o in overlap],
            "ordering": [],
            "findings": list(findings)}


@pytest.fixture()
def label_dir(tmp_path):
    d = tmp_path / "labels"
    d.mkdir()
    (d / "a.toml").write_text(LABELS_A, encoding="utf-8")
    (d / "b.toml").write_text(LABELS_B, encoding="utf-8")
    (d / "notes.txt").write_text("not a label file", encoding="utf-8")
    return d


def test_load_labels_reads_every_toml_of_a_folder_and_keeps_the_source(label_dir):
    items = rl.load_labels([label_dir])
    assert [it.path for it in items] == ["tree_a/1_allreduce_cuda.py", "tree_a/2_allgather_cuda.py", "tree_b/12_gemm_allgather_cuda.py"]
    first = items[0]
    assert first.axes["sync"] == {"device_flags", "host_sync"}
    assert first.fallback == {"sm_load"} and first.ordering == {"release_acquire"}
    assert first.defects[0] == rl.Defect("PKB017", 40, "byte offset before a 32-bit atomic")
    assert items[2].source.endswith("b.toml") and items[2].defects == [rl.Defect("PKB019", 50, "")]
    assert rl.validate_labels(items) == []


def test_load_labels_reads_toml_files_of_sub_folders_too(label_dir):
    held = label_dir / "heldout"
    held.mkdir()
    (held / "c.toml").write_text('["tree_c/3_x_cuda.py"]\nmechanism = ["nvls"]\nsync = ["none"]\noverlap = ["none"]\n', encoding="utf-8")
    items = rl.load_labels([label_dir])
    assert [it.path for it in items][-1] == "tree_c/3_x_cuda.py"
    assert len(items) == 4


def test_validate_labels_names_typos_and_bad_rule_ids(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('["x.py"]\nmechanism = ["sm_loads"]\nsync = ["symm_barrier"]\noverlap = []\n'
                 'defects = [{ rule = "PKB17", line = 3 }, { rule = "PKB001", line = 0 }]\n', encoding="utf-8")
    errors = rl.validate_labels(rl.load_labels([f]))
    assert any("`sm_loads` is not a mechanism label" in e for e in errors)
    assert any("no `overlap` labels" in e for e in errors)
    assert any("`PKB17` is neither PKBnnn" in e for e in errors)
    assert any("line 0 is not a 1-based line" in e for e in errors)


def test_fallback_tagged_labels_do_not_count_on_the_axis():
    rec = _record("p.py", mechanism=["nvls", _label("sm_load", "fallback: multicast_ptr == 0")])
    assert rl.record_labels(rec, "mechanism") == {"nvls"}
    assert rl.record_fallback(rec) == {"sm_load"}
    flagged = {"label": "nccl", "fallback": True, "evidence": []}
    assert rl.is_fallback(flagged)
    mixed = _label("sm_load", "fallback", "")  # one piece of evidence is on the run path
    assert not rl.is_fallback(mixed)
    assert rl.record_labels(None, "sync") == frozenset()


def test_findings_are_distinct_by_rule_and_line():
    rec = _record("p.py", findings=[_finding("PKB008", 10), _finding("PKB008", 10, "again"), _finding("PKB005", 10)])
    assert rl.record_findings(rec) == [("PKB005", 10, "msg", ()), ("PKB008", 10, "msg", ())]


def test_a_finding_matches_a_defect_at_a_related_line_unless_scoring_primary_lines_only():
    rec = _record("p.py", findings=[{**_finding("PKB004", 80), "related_lines": [40]}])
    defects = [rl.Defect("PKB004", 42)]
    true, _, found, _ = rl.match_findings(defects, rl.record_findings(rec))
    assert [f[:2] for f in true] == [("PKB004", 80)] and found == defects
    true, false, found, missed = rl.match_findings(defects, rl.record_findings(rec, related=False))
    assert true == [] and missed == defects  # 80 is far from 42


def test_match_findings_uses_the_rule_and_a_five_line_window_and_skips_other():
    defects = [rl.Defect("PKB017", 40), rl.Defect("PKB008", 100), rl.Defect("other", 7)]
    findings = [("PKB017", 45, "m"), ("PKB017", 46, "m"), ("PKB008", 40, "m"), ("PKB004", 7, "m")]
    true, false, found, missed = rl.match_findings(defects, findings)
    assert [f[:2] for f in true] == [("PKB017", 45)]  # 45 is within 5 of 40; 46 is not
    assert [f[:2] for f in false] == [("PKB017", 46), ("PKB008", 40), ("PKB004", 7)]  # wrong line, wrong rule
    assert found == [rl.Defect("PKB017", 40)]
    assert missed == [rl.Defect("PKB008", 100)]  # `other` is neither found nor missed


def test_per_label_scores_count_each_value_over_files():
    pairs = [(frozenset({"sm_load"}), frozenset({"sm_load", "nccl"})), (frozenset({"nvls"}), frozenset({"sm_load"}))]
    s = rl.per_label_scores(pairs)
    assert s["sm_load"] == {"tp": 1, "fp": 1, "fn": 0, "precision": 0.5, "recall": 1.0}
    assert s["nvls"]["recall"] == 0.0 and s["nvls"]["precision"] is None
    assert s["nccl"]["precision"] == 0.0


def test_score_accuracy_rule_figures_and_mismatch_lists(label_dir):
    items = rl.load_labels([label_dir])
    records = {
        "tree_a/1_allreduce_cuda.py": _record(
            "tree_a/1_allreduce_cuda.py",
            mechanism=["nvls", _label("sm_load", "fallback")],
            sync=["device_flags", "host_sync"], overlap=["n/a"],
            findings=[_finding("PKB017", 43), _finding("PKB015", 90, "multicast unchecked")]),
        "tree_a/2_allgather_cuda.py": _record(
            "tree_a/2_allgather_cuda.py", mechanism=["sm_load"], sync=["none"], overlap=["n/a"]),
        # tree_b's file has no record: wrong on every axis, its defect missed
    }
    s = rl.score(items, records)
    assert s["files"] == 3 and s["missing_records"] == ["tree_b/12_gemm_allgather_cuda.py"]
    assert s["axes"]["mechanism"]["right"] == 2
    assert s["axes"]["sync"]["right"] == 1
    assert s["axes"]["overlap"]["right"] == 2
    assert s["all_three_right"] == 1
    assert s["fallback"]["right"] == 3  # allreduce: sm_load both sides; the others: none labelled, none reported
    assert {"file": "tree_a/2_allgather_cuda.py", "axis": "sync", "expected": ["symm_barrier"], "got": ["none"]} in s["mismatches"]
    assert s["findings"] == {"distinct": 2, "true": 1, "false": 1, "precision": 0.5}
    assert s["defects"]["with_rule"] == 3 and s["defects"]["found"] == 1 and s["defects"]["other"] == 1
    assert s["false_findings"] == [{"file": "tree_a/1_allreduce_cuda.py", "rule": "PKB015", "line": 90, "message": "multicast unchecked"}]
    assert {(m["rule"], m["line"]) for m in s["missed_defects"]} == {("PKB008", 100), ("PKB019", 50)}
    assert s["rules"]["PKB017"]["precision"] == 1.0 and s["rules"]["PKB015"]["precision"] == 0.0
    assert s["rules"]["PKB019"]["recall"] == 0.0
    text = rl.format_report(s)
    assert "tree_a/2_allgather_cuda.py  sync  expected ['symm_barrier']  got ['none']" in text
    assert "tree_a/1_allreduce_cuda.py:90  PKB015" in text
    assert "tree_b/12_gemm_allgather_cuda.py:50  PKB019" in text


def test_main_scores_a_static_jsonl_and_writes_the_json_summary(label_dir, tmp_path, capsys):
    jsonl = tmp_path / "static.jsonl"
    recs = [_record("tree_b/12_gemm_allgather_cuda.py", mechanism=["sm_load"], sync=["symm_barrier"],
                    overlap=["fused_kernel"], findings=[_finding("PKB019", 52)])]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    out = tmp_path / "summary.json"
    rc = rl.main(["--pkb-root", str(tmp_path), "--labels", str(label_dir / "b.toml"),
                  "--static-jsonl", str(jsonl), "--json", str(out)])
    assert rc == 0
    summary = json.loads(out.read_text(encoding="utf-8"))
    assert summary["all_three_right"] == 1 and summary["findings"]["precision"] == 1.0 and summary["defects"]["recall"] == 1.0
    assert summary["label_files"] == [str(label_dir / "b.toml")]
    assert "all three    1/1" in capsys.readouterr().out


def test_main_refuses_labels_with_errors(tmp_path, capsys):
    f = tmp_path / "bad.toml"
    f.write_text('["x.py"]\nmechanism = ["dma"]\nsync = ["none"]\noverlap = ["none"]\n', encoding="utf-8")
    assert rl.main(["--pkb-root", str(tmp_path), "--labels", str(f), "--static-jsonl", str(f)]) == 2
    assert "`dma` is not a mechanism label" in capsys.readouterr().err


@pytest.mark.skipif(not __import__("os").environ.get("PKB_ROOT"), reason="PKB_ROOT (a ParallelKernelBench checkout) not set")
def test_committed_labels_name_files_of_the_checkout_and_valid_words():
    items = rl.load_labels([rl.DEFAULT_LABELS])
    assert items and rl.validate_labels(items) == []
    root = Path(__import__("os").environ["PKB_ROOT"])
    assert [it.path for it in items if not (root / it.path).is_file()] == []
