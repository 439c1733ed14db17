"""Comparing a candidate's output with the reference's on one rank: plain numbers, JSON-ready.

Outputs may be a tensor, a tuple/list/dict of them, or Python scalars; both sides are flattened
to named leaves and compared leaf by leaf. Closeness is `|got - expected| <= atol + rtol*|expected|`
(torch.allclose's rule), NaN equal to NaN, Inf equal to the same Inf.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from pkb.eval.poison import sentinel_mask

MAX_LOCATIONS = 8
# A mismatch whose worst element is within this many tolerances is "close but outside".
TOLERANCE_FACTOR = 10.0


def flatten_output(obj: Any, name: str = "out") -> list[tuple[str, Any]]:
    if isinstance(obj, torch.Tensor) or obj is None or isinstance(obj, (int, float, bool, str)):
        return [(name, obj)]
    if isinstance(obj, (list, tuple)):
        out: list[tuple[str, Any]] = []
        for i, v in enumerate(obj):
            out.extend(flatten_output(v, f"{name}[{i}]"))
        return out
    if isinstance(obj, dict):
        out = []
        for k in sorted(obj, key=str):
            out.extend(flatten_output(obj[k], f"{name}[{k!r}]"))
        return out
    return [(name, obj)]


def compare_outputs(expected: Any, got: Any, atol: float, rtol: float) -> dict[str, Any]:
    """One rank's comparison: the verdict, the numbers, and the leaves that differ."""
    exp_leaves, got_leaves = flatten_output(expected), flatten_output(got)
    result: dict[str, Any] = {
        "matched": True,
        "shape_ok": True,
        "dtype_ok": True,
        "structure_ok": True,
        "numel": 0,
        "mismatches": 0,
        "max_abs_err": 0.0,
        "max_rel_err": 0.0,
        "max_violation": 0.0,  # worst |d| / (atol + rtol*|e|); > 1 means outside tolerance
        "nan_inf": 0,  # non-finite values where the reference has finite ones
        "sentinel": 0,  # elements still holding the allocator poison
        "values_close": True,  # closeness ignoring dtype (PKB's rule: compares .float())
        "atol": atol,
        "rtol": rtol,
        "leaves": [],
    }
    if [n for n, _ in exp_leaves] != [n for n, _ in got_leaves]:
        result.update(matched=False, structure_ok=False, shape_ok=False, values_close=False)
        result["structure"] = {
            "expected": [_describe(v, n) for n, v in exp_leaves],
            "got": [_describe(v, n) for n, v in got_leaves],
        }
        return result
    for (name, e), (_, g) in zip(exp_leaves, got_leaves):
        leaf = _compare_leaf(name, e, g, atol, rtol)
        result["leaves"].append(leaf)
        for key in ("numel", "mismatches", "nan_inf", "sentinel"):
            result[key] += leaf.get(key, 0)
        for key in ("max_abs_err", "max_rel_err", "max_violation"):
            result[key] = _max(result[key], leaf.get(key, 0.0))
        result["shape_ok"] &= leaf["shape_ok"]
        result["dtype_ok"] &= leaf["dtype_ok"]
        result["values_close"] &= leaf["values_close"]
        result["matched"] &= leaf["matched"]
    return result


