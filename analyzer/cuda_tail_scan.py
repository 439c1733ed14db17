"""Tail handling in kernels: bounds checks against a size parameter, and tiles that assume one.

A kernel that compares a thread index with an integer parameter is bounds-checked; a kernel that
divides a size parameter by a constant (or casts to a vector type) tiles the work, and without a
remainder, min/max or comparison on the size its tail elements are never handled.

`TailScan` is a mixin of the clang pass (analyzer/clang_pass.py): it reads a kernel's copied
tree and writes `facts.bounds_checked` and `facts.unguarded_tiles` (read by rule PKB006).
"""

from __future__ import annotations

from analyzer.clang_ast import FuncNode, Node, unwrap
from analyzer.cuda_calls import VECTOR_TYPE_RE


class TailScan:
    """Bounds-check and unguarded-tile facts (see the module docstring)."""

    def scan_tail(self, f: FuncNode) -> None:
        int_params = set()
        for p in f.params:
            try:
                tk = p.type.get_canonical().kind.name
            except Exception:
                tk = ""
            if tk in ("INT", "UINT", "LONG", "ULONG", "LONGLONG", "ULONGLONG", "SHORT", "USHORT"):
                int_params.add(p.spelling)
        index_vars: set[str] = set()
        derived: dict[str, str] = {}  # local -> param it is computed from
        for x in f.body.walk():
            if x.kind == "VAR_DECL":
                names = {y.spelling for y in x.walk() if y.kind in ("DECL_REF_EXPR", "MEMBER_REF_EXPR")}
                if names & ({"threadIdx", "blockIdx"} | index_vars):
                    index_vars.add(x.spelling)
                for pn in names & int_params:
                    derived.setdefault(x.spelling, pn)
        idx_names = index_vars | {"threadIdx", "blockIdx"}

        def refs(x: Node) -> set[str]:
            return {y.spelling for y in x.walk() if y.kind in ("DECL_REF_EXPR", "MEMBER_REF_EXPR")}

        def direct_refs(x: Node) -> set[str]:
            """Names used not under a division or shift (n itself, not n / 4)."""
            out = set()

            def visit(y: Node, under_div: bool):
                if y.kind == "BINARY_OPERATOR" and self.binop(y) in ("Div", "Shr"):
                    under_div = True
                if y.kind == "DECL_REF_EXPR" and not under_div:
                    out.add(y.spelling)
                for ch in y.kids:
                    visit(ch, under_div)

            visit(x, False)
            return out

        counts = int_params | set(derived)
        checked = False
        guarded_tail = False
        tiles: list[Node] = []
        for x in f.body.walk():
            if x.kind == "BINARY_OPERATOR" and len(x.kids) == 2:
                op = self.binop(x)
                if op in ("LT", "LE", "GT", "GE"):
                    a, b = refs(x.kids[0]), refs(x.kids[1])
                    if (a & idx_names and b & counts) or (b & idx_names and a & counts):
                        checked = True
                    da, db = direct_refs(x.kids[0]), direct_refs(x.kids[1])
                    if (da | db) & int_params:
                        guarded_tail = True
                elif op == "Rem" and refs(x) & counts:
                    guarded_tail = True
                elif op in ("Div", "Shr"):
                    lhs, rhs = refs(x.kids[0]), unwrap(x.kids[1])
                    const_rhs = rhs.kind == "INTEGER_LITERAL" or (rhs.kind == "DECL_REF_EXPR" and rhs.ref is not None and rhs.ref.kind.name in ("NON_TYPE_TEMPLATE_PARAMETER", "VAR_DECL", "ENUM_CONSTANT_DECL") and rhs.spelling not in int_params)
                    if lhs & int_params and const_rhs:
                        tiles.append(x)
            elif x.kind in ("CXX_REINTERPRET_CAST_EXPR", "CSTYLE_CAST_EXPR"):
                try:
                    ts = x.type.spelling
                except Exception:
                    ts = ""
                if "*" in ts and VECTOR_TYPE_RE.search(ts):
                    tiles.append(x)
            elif x.kind == "CALL_EXPR" and x.spelling in ("min", "max") and refs(x) & int_params:
                guarded_tail = True
        if checked:
            self.facts.bounds_checked.append(f.name)
        if tiles and not guarded_tail:
            for t in tiles:
                ln = self.line(t)
                if ln not in self.facts.unguarded_tiles:
                    self.facts.unguarded_tiles.append(ln)
