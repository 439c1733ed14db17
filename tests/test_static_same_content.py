"""Each content is analysed once per run: a copy of a file under another folder (same name, same run
tree) gets the first copy's record under its own path; a copy under a run tree of another precision
is analysed on its own (the precision prunes dtype branches)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analyzer.pipeline import StaticAnalyzer, StaticOptions
from test_static_result_cache import no_passes, result_rows, whole

REPO = Path(__file__).resolve().parents[1]
TREE = "solutions_cuda_bf16_h100_8_pkb_sample-b"
OTHER_PRECISION = "solutions_cuda_fp32_h100_8_pkb_sample-b"
NAME = "1_allreduce_cuda.py"


@pytest.fixture
def corpus(tmp_path) -> Path:
    """One candidate in two folders under the same run-tree name, and once under an fp32 tree."""
    root = tmp_path / "corpus"
    for folder in ("a", "b"):
        (root / folder / TREE).mkdir(parents=True)
        shutil.copy(REPO / "corpus" / TREE / NAME, root / folder / TREE / NAME)
    (root / OTHER_PRECISION).mkdir()
    shutil.copy(REPO / "corpus" / TREE / NAME, root / OTHER_PRECISION / NAME)
    return root


def copies(root: Path) -> list[Path]:
    return [root / "a" / TREE / NAME, root / "b" / TREE / NAME]


def count_passes(monkeypatch) -> list[str]:
    """The paths the source passes ran on, from here on."""
    ran: list[str] = []
    original = StaticAnalyzer._compute_source_passes

    def counted(self, rec):
        ran.append(rec.path)
        return original(self, rec)

    monkeypatch.setattr(StaticAnalyzer, "_compute_source_passes", counted)
    return ran


def analyze(files: list[Path], root: Path, processes: int = 1, jobs: int = 1, **opts) -> list:
    analyzer = StaticAnalyzer(StaticOptions(ptx=False, processes=processes, jobs=jobs, **opts))
    try:
        return list(analyzer.analyze_files(files, root))
    finally:
        analyzer.close()


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_copy_elsewhere_is_analysed_once_and_differs_only_by_its_path(corpus, monkeypatch, jobs):
    ran = count_passes(monkeypatch)
    first, second = analyze(copies(corpus), corpus, jobs=jobs, use_cache=False)
    assert ran == ["a/" + TREE + "/" + NAME]
    assert (first.path, second.path) == ("a/" + TREE + "/" + NAME, "b/" + TREE + "/" + NAME)
    assert first.findings and first.labels  # the comparison compares something
    assert {f.file for f in second.findings} == {second.path}
    # equal but for the path, and what the second copy gives when analysed on its own
    assert json.dumps(whole(second)) == json.dumps(whole(first)).replace(first.path, second.path)
    alone = analyze(copies(corpus)[1:], corpus, use_cache=False)
    assert [whole(r) for r in alone] == [whole(second)]
    assert first.findings[0].file == first.path  # the copy did not change the first record


def test_a_copy_under_another_precision_is_analysed_on_its_own(corpus, monkeypatch):
    ran = count_passes(monkeypatch)
    fp32 = corpus / OTHER_PRECISION / NAME
    recs = analyze(copies(corpus) + [fp32], corpus, use_cache=False)
    assert sorted(ran) == sorted(["a/" + TREE + "/" + NAME, OTHER_PRECISION + "/" + NAME])
    assert recs[2].precision == "fp32" and recs[0].precision == "bf16"


def test_pool_gives_the_copies_of_one_process(corpus, tmp_path):
    files = copies(corpus) + [corpus / OTHER_PRECISION / NAME]
    one = analyze(files, corpus, use_cache=False)
    two = analyze(files, corpus, processes=2, jobs=2, cache_dir=tmp_path / "c")
    assert [whole(r) for r in two] == [whole(r) for r in one]
    assert result_rows(tmp_path / "c") == 2  # one finished record per content and precision


def test_a_copy_in_a_later_run_is_a_result_cache_hit(corpus, tmp_path, monkeypatch):
    a, b = copies(corpus)
    analyze([a], corpus, cache_dir=tmp_path / "c")
    cold = analyze([b], corpus, cache_dir=tmp_path / "fresh")
    no_passes(monkeypatch)
    warm = analyze([b], corpus, cache_dir=tmp_path / "c")
    assert [whole(r) for r in warm] == [whole(r) for r in cold]
