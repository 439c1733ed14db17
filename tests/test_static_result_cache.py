"""The finished-record cache: a hit gives the record a cold run gives, without running a pass or
labelling; a changed file, file name or rule set misses; a damaged entry is a miss, not a failure."""

from __future__ import annotations

import shutil
import sqlite3
from dataclasses import fields
from pathlib import Path

import pytest

from analyzer.pipeline import StaticAnalyzer, StaticOptions
from pkb.serde import to_data

REPO = Path(__file__).resolve().parents[1]
TREE = "solutions_cuda_bf16_h100_8_pkb_sample-b"
PICK = ("1_allreduce_cuda.py", "2_allgather_cuda.py", "3_broadcast_cuda.py", "7_reducescatter_cuda.py")


@pytest.fixture
def corpus(tmp_path) -> Path:
    """A few candidates of the bundled corpus, a syntax error and an empty file, in a tree of the test's own."""
    root = tmp_path / "corpus"
    (root / TREE).mkdir(parents=True)
    for name in PICK:
        shutil.copy(REPO / "corpus" / TREE / name, root / TREE / name)
    (root / TREE / "9_broken_cuda.py").write_text("def solution(:\n")
    (root / TREE / "10_empty_cuda.py").write_text("")
    return root


def files(root: Path) -> list[Path]:
    return sorted((root / TREE).iterdir())


def analyze(root: Path, cache: Path, processes: int = 1, **opts) -> list:
    analyzer = StaticAnalyzer(StaticOptions(ptx=False, cache_dir=cache, processes=processes, jobs=1, **opts))
    try:
        return list(analyzer.analyze_files(files(root), root))
    finally:
        analyzer.close()


def no_clocks(data):
    """The data without its `seconds` (the passes' clocks: the one thing two runs never share)."""
    if isinstance(data, dict):
        return {k: no_clocks(v) for k, v in data.items() if k != "seconds"}
    if isinstance(data, list):
        return [no_clocks(v) for v in data]
    return data


def whole(rec) -> dict:
    """Every field of the record but the syntax tree, clocks left out."""
    data = no_clocks({f.name: to_data(getattr(rec, f.name)) for f in fields(rec) if f.name not in ("tree", "source")})
    data["source"] = rec.source
    return data


def no_passes(monkeypatch) -> None:
    """From here on, any pass or labelling fails the test."""
    def boom(*_a, **_k):
        raise AssertionError("a pass or the labelling ran on a cache hit")
    for name in ("_compute_source_passes", "_compute_ptx", "label"):
        monkeypatch.setattr(StaticAnalyzer, name, boom)
    monkeypatch.setattr("analyzer.pipeline.decode_file", boom)


def result_rows(cache: Path) -> int:
    with sqlite3.connect(cache / "static.sqlite") as db:
        return db.execute("SELECT COUNT(*) FROM results").fetchone()[0]


def test_hit_is_the_cold_record_without_any_pass(corpus, tmp_path, monkeypatch):
    cold = analyze(corpus, tmp_path / "c")
    assert any(r.findings for r in cold) and any(r.kernels for r in cold)  # the comparison compares something
    assert {r.parse_status for r in cold} >= {"ok", "syntax_error", "empty"}
    no_passes(monkeypatch)
    warm = analyze(corpus, tmp_path / "c")
    assert [whole(r) for r in warm] == [whole(r) for r in cold]
    assert [r.to_json_line() for r in warm] == [r.to_json_line() for r in cold]


def test_hit_keeps_the_facts_when_asked_and_drops_them_when_not(corpus, tmp_path):
    cold = analyze(corpus, tmp_path / "c")
    warm = analyze(corpus, tmp_path / "c")
    assert [no_clocks(to_data(r.facts)) for r in warm] == [no_clocks(to_data(r.facts)) for r in cold]
    assert any(r.facts.python.calls for r in warm)
    lean = analyze(corpus, tmp_path / "c", keep_facts=False)
    assert not any(r.facts.python.calls for r in lean)
    assert [r.to_json_line() for r in lean] == [r.to_json_line() for r in cold]


