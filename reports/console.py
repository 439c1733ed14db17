"""The console summary of a static run (tabulate)."""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from tabulate import tabulate

from pkb.metrics import speed_text
from pkb.record import CandidateRecord


def _axis(rec: CandidateRecord, axis: str) -> str:
    vals = sorted(rec.label_values(axis))
    if axis == "sync" and rec.labels.get("ordering"):
        return "+".join(vals) + f" ({'+'.join(sorted(rec.label_values('ordering')))})"
    return "+".join(vals) or "-"


def elide_middle(path: str, width: int = 56) -> str:
    """A path shortened in the middle: the head says which tree, the longer tail keeps the end of
    the run tree's name (the model) and the file name, which is what tells rows apart:
    `solutions_cu…gemini-3.1-pro-preview/12_allgather_gemm_cuda.py`."""
    if len(path) <= width:
        return path
    keep_head = max(width // 4, 1)
    keep_tail = width - 1 - keep_head
    return path[:keep_head] + "…" + path[len(path) - keep_tail:]


def summary_table(records: list[CandidateRecord], width: int = 56) -> str:
    rows = []
    for r in records:
        path = elide_middle(r.path, width)
        if r.parse_status != "ok":
            rows.append([path, r.parse_status, "-", "-", "-", r.parse_message[:40]])
            continue
        counts = Counter(f.severity for f in r.findings)
        found = " ".join(sorted({f.rule for f in r.findings}))
        rows.append([path, _axis(r, "mechanism"), _axis(r, "sync"), _axis(r, "overlap"),
                     f"{counts['error']}E {counts['warning']}W", found])
    return tabulate(rows, headers=["candidate", "mechanism", "sync", "overlap", "findings", "rules"], tablefmt="simple")


def totals(records: Iterable[CandidateRecord]) -> str:
    records = list(records)
    mech = Counter(v for r in records for v in r.label_values("mechanism"))
    rules = Counter(f.rule for r in records for f in r.findings)
    status = Counter(r.parse_status for r in records)
    lines = [
        f"{len(records)} candidates; read: " + ", ".join(f"{k} {v}" for k, v in status.most_common()),
        "mechanisms: " + (", ".join(f"{k} {v}" for k, v in mech.most_common()) or "-"),
        "findings: " + (", ".join(f"{k} {v}" for k, v in sorted(rules.items())) or "none"),
    ]
    silenced = Counter(f.rule for r in records for f in r.suppressed)
    if silenced:
        lines.append("suppressed by noqa: " + ", ".join(f"{k} {v}" for k, v in sorted(silenced.items())))
    return "\n".join(lines)


def eval_table(records: list[CandidateRecord], width: int = 56) -> str:
    rows = []
    for r in records:
        ev = r.evaluation or {}
        path = elide_middle(r.path, width)
        outcome = ev.get("outcome") or ("correct" if ev.get("correct") else "-")
        rows.append([path, ev.get("status", "-"), outcome, ev.get("subtype") or "",
                     speed_text(ev), (ev.get("reason") or "")[:50]])
    return tabulate(rows, headers=["candidate", "status", "outcome", "subtype", "speedup", "reason"], tablefmt="simple")


def eval_line(rec: CandidateRecord, index: int, total: int) -> str:
    """One candidate's result as it lands: `[3/82] path: outcome (subtype) 1.2x, 14.1 s`, the reason
    whole where it was not run."""
    ev = rec.evaluation or {}
    status = ev.get("status", "-")
    if status not in ("ran", "skipped_cached"):
        return f"[{index}/{total}] {rec.path}: not run: {ev.get('reason') or 'no reason recorded'}"
    guess = guessed_problem(rec)
    if guess:
        return f"[{index}/{total}] {rec.path}: {_outcome_text(rec)} ({guess})"
    return f"[{index}/{total}] {rec.path}: {_outcome_text(rec)}"


CONFIDENT_MATCHES = ("exact_stem", "shifted_name", "name_variant")


def guessed_problem(rec: CandidateRecord) -> str:
    """What to say when the problem a candidate was run against is a guess: its file name carries
    no id (`myreduce.py` is matched to `4_reduce` by spelling alone), or its id and a loose match
    of its name with `solution()` parameters that disagree with the reference's. A wrong guess reads as a wrong result; the line
    names the guess and how to correct it. Empty where the file's own id and name decided."""
    match = rec.problem_match or {}
    rule = match.get("rule", "")
    if not rule or rule in ("given", "unmatched") or rec.problem_id is None:
        return ""
    # With an id in the file name, a reference's name plus a suffix (`1_allreduce_alias_input`)
    # or its own name is no guess, whatever the parameters are called.
    if match.get("file_id") is not None and (match.get("params_agree") is not False or rule in CONFIDENT_MATCHES):
        return ""
    stem = match.get("stem") or f"{rec.problem_id}_{rec.problem_name or ''}".rstrip("_")
    why = match.get("detail") or rule.replace("_", " ")
    if match.get("params_agree") is False:
        why += "; its solution() parameters differ from the reference's"
    return f"run as problem {stem}, a guess: {why}; --problem ID names it"


def _outcome_text(rec: CandidateRecord) -> str:
    ev = rec.evaluation or {}
    status = ev.get("status", "-")
    outcome = ev.get("outcome") or ("correct" if ev.get("correct") else "-")
    sub = f" ({ev['subtype']})" if ev.get("subtype") else ""
    speed = f" {speed_text(ev)}" if speed_text(ev) else ""
    wall = f", {ev['wall_s']:.1f} s" if isinstance(ev.get("wall_s"), (int, float)) else ""
    cached = " (stored result)" if status == "skipped_cached" else ""
    return f"{outcome}{sub}{speed}{wall}{cached}"


def eval_totals(records: Iterable[CandidateRecord]) -> str:
    records = list(records)
    def outcome(ev: dict) -> str:
        return ev.get("outcome") or ("correct" if ev.get("correct") else ev.get("status", "-"))

    outcomes = Counter(outcome(r.evaluation or {}) for r in records)
    ran = [r for r in records if (r.evaluation or {}).get("status") in ("ran", "skipped_cached")]
    correct = [r for r in ran if (r.evaluation or {}).get("outcome") in ("faster", "slower") or (r.evaluation or {}).get("correct")]
    line = f"evaluated {len(ran)} of {len(records)}; outcomes: " + ", ".join(f"{k} {v}" for k, v in outcomes.most_common())
    if ran:
        line += f"; correct {len(correct)}/{len(ran)}"
    return line
