"""Our outcomes in the columns of ParallelKernelBench's failure table, per model, beside its figures.

PKB's blog counts, per model and out of its 87 problems: nvcc/syntax, tensor shape,
attribute/name/API typo, runtime, output mismatch, deadlock, correct. Our records say more (an
outcome, a subtype, the exception's type); `paper_column` maps them onto those columns with the
rules below, in this order (the first that applies wins):

| column | our records |
| --- | --- |
| not_run | evaluation status `not_run`: nothing was judged (a reason of the tool or the machine) |
| not_evaluated | no evaluation in the record (a static-only run) |
| suspect | outcome `suspect`: correct output under suspicion (a reward-hack signature); the paper has no such column |
| inconclusive | outcome `inconclusive` (emulation could not decide, e.g. a grid that cannot be co-resident) |
| attribute/name/API typo | `compile_error/import_error` whose exception is an ImportError of a missing name (`cannot import name`), not a missing module; `load_error/signature_mismatch` and `load_error/no_solution`; `runtime_error/binding_mismatch`; a runtime exception of type AttributeError, NameError, UnboundLocalError or ImportError |
| nvcc/syntax | every other `compile_error` (nvcc and Python syntax, undeclared identifiers, missing headers, undefined symbols, a missing module) |
| tensor shape | `wrong_result/shape_mismatch`; a `runtime_error` whose message is a shape error (size mismatch, shapes cannot be multiplied, view/reshape of the wrong size...) |
| runtime | every other `runtime_error` |
| output mismatch | every other `wrong_result` (dtype included) |
| deadlock | `hang` |
| correct | `faster`, `slower` |
| other | anything else (an outcome this table does not know); counted, never dropped |

A missing module is an nvcc/syntax-column failure here because the paper's harness reports it at
load time with the build failures; a module missing because of the tool's own environment (PKB's
`utils.*`) is the tool's failure, which bench/real_corpus.py counts as a harness failure.

    paper_column(outcome, subtype, exception_type="", reason="", status="ran") -> column key
    record_column(record) -> column key
    model_rows(records) -> one row per (model, backend): file count and per-column counts
    rows_beside_paper(rows) -> ours and the paper's figures, row after row, for the CSV and tables
    write_csv(rows, path); markdown(rows) -> str; table_cells(rows) -> (headers, rows)
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

# (key, title) in the paper's order, then the columns the paper does not have.
PAPER_COLUMNS = (
    ("nvcc_syntax", "nvcc/syntax"),
    ("tensor_shape", "tensor shape"),
    ("api_typo", "attribute/name/API typo"),
    ("runtime", "runtime"),
    ("output_mismatch", "output mismatch"),
    ("deadlock", "deadlock"),
    ("correct", "correct"),
)
EXTRA_COLUMNS = (
    ("suspect", "suspect"),
    ("inconclusive", "inconclusive"),
    ("not_run", "not run"),
    ("not_evaluated", "not evaluated"),
    ("other", "other"),
)
COLUMNS = PAPER_COLUMNS + EXTRA_COLUMNS
COLUMN_KEYS = tuple(key for key, _ in COLUMNS)
TITLES = dict(COLUMNS)

# The PKB blog's figures per model, out of 87 problems (CUDA), in PAPER_COLUMNS order.
PAPER_SOURCE = "ParallelKernelBench blog, failure breakdown per model out of 87 problems (CUDA)"
PAPER_PROBLEMS = 87
PAPER_FIGURES: dict[str, tuple[int, ...]] = {
    "GPT-5.5": (16, 3, 3, 6, 26, 5, 28),
    "Gemini 3 Pro": (10, 1, 7, 11, 24, 10, 24),
    "Claude Opus 4.7": (26, 1, 7, 12, 12, 9, 20),
    "GLM-5.1": (31, 6, 9, 8, 17, 10, 6),
    "DeepSeek V4 Pro": (36, 1, 20, 8, 6, 14, 2),
}
# PKB run-tree model slugs -> the paper's model names
MODEL_NAMES = {
    "gpt-5.5": "GPT-5.5",
    "gemini-3-pro-preview": "Gemini 3 Pro",
    "claude-opus-4-7": "Claude Opus 4.7",
}
PAPER_BACKEND = "cuda"

NAME_EXCEPTIONS = ("AttributeError", "NameError", "UnboundLocalError", "ImportError")
# Messages torch and Python give for operands or results of the wrong shape.
SHAPE_ERROR = re.compile(
    r"size mismatch|shape mismatch|shapes cannot be multiplied|must match the size of tensor|"
    r"the size of tensor a \(\d+\) must match|is invalid for input of size|view size is not compatible|"
    r"expected .{0,40}(size|shape)|(size|shape) .{0,40}expected|inconsistent tensor size|"
    r"sizes of tensors must match|dimension out of range|not enough values to unpack|too many values to unpack|"
    r"number of dims|mat1 and mat2",
    re.I,
)
_EXCEPTION_NAME = re.compile(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception))\b")


def exception_name(details: dict[str, Any] | None, reason: str = "") -> str:
    """The exception's type: `details.exception_type` where the evaluation wrote it, else the
    first `SomethingError` named in the reason."""
    name = (details or {}).get("exception_type") or ""
    if not name and reason:
        found = _EXCEPTION_NAME.search(reason)
        name = found.group(1) if found else ""
    return str(name)


def paper_column(outcome: str, subtype: str = "", exception_type: str = "", reason: str = "", status: str = "ran") -> str:
    """The column (a key of COLUMNS) of one evaluation; see the module docstring for the rules."""
    if status == "not_run":
        return "not_run"
    if not outcome and not status:
        return "not_evaluated"
    if outcome == "suspect":
        return "suspect"
    if outcome == "inconclusive":
        return "inconclusive"
    if outcome == "compile_error":
        if subtype == "import_error" and _missing_name(exception_type, reason):
            return "api_typo"
        return "nvcc_syntax"
    if outcome == "load_error":
        return "api_typo" if subtype in ("signature_mismatch", "no_solution") else "runtime"
    if outcome == "runtime_error":
        if subtype == "binding_mismatch" or exception_type in NAME_EXCEPTIONS:
            return "api_typo"
        if subtype == "shape_mismatch" or SHAPE_ERROR.search(reason or ""):
            return "tensor_shape"
        return "runtime"
    if outcome == "wrong_result":
        return "tensor_shape" if subtype == "shape_mismatch" else "output_mismatch"
    if outcome == "hang":
        return "deadlock"
    if outcome in ("faster", "slower"):
        return "correct"
    return "other"


def _missing_name(exception_type: str, reason: str) -> bool:
    """An ImportError of a name the module lacks, not of a module that is absent."""
    if exception_type == "ModuleNotFoundError" or re.search(r"No module named", reason or ""):
        return False
    return bool(re.search(r"cannot import name", reason or "")) or exception_type == "ImportError"


def record_column(record: Any) -> str:
    ev = getattr(record, "evaluation", None) or {}
    if not ev:
        return "not_evaluated"
    reason = str(ev.get("reason") or "")
    details = ev.get("details") if isinstance(ev.get("details"), dict) else {}
    outcome = ev.get("outcome") or ""
    if not outcome and ev.get("correct") and ev.get("status") in ("ran", "skipped_cached"):
        outcome = "correct_untimed"  # emulated or untimed: correct, without a speed verdict
    column = paper_column(outcome, ev.get("subtype") or "", exception_name(details, reason), reason, ev.get("status") or "")
    if outcome == "correct_untimed":
        return "correct"
    return column


def model_rows(records: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per (model, backend) of the records: files, and the count of each column."""
    groups: dict[tuple[str, str], Counter[str]] = {}
    for rec in records:
        key = (getattr(rec, "model", "") or "(none)", getattr(rec, "backend", "") or "")
        groups.setdefault(key, Counter())[record_column(rec)] += 1
    rows = []
    for (model, backend), counts in sorted(groups.items()):
        row: dict[str, Any] = {"model": model, "backend": backend, "source": "ours", "files": sum(counts.values())}
        row.update({key: counts.get(key, 0) for key in COLUMN_KEYS})
        rows.append(row)
    return rows


