"""Differential diagnosis of a wrong result: which of TAXONOMY's hypotheses explain the output.

A hypothesis predicts an output (from all ranks' inputs, the reference's answer, an earlier
trial's answer...) and holds when the candidate's output equals that prediction, within the
problem's tolerance, on every element compared, while the prediction itself is not the right
answer (a prediction equal to the right answer cannot tell anything apart). Each tested
hypothesis keeps its figure, e.g. "max |got - expected_without_peer_2| = 0 on 4096 of 4096
elements", so an explanation can cite numbers that were measured, never guessed.

    diagnose_case(case, module, tolerance)     one (trial, rank): pure tensors in, dict out
    load_cases(evaluation)                     the cases of an evaluation, from its job dir
    diagnose_wrong(evaluation)                 every case, then one subtype for the candidate
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pkb.taxonomy import WRONG_RESULT_PRIORITY, most_telling, overall_wrong_result

# Problem hypotheses whose names say the same thing as a TAXONOMY subtype.
ALIASES = {"self_only": "local_only"}
TOLERANCE_FACTOR = 10.0  # as pkb.eval.compare: within ten tolerances is "close but outside"
DEFAULT_TILE = 1024  # largest tail (elements) counted as "the last partial tile" when no tile is known
MAX_PEER_SUBSET = 3  # missing-peer combinations tried beyond single peers


@dataclass
class WrongCase:
    """One wrong (trial, rank): the tensors the worker saved plus what the evaluation measured."""

    trial: int
    rank: int
    world_size: int
    expected: Any
    got: Any
    inputs_per_rank: list[Any] | None = None  # every rank's inputs of this trial (None: not known)
    previous_expected: Any = None  # the reference's answer of the trial before, on this rank
    previous_trial: int | None = None
    repeat: dict[str, Any] | None = None  # the worker's second call on identical inputs (trial 0)
    comparison: dict[str, Any] | None = None  # the evaluation's numbers for this (trial, rank)
    notes: list[str] = field(default_factory=list)


# ---- tensors as flat vectors --------------------------------------------------------------------


def _leaves(obj: Any) -> list[Any]:
    import torch

    if isinstance(obj, dict) and "flat_head" in obj:
        return [obj]  # a tensor the worker truncated: its first elements
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _leaves(v)]
    if isinstance(obj, dict):
        return [t for k in sorted(obj, key=str) for t in _leaves(obj[k])]
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return [torch.tensor([float(obj)])]
    return []


def flat(obj: Any) -> tuple[Any, bool]:
    """(all tensor leaves as one float64 vector, truncated?) or (None, False) without tensors."""
    import torch

    parts, truncated = [], False
    for leaf in _leaves(obj):
        if isinstance(leaf, dict):
            parts.append(leaf["flat_head"].detach().reshape(-1).to("cpu", torch.float64))
            truncated = True
        elif leaf.is_complex():
            parts.append(torch.view_as_real(leaf.detach().to("cpu")).reshape(-1).double())
        else:
            parts.append(leaf.detach().to("cpu").reshape(-1).double())
    if not parts:
        return None, False
    return torch.cat(parts), truncated


def shapes(obj: Any) -> list[list[int]]:
    out = []
    for leaf in _leaves(obj):
        out.append(list(leaf["truncated_from_shape"]) if isinstance(leaf, dict) else list(leaf.shape))
    return out


def close_mask(got: Any, pred: Any, atol: float, rtol: float) -> Any:
    """torch.allclose's rule per element, NaN equal to NaN, Inf equal to the same Inf."""
    import torch

    both_nan = torch.isnan(got) & torch.isnan(pred)
    same_inf = torch.isinf(pred) & (got == pred)
    diff = (got - pred).abs()
    return both_nan | same_inf | (diff <= atol + rtol * pred.abs())


def _max_abs(got: Any, pred: Any) -> float:
    import torch

    d = (got - pred).abs()
    d = d[torch.isfinite(d)]
    return float(d.max().item()) if d.numel() else 0.0


def _fmt(x: float | None) -> str:
    if x is None:
        return "?"
    if x == 0:
        return "0"
    return f"{x:.3g}"


# ---- one case -----------------------------------------------------------------------------------


