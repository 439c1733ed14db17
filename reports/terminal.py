"""`pkb-analyze explain PATH`: one candidate's page in the terminal (rich).

Runs the static passes on the file, takes its latest evaluation from a store where one exists,
diagnoses, and prints the explanation, the labels with their evidence, the findings with the
rule's fix, and the evaluation's figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

AXES = ("mechanism", "sync", "ordering", "overlap")


def analyze_file(path: Path, *, store: Path | None = None, ptx: bool = True) -> tuple[Any, str]:
    """(the record, which store it was read from or '')."""
    from analyzer.pipeline import StaticAnalyzer, StaticOptions
    from pkb.corpus import read_candidate
    from pkb.diagnose.explain import diagnose
    from reports.load import attach_store, find_store

    analyzer = StaticAnalyzer(StaticOptions(ptx=ptx))
    try:
        rec = analyzer.analyze(read_candidate(path, path.parent))
    finally:
        analyzer.close()
    found = store or find_store(Path.cwd()) or find_store(path.parent)
    used = ""
    if found is not None and Path(found).is_file():
        if attach_store([rec], found):
            used = str(found)
    diagnose(rec)
    return rec, used


def _labels_table(labels: dict[str, list[Any]], title: str) -> Table:
    t = Table(title=title, show_lines=False, expand=True, title_justify="left")
    t.add_column("axis", style="bold", no_wrap=True)
    t.add_column("label", style="cyan", no_wrap=True)
    t.add_column("evidence")
    for axis in AXES:
        for lab in labels.get(axis, []):
            ev = "\n".join(f"{e.file}:{e.line} [{e.pass_name}] {e.snippet}" for e in lab.evidence[:4]) or "(no evidence)"
            t.add_row(axis, lab.value, Text(ev))
    return t


def render(rec: Any, console: Console | None = None, store_used: str = "") -> None:
    from analyzer.rules import all_rules

    console = console or Console()
    diag = rec.diagnosis or {}
    expl = diag.get("explanation") or {}
    ev = rec.evaluation or {}
    head = Text(rec.path, style="bold")
    tag = ev.get("outcome") or "not evaluated"
    if diag.get("subtype"):
        tag += f" ({diag['subtype']})"
    head.append(f"  {tag}", style="magenta")
    console.print(Panel(Text(expl.get("headline", "")), title=head, title_align="left"))
    if expl.get("evidence"):
        console.print(Text("Evidence", style="bold"))
        for e in expl["evidence"]:
            console.print(Text(f"  - {e['text']}"))
    if expl.get("fixes"):
        console.print(Text("Likely fix", style="bold"))
        for f in expl["fixes"]:
            rule = f"{f['rule']} {f['name']}: " if f.get("rule") else ""
            console.print(Text(f"  - {rule}{f['fix']}" + (f" (at {', '.join(f['at'])})" if f.get("at") else "")))
    console.print(_labels_table(rec.labels, "Labels of the candidate"))
    for k in rec.kernels:
        console.print(_labels_table(k.labels, f"Kernel {k.name} ({k.language}, line {k.line})"))
    catalogue = {r.id: r for r in all_rules()}
    if rec.findings:
        t = Table(title="Findings", expand=True, title_justify="left")
        for col in ("rule", "severity", "line", "message", "fix"):
            t.add_column(col)
        for f in rec.findings:
            rule = catalogue.get(f.rule)
            t.add_row(f"{f.rule} {f.name}", f.severity, str(f.line), f"{f.message}\n{f.snippet}", rule.fix if rule else "")
        console.print(t)
    else:
        console.print(Text("Findings: none", style="dim"))
    if ev:
        t = Table(title="Evaluation" + (f" (from {store_used})" if store_used else ""), expand=True, title_justify="left")
        t.add_column("figure", style="bold")
        t.add_column("value")
        for key in ("status", "outcome", "subtype", "speedup", "world_size", "dtype", "reason"):
            if ev.get(key) not in (None, ""):
                t.add_row(key, str(ev[key]))
        console.print(t)
    else:
        console.print(Text("Evaluation: none stored for this file (static passes only)", style="dim"))
    slow = diag.get("slow") or []
    if slow:
        t = Table(title="Slowness causes" if ev.get("outcome") in ("slower", "faster") else "Possible slowness causes (static)", expand=True, title_justify="left")
        t.add_column("cause", style="bold")
        t.add_column("cost")
        t.add_column("evidence")
        for c in slow:
            t.add_row(c["cause"], c["cost"], "\n".join(e["text"] for e in c["evidence"][:3]))
        console.print(t)
    for n in expl.get("notes", []):
        console.print(Text(f"note: {n}", style="dim"))


