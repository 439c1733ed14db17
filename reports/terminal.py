"""`pkb-analyze explain PATH`: one candidate's page in the terminal (rich), drawn from its record.

Reads the record only (the command line fills it from the store, running a stage where a part
is missing): prints the explanation, the labels with their evidence, the findings with the
rule's fix, the evaluation's figures and the slowness causes of the stored diagnosis.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from pkb.metrics import speed_text
from reports.explain_view import merged_evidence

AXES = ("mechanism", "sync", "ordering", "overlap")


def _labels_table(labels: dict[str, list[Any]], title: str) -> Table:
    t = Table(title=Text(title), show_lines=False, expand=True, title_justify="left")
    t.add_column("axis", style="bold", no_wrap=True)
    t.add_column("label", style="cyan", no_wrap=True)
    t.add_column("evidence", overflow="fold")
    for axis in AXES:
        for lab in labels.get(axis, []):
            places = merged_evidence(lab.evidence)
            lines = [f"{f}:{line} [{p}] {snip}" + (f" ({notes})" if notes else "") for f, line, p, snip, notes in places[:4]]
            if len(places) > 4:
                lines.append(f"and {len(places) - 4} more")
            t.add_row(Text(axis), Text(lab.value), Text("\n".join(lines) or "(no evidence)"))
    return t


def render(rec: Any, console: Console | None = None, store_used: str = "", notes: Any = ()) -> None:
    """`notes`: what was not read from the store but made now (a stage run), said first. Every piece of the record's text goes in as rich `Text` (never parsed as markup), so
    evidence such as `flags[blockIdx.x]` prints verbatim; each finding is one row of the findings
    table (reports.explain_view), the explanation cites it there."""
    from reports.explain_view import cause_rows, explanation_parts, finding_rows

    console = console or Console()
    for note in notes:
        console.print(Text(note, style="dim"), soft_wrap=True)  # whole, so a long store path never splits it
    diag = rec.diagnosis or {}
    parts = explanation_parts(diag.get("explanation") or {})
    ev = rec.evaluation or {}
    head = Text(rec.path, style="bold")
    tag = ev.get("outcome") or "not evaluated"
    if diag.get("subtype"):
        tag += f" ({diag['subtype']})"
    head.append(f"  {tag}", style="magenta")
    console.print(Panel(Text(parts["headline"]), title=head, title_align="left"))
    if parts["evidence"]:
        console.print(Text("Evidence", style="bold"))
        for text in parts["evidence"]:
            console.print(Text(f"  - {text}"))
    if parts["cited"]:
        console.print(Text(f"Rests on the findings {', '.join(parts['cited'])} (their fixes: the Findings table)"))
    if parts["fixes"]:
        console.print(Text("Likely fix", style="bold"))
        for f in parts["fixes"]:
            console.print(Text(f"  - {f['name'] + ': ' if f.get('name') else ''}{f['fix']}"))
    console.print(_labels_table(rec.labels, "Labels of the candidate"))
    for k in rec.kernels:
        console.print(_labels_table(k.labels, f"Kernel {k.name} ({k.language}, line {k.line})"))
    rows = finding_rows(rec, parts["cited"])
    if rows:
        t = Table(title="Findings", expand=True, title_justify="left")
        for col in ("rule", "severity", "line", "message", "fix"):
            t.add_column(col, overflow="fold")
        for f in rows:
            t.add_row(Text(f"{f['rule']} {f['name']}" + (" (cited)" if f["cited"] else "")), Text(f["severity"]),
                      Text(str(f["line"]) + "".join(f"\n(and {n})" for n in f["related"])),
                      Text(f"{f['message']}\n{f['snippet']}"), Text(f["fix"]))
        console.print(t)
    else:
        console.print(Text("Findings: none", style="dim"))
    if rec.suppressed:
        console.print(Text("Suppressed by noqa: " + ", ".join(f"{f.rule} at line {f.line}" for f in rec.suppressed), style="dim"))
    if ev:
        t = Table(title=Text("Evaluation" + (f" (from {store_used})" if store_used else "")), expand=True, title_justify="left")
        t.add_column("figure", style="bold")
        t.add_column("value", overflow="fold")
        for key in ("status", "outcome", "subtype", "speedup", "world_size", "dtype", "reason"):
            if ev.get(key) not in (None, ""):
                t.add_row(Text(key), Text(speed_text(ev) if key == "speedup" else str(ev[key])))
        console.print(t)
    else:
        console.print(Text("Evaluation: none stored for this file (static passes only)", style="dim"))
    slow = cause_rows(diag, limit=3)
    if slow:
        t = Table(title="Slowness causes" if ev.get("outcome") in ("slower", "faster") else "Possible slowness causes (static)", expand=True, title_justify="left")
        t.add_column("cause", style="bold")
        t.add_column("cost", overflow="fold")
        t.add_column("evidence", overflow="fold")
        for c in slow:
            t.add_row(Text(c["cause"]), Text(c["cost"]), Text("\n".join(c["evidence"])))
        console.print(t)
    for n in parts["notes"]:
        console.print(Text(f"note: {n}", style="dim"))
