"""Which buffer a Python expression of a candidate stands for, so that a rule can tell whether the
pointer a peer-reading launch is given and the tensor a later launch writes are one buffer.

An expression's *roots* are the names of the allocations it reaches through assignments (the
definitions that reach the use, not every one in the function), views (`buf.narrow(...)`,
`buf[:n]`, `int(buf.data_ptr()) + off`), a handle's addresses (`hdl.buffer_ptrs[peer]`,
`torch.tensor(hdl.buffer_ptrs_dev)`, `rendezvous(buf, group)` all stand for `buf`), state-dict
entries (`res["grad_ptrs"]` is whatever the dict built as `"grad_ptrs": ...` holds), the file's
own helpers (their returns, per call site: two calls of one cached `_get_symm` give two buffers)
and parameters (the arguments of the helper's call sites). Two expressions stand for the same
buffer when their roots meet. A root that cannot be followed further is the name itself.
"""

from __future__ import annotations

import ast
import re

# Methods that return a view of (or an address in) their receiver, not a new tensor.
_VIEWS = frozenset({
    "narrow", "view", "view_as", "reshape", "flatten", "unflatten", "permute", "transpose", "t",
    "squeeze", "unsqueeze", "select", "as_strided", "expand", "expand_as", "data_ptr", "contiguous",
    "get_buffer", "__getitem__", "split", "chunk", "unbind", "movedim", "index_select",
})
# Calls that wrap their first argument (an address or a handle) without making a buffer.
_WRAPS = frozenset({"int", "tensor", "as_tensor", "rendezvous", "c_void_p", "cast"})
# A handle's attributes that address its buffer (the signal pad is another thing).
_BUFFER_ATTRS = frozenset({"buffer_ptrs", "buffer_ptrs_dev", "multicast_ptr", "buffer_ptr"})
_SIGNAL_ATTRS = frozenset({"signal_pad_ptrs", "signal_pad_ptrs_dev", "signal_pad_ptr"})
_DEPTH = 14
_GROUP = re.compile(r"(^|_)(group|pg)$")


