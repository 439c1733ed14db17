"""The dtype a Python expression has on PKB's run, where the file alone says so.

Read from the parsed file: explicit casts (`.int()`, `.to(torch.int32)`), factories with a
`dtype=`, views and copies that keep the dtype, and torch's promotion of integer reductions
(`counts.sum()` and `counts.cumsum(0)` of int32 counts are int64). A name is followed to its
assignments before the use in the same function, and a helper's result (`bufs = make_bufs(n)`,
`a, ptrs = make_bufs(n)`) to what the helper returns; where they disagree, or anything else is
met, the answer is None (unknown), never a guess. The one thing passed over is a cached helper's
early return of what it stored (`return cache["ptrs"]`): it returns what the build below it made.
"""

from __future__ import annotations

import ast

TORCH_DTYPES = {
    "float32": "float32", "float": "float32", "float64": "float64", "double": "float64",
    "float16": "float16", "half": "float16", "bfloat16": "bfloat16", "int32": "int32", "int": "int32",
    "int64": "int64", "long": "int64", "int16": "int16", "short": "int16", "int8": "int8",
    "uint8": "uint8", "bool": "bool", "uint64": "uint64", "uint32": "uint32",
}
CAST_METHODS = {"int": "int32", "long": "int64", "float": "float32", "double": "float64", "half": "float16",
                "bfloat16": "bfloat16", "bool": "bool", "short": "int16", "byte": "uint8", "char": "int8"}
# Tensor methods whose result has the receiver's dtype.
SAME_DTYPE = {"contiguous", "view", "reshape", "flatten", "clone", "detach", "t", "transpose", "permute",
              "squeeze", "unsqueeze", "narrow", "expand", "expand_as", "view_as", "reshape_as", "cuda", "cpu",
              "roll", "flip", "repeat", "repeat_interleave", "index_select", "gather", "masked_select"}
INTEGER = {"int8", "int16", "int32", "uint8", "bool"}  # reductions of these promote to int64
FACTORIES = {"zeros", "ones", "empty", "full", "tensor", "arange", "zeros_like", "ones_like", "empty_like",
             "full_like", "randint", "as_tensor"}


def torch_dtype(node: ast.AST | None) -> str | None:
    """`torch.int32` -> 'int32'."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        return TORCH_DTYPES.get(node.attr)
    return None


def _names_a_device(node: ast.AST) -> bool:
    """`"cuda"`, `x.device`, `torch.device(...)`, a name like `device` or `dev`."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (str, int))
    if isinstance(node, ast.Attribute):
        return node.attr == "device"
    if isinstance(node, ast.Call):
        return ast.unparse(node.func) in ("torch.device", "torch.cuda.current_device")
    return isinstance(node, ast.Name) and "dev" in node.id.lower()


