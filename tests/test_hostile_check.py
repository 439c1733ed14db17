"""bench/hostile_check.py: which manifest expectation a GPU or CPU run is held to, on records written here."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load():
    spec = importlib.util.spec_from_file_location("bench_hostile_check", ROOT / "bench" / "hostile_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


hc = _load()

ENTRIES = {
    "peers.py": {"path": "peers.py", "outcome": "wrong_result", "subtype": "*", "needs_gpu": False, "min_world_size": 2},
    "timer.py": {"path": "timer.py", "outcome": "suspect", "subtype": "harness_tamper", "needs_gpu": False,
                 "on_cuda": {"outcome": "slower", "subtype": "", "why": "events"}},
    "plain.py": {"path": "plain.py", "outcome": "faster|slower", "subtype": "", "needs_gpu": False},
    "mem.py": {"path": "mem.py", "outcome": "runtime_error", "subtype": "out_of_memory", "needs_gpu": False, "needs_memory_limit": True},
}


def ev(outcome, subtype="", ws=2, device="cpu", status="ran"):
    return {"status": status, "outcome": outcome, "subtype": subtype, "world_size": ws, "device": device}


def test_gloo_expectations_hold_on_a_cpu_run_at_two_ranks():
    got = {"peers.py": ev("wrong_result", "value_mismatch"), "timer.py": ev("suspect", "harness_tamper"),
           "plain.py": ev("slower"), "mem.py": ev("runtime_error", "out_of_memory")}
    assert hc.differences(ENTRIES, got, memory_limit=True) == ([], [])


def test_a_cuda_run_is_held_to_on_cuda_and_the_gloo_outcome_there_is_a_difference():
    got = {name: ev("slower", ws=1, device="cuda") for name in ENTRIES}
    rows, unjudged = hc.differences(ENTRIES, got)
    assert [r[0] for r in rows] == []  # timer.py: slower is its CUDA outcome; plain.py: slower allowed
    assert {n for n, _ in unjudged} == {"peers.py", "mem.py"}
    got["timer.py"] = ev("suspect", "harness_tamper", ws=1, device="cuda")
    rows, _ = hc.differences(ENTRIES, got)
    assert [r[0] for r in rows] == ["timer.py"]


def test_a_missing_record_or_a_run_that_did_not_run_is_a_difference():
    got = {"peers.py": ev("wrong_result"), "timer.py": ev("", status="not_run")}
    rows, _ = hc.differences(ENTRIES, got, memory_limit=True)
    assert sorted(r[0] for r in rows) == ["mem.py", "plain.py", "timer.py"]


def test_a_resumed_runs_cached_records_carry_the_stored_outcome(tmp_path):
    jsonl = tmp_path / "eval.jsonl"
    recs = [{"path": "sub/plain.py", "evaluation": ev("faster", status="skipped_cached")}]
    jsonl.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    got = hc.last_records(jsonl)
    assert got["plain.py"]["outcome"] == "faster"
    assert hc.differences({"plain.py": ENTRIES["plain.py"]}, got) == ([], [])


def test_the_bundled_manifest_parses_with_its_gates():
    entries = hc.expected()
    assert all(e.get("min_world_size", 1) >= 1 for e in entries.values())
    assert all(set(e["on_cuda"]) >= {"outcome", "subtype", "why"} for e in entries.values() if "on_cuda" in e)


def test_a_subset_run_is_judged_on_its_own_records(tmp_path, capsys):
    """--subset: the manifest's candidates the run did not take are left out of the count, not
    counted as missing records."""
    name = hc.expected()["1_allreduce_raises.py"]["path"]
    want = hc.expected()[name]
    jsonl = tmp_path / "eval.jsonl"
    jsonl.write_text(json.dumps({"path": f"x/{name}", "evaluation": ev(want["outcome"].split("|")[0], want["subtype"].replace("*", ""))}) + "\n")
    hc.main([str(jsonl), "--subset"])
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("1 of 1 candidates")
    hc.main([str(jsonl)])
    assert "got no record" in capsys.readouterr().out