def _compare_leaf(name: str, e: Any, g: Any, atol: float, rtol: float) -> dict[str, Any]:
    leaf: dict[str, Any] = {"name": name, "shape_ok": True, "dtype_ok": True, "matched": True, "values_close": True}
    if not isinstance(e, torch.Tensor) or not isinstance(g, torch.Tensor):
        if isinstance(e, torch.Tensor) != isinstance(g, torch.Tensor):
            leaf.update(matched=False, shape_ok=False, values_close=False, expected=_describe(e, name), got=_describe(g, name))
            return leaf
        same = e == g or (isinstance(e, float) and isinstance(g, (int, float)) and math.isclose(e, g, rel_tol=rtol, abs_tol=atol))
        leaf.update(matched=bool(same), values_close=bool(same))
        if not same:
            leaf.update(expected=repr(e)[:200], got=repr(g)[:200])
        return leaf

    leaf["expected_shape"], leaf["got_shape"] = list(e.shape), list(g.shape)
    leaf["expected_dtype"], leaf["got_dtype"] = _dtype_name(e.dtype), _dtype_name(g.dtype)
    leaf["numel"] = g.numel()
    if g.is_meta and not e.is_meta:  # shape and dtype only: the meta device holds no values
        leaf.update(matched=False, values_close=False, device=str(g.device), mismatches=g.numel(),
                    dtype_ok=e.dtype == g.dtype, shape_ok=e.shape == g.shape)
        return leaf
    g_cpu_dev = g.detach()
    mask = sentinel_mask(g_cpu_dev)
    if mask is not None:
        leaf["sentinel"] = int(mask.sum().item()) if e.shape != g.shape else int((mask & ~_sentinel_or_false(e)).sum().item())
    if e.dtype != g.dtype:
        leaf["dtype_ok"] = False
        leaf["matched"] = False
    if e.shape != g.shape:
        leaf.update(shape_ok=False, matched=False, values_close=False)
        return leaf
    if e.numel() == 0:
        return leaf

    ef = e.detach().to(device=g.device, dtype=torch.float64) if not e.is_complex() else e.detach().to(g.device)
    gf = g_cpu_dev.to(torch.float64) if not g.is_complex() else g_cpu_dev
    if e.dtype == torch.bool or g.dtype == torch.bool:
        ef, gf = ef.to(torch.float64), gf.to(torch.float64)
    both_nan = torch.isnan(ef) & torch.isnan(gf)
    same_inf = torch.isinf(ef) & (ef == gf)
    nonfinite_new = ~torch.isfinite(gf) & torch.isfinite(ef)
    diff = (gf - ef).abs()
    diff = torch.where(both_nan | same_inf, torch.zeros_like(diff), diff)
    bound = atol + rtol * ef.abs()
    bad = (diff > bound) | nonfinite_new | (torch.isnan(diff) & ~both_nan)
    if mask is not None:
        bad |= mask & ~_sentinel_or_false(e)  # a poisoned element is wrong even if "close"
    n_bad = int(bad.sum().item())
    finite = torch.isfinite(diff)
    leaf["nan_inf"] = int(nonfinite_new.sum().item())
    leaf["max_abs_err"] = float(diff[finite].max().item()) if finite.any() else 0.0
    rel = diff / ef.abs().clamp_min(max(atol, 1e-30))
    leaf["max_rel_err"] = float(rel[finite].max().item()) if finite.any() else 0.0
    violation = diff / bound.clamp_min(1e-30)
    leaf["max_violation"] = float(violation[finite].max().item()) if finite.any() else 0.0
    if leaf["nan_inf"]:
        leaf["max_violation"] = math.inf
    leaf["mismatches"] = n_bad
    leaf["values_close"] = n_bad == 0
    if n_bad:
        leaf["matched"] = False
        flat = torch.nonzero(bad.reshape(-1)).reshape(-1)[:MAX_LOCATIONS].tolist()
        leaf["first_mismatches"] = [
            {
                "flat": i,
                "coords": _unravel(i, tuple(g.shape)),
                "expected": _num(ef.reshape(-1)[i].item()),
                "got": _num(gf.reshape(-1)[i].item()),
            }
            for i in flat
        ]
    return leaf


def _sentinel_or_false(e: torch.Tensor) -> torch.Tensor:
    m = sentinel_mask(e.detach())
    return m if m is not None else torch.zeros(e.shape, dtype=torch.bool, device=e.device)


def _unravel(i: int, shape: tuple[int, ...]) -> list[int]:
    coords = []
    for dim in reversed(shape):
        coords.append(i % dim if dim else 0)
        i = i // dim if dim else 0
    return list(reversed(coords))


def _num(x: Any) -> Any:
    if isinstance(x, complex):
        return [x.real, x.imag]
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


def _max(a: float, b: float) -> float:
    if isinstance(b, float) and math.isnan(b):
        return a
    return max(a, b)


def _dtype_name(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def _describe(v: Any, name: str) -> dict[str, Any]:
    if isinstance(v, torch.Tensor):
        return {"name": name, "type": "tensor", "shape": list(v.shape), "dtype": _dtype_name(v.dtype)}
    return {"name": name, "type": type(v).__name__}
