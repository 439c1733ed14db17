"""analyze on unchanged files leaves its tables and SARIF as they are (tables.key says what they
were written from); any change to the records, the rules or the files' presence writes them again."""

from __future__ import annotations

import shutil
from pathlib import Path

from cli_runner import run_cli
from pkb.cli import TABLES_KEY, _TABLE_FILES

REPO = Path(__file__).resolve().parents[1]
TREE = "solutions_cuda_bf16_h100_8_pkb_sample-b"


def make_corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    (root / TREE).mkdir(parents=True)
    for name in ("1_allreduce_cuda.py", "3_broadcast_cuda.py"):
        shutil.copy(REPO / "corpus" / TREE / name, root / TREE / name)
    return root


def stamps(out: Path) -> dict[str, int]:
    return {name: (out / name).stat().st_mtime_ns for name in _TABLE_FILES}


def analyze(root: Path, out: Path, tmp_path, capsys, *extra: str) -> None:
    code, _ = run_cli(["analyze", str(root), "--out", str(out), "--no-ptx", "--jobs", "1", "-q", *extra], tmp_path, capsys)
    assert code == 0


def test_unchanged_run_leaves_the_tables(tmp_path, capsys):
    root, out = make_corpus(tmp_path), tmp_path / "out"
    analyze(root, out, tmp_path, capsys)
    first = stamps(out)
    assert (out / TABLES_KEY).is_file()
    analyze(root, out, tmp_path, capsys)
    assert stamps(out) == first
    assert (out / "static.jsonl").read_text().count("\n") == 2


def test_changed_records_or_rules_rewrite_the_tables(tmp_path, capsys):
    root, out = make_corpus(tmp_path), tmp_path / "out"
    analyze(root, out, tmp_path, capsys)
    first = stamps(out)
    target = root / TREE / "1_allreduce_cuda.py"
    target.write_text(target.read_text() + "\n# edited\n")
    analyze(root, out, tmp_path, capsys)
    second = stamps(out)
    assert all(second[n] != first[n] for n in _TABLE_FILES)
    analyze(root, out, tmp_path, capsys, "--select", "PKB004")
    third = stamps(out)
    assert all(third[n] != second[n] for n in _TABLE_FILES)
    assert "PKB001" not in (out / "findings.csv").read_text()


def test_a_missing_or_foreign_table_is_written_again(tmp_path, capsys):
    root, out = make_corpus(tmp_path), tmp_path / "out"
    analyze(root, out, tmp_path, capsys)
    (out / "kernels.parquet").unlink()
    analyze(root, out, tmp_path, capsys)
    assert (out / "kernels.parquet").is_file()
    (out / TABLES_KEY).write_text("written by something else\n")
    before = stamps(out)
    analyze(root, out, tmp_path, capsys)
    assert stamps(out)["candidates.csv"] != before["candidates.csv"]
