"""Records as tables: one row per candidate, one per kernel, one per finding.

Rows are plain dicts; `*_frame` wraps them in pandas DataFrames for users who keep working in
pandas. `write_tables` writes CSV (standard library) and parquet (pyarrow) without importing
pandas, which costs more than a warm static run of a whole corpus.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Iterable

from pkb.record import CandidateRecord

AXES = ("mechanism", "sync", "ordering", "overlap")
KERNEL_COLUMNS = ["path", "kernel", "language", "line", *AXES]
FINDING_COLUMNS = ["path", "rule", "name", "severity", "line", "kernel", "message", "snippet"]


def _joined(labels, axis: str) -> str:
    return "+".join(sorted(lab.value for lab in labels.get(axis, [])))


def candidate_rows(records: Iterable[CandidateRecord]) -> list[dict[str, Any]]:
    rows = []
    for r in records:
        ev = r.evaluation or {}
        passes = {p.name: p.status for p in r.passes}
        rows.append({
            "path": r.path, "sha256": r.sha256, "problem_id": r.problem_id, "problem_name": r.problem_name,
            "run_tree": r.run_tree, "backend": r.backend, "precision": r.precision, "hardware": r.hardware,
            "provider": r.provider, "model": r.model, "parse_status": r.parse_status,
            **{axis: _joined(r.labels, axis) for axis in AXES},
            "kernels": len(r.kernels),
            "findings": len(r.findings),
            "errors": sum(f.severity == "error" for f in r.findings),
            "warnings": sum(f.severity == "warning" for f in r.findings),
            "rules": ",".join(sorted({f.rule for f in r.findings})),
            **{f"pass_{name}": passes.get(name, "") for name in ("python", "clang", "ptx")},
            "outcome": ev.get("outcome", "") or "", "subtype": ev.get("subtype", "") or "",
            "speedup": ev.get("speedup") if isinstance(ev.get("speedup"), (int, float)) else None,
        })
    return rows


def kernel_rows(records: Iterable[CandidateRecord]) -> list[dict[str, Any]]:
    return [
        {"path": r.path, "kernel": k.name, "language": k.language, "line": k.line,
         **{axis: _joined(k.labels, axis) for axis in AXES}}
        for r in records for k in r.kernels
    ]


def finding_rows(records: Iterable[CandidateRecord]) -> list[dict[str, Any]]:
    return [
        {"path": r.path, "rule": f.rule, "name": f.name, "severity": f.severity, "line": f.line,
         "kernel": f.kernel, "message": f.message, "snippet": f.snippet}
        for r in records for f in r.findings
    ]


def _frame(rows: list[dict[str, Any]], columns: list[str] | None = None):
    import pandas as pd

    return pd.DataFrame(rows, columns=columns) if columns else pd.DataFrame(rows)


def candidates_frame(records: Iterable[CandidateRecord]):
    return _frame(candidate_rows(records))


def kernels_frame(records: Iterable[CandidateRecord]):
    return _frame(kernel_rows(records), KERNEL_COLUMNS)


def findings_frame(records: Iterable[CandidateRecord]):
    return _frame(finding_rows(records), FINDING_COLUMNS)


def write_table(rows: list[dict[str, Any]], columns: list[str], stem: Path) -> None:
    """`stem`.csv and `stem`.parquet with these columns (empty tables keep their header)."""
    with stem.with_suffix(".csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    import pyarrow as pa
    import pyarrow.parquet as pq

    if rows:
        table = pa.Table.from_pylist(rows)
    else:
        table = pa.table({c: pa.array([], type=pa.string()) for c in columns})
    pq.write_table(table, stem.with_suffix(".parquet"))


def write_tables(records: list[CandidateRecord], out: Path) -> None:
    cand = candidate_rows(records)
    write_table(cand, list(cand[0]) if cand else ["path"], out / "candidates")
    write_table(kernel_rows(records), KERNEL_COLUMNS, out / "kernels")
    write_table(finding_rows(records), FINDING_COLUMNS, out / "findings")