class BufferRoots:
    """Roots of expressions of one parsed file (see the module docstring)."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.parent: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
        self.functions: dict[str, ast.AST] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(node.name, node)
        # name -> [(defining statement, value or None, tuple index or None)] per scope node
        self._defs: dict[ast.AST, dict[str, list[tuple[ast.stmt, ast.AST | None, int | None]]]] = {}
        self._calls: dict[tuple[int, int], list[ast.Call]] = {}
        self._by_line: dict[int, list[ast.Call]] = {}
        self._sites: dict[str, list[ast.Call]] = {}
        self._keys: dict[str, list[tuple[ast.AST, ast.AST]]] = {}  # key -> [(scope, value)]
        self._attrs: dict[str, list[tuple[ast.AST, ast.AST]]] = {}  # attribute -> [(scope, value)]
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                self._calls.setdefault((node.lineno, node.col_offset), []).append(node)
                self._by_line.setdefault(node.lineno, []).append(node)
                if isinstance(node.func, ast.Name):
                    self._sites.setdefault(node.func.id, []).append(node)
                elif isinstance(node.func, ast.Attribute):
                    self._sites.setdefault("." + node.func.attr, []).append(node)
            elif isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if isinstance(k, ast.Constant) and isinstance(k.value, str):
                        self._keys.setdefault(k.value, []).append((self.scope(node), v))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    self._record_target(node, t, node.value)
            elif isinstance(node, (ast.For, ast.AsyncFor)):
                self._record_target(node, node.target, None)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                self._record_target(self._stmt(node), node.optional_vars, None)
        self._memo: dict[tuple[int, int, tuple], frozenset[str]] = {}
        # Helper calls being followed, innermost last: (helper, its parameters bound to this call's
        # arguments, the roots that came in through them). A parameter then stands for what this
        # call passes, not for every call site's argument.
        self._frames: list[tuple[ast.AST, dict[str, ast.AST], set[str], int]] = []
        self._frame_count = 0  # each followed call its own number: results memoised per call chain

    # -- recording -------------------------------------------------------------------------

    def _record_target(self, stmt: ast.AST, target: ast.AST, value: ast.AST | None) -> None:
        scope = self.scope(stmt)
        if isinstance(target, ast.Name):
            self._defs.setdefault(scope, {}).setdefault(target.id, []).append((stmt, value, None))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for i, e in enumerate(target.elts):
                if isinstance(e, ast.Name):
                    self._defs.setdefault(scope, {}).setdefault(e.id, []).append((stmt, value, i))
        elif isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant) \
                and isinstance(target.slice.value, str) and value is not None:
            self._keys.setdefault(target.slice.value, []).append((scope, value))
        elif isinstance(target, ast.Attribute) and value is not None:
            self._attrs.setdefault(target.attr, []).append((scope, value))

    def scope(self, node: ast.AST) -> ast.AST:
        """The function (or module) a node belongs to."""
        cur = self.parent.get(node)
        while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            cur = self.parent.get(cur)
        return cur if cur is not None else self.tree

    def _stmt(self, node: ast.AST) -> ast.AST:
        cur = node
        while cur is not None and not isinstance(cur, ast.stmt):
            cur = self.parent.get(cur)
        return cur if cur is not None else node

    def site_group(self, line: int) -> str:
        """The process group a set-up helper called at `line` is given (`_get(cp_group, ...)`:
        "cp_group"), '' when none is; a buffer rooted at that call site lives on that group."""
        for call in self._by_line.get(line, []):
            if isinstance(call.func, ast.Name) and call.func.id in self.functions:
                for a in [*call.args, *(k.value for k in call.keywords)]:
                    text = ast.unparse(a)
                    if _GROUP.search(text):
                        return text
        return ""

    def groups(self) -> set[str]:
        """Every process group the file's own helpers are given."""
        return {g for line in self._by_line for g in [self.site_group(line)] if g}

    def call_at(self, line: int, col: int, name: str = "") -> ast.Call | None:
        """The call written at (line, col); else the one call on that line whose name ends in `name`."""
        last = name.rsplit(".", 1)[-1]
        at = self._calls.get((line, col), [])
        if len(at) > 1:  # `_get_ext().run(...)` and `_get_ext()` start at one column
            at = [c for c in at if _called_name(c).endswith(last)] or at[:1]
        if at:
            return at[0]
        found = [c for c in self._by_line.get(line, []) if _called_name(c).endswith(last)] if last else []
        return found[0] if len(found) == 1 else None

    # -- resolution ------------------------------------------------------------------------

    def roots(self, expr: ast.AST, depth: int = 0) -> frozenset[str]:
        key = (id(expr), depth, tuple(f[3] for f in self._frames))
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = frozenset()  # a cycle resolves to nothing
        got = self._roots(expr, depth) if depth <= _DEPTH else frozenset()
        self._memo[key] = got
        return got

    def _roots(self, e: ast.AST, depth: int) -> frozenset[str]:
        d = depth + 1
        if isinstance(e, ast.Name):
            return self._name_roots(e.id, e, d)
        if isinstance(e, ast.Attribute):
            if e.attr in _BUFFER_ATTRS:
                return self.roots(e.value, d)
            if e.attr in _SIGNAL_ATTRS:
                return frozenset(r + "#signal" for r in self.roots(e.value, d))
            out = frozenset().union(*(self.roots(v, d) for _, v in self._attrs.get(e.attr, [])))
            return out or frozenset({"." + e.attr})
        if isinstance(e, ast.Subscript):
            if isinstance(e.slice, ast.Constant) and isinstance(e.slice.value, str):
                return self._key_roots(e.value, e.slice.value, d)
            return self.roots(e.value, d)
        if isinstance(e, ast.Starred):
            return self.roots(e.value, d)
        if isinstance(e, ast.BinOp) and isinstance(e.op, (ast.Add, ast.Sub)):
            return self.roots(e.left, d)  # base + offset: the base is the buffer
        if isinstance(e, ast.IfExp):
            return self.roots(e.body, d) | self.roots(e.orelse, d)
        if isinstance(e, (ast.ListComp, ast.GeneratorExp)) and len(e.generators) == 1 \
                and isinstance(e.generators[0].target, ast.Name) and _wrapped_name(e.elt) == e.generators[0].target.id:
            return self.roots(e.generators[0].iter, d)  # `[int(p) for p in hdl.buffer_ptrs]`: the table's buffer
        if isinstance(e, ast.Call):
            name = _called_name(e)
            last = name.rsplit(".", 1)[-1]
            if isinstance(e.func, ast.Attribute) and last in _VIEWS:
                return self.roots(e.func.value, d)
            if last in _WRAPS and e.args:
                return self.roots(e.args[0], d)
            helper = self.functions.get(name) if isinstance(e.func, ast.Name) else None
            if helper is not None:
                return self._returned(helper, e, None, d)
        return frozenset()

    def _defs_of(self, name: str, use: ast.AST):
        """The definitions of `name` seen from `use`, in its function or, for a closure, in the
        nearest enclosing function that assigns it (then the use is not placed: None)."""
        scope = self.scope(use)
        while True:
            defs = self._defs.get(scope, {}).get(name)
            if defs or scope is self.tree or isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and name in _params(scope):
                return defs or [], use
            scope = self.scope(scope)
            use = None

    def _name_roots(self, name: str, use: ast.AST, depth: int) -> frozenset[str]:
        scope = self.scope(use)
        while True:
            defs = self._defs.get(scope, {}).get(name)
            if defs:
                break
            if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) and name in _params(scope):
                return self._param_roots(scope, name, depth)
            if scope is self.tree:
                return frozenset({"global:" + name})
            scope = self.scope(scope)  # a closure reads its enclosing function's name
            use = None
        out: set[str] = set()
        for stmt, value, index in self._reaching(defs, use):
            if isinstance(value, ast.Constant) and index is None:
                continue  # `hdl = None`: no buffer
            got = self._def_roots(stmt, value, index, depth)
            out |= got or {f"{getattr(scope, 'name', '')}:{name}:{stmt.lineno}"}
        return frozenset(out)

    def _reaching(self, defs, use):
        """The definitions of a name that reach `use`: the last one on the straight path to it
        and those after it in branches; all of them when none comes before `use` in its function
        (a loop carries it round, or the use is in a closure)."""
        if use is None:
            return defs
        line = getattr(use, "lineno", 0)
        before = [d for d in defs if d[0].lineno <= line
                  and (isinstance(d[0], (ast.For, ast.AsyncFor)) or not _contains(d[0], use))]
        if not before:
            return defs
        chain = set()
        cur = self._stmt(use)
        while cur is not None:
            chain.add((id(self.parent.get(cur)), _field_of(self.parent.get(cur), cur)))
            cur = self._stmt(self.parent.get(cur)) if self.parent.get(cur) is not None else None
        dominating = [d for d in before if (id(self.parent.get(d[0])), _field_of(self.parent.get(d[0]), d[0])) in chain]
        if not dominating:
            return before
        last = max(dominating, key=lambda d: d[0].lineno)
        return [last] + [d for d in before if d[0].lineno > last[0].lineno and d not in dominating]

    def _def_roots(self, stmt, value, index, depth) -> frozenset[str]:
        if value is None:  # a loop variable or `with ... as name`
            if isinstance(stmt, (ast.For, ast.AsyncFor)):
                return self.roots(stmt.iter, depth)
            return frozenset()
        if index is None:
            return self.roots(value, depth)
        if isinstance(value, (ast.Tuple, ast.List)) and index < len(value.elts):
            return self.roots(value.elts[index], depth)
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in self.functions:
            return self._returned(self.functions[value.func.id], value, index, depth)
        return self.roots(value, depth)

    def _returned(self, helper: ast.AST, call: ast.Call, index: int | None, depth: int) -> frozenset[str]:
        """What a call of the file's own helper returns (element `index` of a returned tuple),
        named per call site: the helper's own allocations are another buffer at each call."""
        out: set[str] = set()
        passed_in: set[str] = set()
        for ret in (n for n in ast.walk(helper) if isinstance(n, ast.Return) and n.value is not None):
            if self.scope(ret) is not helper:
                continue
            value = ret.value
            if index is not None and isinstance(value, ast.Name):
                tuples = [v for _, v, i in self._defs.get(helper, {}).get(value.id, []) if i is None
                          and isinstance(v, ast.Tuple)]
                value = tuples[-1] if tuples else value
            if index is not None and isinstance(value, ast.Tuple):
                value = value.elts[index] if index < len(value.elts) else None
            if value is not None:
                self._frame_count += 1
                frame = (helper, _bound_arguments(helper, call), set(), self._frame_count)
                self._frames.append(frame)
                try:
                    out |= self.roots(value, depth + 1)
                finally:
                    self._frames.pop()
                passed_in |= frame[2]
        if self.scope(helper) is not self.tree:
            return frozenset(out)  # a closure's names are its enclosing function's, one per call
        site = f"{call.lineno}>"
        # the helper's own allocations are another buffer per call; what the caller passed in is the caller's
        return frozenset(site + r if not r.startswith((".", "global:")) and r not in passed_in else r for r in out) \
            or frozenset({f"{call.lineno}>{helper.name}"})

    def _key_roots(self, container: ast.AST, key: str, depth: int) -> frozenset[str]:
        """`res["k"]`: what the dict behind `res` holds under "k"; the helper that built it is
        followed per call site, a dict kept elsewhere (a global cache) by the key alone."""
        maker = None
        if isinstance(container, ast.Name):
            defs, use = self._defs_of(container.id, container)
            calls = [v for _, v, i in self._reaching(defs, use) if i is None and isinstance(v, ast.Call)
                     and isinstance(v.func, ast.Name) and v.func.id in self.functions]
            if len(calls) == 1:
                maker = calls[0]
        entries = self._keys.get(key, [])
        if maker is not None:
            helper = self.functions[maker.func.id]
            inside = [v for s, v in entries if s is helper]
            if inside:
                return frozenset(f"{maker.lineno}>{r}" for v in inside for r in self.roots(v, depth)
                                 if not r.startswith((".", "global:")))
        out = frozenset().union(*(self.roots(v, depth) for _, v in entries))
        return out or frozenset({"key:" + key})

    def _param_roots(self, fn: ast.AST, name: str, depth: int) -> frozenset[str]:
        """A parameter stands for what the helper's call sites pass in its place: the call being
        followed, if any (see `_returned`), else every call site."""
        for i in range(len(self._frames) - 1, -1, -1):
            helper, bound, passed_in, _ = self._frames[i]
            if helper is fn and name in bound:
                outer = self._frames
                self._frames = outer[:i]  # the argument is the caller's expression
                try:
                    got = self.roots(bound[name], depth)
                finally:
                    self._frames = outer
                passed_in |= got
                return got
        params = _params(fn)
        pos = params.index(name)
        out: set[str] = set()
        for site in self._sites.get(fn.name, []):
            arg = next((k.value for k in site.keywords if k.arg == name), None)
            if arg is None and pos < len(site.args) and not any(isinstance(a, ast.Starred) for a in site.args[:pos + 1]):
                arg = site.args[pos]
            if arg is not None:
                out |= self.roots(arg, depth)
        return frozenset(out) or frozenset({f"{fn.name}:{name}"})


