"""Reachability from solution(): the call graph of the file's functions, methods, classes and
instances, and for every call the route it runs on (timed on every call, set-up behind a cache
guard, fallback on a branch the run skips, at import, or never), whether it is rank-conditional,
in a loop, or under a side stream.

Reads the parsed file; cache guards come from python_cache, the run's branches from python_run.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from analyzer.python_api import SYMM_HANDLE_ATTRS, SYMM_HANDLE_METHODS


# A comment or function name by which a candidate calls a branch its fallback.
_FALLBACK_WORDS = re.compile(r"\bfall(s|ing)?[\s-]?back\b", re.I)
_FALLBACK_FUNCTION = re.compile(r"fallback|^_*reference|_ref$", re.I)

# Path ranks: a call reached by several routes keeps the one that runs most often.
_PATH_RANK = {"unreached": 0, "module": 0, "fallback": 1, "setup": 2, "timed": 3}


@dataclass
class CallContext:
    """Where a call runs: its function, its route (timed, setup, fallback), and whether it is
    rank-conditional, in a loop, or under a side stream."""

    function: str
    path: str
    rank_conditional: bool = False
    in_loop: bool = False
    stream: str = ""


def _ctx_on(ctx: CallContext, path: str) -> CallContext:
    return CallContext(ctx.function, path, ctx.rank_conditional, ctx.in_loop, ctx.stream)


class Reachability:
    """The call graph and the route of every call (a mixin of PythonPass)."""

    def _enclosing_functions(self) -> dict[int, ast.AST]:
        out: dict[int, ast.AST] = {}
        for fn in ast.walk(self.tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(fn):
                    out.setdefault(id(sub), fn)
        # walk() visits outer functions first; inner functions must win, so redo inner ones
        for fn in ast.walk(self.tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(fn):
                    if inner is not fn and isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        for sub in ast.walk(inner):
                            out[id(sub)] = inner
        return out

    def enclosing_fn(self, node: ast.AST) -> ast.AST | None:
        return self.enclosing.get(id(node))

    def _local_callee(self, call: ast.Call, fn: ast.AST | None = None) -> ast.AST | None:
        """The file's function that `call` runs: a plain function, a method reached through `self`,
        an instance of a file class (its method or `__call__`), a class (its `__init__`), or an
        autograd Function's `apply` (its `forward`)."""
        f = call.func
        if isinstance(f, ast.Name) and f.id in self.triton_names:
            return None
        if isinstance(f, ast.Name):
            if f.id in self.classes:
                return self.classes[f.id].get("__init__")
            if f.id in self.instances:
                return self.classes[self.instances[f.id]].get("__call__")
            return self.functions.get(f.id)
        if not isinstance(f, ast.Attribute) or f.attr in self.ext_functions and not self._is_handle_receiver(f.value):
            return None
        owner = f.value
        cls = ""
        if isinstance(owner, ast.Name) and owner.id in self.classes:
            cls = owner.id
            if f.attr == "apply" and "forward" in self.classes[cls]:
                return self.classes[cls]["forward"]
        elif isinstance(owner, ast.Name) and owner.id in ("self", "cls") and fn is not None:
            cls = self.method_class.get(id(fn), "")
        elif isinstance(owner, ast.Name) and owner.id in self.instances:
            cls = self.instances[owner.id]
        elif isinstance(owner, ast.Attribute) and "*." + owner.attr in self.instances:
            cls = self.instances["*." + owner.attr]
        if cls and f.attr in self.classes.get(cls, {}):
            return self.classes[cls][f.attr]
        if isinstance(owner, (ast.Name, ast.Attribute)) and not cls and f.attr in SYMM_HANDLE_METHODS:
            return None  # hdl.barrier(): the handle's method, not a same-named function of the file
        if f.attr in self.functions and f.attr not in self.ext_functions:
            return self.functions[f.attr]
        return None

    def _callees_of(self, node: ast.AST) -> dict[str, ast.AST]:
        """The file's functions that `node` calls, directly or through each other."""
        found: dict[str, ast.AST] = {}
        todo = [node]
        while todo:
            for sub in ast.walk(todo.pop()):
                if isinstance(sub, ast.Call):
                    callee = self._local_callee(sub, self.enclosing_fn(sub))
                    name = getattr(callee, "name", None)
                    if callee is not None and name and name not in found:
                        found[name] = callee
                        todo.append(callee)
        return found

    def _reachability(self) -> None:
        """Which functions run on every call of solution(), and which only once."""
        sol = self.functions.get("solution")
        self.stmt_ctx: dict[int, CallContext] = {}  # id(call node) -> context
        if sol is None:
            return
        self._visit_function(sol, "timed", False, set())

    def _visit_function(self, fn: ast.AST, path: str, rank_cond: bool, stack: set[str]) -> None:
        name = getattr(fn, "name", "")
        # Keyed by the definition: two autograd Functions each have a `forward`.
        visited = self.path_of_def
        prev = visited.get(id(fn))
        if (prev is not None and _PATH_RANK[prev] >= _PATH_RANK[path]) or name in stack:
            return
        decos = [self.qualname(d.func if isinstance(d, ast.Call) else d) for d in getattr(fn, "decorator_list", [])]
        if path == "timed" and any(d.split(".")[-1] in ("lru_cache", "cache", "cached_property") for d in decos):
            path = "setup"
            self.caching_fns.add(name)
            if prev is not None and _PATH_RANK[prev] >= _PATH_RANK[path]:
                return
        visited[id(fn)] = path
        if name not in self.path_of or _PATH_RANK[self.path_of[name]] < _PATH_RANK[path]:
            self.path_of[name] = path
        ctx = CallContext(function=name, path=path, rank_conditional=rank_cond)
        self._visit_block(fn.body, ctx, fn, stack | {name})  # type: ignore[attr-defined]

    def _visit_block(self, body: list[ast.stmt], ctx: CallContext, fn: ast.AST, stack: set[str]) -> None:
        current = ctx
        for i, stmt in enumerate(body):
            if self._is_early_return_hit(stmt) and self._is_cache_guard_early(stmt, body[i + 1 :], fn):
                self.caching_fns.add(getattr(fn, "name", ""))
                self._visit_stmt(stmt, current, fn, stack)
                if current.path == "timed":
                    current = _ctx_on(current, "setup")
                continue
            self._visit_stmt(stmt, current, fn, stack)
            # `if dtype is torch.bfloat16: ...; return out`: on the run the rest never runs.
            if isinstance(stmt, ast.If) and current.path != "fallback" and self._exits_on_run(stmt.body, fn) \
                    and self.run_value(stmt.test, fn) is True:
                current = _ctx_on(current, "fallback")
                self._mark_fallback(body[i + 1 :])

    def _visit_stmt(self, stmt: ast.stmt, ctx: CallContext, fn: ast.AST, stack: set[str]) -> None:
        if isinstance(stmt, ast.If):
            self._visit_expr(stmt.test, ctx, fn, stack)
            body_ctx, else_ctx = ctx, ctx
            if ctx.path == "timed" and self._is_cache_guard(stmt.test, stmt.body, fn):
                body_ctx = _ctx_on(ctx, "setup")
                self.caching_fns.add(getattr(fn, "name", ""))
            taken = self.run_value(stmt.test, fn) if ctx.path != "fallback" else None
            if taken is None and ctx.path != "fallback" and self._declared_fallback(stmt) and self._exits_on_run(stmt.body, fn):
                taken = False  # the candidate's own early-exit fallback: the rest of the function is the run's path
            if taken is True:
                else_ctx = _ctx_on(else_ctx, "fallback")
                self._mark_fallback(stmt.orelse)
            elif taken is False:
                body_ctx = _ctx_on(body_ctx, "fallback")
                self._mark_fallback(stmt.body)
            if self._is_rank_test(stmt.test, fn):
                body_ctx = CallContext(body_ctx.function, body_ctx.path, True, body_ctx.in_loop, body_ctx.stream)
                else_ctx = CallContext(else_ctx.function, else_ctx.path, True, else_ctx.in_loop, else_ctx.stream)
            self._visit_block(stmt.body, body_ctx, fn, stack)
            self._visit_block(stmt.orelse, else_ctx, fn, stack)
            return
        if isinstance(stmt, (ast.For, ast.While, ast.AsyncFor)):
            head = stmt.iter if isinstance(stmt, (ast.For, ast.AsyncFor)) else stmt.test
            self._visit_expr(head, ctx, fn, stack)
            loop_ctx = CallContext(ctx.function, ctx.path, ctx.rank_conditional, True, ctx.stream)
            self._visit_block(stmt.body, loop_ctx, fn, stack)
            self._visit_block(stmt.orelse, ctx, fn, stack)
            if ctx.path == "timed":
                self.loop_nodes.append((stmt, ctx.function))
            return
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            inner = ctx
            for item in stmt.items:
                self._visit_expr(item.context_expr, ctx, fn, stack)
                q = self.qualname(item.context_expr.func) if isinstance(item.context_expr, ast.Call) else ""
                if q.endswith("cuda.stream") or q.endswith(".stream"):
                    inner = CallContext(ctx.function, ctx.path, ctx.rank_conditional, ctx.in_loop, ast.unparse(item.context_expr))
            self._visit_block(stmt.body, inner, fn, stack)
            return
        if isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody):
                self._visit_block(block, ctx, fn, stack)
            for h in stmt.handlers:
                self._visit_block(h.body, ctx, fn, stack)
            return
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return  # a nested definition runs when called, not here
        if isinstance(stmt, ast.Return):
            self._set_ctx(stmt, ctx)
        self._visit_expr(stmt, ctx, fn, stack)

    def _visit_expr(self, node: ast.AST, ctx: CallContext, fn: ast.AST, stack: set[str]) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                self._set_ctx(sub, ctx)
                callee = self._local_callee(sub, fn)
                if callee is not None:
                    # `helper(x, grp) if grp is not None else x` with grp None on the run: the
                    # helper runs only on the branch the run skips, so all it reaches is fallback.
                    path = "fallback" if ctx.path != "fallback" and self.in_untaken_ifexp(sub) else ctx.path
                    self._visit_function(callee, path, ctx.rank_conditional, stack)
            elif isinstance(sub, ast.Attribute) and sub.attr in SYMM_HANDLE_ATTRS:
                self._set_ctx(sub, ctx)

    def _set_ctx(self, node: ast.AST, ctx: CallContext) -> None:
        # A call reached both from set-up (or a fallback) and per call runs per call.
        old = self.stmt_ctx.get(id(node))
        if old is None or _PATH_RANK[ctx.path] > _PATH_RANK[old.path]:
            self.stmt_ctx[id(node)] = ctx

    def _exits_on_run(self, body: list[ast.stmt], fn: ast.AST | None) -> bool:
        """The block returns or raises on the run's route (branches it does not take ignored)."""
        if not body:
            return False
        last = body[-1]
        if isinstance(last, (ast.Return, ast.Raise)):
            return True
        if isinstance(last, ast.If):
            taken = self.run_value(last.test, fn)
            if taken is True:
                return self._exits_on_run(last.body, fn)
            if taken is False:
                return self._exits_on_run(last.orelse, fn)
            return self._exits_on_run(last.body, fn) and self._exits_on_run(last.orelse, fn)
        return False

    def _declared_fallback(self, stmt: ast.If) -> bool:
        """An `if` the candidate itself calls its fallback: a comment saying so directly above it,
        on its test's lines or before its first statement (`# Fallback to NCCL for other dtypes`),
        or a body that calls a function of the file named as one (`_fallback_all_gather`,
        `_reference_solution`). Models mark the path they did not write for the benchmark so;
        the guard it sits under is one the run's inputs (shapes, sizes) leave undecided here."""
        first = stmt.body[0].lineno if stmt.body else stmt.lineno
        above = stmt.lineno - 1
        lines = []
        while above >= 1 and len(lines) < 3 and self.lines[above - 1].strip().startswith("#"):
            lines.append(self.lines[above - 1])
            above -= 1
        lines += self.lines[stmt.lineno - 1:first - 1]
        lines += [ln for ln in self.lines[first - 1:first + 1] if ln.strip().startswith("#")]
        if any(_FALLBACK_WORDS.search(ln.partition("#")[2]) for ln in lines if "#" in ln):
            return True
        for node in (n for b in stmt.body for n in ast.walk(b)):
            if isinstance(node, ast.Call):
                name = getattr(self._local_callee(node, self.enclosing_fn(node)), "name", "")
                if name and _FALLBACK_FUNCTION.search(name):
                    return True
        return False

    def _mark_fallback(self, block: list[ast.stmt]) -> None:
        if block:
            self.fallback_ranges.append((block[0].lineno, max(getattr(b, "end_lineno", b.lineno) or b.lineno for b in block)))

    def _in_fallback(self, line: int) -> tuple[int, int] | None:
        return next((r for r in self.fallback_ranges if r[0] <= line <= r[1]), None)

    def _is_rank_test(self, test: ast.AST, fn: ast.AST | None) -> bool:
        scope = self._scope_for(fn)
        for node in ast.walk(test):
            if isinstance(node, ast.Compare) and any(self._is_rank_expr(x, scope) for x in [node.left, *node.comparators]):
                return True
            if isinstance(node, ast.Name) and node is test and self._is_rank_expr(node, scope):
                return True
        return False