def _test(name: str, subtype: str, got: Any, pred: Any, expected: Any, atol: float, rtol: float, label: str, **info: Any) -> dict[str, Any]:
    """Does `got` equal `pred`? The figure is written whatever the answer."""
    n = min(got.numel(), pred.numel())
    g, p, e = got[:n], pred[:n], expected[:n]
    match = close_mask(g, p, atol, rtol)
    n_match = int(match.sum().item())
    discriminates = not bool(close_mask(p, e, atol, rtol).all().item())
    held = discriminates and n_match == n and n > 0
    figure = f"max |got - {label}| = {_fmt(_max_abs(g, p))} on {n_match} of {n} elements within tolerance"
    if not discriminates:
        figure += f" ({label} equals the right answer here, so it tells nothing)"
    return {"name": name, "subtype": subtype, "held": held, "tested": discriminates, "figure": figure,
            "matching": n_match, "numel": n, "max_abs_diff": _max_abs(g, p), **info}


def _tail(got: Any, expected: Any, atol: float, rtol: float, world_size: int, tile: int | None) -> dict[str, Any]:
    """Mismatches confined to the last < tile elements of the whole output, or of each rank's chunk."""
    import torch

    bad = ~close_mask(got, expected, atol, rtol)
    n = bad.numel()
    limit = tile or DEFAULT_TILE
    idx = torch.nonzero(bad).reshape(-1)
    out = {"name": "tail_only", "subtype": "tail_only", "held": False, "tested": n > 0 and idx.numel() > 0, "tile": limit}
    if not out["tested"]:
        out["figure"] = "no element outside tolerance in the compared range"
        return out
    first = int(idx[0].item())
    tail_len = n - first
    if 0 < first and tail_len < limit:
        out.update(held=True, figure=f"all {idx.numel()} mismatches lie in the last {tail_len} of {n} elements (flat {first}..{n - 1}), under a tile of {limit}",
                   first_bad=first, tail=tail_len)
        return out
    # the same per rank-sized chunk (a kernel that tiles each peer's block on its own)
    if world_size > 1 and n % world_size == 0:
        chunk = n // world_size
        pos = idx % chunk
        first_in_chunk = min(int(pos.min().item()), chunk)
        chunk_tail = chunk - first_in_chunk
        if 0 < first_in_chunk and chunk_tail < limit and chunk_tail < chunk:
            out.update(held=True, figure=f"all {idx.numel()} mismatches lie in the last {chunk_tail} elements of the {world_size} chunks of {chunk} (under a tile of {limit})",
                       first_bad=first_in_chunk, tail=chunk_tail, chunks=world_size)
            return out
    out["figure"] = f"mismatches start at flat index {first} of {n} ({tail_len} trailing elements; a tail needs fewer than {limit} with something right before)"
    return out


def _scaled(got: Any, expected: Any, atol: float, rtol: float, world_size: int) -> dict[str, Any]:
    """Least-squares factor c of got = c * expected, and whether it explains every element."""
    import torch

    fin = torch.isfinite(got) & torch.isfinite(expected)
    e, g = expected[fin], got[fin]
    denom = float((e * e).sum().item())
    out: dict[str, Any] = {"name": "scaled", "subtype": "scaled", "held": False, "tested": denom > 0}
    if denom <= 0:
        out["figure"] = "the expected output is all zero: no factor to fit"
        return out
    c = float((g * e).sum().item()) / denom
    pred = expected * c
    match = close_mask(got, pred, atol, rtol)
    n_match, n = int(match.sum().item()), got.numel()
    trivial = abs(c - 1.0) <= max(rtol, 1e-6) * TOLERANCE_FACTOR
    nice = {f"world size {world_size}": float(world_size), f"1/world size (1/{world_size})": 1.0 / world_size,
            f"world size - 1 ({world_size - 1})": float(world_size - 1), "2": 2.0, "1/2": 0.5, "0": 0.0, "-1": -1.0}
    named = next((k for k, v in nice.items() if abs(c - v) <= 1e-3 * max(1.0, abs(v))), "")
    out.update(factor=c, factor_name=named, matching=n_match, numel=n, held=(n_match == n and not trivial),
               figure=f"got / expected fits c = {c:.6g}{f' = {named}' if named else ''}; c * expected matches {n_match} of {n} elements")
    return out


