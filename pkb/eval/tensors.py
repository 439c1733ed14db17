"""Nested inputs and outputs (tensors inside tuples, lists and dicts), as the rank and the emulation
both handle them: copies, bitwise equality, in-place refills, storage identity, what two calls on
the same inputs differ in, and small CPU copies for the diagnosis's saved tensors."""

from __future__ import annotations

from typing import Any


def clone_tree(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, tuple):
        return tuple(clone_tree(v) for v in x)
    if isinstance(x, list):
        return [clone_tree(v) for v in x]
    if isinstance(x, dict):
        return {k: clone_tree(v) for k, v in x.items()}
    return x


def tensors_of(x: Any) -> list[Any]:
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in tensors_of(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in tensors_of(v)]
    return []


def spans_past_storage(x: Any) -> bool:
    """Whether a tensor in `x` has more elements than its storage holds (an expanded or otherwise
    overlapping view): made contiguous, one small file would become gigabytes."""
    for t in tensors_of(x):
        try:
            if t.numel() * t.element_size() > t.untyped_storage().nbytes():
                return True
        except Exception:  # a tensor without storage (meta): nothing to blow up
            continue
    return False


def bitwise_equal(a: Any, b: Any) -> bool:
    ta, tb = tensors_of(a), tensors_of(b)
    if len(ta) != len(tb):
        return False
    import torch

    for x, y in zip(ta, tb):
        if x.shape != y.shape or x.dtype != y.dtype or x.layout != y.layout:
            return False
        if x.is_meta or y.is_meta:  # no storage, so no values to differ: equal when both have none
            if not (x.is_meta and y.is_meta):
                return False
            continue
        if x.layout != torch.strided:  # sparse inputs (PKB's spherical convolution): no flat byte view
            x, y = x.to_dense(), y.to_dense()
        # contiguous first: a strided view (an output at an offset, every other element) flattens
        # to a view whose last stride is not 1, which a byte view refuses
        if x.numel() and not torch.equal(_bytes(x), _bytes(y)):
            return False
    return True


def _bytes(t: Any) -> Any:
    import torch

    return t.reshape(-1).contiguous().view(torch.uint8)


def copy_into(dst: Any, src: Any) -> bool:
    """Copy src's values into dst's tensors in place; False when the shapes differ."""
    td, ts = tensors_of(dst), tensors_of(src)
    if len(td) != len(ts) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(td, ts)):
        return False
    import torch

    with torch.no_grad():  # the harness's own write: an input that requires grad is still a buffer here
        for a, b in zip(td, ts):
            a.copy_(b)
    return True


def storage_ptrs(x: Any) -> set[int]:
    out = set()
    for t in tensors_of(x):
        try:
            if t.numel():
                out.add(t.untyped_storage().data_ptr())
        except Exception:
            pass
    return out


def repeat_summary(first: Any, second: Any) -> dict[str, Any]:
    """How a second call on identical inputs differs from the first (bitwise; NaN equals NaN)."""
    import torch

    if bitwise_equal(first, second):
        return {"equal": True, "differing": 0, "max_abs_diff": 0.0}
    ta, tb = tensors_of(first), tensors_of(second)
    differing, worst = 0, 0.0
    for a, b in zip(ta, tb):
        if a.shape != b.shape:
            return {"equal": False, "differing": None, "max_abs_diff": None, "note": "shapes differ between the two calls"}
        af, bf = a.detach().double(), b.detach().double()
        same = (af == bf) | (torch.isnan(af) & torch.isnan(bf))
        differing += int((~same).sum().item())
        d = (af - bf).abs()[~same & torch.isfinite(af - bf)]
        if d.numel():
            worst = max(worst, float(d.max().item()))
    return {"equal": False, "differing": differing, "max_abs_diff": worst}


def cap_for_saving(x: Any, cap_elems: int) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        t = x.detach().to("cpu")
        if t.numel() > cap_elems:
            return {"truncated_from_shape": list(t.shape), "flat_head": t.reshape(-1)[:cap_elems].clone()}
        return t
    if isinstance(x, (list, tuple)):
        return [cap_for_saving(v, cap_elems) for v in x]
    if isinstance(x, dict):
        return {k: cap_for_saving(v, cap_elems) for k, v in x.items()}
    return x


def shared_output_groups(outputs: dict[int, Any]) -> set[int]:
    """Groups whose output shares storage with another group's output."""
    from pkb.eval.guard import overlaps

    keys = sorted(outputs)
    return {a for a in keys for b in keys if a != b and overlaps(outputs[a], outputs[b])}


def overlaps_any(out: Any, groups: list[Any]) -> bool:
    from pkb.eval.guard import overlaps

    return any(overlaps(out, g) for g in groups)
