"""Evaluating Python string expressions to the CUDA text they build, with file lines.

Generated candidates build their CUDA source as raw triple-quoted strings, concatenations of
named pieces, f-strings with a few constants, `.format()`, `.replace()` and `textwrap.dedent`.
`StringResolver.resolve` follows those and returns the text plus, for each line of the text, the
line of the Python file it came from, so evidence can point at the real line.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from analyzer.cpp_scan import match_close


@dataclass
class Piece:
    text: str
    line_map: list[int] = field(default_factory=list)  # one file line per text line
    exact: bool = True

    def __add__(self, other: Piece) -> Piece:
        if not self.text:
            return other
        if not other.text:
            return self
        # The last (partial) line of `self` and the first line of `other` become one line; it
        # sits where its text does: in `other` when `self` ended with a newline.
        left, right = self.line_map, other.line_map
        if not left or not right:
            return Piece(self.text + other.text, left + right, self.exact and other.exact)
        joint = right[0] if self.text.endswith("\n") else left[-1]
        return Piece(self.text + other.text, left[:-1] + [joint] + right[1:], self.exact and other.exact)


def _align(value: str, node: ast.expr, source_lines: list[str]) -> list[int]:
    """File line for each line of a string constant's value."""
    n_lines = value.count("\n") + 1
    first, last = node.lineno, getattr(node, "end_lineno", node.lineno) or node.lineno
    if value.count("\n") == last - first:
        # Real newlines only (the usual raw triple-quoted source): one to one.
        return [first + i for i in range(n_lines)]
    # Escaped newlines ("...\n" "...\n" on consecutive lines) or a mix: find each line's text in
    # the literal's source lines, moving forward only.
    out: list[int] = []
    ptr = first
    for vline in value.split("\n"):
        needle = vline.strip()
        if needle:
            for q in range(ptr, last + 1):
                if needle in source_lines[q - 1]:
                    ptr = q
                    break
        out.append(ptr)
    return out


