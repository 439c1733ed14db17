"""Does a candidate need a CUDA device? Decided from its source, before anything is launched.

A candidate that JIT-builds CUDA (load_inline with CUDA sources, PKB's compile_cuda_extension),
uses cupy, Triton or torch symmetric memory cannot run on a CPU-only machine; launching it there
would only measure the missing device.

Reads the candidate's source, and its parsed tree where the caller has one (the record's), so
nothing here parses a source a caller already parsed.
"""

from __future__ import annotations

import ast
import re

_MODULE_USES = {
    "cupy": "cupy",
    "triton": "triton",
    "torch.distributed._symmetric_memory": "symm_mem",
    "cuda": "cuda-python",
    "cuda.bindings": "cuda-python",
    "pycuda": "pycuda",
}
_CALL_USES = {
    "load_inline": "load_inline",
    "compile_cuda_extension": "compile_cuda_extension",
    "CUDAExtension": "CUDAExtension",
}
_REGEX = re.compile(
    r"\b(load_inline|compile_cuda_extension|import cupy|from cupy|import triton|from triton"
    r"|_symmetric_memory|symm_mem)\b"
)


def cuda_uses(source: str, tree: ast.Module | None = None) -> list[str]:
    """Names of the CUDA-only things the source uses, in first-seen order (`tree`: the source
    parsed, where the caller has it)."""
    found: list[str] = []

    def add(name: str) -> None:
        if name not in found:
            found.append(name)

    if tree is None:
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            for m in _REGEX.finditer(source):
                add(m.group(1).replace("import ", "").replace("from ", "").replace("_symmetric_memory", "symm_mem"))
            return found
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                _module_use(alias.name, add)
        elif isinstance(node, ast.ImportFrom) and node.module:
            _module_use(node.module, add)
            for alias in node.names:
                if alias.name in _CALL_USES:
                    add(_CALL_USES[alias.name])
                if alias.name == "_symmetric_memory":
                    add("symm_mem")
        elif isinstance(node, ast.Call):
            name = _call_name(node.func)
            if name in _CALL_USES:
                if name == "load_inline" and not _has_cuda_sources(node):
                    continue  # a C++-only extension builds and runs on CPU
                add(_CALL_USES[name])
        elif isinstance(node, ast.Attribute) and node.attr == "_symmetric_memory":
            add("symm_mem")
    # `from torch.utils.cpp_extension import load_inline` alone is not a use; the call decides.
    if "load_inline" in found and not any(
        isinstance(n, ast.Call) and _call_name(n.func) == "load_inline" and _has_cuda_sources(n) for n in ast.walk(tree)
    ):
        found.remove("load_inline")
    return found


def cuda_requirement(source: str, tree: ast.Module | None = None) -> str | None:
    """The reason a CPU-only machine cannot run this candidate, or None if it can."""
    uses = cuda_uses(source, tree)
    if not uses:
        return None
    builds = [u for u in uses if u in ("load_inline", "compile_cuda_extension", "CUDAExtension", "cupy", "pycuda")]
    verb = "builds CUDA code" if builds else "uses CUDA-only libraries"
    return f"no CUDA device: this candidate {verb} ({'/'.join(uses)})"


def _module_use(module: str, add) -> None:
    for prefix, name in _MODULE_USES.items():
        if module == prefix or module.startswith(prefix + "."):
            add(name)


def _call_name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _has_cuda_sources(call: ast.Call) -> bool:
    for kw in call.keywords:
        if kw.arg in ("cuda_sources", "with_cuda") and not (isinstance(kw.value, ast.Constant) and kw.value.value in (None, False, "", [])):
            return True
    return len(call.args) >= 3  # load_inline(name, cpp_sources, cuda_sources, ...)
