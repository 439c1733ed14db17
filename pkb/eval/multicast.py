"""Candidates that need NVLink multicast, where there is none (multicast switched off, as on the
shared GPU machines; one GPU; every emulated world).

`hdl.multicast_ptr` is 0 where multicast is off. A candidate whose `multimem.*` path runs on
that 0 with no fallback fails for the machine's sake, not its own: its failure (a hang, an
illegal address, a wrong result) says nothing about its protocol. `multicast_need` gathers the
static evidence (the `multimem.*` lines, and any test of multicast_ptr against 0 that would
lead to a fallback); `needs_multicast_verdict` turns a failed run into `not_run` "needs
multicast" when that evidence and the run agree, and leaves every other result alone. On real
ranks the run's side of the evidence is `MulticastAddressWatch`: how many symmetric-memory
handles the rank was given with a multicast address of 0.

Reads the candidate's source, parsed once: the record's own tree where the record holds that
source, else parsed here.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Callable

_MULTIMEM = re.compile(r"\bmultimem\.[a-z_.0-9]+")
# In CUDA text: the multicast address (multicast_ptr, mc_ptr, ...) tested against 0 or used as
# a condition. A check that only raises (TORCH_CHECK, assert) is no fallback.
_CUDA_GUARD = re.compile(
    r"\b(multicast\w*|mc_?\w*)\s*(!=|==)\s*(0|0ull|0ULL|nullptr|NULL)\b"
    r"|\bif\s*\(\s*!?\s*(multicast\w*|mc_?\w*)\s*\)"
)
_RAISES_ONLY = re.compile(r"TORCH_CHECK|\bassert\b|TORCH_INTERNAL_ASSERT|raise\b")
# Failures that a multimem access through address 0 explains. Anything else (a build error, a
# wrong signature, a TypeError of a binding) is the candidate's own, multicast or not.
_EXPLAINED_RUNTIME = {"illegal_address", "misaligned_address", "launch_config", "device_assert", "crash", "unspecified_launch_failure"}
_EXPLAINED_MESSAGE = re.compile(r"multicast|multimem|illegal memory access|an illegal instruction|unspecified launch failure", re.I)


def multicast_need(source: str, record: Any = None) -> dict[str, Any]:
    """{'multimem': [{line, snippet, pass}], 'fallback_guards': [{line, snippet}], 'reads_multicast_ptr': bool}."""
    lines = source.splitlines()
    tree = _syntax_tree(source, record)
    evidence: list[dict[str, Any]] = []
    seen: set[int] = set()
    for ev in _record_nvls_evidence(record):
        if _MULTIMEM.search(ev.get("snippet", "")) and ev["line"] not in seen:
            seen.add(ev["line"])
            evidence.append(ev)
    in_strings = _string_lines(source, tree)
    code_lines = in_strings - _docstring_lines(tree)
    for i, text in enumerate(lines, 1):
        # CUDA source strings only: a docstring or comment that names multimem is no evidence
        if i in seen or i not in code_lines or text.lstrip().startswith(("//", "/*", "*")):
            continue
        if _MULTIMEM.search(text):
            seen.add(i)
            evidence.append({"line": i, "snippet": text.strip()[:200], "pass": "python"})
    evidence.sort(key=lambda e: e["line"])
    guards = python_guards(source, tree) + [
        {"line": i, "snippet": lines[i - 1].strip()[:200], "where": "cuda"}
        for i in sorted(in_strings) if i <= len(lines) and _CUDA_GUARD.search(lines[i - 1]) and not _RAISES_ONLY.search(lines[i - 1])
    ]
    uniq = {g["line"]: g for g in guards}
    return {
        "multimem": evidence[:32],
        "fallback_guards": [uniq[k] for k in sorted(uniq)],
        "reads_multicast_ptr": "multicast_ptr" in source,
    }


def _syntax_tree(source: str, record: Any = None) -> ast.Module | None:
    """`source` parsed: the record's tree when the record holds this source; None when it does
    not parse."""
    if record is not None and getattr(record, "source", "") == source and hasattr(record, "syntax_tree"):
        return record.syntax_tree()
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _string_lines(source: str, tree: ast.Module | None) -> set[int]:
    """Lines inside the module's string literals (where CUDA sources live); every line when the
    file does not parse."""
    if tree is None:
        return set(range(1, source.count("\n") + 2))
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.end_lineno:
            out.update(range(node.lineno, node.end_lineno + 1))
    return out


def _docstring_lines(tree: ast.Module | None) -> set[int]:
    """Lines of the module's, classes' and functions' docstrings."""
    if tree is None:
        return set()
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return out