class DtypeOf:
    """dtype_of(expr, function, line) over one parsed file."""

    def __init__(self, tree: ast.AST, params: dict[str, str] | None = None) -> None:
        # name -> its definitions (two autograd Functions both define `forward`)
        self.functions: dict[str, list[ast.AST]] = {}
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(n.name, []).append(n)
        # a nested function's definition -> the function it is defined in (its closure's names)
        self.outer: dict[int, ast.AST] = {id(inner): fn for fns in self.functions.values() for fn in fns
                                          for inner in _own_nodes(fn)
                                          if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.enclosing: dict[int, str] = {}  # call node id -> the innermost function it sits in
        self.calls: list[ast.Call] = []
        for fns in self.functions.values():
            for fn in fns:
                for n in _own_nodes(fn):
                    if isinstance(n, ast.Call):
                        self.enclosing[id(n)] = fn.name
                        self.calls.append(n)
        # `Exchange.apply(x)` runs Exchange.forward(ctx, x): forward's definition -> its class
        self.class_of_forward = {id(m): c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                                 for m in c.body if isinstance(m, ast.FunctionDef) and m.name == "forward"}
        # solution()'s tensor parameters and the dtype the run gives them, where known
        self.params = params or {}
        self.used_params: set[str] = set()  # the parameters the last answer rests on
        self.returned: dict[tuple[str, int | None], str | None] = {}  # (helper, index) -> its result's dtype

    def _function(self, name: str, line: int) -> ast.AST | None:
        """The definition of `name` that holds `line`, or its only one."""
        fns = self.functions.get(name, [])
        holding = [f for f in fns if f.lineno <= line <= (f.end_lineno or f.lineno)]
        return holding[0] if holding else (fns[0] if len(fns) == 1 else None)

    def dtype_of(self, node: ast.AST, function: str, line: int, depth: int = 0) -> str | None:
        if depth > 40:
            return None
        if isinstance(node, Unpacked):
            return self._returned(node.value, node.index, depth + 1)
        if isinstance(node, ast.Name):
            return self._name(node.id, function, line, depth)
        if isinstance(node, ast.Subscript):
            return self.dtype_of(node.value, function, line, depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Mod, ast.FloorDiv)):
            return self._promote(node.left, node.right, function, line, depth)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            # a tensor compared is a bool tensor
            return "bool" if self.dtype_of(node.left, function, line, depth + 1) else None
        if not isinstance(node, ast.Call):
            return None
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        func = node.func
        if isinstance(func, ast.Name):
            return self._returned(node, None, depth + 1)
        if isinstance(func, ast.Attribute) and func.attr == "empty" and "dtype" in kw and _names_symmetric_memory(func.value):
            return self._dtype_value(kw["dtype"], function, line, depth + 1)  # symm_mem.empty(shape, dtype=...)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "torch":
            name = func.attr
            if name in FACTORIES:
                if "dtype" in kw:
                    return self._dtype_value(kw["dtype"], function, line, depth + 1)
                if name.endswith("_like") and node.args:
                    return self.dtype_of(node.args[0], function, line, depth + 1)
                return None  # the default dtype, or the data's: not decided here
            if name in ("cumsum", "sum") and node.args:
                return self._reduced(node.args[0], kw, function, line, depth)
            if name in ("cat", "concat", "stack") and node.args and isinstance(node.args[0], (ast.List, ast.Tuple)):
                parts = [self.dtype_of(e, function, line, depth + 1) for e in node.args[0].elts]
                return _promoted(parts)  # torch.cat promotes its inputs to one dtype
            if name == "bincount":
                return "int64"
            return None
        if not isinstance(func, ast.Attribute):
            return None
        name, receiver = func.attr, func.value
        if name in CAST_METHODS and not node.args:
            return CAST_METHODS[name]
        if name in ("to", "type"):
            target = kw.get("dtype") or next((a for a in node.args if torch_dtype(a)), None)
            if target is not None:
                return torch_dtype(target)
            if all(_names_a_device(a) for a in node.args):
                return self.dtype_of(receiver, function, line, depth + 1)  # `.to(device)`
            return None  # `.to(other)` takes other's dtype; `.to(x.dtype)` is not followed
        if name in ("cumsum", "sum"):
            return self._reduced(receiver, kw, function, line, depth)
        if name in SAME_DTYPE:
            return self.dtype_of(receiver, function, line, depth + 1)
        return None

    def _returned(self, call: ast.AST, index: int | None, depth: int) -> str | None:
        """The dtype a call of a helper of this file returns (element `index` of a returned tuple),
        where its returns agree; an early return of a cached value is passed over."""
        if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
            return None
        fns = self.functions.get(call.func.id, [])
        if len(fns) != 1 or depth > 40:
            return None
        key = (call.func.id, index)
        if key in self.returned:  # the same for every call; None while being read (a recursion)
            return self.returned[key]
        self.returned[key] = None
        self.returned[key] = self._read_returns(fns[0], index, depth)
        return self.returned[key]

    def _read_returns(self, fn: ast.AST, index: int | None, depth: int) -> str | None:
        found = set()
        for ret in _returns(fn):
            value = ret.value
            if index is not None:
                if _is_cache_read(value):
                    continue  # `return cache[key]`: the tuple an earlier call stored
                if isinstance(value, ast.Name):
                    bound = _assignments(fn, value.id, ret.lineno)  # `res = (a, b, c); return res`
                    value = bound[0][0] if len(bound) == 1 else value
                if not isinstance(value, (ast.Tuple, ast.List)) or index >= len(value.elts) \
                        or any(isinstance(e, ast.Starred) for e in value.elts):
                    return None
                value = value.elts[index]
            elif isinstance(value, (ast.Tuple, ast.List)):
                return None
            has = self.dtype_of(value, fn.name, ret.lineno, depth + 1)
            if has is None and _is_cache_read(value):
                continue  # `return cache[key]`, `return c["ptrs"], ...`: what an earlier call stored
            found.add(has)
        return found.pop() if len(found) == 1 else None

    def _reduced(self, operand: ast.AST, kw: dict, function: str, line: int, depth: int) -> str | None:
        if "dtype" in kw:
            return torch_dtype(kw["dtype"])
        inner = self.dtype_of(operand, function, line, depth + 1)
        return "int64" if inner in INTEGER else inner

    def _promote(self, left: ast.AST, right: ast.AST, function: str, line: int, depth: int) -> str | None:
        """Integer tensor arithmetic: the wider of two tensors; a Python number keeps the tensor's."""
        sides = []
        for side in (left, right):
            if isinstance(side, ast.Constant) and isinstance(side.value, int):
                continue
            sides.append(self.dtype_of(side, function, line, depth + 1))
        return _promoted(sides)

    def _dtype_value(self, node: ast.AST, function: str, line: int, depth: int) -> str | None:
        """What a `dtype=` argument names: `torch.int32`, `x.dtype`, or a name bound to either."""
        if torch_dtype(node):
            return torch_dtype(node)
        if isinstance(node, ast.Attribute) and node.attr == "dtype":
            return self.dtype_of(node.value, function, line, depth + 1)
        fn = self._function(function, line)
        if isinstance(node, ast.Name) and fn is not None and depth < 40:
            found = {self._dtype_value(v, function, at, depth + 1) for v, at in _assignments(fn, node.id, line)}
            return found.pop() if len(found) == 1 else None
        return None

    def _name(self, name: str, function: str, line: int, depth: int) -> str | None:
        fn = self._function(function, line)
        if fn is None:
            return None
        if any(isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For)) and n.lineno < line
               and any(isinstance(t, ast.Name) and t.id == name for t in ast.walk(n.target)) for n in ast.walk(fn)):
            return None  # bound some other way: not followed
        values = _assignments(fn, name, line)  # a value's own names are read as they were before it
        if not values:
            if function == "solution" and name in self.params:
                self.used_params.add(name)
                return self.params[name]
            outer = self.outer.get(id(fn))
            if outer is not None and name not in {a.arg for a in fn.args.args}:
                return self._name(name, outer.name, fn.lineno, depth + 1)  # a name of its closure
            return self._from_callers(fn, name, depth)
        found = {self.dtype_of(v, function, at, depth + 1) for v, at in values}
        return found.pop() if len(found) == 1 else None

    def _passed(self, fn: ast.AST, name: str) -> list[tuple[ast.Call, ast.AST]] | None:
        """(call, argument) for every call of the helper `fn` in the file, for its parameter
        `name`; None where one cannot be read (a starred argument, a short call)."""
        names = [a.arg for a in fn.args.args]
        if name not in names or fn.name == "solution":
            return None
        index, out = names.index(name), []
        for call in self.calls:
            f = call.func
            if isinstance(f, ast.Name) and f.id == fn.name or isinstance(f, ast.Attribute) and f.attr == fn.name:
                at = index
            elif id(fn) in self.class_of_forward and isinstance(f, ast.Attribute) and f.attr == "apply" \
                    and isinstance(f.value, ast.Name) and f.value.id == self.class_of_forward[id(fn)]:
                at = index - 1  # forward(ctx, ...) is called as apply(...)
            else:
                continue
            if at < 0 or at >= len(call.args) or any(isinstance(a, ast.Starred) for a in call.args[:at + 1]):
                return None
            out.append((call, call.args[at]))
        return out

    def _from_callers(self, fn: ast.AST, name: str, depth: int) -> str | None:
        """A helper's parameter: the dtype every call of the helper in the file passes it."""
        passed = self._passed(fn, name)
        if not passed:
            return None
        found = {self.dtype_of(arg, self.enclosing.get(id(call), ""), call.lineno, depth + 1) for call, arg in passed}
        return found.pop() if len(found) == 1 else None

    def assigned_at(self, name: str, function: str, line: int, depth: int = 0) -> int | None:
        """The line of the last plain assignment to `name` in `function` before `line`; for a
        helper's parameter, where its one caller assigned what it passes."""
        fn = self._function(function, line)
        if fn is None or depth > 8:
            return None
        lines = [at for _, at in _assignments(fn, name, line)]
        if lines:
            return max(lines)
        passed = self._passed(fn, name) or []
        if len(passed) == 1 and isinstance(passed[0][1], ast.Name):
            call, arg = passed[0]
            return self.assigned_at(arg.id, self.enclosing.get(id(call), ""), call.lineno, depth + 1)
        return None


