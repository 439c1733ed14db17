"""Pointer kinds: what each name of a candidate points at (a peer's buffer, an array of peer
pointers, a signal pad, a multicast address, this rank's symmetric buffer), followed through
assignments, tuples, state dicts, attributes and the file's function returns.

Reads the parsed file (flow-insensitive, per function); the kinds seed the arguments of extension,
Triton and CuPy launches that the clang pass follows into the kernels.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from analyzer.python_api import RANK_NAMES, SYMM_HANDLE_ATTRS, dotted


# Names of helpers that make a tensor over a raw address: `tensor_from_ptr`, `from_blob`, `wrap_ptr`.
_WRAPS_ADDRESS = re.compile(r"from_(ptr|blob|address|pointer)|(tensor|wrap|view)_?(from|of|at)?_?(ptr|address|pointer)", re.I)


@dataclass
class Scope:
    """Per-function pointer kinds of names (flow-insensitive; the most specific kind wins)."""

    kinds: dict[str, str] = field(default_factory=dict)
    origin: dict[str, int] = field(default_factory=dict)
    rank_vars: set[str] = field(default_factory=set)
    params: set[str] = field(default_factory=set)  # the function's parameters: the candidate's inputs


def stronger(a: str, b: str) -> str:
    """The more specific of two pointer kinds (a peer pointer array over a plain peer pointer...)."""
    order = ("unknown", "local", "symm_local", "multicast_ptr", "signal_ptr", "signal_ptr_array",
             "nvshmem_ptr", "peer_tensor", "peer_ptr", "peer_ptr_array")
    return a if order.index(a) >= order.index(b) else b


class PointerKinds:
    """The pointer-kind dataflow of the Python pass (a mixin of PythonPass)."""

    def _scope_for(self, fn: ast.AST | None) -> Scope:
        if fn is None:
            return self.module_scope
        scope = self.scopes.setdefault(getattr(fn, "name", ""), Scope())
        if not scope.params and isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scope.params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
        return scope

    def kind_of(self, node: ast.AST, scope: Scope) -> str:
        """What `node` points at, as far as the dataflow knows."""
        if isinstance(node, ast.Name):
            return scope.kinds.get(node.id) or self.module_scope.kinds.get(node.id, "unknown")
        if isinstance(node, ast.Attribute):
            if node.attr in SYMM_HANDLE_ATTRS:
                return SYMM_HANDLE_ATTRS[node.attr]
            key = dotted(node)
            # `self.views` set in __init__ is read as `ctx.views` elsewhere: match on the attribute.
            return scope.kinds.get(key) or self.module_scope.kinds.get(key) or self.module_scope.kinds.get("*." + node.attr, "unknown")
        if isinstance(node, ast.Subscript):
            base = self.kind_of(node.value, scope)
            if isinstance(node.slice, ast.Constant):
                if isinstance(node.value, ast.Name):
                    key = f"{node.value.id}[{node.slice.value!r}]"
                    got = scope.kinds.get(key) or self.module_scope.kinds.get(key)
                    if got:
                        return got
                got = self.module_scope.kinds.get(f"*[{node.slice.value!r}]")
                if got:
                    return got
            if base in ("peer_ptr_array", "signal_ptr_array"):
                if self._holds_tables(node.value):
                    return base  # `state["ptrs"][buf_idx]`: one table of a list of them
                if self._is_rank_expr(node.slice, scope):
                    return "symm_local"
                return "peer_ptr" if base == "peer_ptr_array" else "signal_ptr"
            return base if base in ("peer_tensor", "symm_local") else "unknown"
        if isinstance(node, ast.Call):
            name = self.qualname(node.func)
            last = name.split(".")[-1]
            if last == "get_buffer" or last == "get_signal_pad":
                if node.args and self._is_rank_expr(node.args[0], scope):
                    return "symm_local"
                return "peer_tensor" if last == "get_buffer" else "signal_ptr"
            if name.endswith("_symmetric_memory.empty") or last == "empty" and "symm" in name:
                return "symm_local"
            if last in ("int", "c_void_p", "to", "cuda", "contiguous", "view", "reshape",
                        "flatten", "__int__", "tensor", "as_tensor", "data_ptr", "narrow", "list", "tuple") or name in ("int", "torch.tensor", "torch.as_tensor"):
                inner = node.args[0] if node.args else (node.func.value if isinstance(node.func, ast.Attribute) else None)
                if isinstance(node.func, ast.Attribute) and last in ("to", "cuda", "contiguous", "view", "reshape", "flatten", "data_ptr", "narrow"):
                    inner = node.func.value
                return self.kind_of(inner, scope) if inner is not None else "unknown"
            if isinstance(node.func, ast.Name) and node.func.id in self.returns:
                kinds = self.returns[node.func.id]
                return kinds[0] if len(kinds) == 1 else "unknown"
            # An extension that wraps a raw address as a tensor (`ext.create_tensor_from_ptr(ptr, like,
            # sizes, strides)`, `ext.from_blob(ptr, ...)`) fed a peer address gives a view of the
            # peer's buffer: what a kernel stores through it lands in peer memory.
            if _WRAPS_ADDRESS.search(last) and any(self.kind_of(a, scope) == "peer_ptr" for a in node.args[:1]):
                return "peer_tensor"
            return "unknown"
        if isinstance(node, ast.BinOp):
            return stronger(self.kind_of(node.left, scope), self.kind_of(node.right, scope))
        if isinstance(node, ast.IfExp):
            # `int(hdl.buffer_ptrs[rank - 1]) if rank > 0 else 0`: a peer address on the ranks that
            # have the neighbour, a null the kernel skips on the edge ranks.
            return stronger(self.kind_of(node.body, scope), self.kind_of(node.orelse, scope))
        if isinstance(node, (ast.List, ast.Tuple, ast.ListComp)):
            elts = node.elts if not isinstance(node, ast.ListComp) else [node.elt]
            if isinstance(node, ast.ListComp) and len(node.generators) == 1 and isinstance(node.generators[0].target, ast.Name):
                # `[int(p) for p in hdl.buffer_ptrs]`: the loop variable is an element of the table
                gen = node.generators[0]
                table = self.kind_of(gen.iter, scope)
                if table in ("peer_ptr_array", "signal_ptr_array"):
                    element = "peer_ptr" if table == "peer_ptr_array" else "signal_ptr"
                    scope = Scope(kinds={**scope.kinds, gen.target.id: element}, origin=scope.origin,
                                  rank_vars=scope.rank_vars, params=scope.params)
            best = "unknown"
            for e in elts:
                best = stronger(best, self.kind_of(e, scope))
            if best == "peer_ptr":
                return "peer_ptr_array"
            if best == "signal_ptr":
                return "signal_ptr_array"
            if best == "unknown" and isinstance(node, ast.ListComp) and self._input_addresses(node, scope):
                return "local"
            return best
        return "unknown"

    def _holds_tables(self, node: ast.AST) -> bool:
        """A name, attribute or dict slot that holds a list of address tables (one per buffer of a
        double-buffered exchange), so that indexing it gives a table, not an address."""
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            return f"*[{node.slice.value!r}]" in self.table_lists
        return self._slot(node) in self.table_lists

    def _note_table_list(self, target: ast.AST, value: ast.AST, scope: Scope) -> None:
        """Remember `target` as a list of tables where `value` is a list literal or comprehension
        of them, or names one."""
        elts = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value.elt] if isinstance(value, ast.ListComp) else []
        tables = ("peer_ptr_array", "signal_ptr_array")
        if (elts and all(self.kind_of(e, scope) in tables for e in elts)) or self._holds_tables(value):
            slot = self._slot(target)
            if slot:
                self.table_lists.add(slot)

    def _is_rank_expr(self, node: ast.AST, scope: Scope) -> bool:
        if isinstance(node, ast.Name):
            return node.id in RANK_NAMES or node.id in scope.rank_vars
        if isinstance(node, ast.Attribute):
            return node.attr in ("rank",)
        if isinstance(node, ast.Call):
            return self.qualname(node.func).endswith("get_rank")
        return False

    def _assign_kinds(self, targets: list[ast.AST], value: ast.AST, scope: Scope, line: int) -> None:
        if self._is_host_tensor(value):
            for t in targets:
                name = dotted(t) if isinstance(t, (ast.Name, ast.Attribute)) else ""
                if name and name not in self.facts.host_tensors:
                    self.facts.host_tensors.append(name)
        if isinstance(value, ast.Dict):
            # State dicts (`st = {"peers": [...]}`) are read back by key, often under another name.
            for key, val in zip(value.keys, value.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    kind = self.kind_of(val, scope)
                    if self._holds_tables(val):
                        self.table_lists.add(f"*[{key.value!r}]")
                    if kind != "unknown":
                        slot = f"*[{key.value!r}]"
                        self.module_scope.kinds[slot] = stronger(self.module_scope.kinds.get(slot, "unknown"), kind)
        if isinstance(value, ast.Call) and self.qualname(value.func).endswith("get_rank") or (
            isinstance(value, ast.Attribute) and value.attr == "rank"
        ):
            for t in targets:
                if isinstance(t, ast.Name):
                    scope.rank_vars.add(t.id)
        for t in targets:
            if isinstance(t, ast.Tuple) and isinstance(value, ast.Tuple) and len(t.elts) == len(value.elts):
                for te, ve in zip(t.elts, value.elts):
                    self._assign_kinds([te], ve, scope, line)
                continue
            if isinstance(value, ast.Tuple):
                key = self._slot(t)
                if key:
                    self.tuples[key] = [self.kind_of(v, scope) for v in value.elts]
            elif isinstance(value, ast.Name) and value.id in self.tuples and self._slot(t):
                # `_cache[key] = res` of `res = (buf, hdl, ptrs)`: the cache slot holds that tuple
                self.tuples[self._slot(t)] = self.tuples[value.id]
            elif isinstance(value, ast.Call) and not isinstance(t, ast.Tuple) and self._slot(t) \
                    and len(self._tuple_kinds(value)) > 1:
                # `symm = _get_symm(dev)` then `buf, hdl, ptrs = symm`: the name holds the helper's tuple
                self.tuples[self._slot(t)] = self._tuple_kinds(value)
            if isinstance(t, ast.Tuple):
                kinds = self._tuple_kinds(value)
                for te, k in zip(t.elts, kinds):
                    self._set_kind(te, k, scope, line)
                continue
            self._note_table_list(t, value, scope)
            self._set_kind(t, self.kind_of(value, scope), scope, line)

    @staticmethod
    def _slot(node: ast.AST) -> str:
        """A key for where a value is stored: a name, an attribute, or any slot of a dict."""
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return "*." + node.attr
        if isinstance(node, ast.Subscript) and isinstance(node.value, (ast.Name, ast.Attribute)):
            return PointerKinds._slot(node.value) + "[*]"
        return ""

    def _tuple_kinds(self, value: ast.AST) -> list[str]:
        if isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute)):
            name = value.func.id if isinstance(value.func, ast.Name) else value.func.attr
            return self.returns.get(name, [])
        return self.tuples.get(self._slot(value), [])

    def _set_kind(self, target: ast.AST, kind: str, scope: Scope, line: int) -> None:
        if kind == "unknown":
            return
        if isinstance(target, ast.Name):
            key = target.id
        elif isinstance(target, ast.Attribute):
            key = dotted(target)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and isinstance(target.slice, ast.Constant):
            key = f"{target.value.id}[{target.slice.value!r}]"
        else:
            return
        if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
            slot = f"*[{target.slice.value!r}]"
            self.module_scope.kinds[slot] = stronger(self.module_scope.kinds.get(slot, "unknown"), kind)
        dest = self.module_scope if (key.split("[")[0] in self.global_names or isinstance(target, ast.Attribute)) else scope
        dest.kinds[key] = stronger(dest.kinds.get(key, "unknown"), kind)
        dest.origin.setdefault(key, line)
        if isinstance(target, ast.Attribute):
            slot = "*." + target.attr
            self.module_scope.kinds[slot] = stronger(self.module_scope.kinds.get(slot, "unknown"), kind)
        if dest is not scope:
            scope.kinds[key] = dest.kinds[key]

    def _bind_params(self, callee: ast.AST, call: ast.Call, scope: Scope, skip: int = 0) -> None:
        """`_p2p_copy(buf, int(hdl.buffer_ptrs[peer]), n)`: the helper's parameter holds what
        its callers pass (the most specific kind over every call); `skip` leading parameters
        take no argument (an autograd forward's `ctx`)."""
        params = [a.arg for a in callee.args.args][skip:]  # type: ignore[attr-defined]
        inner = self._scope_for(callee)
        pairs = list(zip(params, call.args)) + [(k.arg, k.value) for k in call.keywords if k.arg in params]
        for name, arg in pairs:
            if isinstance(arg, ast.Starred):
                continue
            kind = self.kind_of(arg, scope)
            if kind not in ("unknown", "local"):
                inner.kinds[name] = stronger(inner.kinds.get(name, "unknown"), kind)
                inner.origin.setdefault(name, getattr(arg, "lineno", 0))

    @staticmethod
    def _input_addresses(comp: ast.ListComp, scope: Scope) -> bool:
        """`[t.data_ptr() for t in P]` over a parameter of the function: a table of the addresses
        of the candidate's own input tensors, local memory whatever the kernel names it."""
        elt = comp.elt
        if not (isinstance(elt, ast.Call) and isinstance(elt.func, ast.Attribute) and elt.func.attr == "data_ptr"
                and isinstance(elt.func.value, ast.Name)) or len(comp.generators) != 1:
            return False
        gen = comp.generators[0]
        return isinstance(gen.target, ast.Name) and gen.target.id == elt.func.value.id \
            and isinstance(gen.iter, ast.Name) and gen.iter.id in scope.params

    def _appended_kind(self, value: ast.AST, fn: ast.AST, scope: Scope) -> str:
        """The kind of an appended value; `t.data_ptr()` of a loop variable over one of the
        function's parameters (the candidate's input tensors) is a local address."""
        kind = self.kind_of(value, scope)
        if kind != "unknown":
            return kind
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "data_ptr" \
                and isinstance(value.func.value, ast.Name):
            params = {a.arg for a in fn.args.args}  # type: ignore[attr-defined]
            var = value.func.value.id
            for loop in ast.walk(fn):
                if isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) and loop.target.id == var \
                        and isinstance(loop.iter, ast.Name) and loop.iter.id in params:
                    return "local"
        return "unknown"

    def _pointer_kinds(self) -> None:
        # Two sweeps: the second sees return kinds and globals that the first discovered.
        for _ in range(2):
            for fn in [None, *self.functions.values()]:
                scope = self._scope_for(fn)
                body = self.tree.body if fn is None else fn.body  # type: ignore[union-attr]
                for stmt in body:
                    for node in ast.walk(stmt) if fn is not None else [stmt]:
                        if isinstance(node, ast.Assign):
                            self._assign_kinds(node.targets, node.value, scope, node.lineno)
                        elif isinstance(node, ast.AnnAssign) and node.value is not None:
                            self._assign_kinds([node.target], node.value, scope, node.lineno)
                        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and fn is not None \
                                and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "append" \
                                and isinstance(node.value.func.value, ast.Name) and len(node.value.args) == 1:
                            # `ptrs.append(t.data_ptr())`: the list holds what is appended
                            appended = self._appended_kind(node.value.args[0], fn, scope)
                            if appended in ("peer_ptr_array", "signal_ptr_array"):
                                self.table_lists.add(node.value.func.value.id)  # a list of tables
                            elif appended in ("peer_ptr", "signal_ptr"):
                                # `ptrs.append(int(hdl.buffer_ptrs[p]))`: a table of the peers' addresses
                                appended = "peer_ptr_array" if appended == "peer_ptr" else "signal_ptr_array"
                            self._set_kind(node.value.func.value, appended, scope, node.lineno)
                        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.functions \
                                and node.func.id not in self.triton_names:
                            self._bind_params(self.functions[node.func.id], node, scope)
                        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "apply" \
                                and isinstance(node.func.value, ast.Name) and "forward" in self.classes.get(node.func.value.id, {}):
                            # `Exchange.apply(x, ptrs)` runs `forward(ctx, x, ptrs)` (no ctx with setup_context)
                            forward = self.classes[node.func.value.id]["forward"]
                            first = forward.args.args[0].arg if forward.args.args else ""
                            self._bind_params(forward, node, scope, skip=1 if first in ("ctx", "self") else 0)
                        elif isinstance(node, ast.For) and isinstance(node.target, ast.Name):
                            k = self.kind_of(node.iter, scope)
                            if k in ("peer_ptr_array", "signal_ptr_array"):
                                self._set_kind(node.target, "peer_ptr" if k == "peer_ptr_array" else "signal_ptr", scope, node.lineno)
                if fn is not None:
                    for node in ast.walk(fn):
                        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
                            # `return {"buf": buf, "peer_ptrs": ptrs}`: a state dict read back by key
                            self._assign_kinds([], node.value, scope, node.lineno)
                        if isinstance(node, ast.Return) and node.value is not None:
                            vals = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                            kinds = [self.kind_of(v, scope) for v in vals]
                            stored = self._tuple_kinds(node.value)
                            if len(vals) == 1 and stored:
                                kinds = stored
                            old = self.returns.get(fn.name)  # type: ignore[union-attr]
                            if old is not None and len(old) != len(kinds) and kinds == ["unknown"]:
                                continue  # `return _cache[key]` beside `return (buf, hdl, ptrs)`: keep the tuple
                            if old is None or len(old) != len(kinds) or old == ["unknown"]:
                                self.returns[fn.name] = kinds  # type: ignore[union-attr]
                            else:
                                self.returns[fn.name] = [stronger(a, b) for a, b in zip(old, kinds)]  # type: ignore[union-attr]
