"""One entry per finding in the candidate views (terminal `explain`, HTML kernel page).

The explanation cites findings and label evidence that the findings and labels tables show
anyway; printed in both, each finding appeared three times (evidence, likely fix, findings).
Here the explanation keeps what only it says (evaluation and diagnosis figures, fixes with no
rule) and names the findings it rests on; the findings table holds each finding once, with its
fix and a mark when the explanation cites it.
"""

from __future__ import annotations

from typing import Any

OWN_TABLE_KINDS = ("finding", "label")  # evidence kinds that have a table of their own


def unique_findings(findings: list[Any]) -> list[Any]:
    """Findings in order, without repeats of the same rule at the same place with the same message."""
    seen: set[tuple[str, str, int, str]] = set()
    out = []
    for f in findings:
        key = (f.rule, f.file, f.line, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def merged_evidence(evidence: list[Any]) -> list[tuple[str, int, str, str, str]]:
    """(file, line, pass, snippet, notes) once per place: the clang pass gives one item per fact
    at an `asm volatile(` line (the instruction, then `multicast_ptr`), which read as repeats
    when the note that tells them apart is not shown."""
    merged: dict[tuple[str, int, str, str], list[str]] = {}
    for e in evidence:
        notes = merged.setdefault((e.file, e.line, e.pass_name, e.snippet), [])
        if e.note and e.note not in notes:
            notes.append(e.note)
    return [(f, line, p, snip, "; ".join(notes)) for (f, line, p, snip), notes in merged.items()]


def _shows_a_cause(e: dict[str, Any]) -> bool:
    """An explanation line that restates a slowness cause, which the causes table shows."""
    return e.get("kind") == "diagnosis" and (e.get("path") or [None])[0] == "slow"


def cause_evidence_text(e: dict[str, Any]) -> str:
    """A slowness cause's piece of evidence, short where a table of the view holds it whole: a
    finding by its rule and line, a label by its axis, value and line."""
    if e.get("kind") == "finding" and e.get("rule"):
        return f"{e['rule']} at line {e.get('line')} (Findings)"
    if e.get("kind") == "label" and e.get("axis"):
        return f"{e['axis']} label {e.get('label')} at line {e.get('line')} (Labels)"
    return e.get("text", "")


def cause_rows(diag: dict[str, Any], limit: int = 4) -> list[dict[str, Any]]:
    """The slowness causes: cause, cost and up to `limit` pieces of evidence, each shown once."""
    rows = []
    for c in diag.get("slow") or []:
        texts: list[str] = []
        for e in c.get("evidence", []):
            text = cause_evidence_text(e)
            if text not in texts:
                texts.append(text)
        rows.append({"cause": c["cause"], "cost": c["cost"], "evidence": texts[:limit]})
    return rows


def explanation_parts(expl: dict[str, Any]) -> dict[str, Any]:
    """headline, evidence texts only the explanation has (a slowness cause is the causes table's),
    cited rule ids, fixes no finding carries."""
    evidence = [e["text"] for e in expl.get("evidence", []) if e.get("kind") not in OWN_TABLE_KINDS and not _shows_a_cause(e)]
    cited = []
    for e in expl.get("evidence", []):
        if e.get("kind") == "finding" and e.get("rule") not in cited:
            cited.append(e["rule"])
    for f in expl.get("fixes", []):
        if f.get("rule") and f["rule"] not in cited:
            cited.append(f["rule"])
    fixes = [f for f in expl.get("fixes", []) if not f.get("rule")]
    return {"headline": expl.get("headline", ""), "evidence": evidence, "cited": cited, "fixes": fixes,
            "notes": list(expl.get("notes", []))}


def finding_rows(record: Any, cited: list[str]) -> list[dict[str, Any]]:
    """The findings table's rows: each finding once, with its rule's fix and rationale."""
    from analyzer.rules import all_rules

    catalogue = {r.id: r for r in all_rules()}
    rows = []
    for f in unique_findings(record.findings):
        rule = catalogue.get(f.rule)
        rows.append({"rule": f.rule, "name": f.name, "severity": f.severity, "file": f.file, "line": f.line,
                     "message": f.message, "snippet": f.snippet, "fix": rule.fix if rule else "",
                     "why": rule.rationale() if rule else "", "cited": f.rule in cited, "related": list(f.related_lines)})
    return rows
