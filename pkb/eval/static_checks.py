"""Exploit hints read from a candidate's source before it runs (no import, no execution).

Each flag is {flag, line, snippet}. They are hints: the outcome turns `suspect` on a flag only
where the run confirms it (a fallback flag plus library collectives counted during the
candidate's calls) or where the flag is itself the offence (reading the harness's files). The
rest become notes in the evaluation's details.

    fallback_try_except   a try/except whose handler calls a data-moving torch.distributed
                          collective (or a process group's own method for one, such as
                          group.allreduce, or the dispatcher's operator for one, such as
                          torch.ops._c10d_functional.all_reduce, or a ready-made one of symmetric
                          memory, such as torch.ops.symm_mem.one_shot_all_reduce, or NCCL's own
                          entry point through ctypes, such as lib.ncclAllReduce) or reaches the
                          reference (a custom kernel that quietly falls back); a barrier there
                          moves nothing and is no fallback
    imports_reference     imports the problem's reference module or opens/runs a reference file
    harness_access        names the harness's own files or modules (result_rank*.json, pkb.eval)
    introspection         gc.get_objects / sys._getframe / inspect.stack: a way to reach the
                          harness's objects (expected outputs, timers) from inside a call
    l2_persistence        sets an L2 access-policy window (persisting lines survive between
                          timed calls and flatter the timing)
"""

from __future__ import annotations

import ast
import re
from typing import Any

from pkb.collectives import COLLECTIVE_ENTRY, HOST_SYNCS, LIBRARY_OPS, MOVES_DATA, PROCESS_GROUP_METHODS

_DIST_OWNERS = ("dist", "distributed", "funcol", "_functional_collectives", "c10d", "distributed_c10d")
# ProcessGroup methods spelled unlike any tensor or Python method (allreduce, alltoall_base...):
# a call of one moves data whatever the object is named (group, pg, WORLD).
_PG_ONLY_METHODS = frozenset(m for m, name in PROCESS_GROUP_METHODS.items() if m not in MOVES_DATA and name not in HOST_SYNCS)
# torch.ops.<namespace>.<operator> of a data-moving collective, by (namespace, operator).
_DISPATCHER_MOVES = frozenset(tuple(q.split("::")) for q, name in LIBRARY_OPS.items() if name not in HOST_SYNCS)
_REFERENCE_MODULES = re.compile(r"^(problems(\.|$)|reference(\.|$)|pkb_reference$|pkb_problem_)")
_REFERENCE_TEXT = re.compile(r"(^|[/\\])(reference|problems)([/\\]|$)|p\d+_[a-z0-9_]+\.py|^\d+_[a-z0-9_]+\.py$")
_HARNESS_TEXT = re.compile(r"result_rank|status_rank|verdict_rank|\.key_rank|job\.json|torchrun\.log|pkb\.eval|TORCHELASTIC_ERROR_FILE")
_L2_TEXT = re.compile(r"accessPolicyWindow|cudaStreamAttributeAccessPolicyWindow|cudaLimitPersistingL2CacheSize|cudaAccessPropertyPersisting|hitProp")
_INTROSPECTION = {("gc", "get_objects"), ("gc", "get_referrers"), ("sys", "_getframe"), ("inspect", "currentframe"), ("inspect", "stack"), ("inspect", "getouterframes")}


def static_flags(source: str, tree: ast.Module | None = None) -> list[dict[str, Any]]:
    """The hints of one candidate's source; `tree` is its parsed text where the caller has it
    (the record's), so the source is parsed here only when no one did."""
    flags: list[dict[str, Any]] = []
    lines = source.splitlines()

    def add(flag: str, line: int) -> None:
        snippet = lines[line - 1].strip()[:160] if 0 < line <= len(lines) else ""
        if not any(f["flag"] == flag and f["line"] == line for f in flags):
            flags.append({"flag": flag, "line": line, "snippet": snippet})

    for i, text in enumerate(lines, 1):
        if _L2_TEXT.search(text):
            add("l2_persistence", i)
    if tree is None:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return flags
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            for handler in node.handlers:  # type: ignore[attr-defined]
                for sub in (n for stmt in handler.body for n in ast.walk(stmt)):
                    if _is_collective_call(sub) or _reaches_reference(sub):
                        add("fallback_try_except", handler.lineno)
                        break
        if _reaches_reference(node):
            add("imports_reference", getattr(node, "lineno", 0))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _HARNESS_TEXT.search(node.value):
            add("harness_access", node.lineno)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(n == "pkb.eval" or n.startswith("pkb.eval.") for n in names):
                add("harness_access", node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            if (node.func.value.id, node.func.attr) in _INTROSPECTION:
                add("introspection", node.lineno)
    flags.sort(key=lambda f: (f["line"], f["flag"]))
    return flags


def _is_collective_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in _PG_ONLY_METHODS:
        return True
    if isinstance(func, ast.Attribute) and COLLECTIVE_ENTRY.fullmatch(func.attr):
        return True  # NCCL / MPI through ctypes or cffi: `lib.ncclAllReduce(...)`
    chain = _attribute_chain(func)  # torch.ops.c10d.allreduce_(...), ops._c10d_functional.all_reduce.default(...)
    if any(chain[i] == "ops" and (chain[i + 1], chain[i + 2]) in _DISPATCHER_MOVES for i in range(len(chain) - 2)):
        return True
    if isinstance(func, ast.Attribute) and func.attr in MOVES_DATA:  # a barrier in a handler moves nothing
        owner = func.value
        name = owner.attr if isinstance(owner, ast.Attribute) else owner.id if isinstance(owner, ast.Name) else ""
        return name in _DIST_OWNERS
    return False


def _attribute_chain(node: ast.AST) -> list[str]:
    """The names of a dotted expression, outermost first (`torch.ops.c10d.x` -> torch, ops, c10d, x)."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
    return names[::-1]


def _reaches_reference(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(_REFERENCE_MODULES.match(a.name) for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return bool(node.module and _REFERENCE_MODULES.match(node.module))
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("run_path", "run_module", "exec_module", "spec_from_file_location", "import_module", "__import__", "open", "exec", "SourceFileLoader"):
            for arg in node.args:
                for c in ast.walk(arg):
                    if isinstance(c, ast.Constant) and isinstance(c.value, str) and (
                        _REFERENCE_TEXT.search(c.value) or _REFERENCE_MODULES.match(c.value)
                    ):
                        return True
    return False
