"""Benchmark metrics over evaluated candidates: pass@k, fast_p, fast_p@k, geomean speedup.

pass@k is the unbiased estimator of Chen et al. (2021): 1 - C(n-c, k) / C(n, k) for n samples of
which c are correct. fast_p is KernelBench's share of samples that are correct with speedup > p;
fast_p@k uses the pass@k estimator with c = samples correct and faster than p.
A sample is correct when its outcome is `faster` or `slower` (a `suspect` is not counted).
A sample is faster than p only when its speedup interval's low end is above p (a tie within the
spread is not faster than 1x); samples without an interval fall back to the speedup itself.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

CORRECT_OUTCOMES = ("faster", "slower")


def pass_at_k(n: int, c: int, k: int) -> float:
    if n <= 0 or k <= 0:
        return math.nan
    if k > n:
        k = n  # with fewer samples than k, the estimate is of pass@n
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def fast_p(correct: Iterable[bool], speedups: Iterable[float | None], p: float, lows: Iterable[float | None] | None = None) -> float:
    """lows: each sample's speedup-interval low end (None where unknown), counted instead of
    the speedup where given."""
    correct, speedups = list(correct), list(speedups)
    if not correct:
        return math.nan
    lows = list(lows) if lows is not None else [None] * len(correct)
    hits = sum(1 for ok, s, lo in zip(correct, speedups, lows) if ok and _above(s, lo, p))
    return hits / len(correct)


def _above(speedup: float | None, low: float | None, p: float) -> bool:
    value = speedup if _nan(low) else low
    return not _nan(value) and float(value) > p  # type: ignore[arg-type]


def speed_verdict(evaluation: dict[str, Any]) -> str:
    """faster | slower | tie for a correct, timed evaluation; '' otherwise. Records made before
    the interval existed keep their outcome as the verdict."""
    if evaluation.get("outcome") not in CORRECT_OUTCOMES:
        return ""
    return (evaluation.get("details") or {}).get("speed_verdict") or evaluation["outcome"]


def device_label(evaluation: dict[str, Any]) -> str:
    """'CPU (gloo)' for a CPU evaluation (its timings say little about a GPU kernel), '' else."""
    if evaluation.get("device") == "cpu" or evaluation.get("backend") == "gloo":
        return f"CPU ({evaluation.get('backend') or 'gloo'})"
    return ""


def speed_text(evaluation: dict[str, Any]) -> str:
    """'1.03x (tie, 0.95-1.1x) CPU (gloo)': the speedup with its verdict when a tie and the device
    when a CPU; '' without a speedup."""
    speed = evaluation.get("speedup")
    if not isinstance(speed, (int, float)) or _nan(speed):
        return ""
    text = f"{speed:.3g}x"
    if speed_verdict(evaluation) == "tie":
        lo_hi = (evaluation.get("details") or {}).get("speedup_interval")
        text += f" (tie, {lo_hi[0]:.3g}-{lo_hi[1]:.3g}x)" if lo_hi else " (tie)"
    label = device_label(evaluation)
    return f"{text} {label}" if label else text


def geomean(values: Iterable[float | None]) -> float:
    vals = [v for v in values if v is not None and not _nan(v) and v > 0]
    if not vals:
        return math.nan
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def summarize(frame: Any, by: str | list[str] = "problem_id", ks: tuple[int, ...] = (1, 5), ps: tuple[float, ...] = (0.0, 1.0, 1.5)) -> Any:
    """One row per group: n, correct, pass@k, fast_p, fast_p@k, geomean speedup over correct ones.

    `frame` needs `outcome` and `speedup` columns (a `correct` column, when present, is used as
    given; a `speedup_lo` column, the interval's low end, decides fast_p) and the grouping
    columns, e.g. problem_id, category, model.
    """
    import pandas as pd

    by = [by] if isinstance(by, str) else list(by)
    df = frame.copy()
    if "correct" not in df.columns:
        df["correct"] = df["outcome"].isin(CORRECT_OUTCOMES)
    df["correct"] = df["correct"].fillna(False).astype(bool)
    rows = []
    for key, g in df.groupby(by, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        n = len(g)
        c = int(g["correct"].sum())
        speed = [None if _nan(s) else float(s) for s in g["speedup"]]
        lows = [None if _nan(s) else float(s) for s in g["speedup_lo"]] if "speedup_lo" in g.columns else [None] * n
        row: dict[str, Any] = dict(zip(by, key))
        row.update(n=n, correct=c)
        for k in ks:
            row[f"pass@{k}"] = pass_at_k(n, c, k)
        for p in ps:
            row[f"fast_{_p(p)}"] = fast_p(g["correct"], speed, p, lows)
            cp = sum(1 for ok, s, lo in zip(g["correct"], speed, lows) if ok and _above(s, lo, p))
            for k in ks:
                row[f"fast_{_p(p)}@{k}"] = pass_at_k(n, cp, k)
        row["geomean_speedup"] = geomean(s for ok, s in zip(g["correct"], speed) if ok)
        rows.append(row)
    return pd.DataFrame(rows)


def _p(p: float) -> str:
    return str(int(p)) if float(p).is_integer() else str(p)


def _nan(v: Any) -> bool:
    try:
        return v is None or math.isnan(float(v))
    except (TypeError, ValueError):
        return True
