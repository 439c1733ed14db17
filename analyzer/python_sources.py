"""Extension binding extraction: the CUDA sources a candidate compiles (load_inline,
compile_cuda_extension, CuPy RawKernel/RawModule, and strings holding `__global__` code) with their
file lines, the functions each extension exports, the names bound to CuPy kernels, and the C++
signatures of the exported functions.

Reads the parsed file and its text; string values are resolved by analyzer/strings.py.
"""

from __future__ import annotations

import ast
import re

from pkb.facts import CudaSource

from analyzer.python_api import COMPILE_FUNCS, dotted
from analyzer.strings import cpp_signatures


_DEF_RE = re.compile(r'\bm\.def\(\s*"(\w+)"')


class ExtensionSources:
    """Compiled sources and extension bindings (a mixin of PythonPass)."""

    def _extension_bindings(self) -> None:
        """The functions compiled extensions export (load_inline's `functions`, `m.def("name")` in
        a binding) and the names bound to CuPy kernels."""
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call):
                last = self.qualname(node.func).split(".")[-1]
                if last == "load_inline":
                    for kw in node.keywords:
                        if kw.arg == "functions":
                            self.ext_functions.update(self._str_list(kw.value))
                    if len(node.args) >= 4:
                        self.ext_functions.update(self._str_list(node.args[3]))
                if last in ("RawKernel",) and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
                    parent_targets = self._assigned_names(node)
                    for t in parent_targets:
                        self.cupy_kernels[t] = str(node.args[1].value)
                if last == "get_function" and node.args and isinstance(node.args[0], ast.Constant):
                    for t in self._assigned_names(node):
                        self.cupy_kernels[t] = str(node.args[0].value)
        for m in _DEF_RE.finditer(self.text):
            self.ext_functions.add(m.group(1))

    def _assigned_names(self, call: ast.Call) -> list[str]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and node.value is call:
                return [dotted(t) for t in node.targets if dotted(t)]
        return []

    def _str_list(self, node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.List, ast.Tuple)):
            return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return []

    def _compile_args(self, call: ast.Call, last: str) -> list[tuple[str, ast.AST]]:
        """(origin, expression) of every source string a compile call takes."""
        out: list[tuple[str, ast.AST]] = []
        kws = {kw.arg: kw.value for kw in call.keywords if kw.arg}
        if last == "load_inline":
            cpp = kws.get("cpp_sources", call.args[1] if len(call.args) > 1 else None)
            cu = kws.get("cuda_sources", call.args[2] if len(call.args) > 2 else None)
            for origin, expr in (("load_inline.cuda_sources", cu), ("load_inline.cpp_sources", cpp)):
                if expr is None:
                    continue
                elts = expr.elts if isinstance(expr, (ast.List, ast.Tuple)) else [expr]
                out.extend((origin, e) for e in elts)
        elif last in ("compile_cuda_extension", "compile_parallelkittens_extension"):
            src = kws.get("cuda_src", call.args[1] if len(call.args) > 1 else None)
            if src is not None:
                out.append((last, src))
        elif last == "RawKernel":
            src = kws.get("code", call.args[0] if call.args else None)
            if src is not None:
                out.append(("cupy.RawKernel", src))
        elif last == "RawModule":
            src = kws.get("code", call.args[0] if call.args else None)
            if src is not None:
                out.append(("cupy.RawModule", src))
        return out

    def _cuda_sources(self) -> None:
        seen: set[str] = set()
        compile_calls = [c for c in self.facts.calls if c.category == "compile"]
        by_line = {c.line: c for c in compile_calls}
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.Call):
                continue
            last = self.qualname(node.func).split(".")[-1]
            if last not in COMPILE_FUNCS:
                continue
            fn = self.enclosing.get(id(node))
            site = by_line.get(node.lineno)
            kws = {kw.arg: kw.value for kw in node.keywords if kw.arg}
            name_node = kws.get("name", node.args[0] if node.args and last in ("load_inline", "compile_cuda_extension") else None)
            if last == "RawKernel":
                name_node = kws.get("name", node.args[1] if len(node.args) > 1 else None)
            ext_name = name_node.value if isinstance(name_node, ast.Constant) and isinstance(name_node.value, str) else ""
            funcs = self._str_list(kws["functions"]) if "functions" in kws else (
                self._str_list(node.args[3]) if last == "load_inline" and len(node.args) > 3 else [])
            for origin, expr in self._compile_args(node, last):
                piece = self.strings.resolve(expr, fn)
                if piece is None or not piece.text.strip():
                    continue
                if piece.text in seen:
                    continue
                seen.add(piece.text)
                self.facts.cuda_sources.append(
                    CudaSource(
                        index=len(self.facts.cuda_sources), origin=origin, text=piece.text,
                        line_map=piece.line_map, var_name=expr.id if isinstance(expr, ast.Name) else "",
                        ext_name=ext_name, functions=funcs, compile_line=node.lineno,
                        compile_path=site.path if site else "module", exact=piece.exact,
                    )
                )
        # Strings holding device code that reach a compiler by a route we did not follow.
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Constant, ast.JoinedStr)):
                text = node.value if isinstance(node, ast.Constant) else None
                if isinstance(node, ast.JoinedStr):
                    piece = self.strings.resolve(node)
                    text = piece.text if piece else None
                if not isinstance(text, str) or "__global__" not in text:
                    continue
                if any(text in s for s in seen):
                    continue
                piece = self.strings.resolve(node)
                if piece is None:
                    continue
                seen.add(text)
                self.facts.cuda_sources.append(
                    CudaSource(index=len(self.facts.cuda_sources), origin="string_literal",
                               text=piece.text, line_map=piece.line_map, compile_line=node.lineno,
                               compile_path="module", exact=piece.exact)
                )

    def _ext_signatures(self) -> None:
        names = set(self.ext_functions) | {c.target for c in self.facts.calls if c.category == "ext_kernel"}
        if names and self.facts.cuda_sources:
            self.facts.ext_signatures = cpp_signatures([s.text for s in self.facts.cuda_sources], names)
