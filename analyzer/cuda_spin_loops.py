"""Spin loops: where device code polls memory until a peer (or another block) writes it.

A loop whose condition reads memory through a pointer (a subscript, a deref, an atomic, a load
intrinsic, a `cuda::atomic_ref` load or wait, or a device helper that reads its argument) is a
spin loop, with the kind it polls, the read's order, and whether anything bounds it (a break,
return or trap, a clock, an iteration counter). `while (true) { if (poll) break; ... }` counts
too, its poll being the guard of the break.

`SpinLoopScan` is a mixin of the clang pass (analyzer/clang_pass.py): it reads the copied tree
and `helper_reads` (filled by `AccessScan.record`) and writes `facts.spin_loops`.
"""

from __future__ import annotations

import re

from analyzer import ptx_ops
from analyzer.clang_ast import LOOP_KINDS, FuncNode, Node, unwrap
from analyzer.cuda_calls import ATOMIC_RE, CLOCK_NAMES, LOAD_INTRINSICS
from analyzer.cuda_pointers import ARRAY_KINDS, KIND_PRIORITY
from analyzer.cuda_text import split_top, string_literals
from pkb.facts import SpinLoop


class SpinLoopScan:
    """Spin-loop facts (see the module docstring)."""

    def loop_parts(self, n: Node) -> tuple[list[Node], Node | None]:
        """(condition nodes, body) of a loop."""
        if n.kind == "WHILE_STMT":
            return n.kids[:-1], n.kids[-1] if n.kids else None
        if n.kind == "DO_STMT":
            return n.kids[1:], n.kids[0] if n.kids else None
        if n.kind == "FOR_STMT":
            text = self.text_of(n)
            o = text.find("(")
            parts = split_top(text[o + 1:], ";") if o >= 0 else []
            if len(parts) < 3:
                return [], n.kids[-1] if n.kids else None
            cs = n.so + len(text[: o + 1 + len(parts[0]) + 1].encode())
            ce = cs + len(parts[1].encode())
            conds = [k for k in n.kids[:-1] if cs <= k.so < ce]
            return conds, n.kids[-1] if n.kids else None
        return [], None

    def reads_memory(self, cond: Node) -> tuple[str, str, bool] | None:
        """(polled kind, order, cached) if evaluating `cond` reads memory through a pointer; cached
        when the read is a plain (not volatile) subscript or dereference, or goes through the
        non-coherent or L1-cached path (`__ldg`, `__ldca`): the compiler may keep such a value in
        a register across iterations and the cache may keep serving it, so the loop need never see
        a peer's store. A volatile, atomic, `__ldcv`/`__ldcg` or helper read goes to memory."""
        best = None
        for x in cond.walk():
            got = None
            if x.kind in ("ARRAY_SUBSCRIPT_EXPR",) and len(x.kids) >= 2:
                pk = self.eval(x.kids[0])[0]
                if pk not in ARRAY_KINDS and "load" in self.uses(x):
                    volatile = self.is_volatile(x)
                    got = (pk, "volatile" if volatile else "relaxed", not volatile)
            elif x.kind == "UNARY_OPERATOR" and x.kids and self.unary_op(x) == "*":
                pk = self.eval(x.kids[0])[0]
                if pk not in ARRAY_KINDS and "load" in self.uses(x):
                    volatile = self.is_volatile(x)
                    got = (pk, "volatile" if volatile else "relaxed", not volatile)
            elif x.kind == "CALL_EXPR":
                args = self.call_args(x)
                nm = x.spelling
                if ATOMIC_RE.match(nm) and args:
                    got = (self.eval(args[0])[0], "atomic", False)
                elif nm in LOAD_INTRINSICS and args:
                    got = (self.eval(args[0])[0], "volatile" if nm == "__ldcv" else "relaxed", nm in ("__ldg", "__ldca"))
                elif nm in ("load", "wait") and x.kids and x.kids[0].kind == "MEMBER_REF_EXPR":
                    obj = self.call_object(x)
                    if obj is not None and "atomic" in obj.type.spelling:
                        order = "seq_cst"
                        for a in args:
                            for y in a.walk():
                                if y.spelling.startswith("memory_order_"):
                                    order = y.spelling[len("memory_order_"):]
                        ptr_kind = "unknown"
                        o = unwrap(obj)
                        ent = self.atomic_refs.get(self.key_of_ref(o)) if o.kind == "DECL_REF_EXPR" else None
                        tgt = ent[0] if ent else (self.call_args(o)[0] if o.kind == "CALL_EXPR" and self.call_args(o) else None)
                        if tgt is not None:
                            t = unwrap(tgt)
                            ptr_kind = self.eval(t.kids[0] if t.kids and t.kind in ("ARRAY_SUBSCRIPT_EXPR", "UNARY_OPERATOR") else t)[0]
                        got = (ptr_kind, "relaxed" if order == "relaxed" else "acquire", False)
                elif nm in self.helper_reads:
                    for i, order in self.helper_reads[nm].items():
                        if i < len(args):
                            got = (self.eval(args[i])[0], order, False)
                            break
            if got is not None:
                if best is None or KIND_PRIORITY.get(got[0], 0) > KIND_PRIORITY.get(best[0], 0):
                    best = got
        return best

    def mentions_bound(self, cond: Node, body: Node | None) -> bool:
        """The condition tests a clock or an iteration counter."""
        modified = set()
        scope = [cond] + ([body] if body is not None else [])
        for s in scope:
            for x in s.walk():
                if x.kind in ("UNARY_OPERATOR", "COMPOUND_ASSIGNMENT_OPERATOR") and x.kids:
                    if x.kind == "COMPOUND_ASSIGNMENT_OPERATOR" or self.unary_op(x) in ("++", "--"):
                        t = unwrap(x.kids[0])
                        if t.kind == "DECL_REF_EXPR":
                            modified.add(t.spelling)
        for x in cond.walk():
            if x.kind in ("CALL_EXPR", "DECL_REF_EXPR") and x.spelling in CLOCK_NAMES:
                return True
            if x.kind == "ASM_STMT" and "globaltimer" in self.text_of(x):
                return True
            if x.kind == "DECL_REF_EXPR" and x.spelling in modified:
                try:
                    if x.type.kind.name != "POINTER":
                        return True
                except Exception:
                    return True
        return False

    def exits_in(self, body: Node) -> list[Node]:
        """break/return/trap statements that leave this loop."""
        out = []

        def visit(x: Node, nested: bool):
            if x.kind == "BREAK_STMT" and not nested:
                out.append(x)
            elif x.kind == "RETURN_STMT" or (x.kind == "CALL_EXPR" and x.spelling in ("__trap", "abort", "__brkpt")):
                out.append(x)
            elif x.kind == "ASM_STMT" and ptx_ops.exits(string_literals(self.text_of(x))):
                out.append(x)
            elif x.kind == "GOTO_STMT":
                out.append(x)
            for ch in x.kids:
                visit(ch, nested or x.kind in LOOP_KINDS or x.kind == "SWITCH_STMT")

        visit(body, False)
        return out

    def guarding_if(self, x: Node, body: Node) -> Node | None:
        p = x.parent
        while p is not None and p is not body:
            if p.kind == "IF_STMT" and p.kids:
                return p.kids[0]
            p = p.parent
        return None

    def modified_names(self, body: Node | None) -> set[str]:
        """Local names a loop body assigns or increments."""
        out: set[str] = set()
        for x in body.walk() if body is not None else []:
            if x.kind in ("UNARY_OPERATOR", "COMPOUND_ASSIGNMENT_OPERATOR", "BINARY_OPERATOR") and x.kids:
                if x.kind == "COMPOUND_ASSIGNMENT_OPERATOR" or (x.kind == "UNARY_OPERATOR" and self.unary_op(x) in ("++", "--")) \
                        or (x.kind == "BINARY_OPERATOR" and re.match(r"[^=]*[^=!<>]=[^=]", self.text_of(x) or "")):
                    t = unwrap(x.kids[0])
                    if t.kind == "DECL_REF_EXPR":
                        out.add(t.spelling)
        return out

    def is_search_loop(self, cond: Node, body: Node | None) -> bool:
        """`while (i < n && i >= offsets[i + 1]) i++;`: every memory read of the condition is a
        plain subscript whose index the body moves, so each test reads a new element; a poll
        rereads one address until another agent writes it."""
        moved = self.modified_names(body)
        reads = [x for x in cond.walk() if x.kind == "ARRAY_SUBSCRIPT_EXPR" and len(x.kids) >= 2]
        if not moved or not reads or any(x.kind == "CALL_EXPR" or (x.kind == "UNARY_OPERATOR" and self.unary_op(x) == "*")
                                         for x in cond.walk()):
            return False
        return all(any(y.kind == "DECL_REF_EXPR" and y.spelling in moved for y in r.kids[1].walk()) for r in reads)

    def scan_loop(self, f: FuncNode, n: Node) -> None:
        conds, body = self.loop_parts(n)
        cond = conds[0] if conds else None
        polled = self.reads_memory(cond) if cond is not None else None
        if polled is not None and self.is_search_loop(cond, body):
            return
        if polled is not None:
            has_exit = bool(body is not None and self.exits_in(body)) or self.mentions_bound(cond, body)
            self.facts.spin_loops.append(SpinLoop(line=self.line(n), function=f.name, condition=self.snippet(cond),
                                                  has_exit=has_exit, polls=polled[0], order=polled[1],
                                                  cached=polled[2]))
            return
        const_true = cond is None or re.fullmatch(r"\s*(true|1|!0)\s*", self.text_of(cond) or "") is not None
        if not const_true or body is None:
            return
        # while (true) { if (poll) break; ... }: the poll is the guard of a break
        exits = self.exits_in(body)
        poll_exit = None
        other_exit = False
        for e in exits:
            g = self.guarding_if(e, body)
            r = self.reads_memory(g) if g is not None else None
            if r is not None and poll_exit is None:
                poll_exit = (g, r)
                if self.mentions_bound(g, body):
                    other_exit = True
            elif e.kind != "BREAK_STMT" or r is None:
                other_exit = True
        if poll_exit is None or self.is_search_loop(poll_exit[0], body):
            return  # `while (true) { if (keys[slot] == k) break; slot = (slot + 1) % n; }`: a probe
        if any(x.kind == "CALL_EXPR" and x.spelling in CLOCK_NAMES for x in body.walk()):
            other_exit = other_exit or any(
                (g := self.guarding_if(e, body)) is not None and self.mentions_bound(g, body) for e in exits)
        g, r = poll_exit
        self.facts.spin_loops.append(SpinLoop(line=self.line(n), function=f.name, condition=self.snippet(g),
                                              has_exit=other_exit, polls=r[0], order=r[1], cached=r[2]))
