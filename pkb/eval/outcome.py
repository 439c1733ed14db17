"""One outcome per candidate from the per-rank results of its launch (TAXONOMY's words).

Order of precedence: a failure a rank reported (compile_error, load_error, runtime_error, in that
order, since a later stage's error is often the echo of an earlier one) > hang > a crash with no
report > wrong_result > suspect > slower/faster.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pkb.eval.classify import RUNTIME_PRIORITY, runtime_subtype
from pkb.eval.compare import TOLERANCE_FACTOR
from pkb.eval.launcher import LaunchResult
from pkb.eval.timing import rank_time_ms

_ERROR_PRIORITY = ("compile_error", "load_error", "runtime_error")


def decide(launch: LaunchResult) -> dict[str, Any]:
    """{status, outcome, subtype, speedup, correct, reason, details}."""
    ranks = launch.ranks
    errors = [(r.rank, r.result["error"]) for r in ranks if r.result and r.result.get("error")]
    details: dict[str, Any] = {}
    if errors:
        details["errors"] = [
            {"rank": rank, **{k: e.get(k) for k in ("outcome", "subtype", "source", "phase", "type", "message")}}
            for rank, e in errors
        ]
    not_ours = [e for _, e in errors if e.get("source") in ("reference", "harness")]
    ours = [(rank, e) for rank, e in errors if e.get("source") == "candidate"]
    if ours:
        rank, err = min(ours, key=lambda re: _error_rank(re[1]))
        details["failed_ranks"] = sorted(r for r, _ in ours)
        message = _first_compiler_error(err.get("message")) if err["outcome"] == "compile_error" else None
        return _result("ran", err["outcome"], err.get("subtype", ""), details, reason=f"rank {rank} in {err.get('phase')}: {err.get('type')}: {message or _short(err.get('message'))}")
    if not_ours:
        err = not_ours[0]
        return _result(
            "not_run", "", "", details,
            reason=f"{err['source']} failed in {err.get('phase')}: {err.get('type')}: {_short(err.get('message'))}",
        )
    if launch.timed_out:
        details["stuck_ranks"] = launch.stuck
        where = ", ".join(f"rank {s['rank']} in {s['phase']}" for s in launch.stuck) or "no rank reported"
        return _result("ran", "hang", "timeout", details, reason=f"killed after the {launch.wall_s:.0f} s limit; {where}")
    unfinished = [r for r in ranks if not r.finished]
    if unfinished or launch.returncode not in (0, None):
        # A rank died without writing an error: a signal (segfault, abort on a CUDA error).
        text = "\n".join(r.stderr_tail for r in unfinished) + "\n" + launch.launcher_tail
        subtype = runtime_subtype(text)
        details["crashed_ranks"] = [{"rank": r.rank, "phase": r.phase} for r in unfinished]
        details["returncode"] = launch.returncode
        where = ", ".join(f"rank {r.rank} in {r.phase or 'start-up'}" for r in unfinished)
        return _result("ran", "runtime_error", subtype, details, reason=f"exited with code {launch.returncode} without a report ({where})")

    trials = {r.rank: r.result.get("trials", []) for r in ranks}  # type: ignore[union-attr]
    wrong = {rank: [c for c in cs if not c.get("matched")] for rank, cs in trials.items()}
    details["pkb_match"] = all(c.get("values_close") for cs in trials.values() for c in cs)
    if any(wrong.values()):
        subtype = wrong_result_subtype(trials)
        details["wrong_ranks"] = sorted(r for r, w in wrong.items() if w)
        details["right_ranks"] = sorted(r for r, w in wrong.items() if not w)
        details["wrong_trials"] = sorted({c["trial"] for w in wrong.values() for c in w})
        first = next(c for r in sorted(wrong) for c in wrong[r])
        return _result("ran", "wrong_result", subtype, details, reason=_mismatch_sentence(first, wrong))

    details["mutates_inputs"] = any(c.get("mutates_inputs") for cs in trials.values() for c in cs)
    details["aliases_input"] = any(c.get("aliases_input") for cs in trials.values() for c in cs)
    timings = {r.rank: r.result.get("timing") for r in ranks}  # type: ignore[union-attr]
    if not all(timings.values()):
        return _result("ran", "", "", details, correct=True, reason="correct on every trial; not timed")

    suspect = _suspect(ranks, details)
    speedup, speed = speedups(timings)
    details.update(speed)
    if suspect:
        return _result("ran", "suspect", suspect[0], details, speedup=speedup, correct=False, reason=suspect[1])
    outcome = "faster" if speedup is not None and speedup >= 1.0 else "slower"
    return _result("ran", outcome, "", details, speedup=speedup, correct=True, reason=f"correct on every trial; speedup {speedup:.3g}x")


def wrong_result_subtype(trials: dict[int, list[dict[str, Any]]]) -> str:
    """The subtype the evidence supports, or '' for the diagnosis stage to find."""
    bad = [c for cs in trials.values() for c in cs if not c.get("matched")]
    if any(not c.get("shape_ok", True) or not c.get("structure_ok", True) for c in bad):
        return "shape_mismatch"
    if any(not c.get("dtype_ok", True) for c in bad):
        return "dtype_mismatch"
    if any(c.get("nan_inf", 0) > 0 for c in bad):
        return "nan_inf"
    if any(c.get("sentinel", 0) > 0 for c in bad):
        return "unwritten"
    right_ranks = [r for r, cs in trials.items() if cs and all(c.get("matched") for c in cs)]
    if right_ranks and len(right_ranks) < len(trials):
        return "rank_subset"
    if bad and all(1.0 < c.get("max_violation", math.inf) <= TOLERANCE_FACTOR for c in bad):
        return "tolerance"
    return ""


def speedups(timings: dict[int, dict[str, Any] | None]) -> tuple[float | None, dict[str, Any]]:
    """Reference slowest-rank median / candidate slowest-rank median (each rank charged the larger
    of its two clocks); the event-only figure (PKB's clock) is kept beside it."""
    out: dict[str, Any] = {"rank_times_ms": {}}
    side_time: dict[str, float | None] = {}
    side_event: dict[str, float | None] = {}
    for side in ("reference", "candidate"):
        per_rank = {r: rank_time_ms(t[side]) for r, t in timings.items() if t}
        out["rank_times_ms"][side] = per_rank
        vals = [v for v in per_rank.values() if v is not None]
        side_time[side] = max(vals) if vals else None
        ev = [t[side]["event"]["median_ms"] for t in timings.values() if t and t[side].get("event")]
        side_event[side] = max(ev) if ev else None
    out["reference_ms"], out["candidate_ms"] = side_time["reference"], side_time["candidate"]
    speedup = _ratio(side_time["reference"], side_time["candidate"])
    out["speedup_event"] = _ratio(side_event["reference"], side_event["candidate"])
    return speedup, out


def _suspect(ranks: list[Any], details: dict[str, Any]) -> tuple[str, str] | None:
    timed_bad = [(r.rank, c) for r in ranks for c in (r.result.get("timed_checks") or []) if not c.get("matched")]
    refresh_bad = [r.rank for r in ranks if (r.result.get("refresh_check") or {}).get("matched") is False]
    if timed_bad:
        details["timed_mismatch"] = [{"rank": r, "group": c["trial"]} for r, c in timed_bad][:16]
        if details.get("mutates_inputs"):
            return "aliases_input", "right on fresh inputs, wrong on repeated calls: the candidate writes into its inputs"
        return "cached_output", "right in the correctness trials, wrong on the timed calls' inputs"
    if refresh_bad:
        details["refresh_mismatch_ranks"] = refresh_bad
        return "cached_output", "new values at the same addresses gave the old answer (output cached on the pointer)"
    return None


def _result(status: str, outcome: str, subtype: str, details: dict[str, Any], *, speedup: float | None = None, correct: bool = False, reason: str = "") -> dict[str, Any]:
    return {
        "status": status,
        "outcome": outcome,
        "subtype": subtype or "",
        "speedup": speedup,
        "correct": correct,
        "reason": reason,
        "details": details,
    }


def _error_rank(err: dict[str, Any]) -> tuple[int, int]:
    outcome = err.get("outcome", "")
    o = _ERROR_PRIORITY.index(outcome) if outcome in _ERROR_PRIORITY else len(_ERROR_PRIORITY)
    sub = err.get("subtype", "")
    s = RUNTIME_PRIORITY.index(sub) if sub in RUNTIME_PRIORITY else 0
    return o, s


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def _short(msg: Any, n: int = 300) -> str:
    s = str(msg or "").strip().splitlines()
    s = s[-1] if s else ""
    return s if len(s) <= n else s[: n - 3] + "..."


def _first_compiler_error(msg: Any, n: int = 300) -> str | None:
    """nvcc's first `error` line says more than ninja's closing 'build stopped'."""
    for line in str(msg or "").splitlines():
        if re.search(r"\berror\b", line, re.I) and "ninja: build stopped" not in line and "Error building extension" not in line:
            line = line.strip()
            return line if len(line) <= n else line[: n - 3] + "..."
    return None


def _mismatch_sentence(first: dict[str, Any], wrong: dict[int, list[dict[str, Any]]]) -> str:
    ranks = sorted(r for r, w in wrong.items() if w)
    if not first.get("structure_ok", True):
        what = "output structure differs"
    elif not first.get("shape_ok", True):
        leaf = next((l for l in first.get("leaves", []) if not l.get("shape_ok", True)), {})
        what = f"shape {leaf.get('got_shape')} instead of {leaf.get('expected_shape')}"
    elif not first.get("dtype_ok", True):
        leaf = next((l for l in first.get("leaves", []) if not l.get("dtype_ok", True)), {})
        what = f"dtype {leaf.get('got_dtype')} instead of {leaf.get('expected_dtype')}"
    else:
        what = (
            f"{first.get('mismatches')} of {first.get('numel')} elements outside tolerance, "
            f"max abs error {first.get('max_abs_err'):.3g}"
        )
    return f"trial {first.get('trial')}: {what} (ranks {ranks})"