def _promoted(dtypes: list[str | None]) -> str | None:
    """The dtype torch gives tensors of these dtypes combined, where all are known and it is
    one of them or an integer widening."""
    if not dtypes or None in dtypes:
        return None
    if len(set(dtypes)) == 1:
        return dtypes[0]
    if set(dtypes) <= {"int8", "int16", "int32", "int64", "uint8"}:
        return "int64" if "int64" in dtypes else None
    return None


def _names_symmetric_memory(node: ast.AST) -> bool:
    """`symm_mem`, `_symmetric_memory`, `torch.distributed._symmetric_memory`, however imported."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name in ("symm_mem", "_symmetric_memory", "symmetric_memory")


class Unpacked:
    """Element `index` of what `value` gives, as `a, b = value` binds it."""

    def __init__(self, value: ast.AST, index: int) -> None:
        self.value, self.index = value, index


def _assignments(fn: ast.AST, name: str, line: int) -> list[tuple[ast.AST, int]]:
    """(value, line) of each assignment `name = value` in `fn` before `line`; an unpacking
    `a, name = value` gives Unpacked(value, 1)."""
    out: list[tuple[ast.AST, int]] = []
    for n in ast.walk(fn):
        if not isinstance(n, ast.Assign) or n.lineno >= line:
            continue
        for t in n.targets:
            if isinstance(t, ast.Name) and t.id == name:
                out.append((n.value, n.lineno))
            elif isinstance(t, (ast.Tuple, ast.List)):
                at = [i for i, e in enumerate(t.elts) if isinstance(e, ast.Name) and e.id == name]
                if at:
                    starred = any(isinstance(e, ast.Starred) for e in t.elts)
                    out.append((ast.Constant(None) if starred else Unpacked(n.value, at[0]), n.lineno))
    return out


def _own_nodes(fn: ast.AST):
    """The nodes of `fn`'s body, the functions and classes defined in it included but not their
    bodies (a lambda's stay)."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(n))


def _is_cache_read(node: ast.AST) -> bool:
    """`cache[key]`: a subscript of a plain name."""
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)


def _returns(fn: ast.AST) -> list[ast.Return]:
    """The return statements of `fn` with a value, not those of functions nested in it."""
    out, todo = [], list(fn.body)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(n, ast.Return) and n.value is not None:
            out.append(n)
        todo.extend(ast.iter_child_nodes(n))
    return out
