"""SARIF 2.1.0 for rule findings, so code-scanning tools show them on the right lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable
from urllib.parse import quote

from analyzer.rules import Rule
from pkb.record import CandidateRecord

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def rule_descriptor(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": rule.message},
        "fullDescription": {"text": rule.rationale()},
        "help": {"text": rule.fix, "markdown": rule.doc()},
        "defaultConfiguration": {"level": _LEVEL[rule.severity]},
        "properties": {"tags": ["multi-gpu", "pkb"]},
    }


BASE_ID = "CORPUSROOT"


def to_sarif(records: Iterable[CandidateRecord], rules: list[Rule], version: str, *, root: Path | None = None,
             exit_code: int = 0, unreadable: list[str] | None = None) -> dict[str, Any]:
    """The run as SARIF: artifact URIs relative to the corpus root (`originalUriBaseIds`), each
    result with its line and, where the source is in memory, its column, and one invocation with
    the exit status and a notification per file that could not be read."""
    from reports.formats import finding_column

    records = list(records)
    index = {r.id: i for i, r in enumerate(rules)}
    results = []
    artifacts: dict[str, int] = {}
    for rec in records:
        for f in rec.findings:
            art = artifacts.setdefault(f.file, len(artifacts))
            region: dict[str, Any] = {"startLine": max(f.line, 1)}
            col = finding_column(rec, f)
            if col:
                region["startColumn"] = col
            if f.snippet:
                region["snippet"] = {"text": f.snippet}
            location: dict[str, Any] = {"uri": quote(f.file), "index": art}
            if root is not None:
                location["uriBaseId"] = BASE_ID
            results.append({
                "ruleId": f.rule,
                "ruleIndex": index.get(f.rule, -1),
                "level": _LEVEL.get(f.severity, "warning"),
                "message": {"text": f.message},
                "locations": [{"physicalLocation": {"artifactLocation": location, "region": region}}],
                "properties": {"kernel": f.kernel, "pass": f.pass_name},
            })
            if f.related_lines:
                results[-1]["relatedLocations"] = [
                    {"id": i, "physicalLocation": {"artifactLocation": location, "region": {"startLine": n}}}
                    for i, n in enumerate(f.related_lines)]
        for f in rec.suppressed:  # SARIF's own way to say a result was silenced in the source
            results.append({
                "ruleId": f.rule, "ruleIndex": index.get(f.rule, -1), "level": _LEVEL.get(f.severity, "warning"),
                "message": {"text": f.message},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": quote(f.file), **({"uriBaseId": BASE_ID} if root is not None else {})},
                    "region": {"startLine": max(f.line, 1)}}}],
                "suppressions": [{"kind": "inSource", "justification": "noqa comment on the line"}],
            })
    notes = [
        {"level": "error" if r.parse_status == "unreadable" else "warning",
         "message": {"text": f"{r.path}: {r.parse_status}: {r.parse_message}"},
         "locations": [{"physicalLocation": {"artifactLocation": {"uri": quote(r.path), **({"uriBaseId": BASE_ID} if root is not None else {})}}}]}
        for r in records if r.parse_status != "ok"
    ]
    for path in unreadable or []:
        notes.append({"level": "error", "message": {"text": f"{path}: could not be read"}})
    run: dict[str, Any] = {
        "tool": {"driver": {
            "name": "pkb-analyze",
            "version": version,
            "rules": [rule_descriptor(r) for r in rules],
        }},
        "invocations": [{
            "executionSuccessful": exit_code in (0, 1),  # 1 is findings, not a failed run
            "exitCode": exit_code,
            "toolExecutionNotifications": notes,
        }],
        "columnKind": "unicodeCodePoints",
        "artifacts": [{"location": {"uri": quote(uri), **({"uriBaseId": BASE_ID} if root is not None else {})}} for uri in artifacts],
        "results": results,
    }
    if root is not None:
        run["originalUriBaseIds"] = {BASE_ID: {"uri": Path(root).resolve().as_uri() + "/"}}
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}
