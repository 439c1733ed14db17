"""Records as pandas tables: one row per candidate, one per kernel, one per finding."""

from __future__ import annotations

from typing import Iterable

import pandas as pd

from pkb.record import CandidateRecord

AXES = ("mechanism", "sync", "ordering", "overlap")


def _joined(labels, axis: str) -> str:
    return "+".join(sorted(lab.value for lab in labels.get(axis, [])))


def candidates_frame(records: Iterable[CandidateRecord]) -> pd.DataFrame:
    rows = []
    for r in records:
        ev = r.evaluation or {}
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
            **{f"pass_{p.name}": p.status for p in r.passes},
            "outcome": ev.get("outcome", ""), "subtype": ev.get("subtype", ""), "speedup": ev.get("speedup"),
        })
    return pd.DataFrame(rows)


def kernels_frame(records: Iterable[CandidateRecord]) -> pd.DataFrame:
    rows = []
    for r in records:
        for k in r.kernels:
            rows.append({"path": r.path, "kernel": k.name, "language": k.language, "line": k.line,
                         **{axis: _joined(k.labels, axis) for axis in AXES}})
    return pd.DataFrame(rows, columns=["path", "kernel", "language", "line", *AXES])


def findings_frame(records: Iterable[CandidateRecord]) -> pd.DataFrame:
    rows = []
    for r in records:
        for f in r.findings:
            rows.append({"path": r.path, "rule": f.rule, "name": f.name, "severity": f.severity,
                         "line": f.line, "kernel": f.kernel, "message": f.message, "snippet": f.snippet})
    return pd.DataFrame(rows, columns=["path", "rule", "name", "severity", "line", "kernel", "message", "snippet"])