def test_a_changed_file_misses(corpus, tmp_path):
    analyze(corpus, tmp_path / "c")
    target = files(corpus)[-1]
    target.write_text(target.read_text() + "\nimport torch.distributed as dist\ndist.barrier()\n")
    again = analyze(corpus, tmp_path / "c")
    fresh = analyze(corpus, tmp_path / "fresh")
    assert [whole(r) for r in again] == [whole(r) for r in fresh]
    assert result_rows(tmp_path / "c") == result_rows(tmp_path / "fresh") + 1  # one new entry, for the new bytes


def test_a_renamed_file_misses(corpus, tmp_path):
    """The file name is part of the key (the problem is read from it)."""
    first = analyze(corpus, tmp_path / "c")
    src = files(corpus)[0]
    moved = corpus / TREE / ("7" + src.name[src.name.index("_"):])
    src.rename(moved)
    again = analyze(corpus, tmp_path / "c")
    assert any(r.path.endswith(moved.name) for r in again)
    assert not any(r.path.endswith(src.name) for r in again)
    assert result_rows(tmp_path / "c") == len(first) + 1


def test_a_changed_rule_set_misses_and_relabels(corpus, tmp_path, monkeypatch):
    full = analyze(corpus, tmp_path / "c")
    rules_fired = sorted({f.rule for r in full for f in r.findings})
    assert len(rules_fired) >= 2
    calls = []
    original = StaticAnalyzer.label
    monkeypatch.setattr(StaticAnalyzer, "label", lambda self, rec: (calls.append(rec.path), original(self, rec)))
    one = analyze(corpus, tmp_path / "c", select=[rules_fired[0]])
    assert calls  # labelled again (from the cached facts)
    assert {f.rule for r in one for f in r.findings} == {rules_fired[0]}


def test_a_changed_ptx_option_misses(corpus, tmp_path, monkeypatch):
    analyze(corpus, tmp_path / "c")
    analyzer = StaticAnalyzer(StaticOptions(ptx=False, cache_dir=tmp_path / "c"))
    with_ptx = StaticAnalyzer(StaticOptions(ptx=True, nvcc="/opt/some/nvcc", cache_dir=tmp_path / "c"))
    try:
        from pkb.corpus import read_file

        rec = read_file(files(corpus)[0], corpus).rec
        assert analyzer.result_key(rec) != with_ptx.result_key(rec)
    finally:
        analyzer.close()
        with_ptx.close()


@pytest.mark.parametrize("damage", [b"not a pickle", b"", "text, not bytes"])
def test_a_damaged_entry_is_a_miss(corpus, tmp_path, damage):
    cold = analyze(corpus, tmp_path / "c")
    with sqlite3.connect(tmp_path / "c" / "static.sqlite") as db:
        db.execute("UPDATE results SET data = ?", (damage,))
    again = analyze(corpus, tmp_path / "c")
    assert [whole(r) for r in again] == [whole(r) for r in cold]
    with sqlite3.connect(tmp_path / "c" / "static.sqlite") as db:  # and rewritten whole
        assert all(isinstance(d, bytes) and len(d) > 100 for (d,) in db.execute("SELECT data FROM results"))


def test_pool_hits_and_misses_give_the_records_of_one_process(corpus, tmp_path):
    one = analyze(corpus, tmp_path / "c1")
    two = analyze(corpus, tmp_path / "c2", processes=2)
    assert [whole(r) for r in two] == [whole(r) for r in one]
    assert result_rows(tmp_path / "c2") == len(one)  # written by the workers
    files(corpus)[0].write_text(files(corpus)[0].read_text() + "\n# edited\n")
    mixed = analyze(corpus, tmp_path / "c2", processes=2)  # one miss among hits
    assert [whole(r) for r in mixed] == [whole(r) for r in analyze(corpus, tmp_path / "fresh")]


def test_interrupted_pool_keeps_the_entries_it_finished(corpus, tmp_path):
    cache = tmp_path / "c"
    analyzer = StaticAnalyzer(StaticOptions(ptx=False, cache_dir=cache, processes=2, jobs=2))
    gen = analyzer.analyze_files(files(corpus), corpus)
    first = [next(gen) for _ in range(2)]
    gen.close()  # what a Ctrl-C does to the loop consuming it
    analyzer.close()
    assert all(r.passes for r in first)
    assert result_rows(cache) >= 2
    assert [whole(r) for r in analyze(corpus, cache)] == [whole(r) for r in analyze(corpus, tmp_path / "fresh")]
