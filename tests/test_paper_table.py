"""The mapping of our outcomes onto the PKB blog's failure columns, and the per-model table."""

from __future__ import annotations

import csv

import pytest

from pkb.record import CandidateRecord
from reports import corpus_report, paper_table
from reports.paper_table import paper_column


@pytest.mark.parametrize(("outcome", "subtype", "exc", "reason", "column"), [
    ("compile_error", "cuda_syntax", "", "error: expected a ';'", "nvcc_syntax"),
    ("compile_error", "python_syntax", "SyntaxError", "", "nvcc_syntax"),
    ("compile_error", "undeclared_identifier", "", "identifier \"foo\" is undefined", "nvcc_syntax"),
    ("compile_error", "import_error", "ModuleNotFoundError", "No module named 'cutlass'", "nvcc_syntax"),
    ("compile_error", "import_error", "ImportError", "cannot import name 'symm_all_reduce' from 'torch.ops'", "api_typo"),
    ("load_error", "signature_mismatch", "", "solution() takes 1 positional argument but 2 were given", "api_typo"),
    ("load_error", "no_solution", "", "", "api_typo"),
    ("runtime_error", "binding_mismatch", "TypeError", "incompatible function arguments", "api_typo"),
    ("runtime_error", "python_exception", "AttributeError", "'_SymmetricMemory' object has no attribute 'signal_pad_ptr'", "api_typo"),
    ("runtime_error", "python_exception", "NameError", "name 'world' is not defined", "api_typo"),
    ("runtime_error", "python_exception", "RuntimeError", "mat1 and mat2 shapes cannot be multiplied (32x64 and 128x48)", "tensor_shape"),
    ("runtime_error", "python_exception", "RuntimeError", "shape '[4, 8]' is invalid for input of size 48", "tensor_shape"),
    ("runtime_error", "illegal_address", "", "CUDA error: an illegal memory access was encountered", "runtime"),
    ("runtime_error", "python_exception", "TypeError", "unsupported operand type(s)", "runtime"),
    ("wrong_result", "shape_mismatch", "", "", "tensor_shape"),
    ("wrong_result", "dtype_mismatch", "", "", "output_mismatch"),
    ("wrong_result", "missing_peer", "", "", "output_mismatch"),
    ("hang", "timeout", "", "", "deadlock"),
    ("faster", "", "", "", "correct"),
    ("slower", "", "", "", "correct"),
    ("suspect", "cached_output", "", "", "suspect"),
    ("inconclusive", "", "", "", "inconclusive"),
    ("brand_new_outcome", "", "", "", "other"),
])
def test_each_outcome_has_one_column(outcome, subtype, exc, reason, column):
    assert paper_column(outcome, subtype, exc, reason) == column


def test_not_run_and_unevaluated_have_their_own_columns():
    assert paper_column("", "", "", "no CUDA device", status="not_run") == "not_run"
    assert paper_column("runtime_error", "python_exception", status="not_run") == "not_run"
    assert paper_table.record_column(CandidateRecord(path="a.py")) == "not_evaluated"


def test_exception_type_from_details_or_reason():
    assert paper_table.exception_name({"exception_type": "NameError"}, "RuntimeError: x") == "NameError"
    assert paper_table.exception_name({}, "candidate raised AttributeError: no attribute 'x'") == "AttributeError"
    assert paper_table.exception_name(None, "timed out") == ""


def _rec(model: str, backend: str, i: int, evaluation: dict) -> CandidateRecord:
    return CandidateRecord(path=f"solutions_{backend}_bf16_h100_8_x_{model}/{i}_p_{backend}.py", model=model,
                           backend=backend, problem_id=i, problem_name="p", evaluation=evaluation)


def _ev(outcome: str, subtype: str = "", reason: str = "", status: str = "ran", **details) -> dict:
    return {"status": status, "outcome": outcome, "subtype": subtype, "reason": reason, "details": details,
            "correct": outcome in ("faster", "slower")}


