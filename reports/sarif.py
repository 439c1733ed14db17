"""SARIF 2.1.0 for rule findings, so code-scanning tools show them on the right lines."""

from __future__ import annotations

from typing import Any, Iterable

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


def to_sarif(records: Iterable[CandidateRecord], rules: list[Rule], version: str) -> dict[str, Any]:
    index = {r.id: i for i, r in enumerate(rules)}
    results = []
    artifacts: dict[str, int] = {}
    for rec in records:
        for f in rec.findings:
            art = artifacts.setdefault(f.file, len(artifacts))
            region: dict[str, Any] = {"startLine": max(f.line, 1)}
            if f.snippet:
                region["snippet"] = {"text": f.snippet}
            results.append({
                "ruleId": f.rule,
                "ruleIndex": index.get(f.rule, -1),
                "level": _LEVEL.get(f.severity, "warning"),
                "message": {"text": f.message},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": f.file, "index": art},
                    "region": region,
                }}],
                "properties": {"kernel": f.kernel, "pass": f.pass_name},
            })
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "pkb-analyze",
                "version": version,
                "rules": [rule_descriptor(r) for r in rules],
            }},
            "artifacts": [{"location": {"uri": uri}} for uri in artifacts],
            "results": results,
        }],
    }