def _record_nvls_evidence(record: Any) -> list[dict[str, Any]]:
    """The static passes' evidence for the `nvls` mechanism (candidate and kernels)."""
    if record is None:
        return []
    out = []
    label_sets = [getattr(record, "labels", None) or {}] + [getattr(k, "labels", None) or {} for k in getattr(record, "kernels", None) or []]
    for labels in label_sets:
        for lab in labels.get("mechanism", []) or []:
            if getattr(lab, "value", "") != "nvls":
                continue
            for ev in getattr(lab, "evidence", []) or []:
                out.append({"line": int(getattr(ev, "line", 0) or 0), "snippet": str(getattr(ev, "snippet", ""))[:200],
                            "pass": getattr(ev, "pass_name", "")})
    return out


def python_guards(source: str, tree: ast.Module | None = None) -> list[dict[str, Any]]:
    """Tests in the Python code that can steer a 0 multicast_ptr away from the multimem path:
    a comparison of multicast_ptr (or a name bound from it) with 0/None, its use as a condition,
    or has_multicast_support(). `hasattr(hdl, "multicast_ptr")` is no guard: torch always has it.
    `tree`: the source parsed, where the caller has it."""
    if tree is None:
        tree = _syntax_tree(source)
    if tree is None:
        return []
    names = _names_bound_from_multicast(tree)
    lines = source.splitlines()

    def refers(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute) and node.attr == "multicast_ptr":
            return True
        if isinstance(node, ast.Name) and node.id in names:
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "bool") and node.args:
            return refers(node.args[0])
        if isinstance(node, ast.Call) and _is_getattr_multicast(node):
            return True
        return False

    def is_guard(test: ast.AST) -> bool:
        for node in ast.walk(test):
            if isinstance(node, ast.Compare) and (refers(node.left) or any(refers(c) for c in node.comparators)):
                return True
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "has_multicast_support":
                return True
        operands = test.values if isinstance(test, ast.BoolOp) else [test]
        return any(refers(op.operand if isinstance(op, ast.UnaryOp) and isinstance(op.op, ast.Not) else op) for op in operands)

    out = []
    for node in ast.walk(tree):
        test = None
        if isinstance(node, (ast.If, ast.IfExp, ast.While)):  # an assert only raises: no fallback
            test = node.test
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and isinstance(node.value, (ast.BoolOp, ast.Compare)):
            test = node.value  # use_mc = hdl.multicast_ptr != 0 and ...
        if test is not None and is_guard(test):
            line = getattr(node, "lineno", 0)
            out.append({"line": line, "snippet": lines[line - 1].strip()[:200] if 0 < line <= len(lines) else "", "where": "python"})
    return out


def _is_getattr_multicast(node: ast.Call) -> bool:
    return (isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant) and node.args[1].value == "multicast_ptr")