RECORDS = [
    _rec("gpt-5.5", "cuda", 1, _ev("faster")),
    _rec("gpt-5.5", "cuda", 2, _ev("wrong_result", "shape_mismatch")),
    _rec("gpt-5.5", "cuda", 3, _ev("runtime_error", "python_exception", "TypeError: bad", exception_type="AttributeError")),
    _rec("gpt-5.5", "cuda", 4, _ev("hang", "timeout")),
    _rec("gpt-5.5", "cuda", 5, _ev("", "", "no CUDA device", status="not_run")),
    _rec("gpt-5.5", "cuda", 6, _ev("suspect", "calls_reference")),
    _rec("gemini-3-pro-preview", "triton", 1, _ev("compile_error", "python_syntax")),
    _rec("gemini-3-pro-preview", "triton", 2, _ev("slower")),
    _rec("gemini-3-pro-preview", "cuda", 3, {}),
    _rec("gemini-3-pro-preview", "cuda", 4, {"status": "ran", "outcome": "", "correct": True, "emulated": True}),
]


def test_model_rows_count_every_record_once():
    rows = {(r["model"], r["backend"]): r for r in paper_table.model_rows(RECORDS)}
    gpt = rows[("gpt-5.5", "cuda")]
    assert gpt["files"] == 6
    assert (gpt["correct"], gpt["tensor_shape"], gpt["api_typo"], gpt["deadlock"], gpt["not_run"], gpt["suspect"]) == (1, 1, 1, 1, 1, 1)
    for row in rows.values():
        assert sum(row[k] for k in paper_table.COLUMN_KEYS) == row["files"]  # nothing dropped
    assert rows[("gemini-3-pro-preview", "triton")]["nvcc_syntax"] == 1
    gemini_cuda = rows[("gemini-3-pro-preview", "cuda")]
    assert (gemini_cuda["not_evaluated"], gemini_cuda["correct"]) == (1, 1)  # untimed correct (emulated) is correct


def test_paper_figures_sit_beside_cuda_rows_only():
    beside = paper_table.rows_beside_paper(paper_table.model_rows(RECORDS))
    sources = [(r["model"], r["backend"], r["source"]) for r in beside]
    assert ("gpt-5.5", "cuda", "paper (GPT-5.5)") in sources
    assert ("gemini-3-pro-preview", "cuda", "paper (Gemini 3 Pro)") in sources
    assert not any(b == "triton" and s.startswith("paper") for _, b, s in sources)
    paper = next(r for r in beside if r["source"] == "paper (GPT-5.5)")
    assert [paper[k] for k, _ in paper_table.PAPER_COLUMNS] == [16, 3, 3, 6, 26, 5, 28]
    assert sum(paper[k] for k, _ in paper_table.PAPER_COLUMNS) == paper_table.PAPER_PROBLEMS
    for name, figures in paper_table.PAPER_FIGURES.items():
        assert sum(figures) == 87, name


def test_csv_and_markdown(tmp_path):
    rows = paper_table.model_rows(RECORDS)
    path = paper_table.write_csv(rows, tmp_path / "t.csv")
    with path.open(encoding="utf-8") as fh:
        read = list(csv.DictReader(fh))
    assert list(read[0]) == list(paper_table.CSV_FIELDS)
    ours = next(r for r in read if r["model"] == "gpt-5.5" and r["source"] == "ours")
    assert ours["deadlock"] == "1" and ours["files"] == "6"
    paper = next(r for r in read if r["source"] == "paper (GPT-5.5)")
    assert paper["suspect"] == "" and paper["output_mismatch"] == "26"
    header = paper_table.markdown(rows).splitlines()[0]
    assert "attribute/name/API typo" in header and "suspect" in header and "not run" in header
    assert "inconclusive" not in header  # a column the paper lacks shows only where it has counts


def test_corpus_report_has_the_section_and_csv(tmp_path):
    out = corpus_report.build(RECORDS, tmp_path)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "## Failures in the paper's columns" in md and "paper (GPT-5.5)" in md
    assert (tmp_path / "paper_table.csv").exists()
    assert 'id="paper-table"' in (tmp_path / "index.html").read_text(encoding="utf-8")
    assert out["evaluated"] >= 1
