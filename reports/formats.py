"""What `pkb-analyze analyze --output-format FORMAT` prints on standard output.

    text     the console table (one row per candidate) and the totals
    json     one JSON array of records (the static.jsonl shape, docs/record.schema.json)
    jsonl    one record per line
    sarif    SARIF 2.1.0 (as findings.sarif)
    github   GitHub Actions workflow commands: one `::error`/`::warning` annotation per finding

With `--statistics` the output is the count of findings per rule instead (text: a table; json
and jsonl: objects), as `ruff --statistics` does.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

FORMATS = ("text", "json", "jsonl", "sarif", "github")
_GITHUB_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def finding_column(rec: Any, finding: Any) -> int | None:
    """1-based column of the finding's snippet on its line (its first non-blank character when the
    snippet is not found there); None when the record's source is not in memory."""
    if not rec.source or not 1 <= finding.line:
        return None
    lines = rec.source.splitlines()
    if finding.line > len(lines):
        return None
    line = lines[finding.line - 1]
    snippet = (finding.snippet or "").strip()
    at = line.find(snippet) if snippet else -1
    if at < 0:
        at = len(line) - len(line.lstrip())
    return at + 1


def statistics_rows(records: Iterable[Any]) -> list[dict[str, Any]]:
    """Per rule: findings that stand, findings suppressed by noqa, in rule order."""
    records = list(records)
    standing = Counter(f.rule for r in records for f in r.findings)
    silenced = Counter(f.rule for r in records for f in r.suppressed)
    names = {f.rule: (f.name, f.severity) for r in records for f in [*r.findings, *r.suppressed]}
    return [
        {"code": code, "name": names[code][0], "severity": names[code][1], "count": standing[code], "suppressed": silenced[code]}
        for code in sorted(set(standing) | set(silenced))
    ]


def statistics_text(records: Iterable[Any]) -> str:
    rows = statistics_rows(records)
    if not rows:
        return "no findings"
    width = max(len(str(r["count"])) for r in rows)
    out = []
    for r in rows:
        tail = f"  ({r['suppressed']} suppressed)" if r["suppressed"] else ""
        out.append(f"{r['count']:>{width}}  {r['code']}  [{r['severity']}] {r['name']}{tail}")
    return "\n".join(out)


def github_annotations(records: Iterable[Any], root: Path) -> str:
    """`::error file=F,line=L,col=C,title=T::message` per finding; file as seen from the working folder."""
    from pkb.roots import display_path

    def esc_data(text: str) -> str:  # GitHub's escaping for the message part
        return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    def esc_prop(text: str) -> str:  # and for property values
        return esc_data(text).replace(":", "%3A").replace(",", "%2C")

    lines = []
    for rec in records:
        for f in rec.findings:
            props = [f"file={esc_prop(display_path(f.file or rec.path, root))}", f"line={max(f.line, 1)}"]
            col = finding_column(rec, f)
            if col:
                props.append(f"col={col}")
            props.append(f"title={esc_prop(f'{f.rule} {f.name}')}")
            lines.append(f"::{_GITHUB_LEVEL.get(f.severity, 'warning')} {','.join(props)}::{esc_data(f'{f.rule} {f.message}')}")
    return "\n".join(lines)


def render(records: list[Any], fmt: str, *, root: Path, rules: list[Any], version: str, exit_code: int = 0,
           unreadable: list[str] | None = None, statistics: bool = False) -> str:
    """The text FORMAT puts on standard output for these records."""
    from reports import console, sarif

    if fmt not in FORMATS:
        raise ValueError(f"unknown output format {fmt!r}; one of {', '.join(FORMATS)}")
    if statistics:
        rows = statistics_rows(records)
        if fmt == "json":
            return json.dumps(rows, indent=2)
        if fmt == "jsonl":
            return "\n".join(json.dumps(r) for r in rows)
        return statistics_text(records)
    if fmt == "json":
        return json.dumps([r.to_json_line() for r in records], indent=1, default=str)
    if fmt == "jsonl":
        return "\n".join(json.dumps(r.to_json_line(), default=str) for r in records)
    if fmt == "sarif":
        return json.dumps(sarif.to_sarif(records, rules, version, root=root, exit_code=exit_code, unreadable=unreadable), indent=1)
    if fmt == "github":
        return github_annotations(records, root)
    return console.summary_table(records) + "\n\n" + console.totals(records)
