"""Inline suppression, as in ruff: `# noqa: PKB004` on a Python line, `// noqa: PKB004` on a line
of a CUDA source string, on the line the finding points at.

A bare `noqa` (no codes) suppresses every finding on its line. A suppressed finding is not
dropped: it moves to `record.suppressed`, is counted in every output, and never decides the exit
status.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

# `# noqa`, `// noqa`, `# noqa: PKB004`, `// NOQA: PKB004, PKB001`, rule names allowed as codes.
_NOQA = re.compile(r"(?:#|//)\s*noqa\b(?P<colon>\s*:\s*(?P<codes>[\w-]+(?:\s*[,\s]\s*[\w-]+)*))?", re.IGNORECASE)
ALL_CODES = "*"


def noqa_codes(line: str) -> set[str] | None:
    """The codes a line suppresses ({'*'} for a bare noqa), None when it has no noqa comment."""
    found: set[str] = set()
    for m in _NOQA.finditer(line):
        codes = m.group("codes")
        if not codes:
            return {ALL_CODES}
        found.update(c.upper() for c in re.split(r"[,\s]+", codes) if c)
    return found or None


def is_suppressed(finding: Any, lines: list[str]) -> bool:
    if not 1 <= finding.line <= len(lines):
        return False
    codes = noqa_codes(lines[finding.line - 1])
    if codes is None:
        return False
    return ALL_CODES in codes or finding.rule.upper() in codes or finding.name.upper() in codes


def split_suppressed(findings: Iterable[Any], source: str) -> tuple[list[Any], list[Any]]:
    """(findings that stand, findings a noqa comment on their line suppresses)."""
    findings = list(findings)
    if "noqa" not in source.lower():
        return findings, []
    lines = source.splitlines()
    kept, suppressed = [], []
    for f in findings:
        (suppressed if is_suppressed(f, lines) else kept).append(f)
    return kept, suppressed
