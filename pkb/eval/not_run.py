"""Candidates an evaluation could not run: how many, why (each reason whole), and what to do.

`pkb-analyze eval` ends with this: the exit status the README documents is 0 when every candidate
was evaluated (whatever its outcome), 1 when some could not be (the environment or the harness),
2 on a usage error.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Iterable

# Statuses of a candidate that was evaluated; an emulated run that could not decide (a grid that
# cannot be co-resident) is `inconclusive`: evaluated, with that as its answer.
EVALUATED = ("ran", "skipped_cached", "inconclusive")

# A reason's start -> what the user can do about it.
_HINTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"no problem id"), "give its problem: `--problem ID` (or name the file `<id>_<name>.py`)"),
    (re.compile(r"problem \d+ is not in problems/"), "evaluate against a PKB checkout: `--pkb-root PATH`"),
    (re.compile(r"no reference \d+_"), "check that the PKB checkout given to --pkb-root has this problem under reference/"),
    (re.compile(r"no CUDA device"), "run it where a CUDA GPU is present; on CPU only pure-PyTorch candidates run"),
    (re.compile(r"needs \d+ GPUs; \d+ visible"), "lower `--world-size` to the GPUs visible, or run on a larger machine"),
    (re.compile(r"no source to run"), "the file could not be read as Python; see its parse status in static.jsonl"),
    (re.compile(r"not emulated: "), "the emulated ranks lack that part of torch.distributed: evaluate it on real ranks (without --emulate)"),
    (re.compile(r"evaluation failed"), "a harness error: please report it with this line"),
)


def hint(reason: str) -> str:
    for pattern, what_to_do in _HINTS:
        if pattern.search(reason or ""):
            return what_to_do
    return ""


def not_evaluated(records: Iterable[Any]) -> list[Any]:
    return [r for r in records if (r.evaluation or {}).get("status") not in EVALUATED]


def summary_lines(records: Iterable[Any], limit: int = 20) -> list[str]:
    """Nothing when every candidate was evaluated; else a count line, then each distinct reason
    whole with how many candidates it stopped, an example path, and what to do."""
    records = list(records)
    missed = not_evaluated(records)
    if not missed:
        return []
    reasons = Counter((r.evaluation or {}).get("reason") or "no reason recorded" for r in missed)
    example = {}
    for r in missed:
        example.setdefault((r.evaluation or {}).get("reason") or "no reason recorded", r.path)
    lines = [f"{len(missed)} of {len(records)} candidates could not be evaluated:"]
    for reason, count in reasons.most_common(limit):
        todo = hint(reason)
        lines.append(f"  {count} x {reason}" + (f" (e.g. {example[reason]})" if count > 1 else f" ({example[reason]})"))
        if todo:
            lines.append(f"      what to do: {todo}")
    if len(reasons) > limit:
        lines.append(f"  ... and {len(reasons) - limit} more reasons (eval.jsonl has every one)")
    return lines