def diagnose_case(case: WrongCase, module: Any, tolerance: tuple[float, float], tile: int | None = None) -> dict[str, Any]:
    """Every hypothesis tested on one wrong (trial, rank); `subtype` names the most telling that held."""
    import torch

    atol, rtol = tolerance
    tests: list[dict[str, Any]] = []
    notes = list(case.notes)
    cmp = case.comparison or {}

    def result(subtype: str) -> dict[str, Any]:
        return {"trial": case.trial, "rank": case.rank, "subtype": subtype,
                "held": [t for t in tests if t["held"]], "rejected": [t for t in tests if not t["held"] and t.get("tested", True)],
                "notes": notes}

    exp_shapes, got_shapes = shapes(case.expected), shapes(case.got)
    if (case.expected is not None and case.got is not None and exp_shapes != got_shapes) or cmp.get("shape_ok") is False:
        tests.append({"name": "shape_mismatch", "subtype": "shape_mismatch", "held": True,
                      "figure": f"output shapes {got_shapes or '?'} instead of {exp_shapes or '?'}"})
        return result("shape_mismatch")
    if cmp.get("dtype_ok") is False or _dtypes(case.expected) != _dtypes(case.got):
        tests.append({"name": "dtype_mismatch", "subtype": "dtype_mismatch", "held": True,
                      "figure": f"dtypes {_dtypes(case.got)} instead of {_dtypes(case.expected)}"})
    exp, exp_trunc = flat(case.expected)
    got, got_trunc = flat(case.got)
    if exp is None or got is None:
        notes.append("no saved output tensors: only the evaluation's numbers were used")
        return _from_numbers(case, tests, notes, result)
    if exp_trunc or got_trunc:
        notes.append(f"the saved output was truncated: compared on its first {min(exp.numel(), got.numel())} elements")
    n = min(exp.numel(), got.numel())
    exp, got = exp[:n], got[:n]

    nonfinite = int((~torch.isfinite(got) & torch.isfinite(exp)).sum().item())
    if nonfinite:
        tests.append({"name": "nan_inf", "subtype": "nan_inf", "held": True, "count": nonfinite,
                      "figure": f"{nonfinite} of {n} elements are NaN or Inf where the reference is finite"})
    sentinel = _sentinel_count(case.got, case.expected) if not got_trunc else int(cmp.get("sentinel") or 0)
    if sentinel:
        tests.append({"name": "unwritten", "subtype": "unwritten", "held": True, "count": sentinel,
                      "figure": f"{sentinel} of {n} elements still hold the allocator poison (0x7A bytes): never written"})

    preds: list[tuple[str, str, Any, str, dict[str, Any]]] = []  # (name, subtype, vector, label, info)
    missing_single: dict[int, Any] = {}
    if case.inputs_per_rank is not None and module is not None and hasattr(module, "hypotheses"):
        try:
            hyps = module.hypotheses(case.inputs_per_rank, case.expected, case.got, case.rank, case.world_size)
        except Exception as exc:  # a problem's hypothesis code is ours to fix, not the candidate's fault
            hyps = []
            notes.append(f"the problem's hypotheses failed: {type(exc).__name__}: {str(exc)[:200]}")
        for h in hyps:
            name = h.get("name", "")
            if name == "scaled":
                continue  # the generic least-squares fit below covers every constant factor
            vec, _ = flat(h.get("tensor"))
            if vec is None or shapes(h.get("tensor")) != exp_shapes:
                continue
            subtype = ALIASES.get(name, name if name in WRONG_RESULT_PRIORITY else "problem_specific")
            info = {k: h[k] for k in ("peers", "block", "detail", "order") if k in h}
            if name == "missing_peer":
                peers = list(h.get("peers") or [])
                label = "expected_without_peer_" + "_".join(map(str, peers))
                if len(peers) == 1:
                    missing_single[peers[0]] = vec[:n]
            elif name == "local_only":
                label = f"rank_{case.rank}_alone"
            else:
                label = f"{name}_prediction"
            preds.append((name, subtype, vec[:n], label, info))
        # Several peers missing at once: the single-peer predictions are expected minus one peer's
        # share, so k of them combine as their sum minus (k-1) times expected.
        peers = sorted(missing_single)
        for k in range(2, min(len(peers), MAX_PEER_SUBSET) + 1):
            for subset in itertools.combinations(peers, k):
                vec = sum(missing_single[p] for p in subset) - (k - 1) * exp
                preds.append(("missing_peer", "missing_peer", vec, "expected_without_peers_" + "_".join(map(str, subset)), {"peers": list(subset)}))
    elif case.inputs_per_rank is None:
        notes.append("other ranks' inputs unknown: local_only and missing_peer not tested")

    if case.previous_expected is not None:
        prev, _ = flat(case.previous_expected)
        if prev is not None and prev.numel() >= n and shapes(case.previous_expected)[:1] == exp_shapes[:1]:
            preds.append(("stale", "stale", prev[:n], f"expected_of_trial_{case.previous_trial}", {"previous_trial": case.previous_trial}))
    elif case.trial > 0:
        notes.append("the previous trial's answer was not saved: stale not tested")

    for name, subtype, vec, label, info in preds:
        tests.append(_test(name, subtype, got, vec, exp, atol, rtol, label, **info))
    tests.append(_scaled(got, exp, atol, rtol, case.world_size))
    tests.append(_tail(got, exp, atol, rtol, case.world_size, tile))
    rep = case.repeat
    if rep is not None:
        if rep.get("equal") is False:
            diff = rep.get("differing")
            tests.append({"name": "nondeterministic", "subtype": "nondeterministic", "held": True,
                          "figure": f"a second call on identical inputs (trial 0) differs in {diff if diff is not None else 'some'} elements, max |difference| = {_fmt(rep.get('max_abs_diff'))}"})
        else:
            tests.append({"name": "nondeterministic", "subtype": "nondeterministic", "held": False, "tested": True,
                          "figure": "a second call on identical inputs (trial 0) gave bit-identical output"})
    violation = _violation(got, exp, atol, rtol)
    if 1.0 < violation <= TOLERANCE_FACTOR:
        tests.append({"name": "tolerance", "subtype": "tolerance", "held": True, "max_violation": violation,
                      "figure": f"worst element is {violation:.3g} tolerances away (atol {atol:g}, rtol {rtol:g}); within {TOLERANCE_FACTOR:g}x counts as close"})
    return result(_pick(tests))


