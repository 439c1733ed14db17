"""Explanations cite only what the record holds; slowness causes need evidence and rank by cost."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from pkb.diagnose.explain import check_citations, diagnose
from pkb.diagnose.slow import diagnose_slow
from pkb.record import CandidateRecord, Evidence, Finding, Label

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus_records(tmp_path_factory):
    from analyzer.pipeline import StaticOptions
    from pkb.cli import run_static

    tmp = tmp_path_factory.mktemp("explain")
    os.environ["PKB_CACHE_DIR"] = str(tmp / "cache")
    records = run_static(ROOT / "corpus", tmp / "out", StaticOptions(ptx=False), quiet=True)
    for rec in records:
        diagnose(rec)
    return records


def test_no_explanation_cites_a_line_absent_from_evidence(corpus_records):
    assert len(corpus_records) >= 24
    for rec in corpus_records:
        expl = rec.diagnosis["explanation"]
        assert check_citations(rec, expl) == [], rec.path
        cited = [e for e in expl["evidence"] if e["kind"] in ("label", "finding")]
        assert cited or not rec.labels, rec.path  # labelled candidates cite their labels' evidence


def test_findings_bring_the_rule_fix(corpus_records):
    from analyzer.rules import all_rules

    fixes = {r.id: r.fix for r in all_rules()}
    rec = next(r for r in corpus_records if any(f.rule == "PKB012" for f in r.findings))
    fix = next(f for f in rec.diagnosis["explanation"]["fixes"] if f["rule"] == "PKB012")
    assert fix["fix"] == fixes["PKB012"] and fix["why"]


def test_a_made_up_citation_is_caught(corpus_records):
    rec = next(r for r in corpus_records if r.findings)
    expl = copy.deepcopy(rec.diagnosis["explanation"])
    f = rec.findings[0]
    expl["evidence"].append({"kind": "finding", "rule": f.rule, "file": f.file, "line": f.line + 1000, "snippet": f.snippet, "text": "invented"})
    expl["evidence"].append({"kind": "label", "file": rec.path, "line": 99999, "snippet": "x", "text": "invented"})
    expl["evidence"].append({"kind": "evaluation", "path": ["speedup"], "value": 9.9, "text": "speedup 9.9x"})
    expl["fixes"].append({"rule": "PKB001", "name": "", "fix": "", "why": "", "at": [f"{rec.path}:99999"]})
    assert len(check_citations(rec, expl)) == 4


def _record(**kw) -> CandidateRecord:
    rec = CandidateRecord(path="c.py", problem_id=12, problem_name="allgather_gemm", **kw)
    return rec


def test_slow_causes_need_evidence_and_rank_by_cost():
    rec = _record()
    assert diagnose_slow(rec, True) == []  # nothing static, nothing measured: no cause
    rec.findings = [Finding("PKB008", "host-sync-in-timed-path", "warning", "host synchronisation on the timed path: torch.cuda.synchronize", "c.py", 12, "torch.cuda.synchronize()"),
                    Finding("PKB009", "allocation-in-timed-path", "warning", "allocation on the timed path", "c.py", 9, "torch.empty(n)")]
    rec.labels = {"overlap": [Label("overlap", "none", [Evidence("c.py", 5, "def solution(a, b):", "python")])]}
    rec.profile = {"ranks": [{"rank": 0, "n_calls": 3, "median": {
        "host_syncs": 2, "cuda_sync_us": 40.0, "allocations": 1, "overlap_share": 0.0, "comm_us": 120.0, "compute_us": 300.0,
        "launches": 3, "gpu_span_us": 450.0, "idle_us": 30.0, "link_share": 0.1, "achieved_GBps": 45.0}, "calls": []}]}
    causes = diagnose_slow(rec, has_compute=True)
    names = [c["cause"] for c in causes]
    # measured ones first, by cost: low link use 405 us, serialized 120 us, host sync 40 us; set-up unmeasured
    assert names == ["low_link_utilization", "serialized", "host_sync_in_hot_path", "setup_in_hot_path"]
    assert causes[0]["cost"] == "405 us per call" and causes[-1]["cost"] == "unmeasured"
    assert {e["kind"] for e in causes[2]["evidence"]} == {"finding", "profile"}
    assert "launch_bound" not in names  # 3 launches is not many


def test_low_occupancy_reads_the_ncu_rows_as_stored():
    rec = _record()
    rec.profile = {"ncu": {"status": "ok", "kernels": [{"rank": 0, "kernel": "pull_kernel", "achieved_occupancy": 0.1, "duration_ns": 5000.0}]}}
    causes = diagnose_slow(rec, has_compute=True)
    assert [c["cause"] for c in causes] == ["low_occupancy"] and causes[0]["cost"] == "5 us per call"
    # what --ncu stores where it could not run (a CPU run, a failed pass): no rows, no cause
    rec.profile = {"ncu": {"status": "skipped", "error": "no GPU: ncu profiles CUDA kernels"}}
    assert diagnose_slow(rec, has_compute=True) == []
    rec.profile = {"ncu": {"status": "ok", "kernels": [{"rank": 0, "kernel": "pull_kernel", "achieved_occupancy": 0.9, "duration_ns": 5000.0}]}}
    assert diagnose_slow(rec, has_compute=True) == []


def test_slower_explanation_names_the_costliest_cause():
    rec = _record()
    rec.findings = [Finding("PKB012", "library-collective-on-timed-path", "warning", "library collective on the timed path", "c.py", 30, "dist.all_gather_into_tensor(g, a)")]
    rec.evaluation = {"status": "ran", "outcome": "slower", "subtype": "", "speedup": 0.5, "correct": True,
                      "details": {"reference_ms": 1.0, "candidate_ms": 2.0}, "trials": [], "ranks": []}
    rec.profile = {"ranks": [{"rank": 0, "n_calls": 1, "median": {}, "calls": [{"call": 0, "comm_by_source_us": {"nccl": 800.0}}]}]}
    d = diagnose(rec)
    expl = d["explanation"]
    assert expl["headline"].startswith("is correct but slower than the reference: speedup 0.5x; the costliest cause: nccl_fallback (800 us per call)")
    assert expl["fixes"][0]["rule"] == "PKB012"
    assert check_citations(rec) == []


def test_a_profile_that_disagrees_with_the_timing_is_cited():
    rec = _record()
    check = {"agrees": False, "ranks": [{"rank": 0, "charged_ms": 0.05, "profiled_gpu_busy_ms": 0.04, "agrees": True},
                                        {"rank": 1, "charged_ms": 0.05, "profiled_gpu_busy_ms": 0.4, "agrees": False}]}
    rec.evaluation = {"status": "ran", "outcome": "faster", "subtype": "", "speedup": 2.0, "correct": True,
                      "details": {"reference_ms": 0.1, "candidate_ms": 0.05, "profile_check": check}, "trials": [], "ranks": []}
    expl = diagnose(rec)["explanation"]
    said = [e["text"] for e in expl["evidence"] if e.get("path") == ["details", "profile_check", "agrees"]]
    assert len(said) == 1 and "rank 1" in said[0] and "0.4 ms" in said[0]
    assert check_citations(rec) == []
    check.update(agrees=True)
    assert not [e for e in diagnose(rec)["explanation"]["evidence"] if e.get("path") == ["details", "profile_check", "agrees"]]


def test_failure_explanations_quote_the_evaluation():
    rec = _record()
    rec.evaluation = {"status": "ran", "outcome": "hang", "subtype": "timeout", "speedup": None, "correct": False,
                      "reason": "killed after the 60 s limit; rank 1 in trial 0 candidate",
                      "details": {"stuck_ranks": [{"rank": 1, "phase": "trial 0 candidate"}]}, "trials": [], "ranks": []}
    d = diagnose(rec)
    texts = [e["text"] for e in d["explanation"]["evidence"]]
    assert "evaluation: killed after the 60 s limit; rank 1 in trial 0 candidate" in texts
    assert any(t.startswith("stuck ranks:") for t in texts)
    assert d["explanation"]["fixes"][0]["fix"].startswith("a rank never finished")
    assert check_citations(rec) == []


def test_a_race_rule_is_the_likely_cause_of_a_stale_result_and_a_slot_formula_of_a_misaligned_address():
    rec = _record()
    rec.findings = [Finding("PKB021", "side-stream-without-wait", "error",
                            "side-stream work is not ordered after the current stream's earlier work", "c.py", 40,
                            "ext.pull(ptrs, out)", related_lines=[35]),
                    Finding("PKB008", "host-sync-in-timed-path", "warning", "host synchronisation on the timed path", "c.py", 12,
                            "torch.cuda.synchronize()")]
    rec.evaluation = {"status": "ran", "outcome": "wrong_result", "subtype": "stale", "speedup": None, "correct": False,
                      "reason": "trial 1 rank 1: equals trial 0's answer", "details": {}, "trials": [], "ranks": []}
    expl = diagnose(rec)["explanation"]
    assert [f["rule"] for f in expl["fixes"]] == ["PKB021"]
    assert check_citations(rec) == []
    rec.findings.append(Finding("PKB017", "misaligned-signal-atomic", "error", "byte offset added to an integer signal address",
                                "c.py", 20, "uint32_t* slot = reinterpret_cast<uint32_t*>(base + rank);"))
    rec.evaluation = {"status": "ran", "outcome": "runtime_error", "subtype": "misaligned_address", "speedup": None,
                      "correct": False, "reason": "CUDA error: misaligned address", "details": {}, "trials": [], "ranks": []}
    rec.diagnosis = None
    assert [f["rule"] for f in diagnose(rec)["explanation"]["fixes"]] == ["PKB017"]