def _bound_arguments(fn: ast.AST, call: ast.Call) -> dict[str, ast.AST]:
    """The helper's parameters that this call fills, by name (none past a starred argument)."""
    params = _params(fn)
    out: dict[str, ast.AST] = {}
    for name, arg in zip(params, call.args):
        if isinstance(arg, ast.Starred):
            break
        out[name] = arg
    out.update({k.arg: k.value for k in call.keywords if k.arg in params})
    return out


def _wrapped_name(e: ast.AST) -> str:
    """The name under wrappers and views (`int(p)`, `p.data_ptr()`, `ctypes.c_void_p(p)`), or ''."""
    for _ in range(4):
        if isinstance(e, ast.Name):
            return e.id
        if not isinstance(e, ast.Call):
            return ""
        last = _called_name(e).rsplit(".", 1)[-1]
        if isinstance(e.func, ast.Attribute) and last in _VIEWS:
            e = e.func.value
        elif last in _WRAPS and e.args:
            e = e.args[0]
        else:
            return ""
    return ""


def _called_name(call: ast.Call) -> str:
    f = call.func
    parts = []
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if isinstance(f, ast.Name):
        parts.append(f.id)
    return ".".join(reversed(parts))


def _params(fn: ast.AST) -> list[str]:
    a = fn.args
    return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]


def _field_of(parent: ast.AST | None, child: ast.AST) -> str:
    if parent is None:
        return ""
    for name, value in ast.iter_fields(parent):
        if value is child or isinstance(value, list) and any(v is child for v in value):
            return name
    return ""


def _contains(stmt: ast.AST, node: ast.AST) -> bool:
    return any(n is node for n in ast.walk(stmt))