class StringResolver:
    """Resolves str-valued expressions inside one module.

    `bindings` maps a name to the expressions assigned to it (module level and per function),
    so `CUDA_SRC = HEADER + KERNEL` and `src = CUDA_SRC.replace(...)` are followed.
    """

    def __init__(self, tree: ast.Module, source: str):
        self.lines = source.splitlines() or [""]
        self.module_bindings: dict[str, list[ast.expr]] = {}
        self.function_bindings: dict[ast.AST, dict[str, list[ast.expr]]] = {}
        self.constants: dict[str, object] = {}
        for node in tree.body:
            self._collect(node, self.module_bindings)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.constants[t.id] = node.value.value
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                local: dict[str, list[ast.expr]] = {}
                for stmt in ast.walk(node):
                    if stmt is not node and isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                        self._collect(stmt, local)
                self.function_bindings[node] = local

    @staticmethod
    def _collect(node: ast.AST, into: dict[str, list[ast.expr]]) -> None:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    into.setdefault(t.id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            if isinstance(node.target, ast.Name):
                into.setdefault(node.target.id, []).append(node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            into.setdefault(node.target.id, []).append(
                ast.BinOp(left=ast.Name(id=node.target.id), op=ast.Add(), right=node.value)
            )

    def resolve(self, node: ast.expr, scope: ast.AST | None = None, depth: int = 0) -> Piece | None:
        """The string `node` evaluates to, or None when it is not a string we can follow."""
        if depth > 24:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return Piece(node.value, _align(node.value, node, self.lines))
        if isinstance(node, ast.JoinedStr):
            return self._fstring(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = self.resolve(node.left, scope, depth + 1)
            right = self.resolve(node.right, scope, depth + 1)
            if left is None or right is None:
                return left or right
            return left + right
        if isinstance(node, ast.Name):
            local = self.function_bindings.get(scope, {}).get(node.id) if scope else None
            exprs, expr_scope = (local, scope) if local else (self.module_bindings.get(node.id), None)
            # The first binding that is a string wins; later rebinds are usually edits
            # (src = src.replace(...)) that resolve through the same name.
            for expr in exprs or ():
                if isinstance(expr, ast.Name) and expr.id == node.id:
                    continue
                piece = self.resolve(expr, expr_scope, depth + 1)
                if piece is not None:
                    return piece
            return None
        if isinstance(node, ast.Call):
            return self._call(node, scope, depth)
        return None

    def _fstring(self, node: ast.JoinedStr) -> Piece:
        parts: list[str] = []
        exact = True
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts.append(value.value)
            elif isinstance(value, ast.FormattedValue):
                inner = value.value
                if isinstance(inner, ast.Name) and inner.id in self.constants:
                    parts.append(str(self.constants[inner.id]))
                elif isinstance(inner, ast.Constant):
                    parts.append(str(inner.value))
                else:
                    # An unknown field: a number keeps most C++ (sizes, template args) parseable.
                    parts.append("0")
                    exact = False
        text = "".join(parts)
        return Piece(text, _align(text, node, self.lines), exact)

    def _call(self, node: ast.Call, scope: ast.AST | None, depth: int) -> Piece | None:
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr == "dedent":
                # textwrap.dedent(x): line structure kept; indentation does not matter to C++.
                return self.resolve(node.args[0], scope, depth + 1) if node.args else None
            base = self.resolve(func.value, scope, depth + 1) if func.attr != "join" else None
            if func.attr in ("strip", "lstrip", "rstrip") and base is not None:
                return base  # leading blank lines shift nothing that matters for evidence
            if func.attr == "replace" and base is not None and len(node.args) >= 2:
                old = self.resolve(node.args[0], scope, depth + 1)
                new = self.resolve(node.args[1], scope, depth + 1)
                if old is not None and new is not None and "\n" not in old.text + new.text:
                    return Piece(base.text.replace(old.text, new.text), base.line_map, base.exact)
                return Piece(base.text, base.line_map, False)
            if func.attr == "format" and base is not None:
                return Piece(self._format(base.text, node), base.line_map, False)
            if func.attr == "join" and node.args:
                sep = self.resolve(func.value, scope, depth + 1)
                arg = node.args[0]
                if sep is not None and isinstance(arg, (ast.List, ast.Tuple)):
                    out: Piece | None = None
                    for i, elt in enumerate(arg.elts):
                        piece = self.resolve(elt, scope, depth + 1)
                        if piece is None:
                            continue
                        out = piece if out is None else out + Piece(sep.text, [elt.lineno] * (sep.text.count("\n") + 1)) + piece
                    return out
        if isinstance(func, ast.Name) and func.id == "dedent" and node.args:
            return self.resolve(node.args[0], scope, depth + 1)
        return None

    def _format(self, text: str, call: ast.Call) -> str:
        """str.format with constant arguments; unknown fields become 0 (see _fstring)."""
        values: dict[str, str] = {}
        for kw in call.keywords:
            if kw.arg and isinstance(kw.value, ast.Constant):
                values[kw.arg] = str(kw.value.value)
            elif kw.arg and isinstance(kw.value, ast.Name) and kw.value.id in self.constants:
                values[kw.arg] = str(self.constants[kw.value.id])
        out: list[str] = []
        i = 0
        while i < len(text):
            ch = text[i]
            if text.startswith("{{", i) or text.startswith("}}", i):
                out.append(ch)
                i += 2
                continue
            if ch == "{":
                end = text.find("}", i)
                if end == -1:
                    out.append(text[i:])
                    break
                key = text[i + 1 : end].split(":")[0].split("!")[0]
                out.append(values.get(key, "0"))
                i = end + 1
                continue
            out.append(ch)
            i += 1
        return "".join(out)


# ---- C++ binding signatures ------------------------------------------------------------------

_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_PYBIND_RE = re.compile(r'\bm\.def\(\s*"(\w+)"\s*,\s*&?\s*([\w:]+)')
_SCHEMA_RE = re.compile(r'\.def\(\s*"(\w+)\(((?:[^"()]|\([^()]*\))*)\)\s*->')
_SIGNATURE_RE = re.compile(r"([\w:<>,\s\*&]+?)\b(\w+)\s*\(((?:[^()]|\([^()]*\))*)\)\s*(?:const\s*)?(?:;|\{)")
_SCHEMA_TYPES = {"Tensor": "torch::Tensor", "int": "int64_t", "float": "double", "bool": "bool", "SymInt": "int64_t"}


def _split_params(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return [p.strip() for p in out if p.strip() and p.strip() != "void"]


def _param_type(param: str) -> str:
    """`const torch::Tensor& x = {}` -> 'const torch::Tensor&'; a lone type stays as it is."""
    param = param.split("=")[0].strip()
    m = re.match(r"(.*?[\w>\*&\]])\s*\b(\w+)$", param)
    if m and m.group(1).strip() and not m.group(1).strip().endswith(("::", "unsigned", "long", "short", "signed")):
        return m.group(1).strip()
    return param


def _host_function(ret: str) -> bool:
    """What _SIGNATURE_RE took for a return type belongs to a host function's header, not a
    kernel's or a statement (`return f(x);`, `if (ok) {`)."""
    return "__global__" not in ret and "__device__" not in ret and not re.search(r"\b(return|if|while|for|switch)\b", ret)


def cpp_signatures(texts: list[str], names: set[str]) -> dict[str, list[str]]:
    """Parameter types of the bound functions `names` (Python names), read from the C++ sources:
    `m.def("py", &cpp)` maps a Python name to its C++ function, whose declaration or definition
    gives the types; a TORCH_LIBRARY schema `m.def("py(Tensor x, int n) -> ()")` gives them too.
    A simple parse: a name it cannot find is left out."""
    code = "\n".join(_COMMENT_RE.sub("", t) for t in texts)
    cpp_of = {py: cpp.split("::")[-1] for py, cpp in _PYBIND_RE.findall(code)}
    out: dict[str, list[str]] = {}
    for py, params in _SCHEMA_RE.findall(code):
        if py in names:
            out[py] = [_SCHEMA_TYPES.get(p.strip().split()[0].split("(")[0].rstrip("?"), p.strip().split()[0]) for p in _split_params(params)]
    wanted = {cpp_of.get(n, n): n for n in names if n not in out}
    for m in _SIGNATURE_RE.finditer(code):
        ret, name, params = m.group(1), m.group(2), m.group(3)
        if name not in wanted or not _host_function(ret):
            continue
        out.setdefault(wanted[name], [_param_type(p) for p in _split_params(params)])
    return out


_DISPATCH_RE = re.compile(r"\bAT_DISPATCH_(\w+?)\s*\(")
FLOATING_DISPATCH = "scalar_t of a floating dispatch"


def cpp_element_types(texts: list[str], names: set[str]) -> dict[str, dict[int, tuple[set[str], int, int]]]:
    """For each bound function `names` (Python names): parameter position -> (the element types its
    body reads the tensor parameter as, the index of the source text and the line in it of the
    first such read): `offsets.data_ptr<int>()` -> ({'int'}, 0, 12). Only the bound function's
    own definition is read. `data_ptr<scalar_t>()` counts where every dispatch in the body is a
    floating one (AT_DISPATCH_FLOATING_TYPES, with or without _AND Half/BFloat16), as the type
    FLOATING_DISPATCH: some floating type; under any other dispatch it is left out."""
    blank = [_COMMENT_RE.sub(lambda c: re.sub(r"[^\n]", " ", c.group(0)), t) for t in texts]  # offsets kept
    code = "\n".join(blank)
    starts = [0]
    for t in blank:
        starts.append(starts[-1] + len(t) + 1)
    cpp_of = {py: cpp.split("::")[-1] for py, cpp in _PYBIND_RE.findall(code)}
    wanted = {cpp_of.get(n, n): n for n in names}
    out: dict[str, dict[int, tuple[set[str], int, int]]] = {}
    for m in _SIGNATURE_RE.finditer(code):
        ret, name = m.group(1), m.group(2)
        if name not in wanted or not m.group(0).rstrip().endswith("{") or not _host_function(ret):
            continue
        open_at = m.end() - 1
        end = match_close(code, open_at)
        for position, param in enumerate(_split_params(m.group(3))):
            pname = re.search(r"(\w+)\s*$", param.split("=")[0].strip())
            if not pname or "Tensor" not in param:
                continue
            body = code[open_at:end]
            dispatches = set(_DISPATCH_RE.findall(body))
            floating = bool(dispatches) and all(d.startswith("FLOATING_TYPES") for d in dispatches)
            reads = [r for r in re.finditer(rf"\b{pname.group(1)}\s*\.\s*(?:mutable_|const_)?data_ptr\s*<\s*([\w:]+(?:\s+[\w:]+)*)\s*>", body)
                     if r.group(1) != "scalar_t" or floating]
            if reads:
                at = open_at + reads[0].start()
                index = max(i for i, s0 in enumerate(starts[:-1]) if s0 <= at)
                line = code.count("\n", starts[index], at) + 1
                types = {FLOATING_DISPATCH if r.group(1) == "scalar_t" else " ".join(r.group(1).split()) for r in reads}
                out.setdefault(wanted[name], {})[position] = (types, index, line)
    return out