def _from_numbers(case: WrongCase, tests: list[dict[str, Any]], notes: list[str], result: Any) -> dict[str, Any]:
    """Without tensors: what the evaluation's comparison numbers alone establish."""
    cmp = case.comparison or {}
    numel = cmp.get("numel")
    if cmp.get("nan_inf"):
        tests.append({"name": "nan_inf", "subtype": "nan_inf", "held": True, "figure": f"{cmp['nan_inf']} of {numel} elements are NaN or Inf where the reference is finite"})
    if cmp.get("sentinel"):
        tests.append({"name": "unwritten", "subtype": "unwritten", "held": True, "figure": f"{cmp['sentinel']} of {numel} elements still hold the allocator poison (0x7A bytes): never written"})
    v = cmp.get("max_violation")
    if isinstance(v, (int, float)) and 1.0 < v <= TOLERANCE_FACTOR:
        tests.append({"name": "tolerance", "subtype": "tolerance", "held": True, "max_violation": v,
                      "figure": f"worst element is {v:.3g} tolerances away; within {TOLERANCE_FACTOR:g}x counts as close"})
    rep = case.repeat
    if rep is not None and rep.get("equal") is False:
        tests.append({"name": "nondeterministic", "subtype": "nondeterministic", "held": True,
                      "figure": f"a second call on identical inputs (trial 0) differs in {rep.get('differing')} elements"})
    return result(_pick(tests))


def _pick(tests: list[dict[str, Any]]) -> str:
    return most_telling(t["subtype"] for t in tests if t["held"])


def _dtypes(obj: Any) -> list[str]:
    out = []
    for leaf in _leaves(obj):
        t = leaf["flat_head"] if isinstance(leaf, dict) else leaf
        out.append(str(t.dtype).replace("torch.", ""))
    return out


def _sentinel_count(got: Any, expected: Any) -> int:
    from pkb.eval.poison import sentinel_mask

    total = 0
    for g, e in zip(_leaves(got), _leaves(expected)):
        if isinstance(g, dict) or isinstance(e, dict):
            continue
        m = sentinel_mask(g.detach().cpu())
        if m is None:
            continue
        me = sentinel_mask(e.detach().cpu()) if e.shape == g.shape else None
        total += int((m & ~me).sum().item()) if me is not None else int(m.sum().item())
    return total