def paper_row(model_slug: str, backend: str) -> dict[str, Any] | None:
    """The paper's figures for a run tree's model, where it gives them (CUDA only)."""
    name = MODEL_NAMES.get(model_slug)
    if backend != PAPER_BACKEND or name not in PAPER_FIGURES:
        return None
    row: dict[str, Any] = {"model": model_slug, "backend": backend, "source": f"paper ({name})", "files": PAPER_PROBLEMS}
    row.update(dict(zip((key for key, _ in PAPER_COLUMNS), PAPER_FIGURES[name])))
    row.update({key: None for key, _ in EXTRA_COLUMNS})  # the paper has no such column
    return row


def rows_beside_paper(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        out.append(row)
        paper = paper_row(row["model"], row["backend"])
        if paper is not None:
            out.append(paper)
    return out


CSV_FIELDS = ("model", "backend", "source", "files", *COLUMN_KEYS)


def write_csv(rows: list[dict[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in rows_beside_paper(rows):
            writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CSV_FIELDS})
    return path


def _shown_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The paper's columns always; ours only where some row has a count."""
    extra = [key for key, _ in EXTRA_COLUMNS if any(row.get(key) for row in rows)]
    return [key for key, _ in PAPER_COLUMNS] + extra


def table_cells(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    keys = _shown_columns(rows)
    headers = ["model", "backend", "source", "files", *(TITLES[k] for k in keys)]
    body = [[row["model"], row["backend"], row["source"], row["files"], *("-" if row.get(k) is None else row[k] for k in keys)]
            for row in rows_beside_paper(rows)]
    return headers, body


def markdown(rows: list[dict[str, Any]]) -> str:
    headers, body = table_cells(rows)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in body]
    return "\n".join(lines)
