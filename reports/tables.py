"""Records as tables: one row per candidate, one per kernel, one per finding.

Rows are plain dicts; `*_frame` wraps them in pandas DataFrames for users who keep working in
pandas. `write_tables` writes CSV (standard library) and parquet (pyarrow) without importing
pandas, which costs more than a warm static run of a whole corpus.

Every column has a fixed type whatever the data (DTYPES): `problem_id` and `line` are nullable
integers (pandas `Int64`), `speedup` a float even when no candidate was timed. The parquet files
carry the pandas dtypes in their metadata, so `pandas.read_parquet` gives them back; for CSV,
`tables.dtypes.json` beside the files is the `dtype=` argument of `pandas.read_csv` (read_csv_typed).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Iterable

from pkb.record import CandidateRecord

AXES = ("mechanism", "sync", "ordering", "overlap")

# pandas dtype per column: "str", "Int64" (nullable integer), "int64", "float64".
_STR = "str"
CANDIDATE_DTYPES: dict[str, str] = {
    "path": _STR, "sha256": _STR, "problem_id": "Int64", "problem_name": _STR, "run_tree": _STR, "backend": _STR,
    "precision": _STR, "hardware": _STR, "provider": _STR, "model": _STR, "parse_status": _STR,
    **{axis: _STR for axis in AXES},
    "kernels": "int64", "findings": "int64", "errors": "int64", "warnings": "int64", "suppressed": "int64", "rules": _STR,
    "pass_python": _STR, "pass_clang": _STR, "pass_ptx": _STR, "outcome": _STR, "subtype": _STR, "speedup": "float64",
}
KERNEL_DTYPES: dict[str, str] = {"path": _STR, "kernel": _STR, "language": _STR, "line": "Int64", **{axis: _STR for axis in AXES}}
FINDING_DTYPES: dict[str, str] = {"path": _STR, "rule": _STR, "name": _STR, "severity": _STR, "line": "Int64", "kernel": _STR,
                                  "message": _STR, "snippet": _STR, "related_lines": _STR}
DTYPES = {"candidates": CANDIDATE_DTYPES, "kernels": KERNEL_DTYPES, "findings": FINDING_DTYPES}
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
            "suppressed": len(r.suppressed),
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
         "kernel": f.kernel, "message": f.message, "snippet": f.snippet,
         "related_lines": ",".join(map(str, f.related_lines))}
        for r in records for f in r.findings
    ]


def _frame(rows: list[dict[str, Any]], dtypes: dict[str, str]):
    import pandas as pd

    columns = list(dtypes) + [c for row in rows[:1] for c in row if c not in dtypes]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.astype({c: d for c, d in dtypes.items()})


def candidates_frame(records: Iterable[CandidateRecord]):
    return _frame(candidate_rows(records), CANDIDATE_DTYPES)


def kernels_frame(records: Iterable[CandidateRecord]):
    return _frame(kernel_rows(records), KERNEL_DTYPES)


def findings_frame(records: Iterable[CandidateRecord]):
    return _frame(finding_rows(records), FINDING_DTYPES)


def _arrow_type(dtype: str):
    import pyarrow as pa

    return {"str": pa.string(), "Int64": pa.int64(), "int64": pa.int64(), "float64": pa.float64()}[dtype]


def _cell(value: Any, dtype: str) -> Any:
    """A value of the column's type (None where missing): ints stay ints, floats floats."""
    if value is None or value == "" and dtype != "str":
        return None if dtype != "str" else ""
    if dtype in ("Int64", "int64"):
        return int(value)
    if dtype == "float64":
        return float(value)
    return str(value)


def write_table(rows: list[dict[str, Any]], dtypes: dict[str, str], stem: Path) -> None:
    """`stem`.csv and `stem`.parquet with these columns and types (empty tables keep both)."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    extra = [c for row in rows[:1] for c in row if c not in dtypes]  # a column a later stage added: kept, as text
    dtypes = {**dtypes, **{c: "str" for c in extra}}
    columns = list(dtypes)
    typed = [{c: _cell(row.get(c), dtypes[c]) for c in columns} for row in rows]
    with stem.with_suffix(".csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(typed)
    schema = pa.schema([(c, _arrow_type(dtypes[c])) for c in columns])
    table = pa.Table.from_pylist(typed, schema=schema) if typed else schema.empty_table()
    pandas_meta = {
        "index_columns": [], "column_indexes": [],
        "columns": [{"name": c, "field_name": c, "pandas_type": "unicode" if d == "str" else d.lower(),
                     "numpy_type": "object" if d == "str" else d, "metadata": None} for c, d in dtypes.items()],
        "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "3.1.1",
    }
    pq.write_table(table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()}), stem.with_suffix(".parquet"))


def read_csv_typed(path: Path):
    """A table's CSV with its fixed dtypes (pandas), whatever values it holds."""
    import pandas as pd

    name = Path(path).stem
    return pd.read_csv(path, dtype=DTYPES[name], keep_default_na=False, na_values={c: [""] for c, d in DTYPES[name].items() if d != "str"})


def write_tables(records: list[CandidateRecord], out: Path) -> None:
    import json

    write_table(candidate_rows(records), CANDIDATE_DTYPES, out / "candidates")
    write_table(kernel_rows(records), KERNEL_DTYPES, out / "kernels")
    write_table(finding_rows(records), FINDING_DTYPES, out / "findings")
    (out / "tables.dtypes.json").write_text(json.dumps(DTYPES, indent=1) + "\n", encoding="utf-8")