def _violation(got: Any, exp: Any, atol: float, rtol: float) -> float:
    import torch

    d = (got - exp).abs() / (atol + rtol * exp.abs()).clamp_min(1e-30)
    d = d[torch.isfinite(d)]
    if not bool(torch.isfinite(got).all().item()):
        return math.inf
    return float(d.max().item()) if d.numel() else 0.0


# ---- from an evaluation -----------------------------------------------------------------------


def _load_pt(path: Path) -> dict[str, Any] | None:
    """A tensor file the rank saved in the job folder, which the candidate could have replaced:
    read only as a plain file under the job folder's read cap, and not where a tensor in it spans
    past its storage (made dense, a small file would fill the memory)."""
    import io

    import torch

    from pkb.eval.job import read_plain
    from pkb.eval.tensors import spans_past_storage

    try:
        data = torch.load(io.BytesIO(read_plain(path)), map_location="cpu", weights_only=True)
    except Exception:
        return None
    return None if spans_past_storage(data) else data


def job_context(evaluation: dict[str, Any]) -> dict[str, Any]:
    """The job's spec, the problem module, tolerance and an input factory (each None where unknown)."""
    ctx: dict[str, Any] = {"job": None, "module": None, "tolerance": None, "make_inputs": None, "notes": []}
    job_dir = evaluation.get("job_dir")
    if not job_dir or not (Path(job_dir) / "job.json").is_file():
        ctx["notes"].append("no job directory: diagnosis from the evaluation's numbers only")
        return ctx
    from pkb.eval import problem_source
    from pkb.eval.job import JobSpec

    job = JobSpec.read(Path(job_dir) / "job.json")
    ctx["job"] = job
    try:
        src = problem_source.load(job.problem, job.dtype, job.scale, job.tolerance)
        key = (evaluation.get("details") or {}).get("input_key")
        try:  # the inputs the launch drew: under its key, told by the ranks at the end
            key_bytes = bytes.fromhex(key) if isinstance(key, str) else None
        except ValueError:
            key_bytes = None
        ctx.update(module=src.module, tolerance=tuple(src.tolerance), make_inputs=problem_source.salted_inputs(src.make_inputs, key_bytes))
    except Exception as exc:
        ctx["notes"].append(f"problem not loadable here ({type(exc).__name__}: {str(exc)[:160]}): problem hypotheses not tested")
    return ctx


def load_cases(evaluation: dict[str, Any], ctx: dict[str, Any] | None = None) -> list[WrongCase]:
    """One case per wrong (trial, rank) of the correctness trials, with what the job dir holds."""
    import torch

    ctx = ctx if ctx is not None else job_context(evaluation)
    job = ctx.get("job")
    ws = int(evaluation.get("world_size") or (job.world_size if job else 1))
    tdir = Path(evaluation["job_dir"]) / "tensors" if evaluation.get("job_dir") else None
    first_repeat = {e["rank"]: e.get("repeat") for t in evaluation.get("trials", []) if t.get("trial") == 0 for e in t.get("ranks", [])}
    cases = []
    for trial in evaluation.get("trials", []):
        t = int(trial["trial"])
        for entry in trial.get("ranks", []):
            if entry.get("matched"):
                continue
            r = int(entry["rank"])
            case = WrongCase(trial=t, rank=r, world_size=ws, expected=None, got=None, comparison=entry,
                             repeat=first_repeat.get(r))
            saved = _load_pt(Path(entry["saved"])) if entry.get("saved") and not str(entry["saved"]).startswith("not saved") else None
            if saved is None and tdir is not None:
                saved = _load_pt(tdir / f"trial{t}_rank{r}.pt")
            if saved is None:
                case.notes.append(f"no tensors saved for trial {t} rank {r}")
            else:
                case.expected, case.got = saved.get("expected"), saved.get("got")
                case.previous_expected, case.previous_trial = saved.get("previous_expected"), saved.get("previous_trial")
                inputs: list[Any] = []
                for peer in range(ws):
                    inp = saved.get("inputs") if peer == r else _peer_inputs(tdir, t, peer)
                    if inp is None or _truncated(inp):
                        inp = _regenerate(ctx, peer, ws, t, torch)
                        if inp is not None:
                            case.notes.append(f"inputs of rank {peer} regenerated from the trial's seed")
                    inputs.append(tuple(inp) if isinstance(inp, list) else inp)
                case.inputs_per_rank = inputs if all(i is not None for i in inputs) else None
            cases.append(case)
    return cases


