"""Caches that outlive a call: the guards that make a branch run once (`if _ext is None:`,
`if key not in _cache:`, an early return of a cached value), and solution()'s returns whose
buffer is kept between calls (a symmetric buffer, a cached or global tensor, or a view of one).

Reads the parsed file, the routes python_reach gave each statement, and the pointer kinds.
"""

from __future__ import annotations

import ast

from pkb.facts import ReusedReturn

from analyzer.python_api import dotted


def _base_name(node: ast.AST) -> str:
    """The variable an expression reads through (`st` of `st["buf"].numel()`), or ''."""
    while isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


class CacheState:
    """Set-up detection and reused returned buffers (a mixin of PythonPass)."""

    _module_containers: set[str] | None = None  # filled on first use (one parsed file per pass)

    def _is_cache_guard(self, test: ast.AST, body: list[ast.stmt], fn: ast.AST | None = None, early: bool = False) -> bool:
        """`if _ext is None:` / `if key not in _cache:` / `if not self._ready:` whose body fills it.

        The test may name a local read from the cache first (`res = _cache.get(key)` then
        `if res is not None: return res`): the local stands for the cache it was read from."""
        names: set[str] = set()
        t = test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else test
        if isinstance(t, ast.Name) and fn is not None and t.id not in self.global_names:
            # `needs_realloc = (counts > _caps).any().item() or D != _cur_D; if needs_realloc:`:
            # a local flag stands for the comparisons it was computed from
            names |= self._compared_names(t, fn)
        if isinstance(t, ast.BoolOp):
            parts = t.values
        else:
            parts = [t]
        for p in parts:
            if isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.Not):
                p = p.operand
            if isinstance(p, ast.Compare):
                for side in [p.left, *p.comparators]:
                    d = dotted(side)
                    if d:
                        names.add(d)
                    base = _base_name(side)
                    if base and base != d:
                        names.add(base)  # `need > st["buf"].numel()`: a test of what `st` holds
            elif isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id == "hasattr":
                if p.args:
                    names.add(dotted(p.args[0]))
            else:
                d = dotted(p)
                if d:
                    names.add(d)
        aliases: set[str] = set()  # locals read from a cache: storing into them fills the cache
        if fn is not None:
            for n in list(names):
                if "." not in n and n not in self.global_names:
                    reads = self._cache_reads(n, fn)
                    names |= reads
                    if reads:
                        aliases.add(n)
        # Module globals, attributes of self/cls, and attributes of the file's functions and
        # classes (`solution._state`, `hasattr(solution, "mgr")`) outlive the call.
        module_defs = {n.name for n in self.tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        cached = {n for n in names if n.split(".")[0] in self.global_names or n.startswith("self.") or n.split(".")[0] in ("cls",)
                  or ("." in n or n in module_defs) and n.split(".")[0] in module_defs}
        if not cached:
            # `if st is None or st["cap"] < need: st = _alloc(...)` on a helper's parameter: a miss
            # of a cache the body (or a helper it calls) fills at module level
            # (not for an early return: there `body` is the rest of the function, not the miss)
            return not early and self._tests_none(t) and self._fills_module_cache(body)
        for stmt in body:
            for node in ast.walk(stmt):
                targets: list[ast.AST] = []
                if isinstance(node, ast.Assign):
                    targets = node.targets
                elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                    targets = [node.target]
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("update", "setdefault", "append", "add"):
                    targets = [node.func.value]
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
                    targets = node.args[:1]
                for tg in targets:
                    if isinstance(tg, (ast.Subscript, ast.Attribute)) and _base_name(tg) in aliases:
                        return True  # `st["buf"] = bigger`: the cached entry grows in place
                    for sub in ast.walk(tg):
                        d = dotted(sub) if isinstance(sub, (ast.Name, ast.Attribute)) else ""
                        if d and any(d == n or n.startswith(d + ".") or d.startswith(n) for n in cached):
                            return True
                # `if _ext is None: _get_ext(); dist.barrier()`: a helper of the file fills the global.
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.functions:
                    helper = self.functions[node.func.id]
                    declared = {g for n in ast.walk(helper) if isinstance(n, ast.Global) for g in n.names}
                    if any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id in declared & cached for t in n.targets)
                           for n in ast.walk(helper)):
                        return True
        return False

    def _compared_names(self, flag: ast.Name, fn: ast.AST, depth: int = 0) -> set[str]:
        """The module-level names compared in the one expression a local flag is assigned (and in
        the locals that expression reads, two levels)."""
        value = self._single_assignment(flag.id, fn) if depth < 3 else None
        if value is None:
            return set()
        found: set[str] = set()
        for node in ast.walk(value):
            if isinstance(node, ast.Compare):
                for side in [node.left, *node.comparators]:
                    for sub in ast.walk(side):
                        d = dotted(sub) if isinstance(sub, (ast.Name, ast.Attribute)) else ""
                        if d and d.split(".")[0] in self.global_names:
                            found.add(d)
            elif isinstance(node, ast.Name) and node.id not in self.global_names and node.id != flag.id:
                found |= self._compared_names(node, fn, depth + 1)
        return found

    @staticmethod
    def _tests_none(test: ast.AST) -> bool:
        """`x is None`, alone or as one operand of an `or`."""
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
        return any(isinstance(p, ast.Compare) and len(p.ops) == 1 and isinstance(p.ops[0], ast.Is)
                   and isinstance(p.comparators[0], ast.Constant) and p.comparators[0].value is None for p in parts)

    def _fills_module_cache(self, body: list[ast.stmt], depth: int = 0) -> bool:
        """A store into a module-level container (`_state[key] = st`, `_cache.update(...)`) in
        `body`, or in a function of the file that `body` calls (two levels)."""
        if self._module_containers is None:  # names bound at module level to a dict, list or constructor
            self._module_containers = {t.id for n in self.tree.body if isinstance(n, ast.Assign) for t in n.targets
                                       if isinstance(t, ast.Name) and isinstance(n.value, (ast.Dict, ast.List, ast.Call))}
        module_containers = self._module_containers
        for stmt in body:
            for node in ast.walk(stmt):
                if isinstance(node, ast.Assign) and any(
                        isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in module_containers
                        for t in node.targets):
                    return True
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("update", "setdefault") \
                        and isinstance(node.func.value, ast.Name) and node.func.value.id in module_containers:
                    return True
                if depth < 2 and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.functions \
                        and self._fills_module_cache(self.functions[node.func.id].body, depth + 1):
                    return True
        return False

    def _cache_reads(self, local: str, fn: ast.AST) -> set[str]:
        """Globals and attributes a local is read from: `x = _cache.get(k)`, `x = _cache[k]`,
        `x = getattr(self, "_st", None)`, `x = self._state`."""
        out: set[str] = set()
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == local for t in node.targets)):
                continue
            v = node.value
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in ("get", "setdefault"):
                v = v.func.value
            elif isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "getattr" and v.args:
                v = v.args[0]
            elif isinstance(v, ast.Subscript):
                v = v.value
            d = dotted(v) if isinstance(v, (ast.Name, ast.Attribute)) else ""
            if d:
                out.add(d)
        return out

    @staticmethod
    def _is_early_return_hit(stmt: ast.stmt) -> bool:
        """`if key in _cache: return _cache[key]` / `if _ext is not None: return _ext`."""
        if not isinstance(stmt, ast.If) or stmt.orelse:
            return False
        # The hit branch returns (possibly after checking the cached entry still fits).
        return any(isinstance(n, ast.Return) for n in ast.walk(stmt))

    def _is_cache_guard_early(self, stmt: ast.If, rest: list[ast.stmt], fn: ast.AST | None = None) -> bool:
        return self._is_cache_guard(stmt.test, rest, fn, early=True)

    _VIEWS = ("view", "reshape", "reshape_as", "view_as", "narrow", "flatten", "squeeze", "unsqueeze", "t",
              "transpose", "permute", "as_strided", "contiguous", "unflatten", "expand", "expand_as", "detach",
              "select", "split", "chunk", "unbind", "__getitem__")

    # Functions that return views of their first argument.
    _VIEW_FUNCS = ("_unflatten_dense_tensors", "split", "chunk", "unbind", "narrow", "tensor_split")

    def _reused_returns(self) -> None:
        """solution()'s per-call returns whose value outlives the call: a symmetric buffer, or a
        buffer it keeps in a cache, a global or an attribute (or a view of one)."""
        sol = self.functions.get("solution")
        if sol is None:
            return
        seen: set[int] = set()
        todo: list[tuple[ast.AST, int]] = [(sol, 0)]
        while todo:
            fn, depth = todo.pop()
            for node in ast.walk(fn):
                if not isinstance(node, ast.Return) or node.value is None or self.enclosing.get(id(node)) is not fn:
                    continue
                ctx = self.stmt_ctx.get(id(node))
                if ctx is None or ctx.path != "timed" or id(node) in seen:
                    continue
                seen.add(id(node))
                vals = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                for v in vals:
                    if isinstance(v, ast.Call) and depth < 2:
                        callee = self._local_callee(v, fn)
                        if callee is not None and getattr(callee, "name", "") not in self.caching_fns:
                            todo.append((callee, depth + 1))
                            continue
                    self._return_line = node.lineno
                    got = self._kept(v, fn, 0)
                    if got is not None:
                        reason, name, origin = got
                        base = v
                        while isinstance(base, (ast.Subscript, ast.Call)):
                            base = base.value if isinstance(base, ast.Subscript) else getattr(base.func, "value", base.func)
                        if self.kind_of(base, self._scope_for(fn)) in ("symm_local", "peer_tensor"):
                            reason = "symmetric"
                        self.facts.reused_returns.append(ReusedReturn(node.lineno, name, reason, origin))
                        break

    def _kept(self, node: ast.AST, fn: ast.AST, depth: int) -> tuple[str, str, int] | None:
        """(symmetric | cached, name, origin line) when `node` is a buffer that outlives the call."""
        if depth > 4:
            return None
        while True:  # strip views: `buf[:n].view(shape)` is still `buf`
            if isinstance(node, ast.Subscript) and not self._is_cache_read(node):
                node = node.value
            elif isinstance(node, ast.Call) and node.args and self.qualname(node.func).startswith("torch.") \
                    and self.qualname(node.func).split(".")[-1] in self._VIEW_FUNCS:
                node = node.args[0]  # `torch.split(buf, sizes)`: views of `buf` (not of the module)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in self._VIEWS:
                if node.func.attr == "contiguous" and self._strided_view(node.func.value):
                    return None  # `buf.permute(1, 0, 2).contiguous()` copies into a fresh tensor
                node = node.func.value
            elif isinstance(node, ast.Call) and node.args and self.qualname(node.func).split(".")[-1] in self._VIEW_FUNCS:
                node = node.args[0]  # `_unflatten_dense_tensors(flat, like)`: views of `flat`
            elif isinstance(node, ast.Attribute) and node.attr in ("data", "data_") and isinstance(node.value, ast.Name):
                node = node.value  # a tensor's (a ThunderKittens parallel tensor's) own data
            elif isinstance(node, ast.Starred):
                node = node.value  # `return (*views, m)`
            elif (isinstance(node, (ast.ListComp, ast.GeneratorExp)) and len(node.generators) == 1
                  and isinstance(node.generators[0].target, ast.Name)
                  and self._views_of(node.elt, node.generators[0].target.id)):
                node = node.generators[0].iter  # `[t.view(-1, 1) for t in torch.split(buf, sizes)]`
            else:
                break
        if isinstance(node, ast.Call):
            last = self.qualname(node.func).split(".")[-1]
            if last in ("get_buffer", "get_or_create_parallel_tensor"):
                # PKB's ParallelKittens runtime keeps each parallel tensor for the next call
                return "symmetric", ast.unparse(node)[:60], node.lineno
            callee = self._local_callee(node, fn)
            if callee is not None and getattr(callee, "name", "") in self.caching_fns:
                return "cached", ast.unparse(node)[:60], node.lineno
            return None
        if self._is_cache_read(node):
            return "cached", ast.unparse(node)[:60], node.lineno
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            return "cached", ast.unparse(node), node.lineno
        if not isinstance(node, ast.Name):
            return None
        sources = self._assignments(node.id, fn)
        if not sources:
            if node.id in self.global_names and node.id not in self.functions:
                return "cached", node.id, 0
            return None
        found = None
        for value, line in sources:
            if isinstance(value, ast.Constant) and value.value is None and line not in self._rebound_lines(node.id, fn):
                continue  # `res = None` on a route where nothing is returned from it
            if isinstance(value, (ast.List, ast.Tuple)) and not value.elts:
                continue  # `out = []` where there is nothing to return: it holds no buffer
            if self._views_of(value, node.id):
                continue  # `y = y.reshape(shape)`: a view of what `y` was before
            if self._under_alias_check(value):
                continue  # `if out.data_ptr() == x.data_ptr(): out = torch.empty_like(x)`: only when the caller aliases
            got = self._kept(value, fn, depth + 1)
            if got is None:
                return None  # fresh on some route: not reported
            found = found or (got[0], node.id, line)
        return found

    def _under_alias_check(self, value: ast.AST) -> bool:
        """`value` is assigned only inside `if a.data_ptr() == b.data_ptr():` (or `if a is b:`): a
        route taken when the caller hands back the very buffer, which PKB's fresh inputs never do."""
        node = value
        for _ in range(6):
            parent = self.parents.get(id(node))
            if parent is None or isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return False
            if isinstance(parent, ast.If) and node in parent.body:
                t = parent.test
                if isinstance(t, ast.Compare) and len(t.ops) == 1 and (
                        isinstance(t.ops[0], ast.Is) and not any(isinstance(x, ast.Constant) for x in (t.left, t.comparators[0]))
                        or isinstance(t.ops[0], ast.Eq) and all(isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute)
                                                                and x.func.attr == "data_ptr" for x in (t.left, t.comparators[0]))):
                    return True
                return False
            node = parent
        return False

    def _views_of(self, value: ast.AST, name: str) -> bool:
        """`value` is `name` itself seen through views (`name.reshape(shape)`, `name[:n]`)."""
        while True:
            if isinstance(value, ast.Subscript):
                value = value.value
            elif isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in self._VIEWS:
                value = value.func.value
            else:
                return isinstance(value, ast.Name) and value.id == name

    @staticmethod
    def _rebound_lines(name: str, fn: ast.AST) -> set[int]:
        """Lines where a loop or an augmented assignment rebinds `name` (a fresh value per call)."""
        return {n.lineno for n in ast.walk(fn) if isinstance(n, (ast.For, ast.AugAssign))
                and any(isinstance(x, ast.Name) and x.id == name for x in ast.walk(n.target))}

    @staticmethod
    def _strided_view(node: ast.AST) -> bool:
        """A view whose elements are not in memory order (a permute, a transpose, an expand)."""
        if isinstance(node, ast.Attribute):
            return node.attr in ("T", "mT", "mH", "H")
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
            "permute", "transpose", "t", "expand", "expand_as", "movedim", "swapaxes", "swapdims")

    def _is_cache_read(self, node: ast.AST) -> bool:
        """`_cache[key]`, `self.bufs[i]`, `_STATE.get(key)` where the container persists across calls."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            node = ast.Subscript(value=node.func.value, slice=ast.Constant(0))
        if not isinstance(node, ast.Subscript):
            return False
        base = dotted(node.value)
        return bool(base) and (base.split(".")[0] in self.global_names or base.startswith("self.")) and base.split(".")[0] not in self.functions

    def _assignments(self, name: str, fn: ast.AST) -> list[tuple[ast.AST, int]]:
        """Values assigned to `name` in `fn`; a tuple unpack from a caching call counts as cached."""
        out: list[tuple[ast.AST, int]] = []
        here = self._in_fallback(getattr(self, "_return_line", 0))
        for n in ast.walk(fn):
            if self._in_fallback(n.lineno if hasattr(n, "lineno") else 0) not in (None, here):
                continue  # assigned only on a branch the run does not take
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and getattr(n, "value", None) is not None:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for t in targets:
                    if isinstance(t, ast.Name) and t.id == name:
                        out.append((n.value, n.lineno))
                    elif isinstance(t, (ast.Tuple, ast.List)) and any(isinstance(e, ast.Name) and e.id == name for e in t.elts):
                        if isinstance(n.value, (ast.Tuple, ast.List)) and len(n.value.elts) == len(t.elts):
                            i = next(i for i, e in enumerate(t.elts) if isinstance(e, ast.Name) and e.id == name)
                            out.append((n.value.elts[i], n.lineno))
                        else:
                            out.append((n.value, n.lineno))  # unpacked from a call or a cache slot
            elif isinstance(n, (ast.For, ast.AugAssign)) and any(
                    isinstance(x, ast.Name) and x.id == name for x in ast.walk(n.target)):
                out.append((ast.Constant(None), n.lineno))  # rebound per call: treat as fresh
        return out