def _names_bound_from_multicast(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        reads = any(
            (isinstance(n, ast.Attribute) and n.attr == "multicast_ptr") or (isinstance(n, ast.Call) and _is_getattr_multicast(n))
            for n in ast.walk(node.value)
        )
        if reads and not isinstance(node.value, (ast.BoolOp, ast.Compare)):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def explained_by_missing_multicast(evaluation: dict[str, Any]) -> bool:
    """Whether the run's failure is one a multimem access through address 0 produces."""
    if evaluation.get("correct"):
        return False
    status, outcome, subtype = evaluation.get("status"), evaluation.get("outcome"), evaluation.get("subtype")
    if status == "inconclusive" or outcome in ("hang", "wrong_result"):
        return True
    if outcome != "runtime_error":
        return False
    if subtype in _EXPLAINED_RUNTIME:
        return True
    if subtype == "nccl_error" and (evaluation.get("details") or {}).get("signal") == "SIGABRT":
        # NCCL's watchdog aborting the rank on the sticky CUDA error the multimem access left
        # (seen on an H100: the same file was illegal_address in one run, this in the next)
        return True
    messages = [str(evaluation.get("reason", ""))]
    messages += [str(((r or {}).get("error") or {}).get("message", "")) for r in evaluation.get("ranks") or []]
    return subtype == "python_exception" and any(_EXPLAINED_MESSAGE.search(m) for m in messages)


def needs_multicast_verdict(evaluation: dict[str, Any], need: dict[str, Any]) -> dict[str, Any] | None:
    """The `not_run` "needs multicast" evaluation that replaces a failed run, or None to keep it.

    All of: multimem.* in the source, multicast_ptr read by the candidate (at run time, where
    the run says; else in its text), no fallback guard, and a failure that address 0 explains."""
    if not need.get("multimem") or need.get("fallback_guards") or not explained_by_missing_multicast(evaluation):
        return None
    reads = (evaluation.get("details") or {}).get("multicast_reads")
    if reads == 0 or (reads is None and not need.get("reads_multicast_ptr")):
        return None  # the run never asked for the multicast address: the failure is elsewhere
    first = need["multimem"][0]
    observed = {k: evaluation.get(k) for k in ("status", "outcome", "subtype", "reason")}
    details = dict(evaluation.get("details") or {})
    details["multicast"] = {**need, "observed": observed}
    shown = ", ".join(f"line {e['line']}" for e in need["multimem"][:4])
    return {
        **evaluation,
        "status": "not_run",
        "outcome": "",
        "subtype": "needs_multicast",
        "correct": False,
        "details": details,
        "reason": (f"needs multicast: the candidate runs multimem.* ({shown}: {first['snippet'][:80]}) on hdl.multicast_ptr, "
                   "which is 0 where NVLink multicast is off (switched off, one GPU, emulation), and has no fallback for 0; "
                   f"the run gave {observed['outcome'] or observed['status']}/{observed['subtype']}"),
    }


class MulticastAddressWatch:
    """Counts, on a real rank, the symmetric-memory handles `rendezvous` returns and those whose
    multicast address is 0 (multicast off or absent), into `counts` (the rank's report). Installed
    before the candidate is imported, so `symm_mem.rendezvous` and a name imported from it reach
    the wrapper; the handle is the library's own, untouched. `on_first_zero` is called once, at
    the first handle without a multicast address: the rank saves its report there, since the
    kernel that then reads address 0 may end the process before any later save (seen on the H100:
    NCCL's watchdog aborted a rank on the illegal address, and its report had no counts)."""

    def __init__(self, counts: dict[str, int], module: Any = None, on_first_zero: Callable[[], None] | None = None) -> None:
        self.counts = counts
        self.module = module
        self.on_first_zero = on_first_zero

    def install(self) -> None:
        module = self.module
        if module is None:
            try:
                import torch.distributed._symmetric_memory as module
            except ImportError:  # a torch without symmetric memory: nothing to watch
                return
        original = getattr(module, "rendezvous", None)
        if original is None or getattr(original, "_pkb_multicast_watch", False):
            return
        counts, on_first_zero = self.counts, self.on_first_zero
        counts.setdefault("handles", 0)
        counts.setdefault("multicast_zero", 0)

        def rendezvous(*args: Any, **kwargs: Any) -> Any:
            handle = original(*args, **kwargs)
            counts["handles"] += 1
            try:
                address = int(getattr(handle, "multicast_ptr", 0) or 0)
            except Exception:  # noqa: BLE001 - a handle that cannot say has no multicast address to give
                address = 0
            if address == 0:
                counts["multicast_zero"] += 1
                if counts["multicast_zero"] == 1 and on_first_zero is not None:
                    on_first_zero()
            return handle

        rendezvous._pkb_multicast_watch = True  # type: ignore[attr-defined]
        rendezvous.__wrapped__ = original  # type: ignore[attr-defined]
        module.rendezvous = rendezvous


def real_rank_multicast_verdict(evaluation: dict[str, Any], rank_results: list[dict[str, Any] | None],
                                read_source: Callable[[], str | None], record: Any = None) -> dict[str, Any] | None:
    """The "needs multicast" verdict for a failed run on real ranks, or None to keep the run's.

    Only where a rank was handed a symmetric-memory handle whose multicast address was 0 (the
    run's own evidence that multicast was off), and `needs_multicast_verdict` agrees. The
    candidate's source is read (`read_source`) only then."""
    if evaluation.get("correct") or evaluation.get("status") not in ("ran", "inconclusive"):
        return None
    zero = sum(int(((r or {}).get("symm_mem") or {}).get("multicast_zero") or 0) for r in rank_results)
    source = read_source() if zero else None
    if source is None:
        return None
    need = multicast_need(source, record)
    if not need["multimem"]:
        return None
    details = {**(evaluation.get("details") or {}), "multicast_evidence": need, "multicast_reads": zero}
    return needs_multicast_verdict({**evaluation, "details": details}, need)