def _peer_inputs(tdir: Path | None, trial: int, peer: int) -> Any:
    if tdir is None:
        return None
    for name in (f"trial{trial}_rank{peer}.pt", f"inputs_trial{trial}_rank{peer}.pt"):
        data = _load_pt(tdir / name)
        if data is not None and "inputs" in data:
            return data["inputs"]
    return None


def _truncated(x: Any) -> bool:
    return any(isinstance(leaf, dict) for leaf in _leaves(x))


def _regenerate(ctx: dict[str, Any], rank: int, ws: int, trial: int, torch: Any) -> Any:
    factory, job = ctx.get("make_inputs"), ctx.get("job")
    if factory is None or job is None:
        return None
    try:
        return factory(rank, ws, trial, torch.device("cpu"), getattr(torch, job.dtype))
    except Exception:
        return None


def diagnose_wrong(evaluation: dict[str, Any], *, tile: int | None = None, module: Any = None, tolerance: tuple[float, float] | None = None,
                   cases: list[WrongCase] | None = None) -> dict[str, Any]:
    """The candidate's wrong-result diagnosis: per case, then one subtype with its supporting figures."""
    ctx = job_context(evaluation) if cases is None else {"module": module, "tolerance": tolerance, "notes": []}
    if cases is None:
        cases = load_cases(evaluation, ctx)
    module = module or ctx.get("module")
    tol = tolerance or ctx.get("tolerance") or (1e-2, 1e-2)
    per_case = [diagnose_case(c, module, tol, tile) for c in cases]
    details = evaluation.get("details") or {}
    right, wrong = details.get("right_ranks"), details.get("wrong_ranks")
    if right is None:
        by_rank: dict[int, bool] = {}
        for t in evaluation.get("trials", []):
            for e in t.get("ranks", []):
                by_rank[e["rank"]] = by_rank.get(e["rank"], True) and bool(e.get("matched"))
        right = sorted(r for r, ok in by_rank.items() if ok)
        wrong = sorted(r for r, ok in by_rank.items() if not ok)
    counts = Counter(c["subtype"] for c in per_case if c["subtype"])
    subtype = overall_wrong_result(c["subtype"] for c in per_case)
    evidence: list[dict[str, Any]] = []
    if right and wrong:
        evidence.append({"name": "rank_subset", "subtype": "rank_subset", "held": True,
                         "figure": f"ranks {right} right on every trial; ranks {wrong} wrong"})
        if not subtype:
            subtype = "rank_subset"
    if not subtype:
        subtype = evaluation.get("subtype") or ""
    # The figures that support the chosen subtype, one per case (first few), then the others held.
    for c in per_case:
        for h in c["held"]:
            evidence.append({**_plain(h), "trial": c["trial"], "rank": c["rank"]})
    held_names = sorted({e["subtype"] for e in evidence})
    return {
        "subtype": subtype,
        "eval_subtype": evaluation.get("subtype") or "",
        "held": held_names,
        "evidence": _dedupe(evidence),
        "cases": [{**c, "held": [_plain(h) for h in c["held"]], "rejected": [_plain(h) for h in c["rejected"]]} for c in per_case],
        "case_subtypes": dict(counts),
        "tolerance": list(tol),
        "notes": sorted(set(ctx.get("notes", []) + [n for c in per_case for n in c["notes"]])),
    }


def _plain(h: dict[str, Any]) -> dict[str, Any]:
    """JSON-ready: numbers and strings only."""
    out = {}
    for k, v in h.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = str(v)
        out[k] = v
    return out


def _dedupe(evidence: list[dict[str, Any]], per_subtype: int = 6) -> list[dict[str, Any]]:
    seen: Counter[str] = Counter()
    out = []
    for e in evidence:
        if seen[e["subtype"]] < per_subtype:
            out.append(e)
        seen[e["subtype"]] += 1
    return out
