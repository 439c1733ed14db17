"""Run-aware branches: whether an `if` holds on PKB's run (its dtype, world size, multicast, large
aligned CUDA inputs, an initialised process group), so the branches the run skips are `fallback`.

Reads the run's facts from a PKB run tree's folder name (`solutions_cuda_bf16_h100_8_...`) or from
the caller, and the candidate's parsed tests and parameters.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass

from analyzer.python_api import WORLD_NAMES


_HANDLE_MULTICAST_ATTRS = ("multicast_ptr", "mc_ptr", "multicast_addr")


_FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")


_TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8": "float8_e4m3fn"}


_DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16",
                  "float32": "float32", "float16": "float16", "float64": "float64"}


@dataclass(frozen=True)
class RunContext:
    """What PKB's run fixes about the call (from the run tree's name; None where unknown).

    The tree `solutions_cuda_bf16_h100_8_...` ran at world size 8 on one NVSwitch node, where
    multicast exists, with bfloat16 inputs. Branches that cannot run there are `fallback`.
    """

    dtype: str | None = None  # torch dtype name of the inputs ('bfloat16')
    world_size: int | None = None
    multicast: bool | None = None
    group_args: tuple[str, ...] = ()  # solution() parameters the run passes a process group
    none_args: tuple[str, ...] = ()  # other solution() parameters the run passes as None
    scalar_args: tuple[tuple[str, object], ...] = ()  # solution() parameters the run passes a constant (name, value)


def run_context(precision: str = "", hardware: str = "") -> RunContext:
    """The run facts a PKB run tree's precision and hardware tokens give ('bf16', 'h100_8')."""
    m = re.search(r"_(\d+)$", hardware or "")
    world = int(m.group(1)) if m else None
    # Hopper and later nodes with NVSwitch expose multicast to symmetric memory.
    multicast = True if world and world > 1 and re.match(r"(h100|h200|h20|b200|gb200)", hardware or "") else None
    return RunContext(_TORCH_DTYPES.get(precision), world, multicast)


def run_context_of_path(path: str) -> RunContext:
    """run_context from a file's folder when it is a PKB run tree; unknown otherwise."""
    from pathlib import PurePath

    from pkb.corpus import parse_run_tree

    tree = parse_run_tree(PurePath(path).parent.name)
    return run_context(tree.precision, tree.hardware) if tree is not None else RunContext()


def _cmp(a: int, op: ast.cmpop, b: int) -> bool | None:
    table = {ast.Eq: a == b, ast.NotEq: a != b, ast.Lt: a < b, ast.LtE: a <= b, ast.Gt: a > b, ast.GtE: a >= b}
    return table.get(type(op))


_SIZE_NAME = re.compile(r"^(n|N|numel|total|count)$|numel|elems?$|^n_?elem|num_elements|nbytes$|_bytes$|^num_tokens$|^rows$|^cols$")


def _is_size_expr(node: ast.AST) -> bool:
    """`n`, `numel`, `x.numel()`, `chunk_elems`: an element count of the input (never 0 on PKB's run)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("numel", "nelement"):
        return True
    if isinstance(node, ast.Attribute):
        return node.attr in ("numel", "nbytes")
    return isinstance(node, ast.Name) and bool(_SIZE_NAME.search(node.id))


_NO_LITERAL = object()
# comparisons of a constant argument with a literal (`n_iterations == 0`, `mode in ("sum",)`)
_SCALAR_OPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Is: operator.is_, ast.IsNot: operator.is_not,
               ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
               ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


# PKB's worker makes 500 warm-up and 100 timed calls (and a few checks): a counter stepped by at
# most 16 per statement, even in a loop of a hundred per call, stays under this.
_COUNTER_NEVER_REACHES = 10_000_000


def _int_value(node: ast.AST, depth: int = 0) -> int | None:
    """An integer constant expression's value: `1_000_000_000`, `1 << 30`, `2**31 - 1`, `0x7FFFFFFF`."""
    if depth > 4:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp):
        a, b = _int_value(node.left, depth + 1), _int_value(node.right, depth + 1)
        if a is None or b is None:
            return None
        if isinstance(node.op, ast.Pow) and 0 <= b <= 64:
            return a ** b
        if isinstance(node.op, ast.LShift) and 0 <= b <= 64:
            return a << b
        ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
        return ops.get(type(node.op))
    return None


def _literal(node: ast.AST) -> object:
    """The value of a literal (`-1`, `None`, `"x"`); _NO_LITERAL for anything else."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NO_LITERAL


def _is_world_group(node: ast.AST) -> bool:
    """`dist.group.WORLD`, `torch.distributed.group.WORLD`, `group.WORLD`."""
    return isinstance(node, ast.Attribute) and node.attr == "WORLD" and isinstance(node.value, ast.Attribute) \
        and node.value.attr == "group" or isinstance(node, ast.Attribute) and node.attr == "WORLD" \
        and isinstance(node.value, ast.Name) and node.value.id == "group"


class RunBranches:
    """Decides the candidate's tests on PKB's run (a mixin of PythonPass)."""

    def run_value(self, test: ast.AST, fn: ast.AST | None, depth: int = 0) -> bool | None:
        """Whether `test` holds on PKB's run (its dtype, world size, multicast, large aligned CUDA
        inputs); None where the run does not decide it."""
        if depth > 4:
            return None
        if isinstance(test, ast.Constant) and isinstance(test.value, (bool, int, str, type(None))):
            return bool(test.value)  # `x if False else y`, `if 0:`: a branch switched off by hand
        if isinstance(test, ast.BoolOp):
            vals = [self.run_value(v, fn, depth + 1) for v in test.values]
            if isinstance(test.op, ast.And):
                return False if False in vals else (True if all(v is True for v in vals) else None)
            return True if True in vals else (False if all(v is False for v in vals) else None)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            v = self.run_value(test.operand, fn, depth + 1)
            return None if v is None else not v
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id in ("int", "bool") and len(test.args) == 1:
            return self.run_value(test.args[0], fn, depth + 1)
        scalar = self._scalar_on_run(test, fn)
        if scalar is not _NO_LITERAL:
            return bool(scalar)  # `if causal:`, `if n_iterations:` on the value PKB's factory passes
        if isinstance(test, ast.Name) and fn is not None:
            if self._unset_group(test, fn):
                return False
            if self._is_multicast_expr(test, fn):
                return self.run_ctx.multicast
            value = self._single_assignment(test.id, fn)
            if self._nonempty_input_list(test.id, value, fn):
                return True
            if value is None:
                return self._flag_on_run(test, fn, depth)
            return self.run_value(value, fn, depth + 1)
        if isinstance(test, ast.Attribute):
            if test.attr in ("is_cuda",):
                return True
            if self._is_multicast_expr(test, fn):
                return self.run_ctx.multicast
            return None
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr == "is_contiguous" and not test.args:
            return True
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr" \
                and len(test.args) == 2 and isinstance(test.args[1], ast.Constant) \
                and test.args[1].value in _HANDLE_MULTICAST_ATTRS:
            return True  # every symmetric-memory handle has the attribute (0 where multicast is absent)
        if isinstance(test, ast.Call) and self.qualname(test.func) in (
                "torch.distributed.is_initialized", "torch.distributed.is_available", "torch.cuda.is_available"):
            return True  # PKB runs every candidate under an initialised process group on GPUs
        if isinstance(test, ast.Call) and self.qualname(test.func) == "torch.is_grad_enabled" and not test.args:
            return self._grad_enabled_at(test, fn)
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance" and len(test.args) == 2:
            return self._isinstance_value(test, fn)
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            held = self._scalar_compare(test.left, test.ops[0], test.comparators[0], fn)
            if held is not None:
                return held
            if isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None \
                    and isinstance(test.ops[0], (ast.Is, ast.IsNot)) and (
                        self._unset_group(test.left, fn) or self._none_on_run(test.left, fn)):
                return isinstance(test.ops[0], ast.Is)
            return self._compare_value(test.left, test.ops[0], test.comparators[0], fn)
        return None

    def _grad_enabled_at(self, node: ast.AST, fn: ast.AST | None) -> bool:
        """`torch.is_grad_enabled()` on PKB's run: its worker calls solution() with grad mode on, so
        it holds unless solution(), the function testing it, or a `with` block around the test
        turns grad off (`@torch.no_grad()`, `torch.inference_mode`, `set_grad_enabled(False)`)."""
        def turns_grad_off(expr: ast.AST) -> bool:
            call = expr if isinstance(expr, ast.Call) else None
            name = self.qualname(call.func if call is not None else expr)
            if name in ("torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad"):
                return not (call is not None and call.args and isinstance(call.args[0], ast.Constant)
                            and call.args[0].value is False)  # inference_mode(False) keeps grad on
            return name in ("torch.set_grad_enabled", "torch.autograd.set_grad_enabled") and call is not None \
                and bool(call.args) and isinstance(call.args[0], ast.Constant) and call.args[0].value is False

        for owner in (self.functions.get("solution"), fn):
            if isinstance(owner, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    turns_grad_off(d) for d in owner.decorator_list):
                return False
        parent = self.parents.get(id(node))
        while parent is not None and parent is not fn:
            if isinstance(parent, ast.With) and any(turns_grad_off(item.context_expr) for item in parent.items):
                return False
            parent = self.parents.get(id(parent))
        return True

    def _nonempty_input_list(self, name: str, value: ast.AST | None, fn: ast.AST) -> bool:
        """A list input of solution() (`grad_tensors: List[torch.Tensor]`), or a comprehension
        filtering one (`[t for t in grad_tensors if t is not None]`): PKB's inputs are non-empty."""
        sol = self.functions.get("solution")
        if fn is not sol or sol is None:
            return False
        lists = {a.arg for a in sol.args.args if a.annotation is not None
                 and re.search(r"\b(List|list|Sequence|Tuple|tuple)\b", ast.unparse(a.annotation))}
        if value is None:
            return name in lists and not any(isinstance(n, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in n.targets) for n in ast.walk(fn))
        return isinstance(value, ast.ListComp) and len(value.generators) == 1 \
            and isinstance(value.generators[0].iter, ast.Name) and value.generators[0].iter.id in lists \
            and all(self._keeps_tensors(c) for c in value.generators[0].ifs)

    @staticmethod
    def _keeps_tensors(cond: ast.AST) -> bool:
        """`t is not None`, `t.grad is not None`: a filter that keeps every tensor of PKB's inputs."""
        return isinstance(cond, ast.Compare) and len(cond.ops) == 1 and isinstance(cond.ops[0], ast.IsNot) \
            and isinstance(cond.comparators[0], ast.Constant) and cond.comparators[0].value is None

    def in_untaken_ifexp(self, node: ast.AST) -> bool:
        """`a.tolist() if isinstance(a, torch.Tensor) else a`: `node` sits in the branch of a
        conditional expression that PKB's run does not take."""
        child, parent = node, self.parents.get(id(node))
        while parent is not None and not isinstance(parent, ast.stmt):
            if isinstance(parent, ast.IfExp) and child is not parent.test:
                taken = self.run_value(parent.test, self.enclosing.get(id(parent)))
                if taken is not None and (child is parent.body) != taken:
                    return True
            child, parent = parent, self.parents.get(id(parent))
        return False

    def _scalar_on_run(self, node: ast.AST, fn: ast.AST | None) -> object:
        """The constant PKB's input factory passes a parameter of solution() (`n_iterations` 3,
        `causal` True), where `node` names it (or `int(...)`/`float(...)`/`bool(...)` of it) and
        solution() does not rebind it; _NO_LITERAL otherwise."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "float", "bool") \
                and len(node.args) == 1 and not node.keywords:
            inner = self._scalar_on_run(node.args[0], fn)
            if inner is _NO_LITERAL or inner is None:
                return _NO_LITERAL
            try:
                return {"int": int, "float": float, "bool": bool}[node.func.id](inner)
            except (TypeError, ValueError):
                return _NO_LITERAL
        if not isinstance(node, ast.Name) or not self.run_ctx.scalar_args:
            return _NO_LITERAL
        sol = self.functions.get("solution")
        values = dict(self.run_ctx.scalar_args)
        if sol is None or fn is not sol or node.id not in values:
            return _NO_LITERAL
        if any(isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and any(
                isinstance(t, ast.Name) and t.id == node.id
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])) for n in ast.walk(sol)):
            return _NO_LITERAL  # rebound before or after the test: no longer the factory's value
        return values[node.id]

    def _scalar_compare(self, left: ast.AST, op: ast.cmpop, right: ast.AST, fn: ast.AST | None) -> bool | None:
        """`n_iterations == 0`, `top_k is None`, `mode != "sum"`: a parameter the factory passes a
        constant, compared with a literal."""
        value, other = self._scalar_on_run(left, fn), right
        flipped = False
        if value is _NO_LITERAL:
            value, other, flipped = self._scalar_on_run(right, fn), left, True
        if value is _NO_LITERAL:
            return None
        lit = _literal(other)
        if lit is _NO_LITERAL or isinstance(lit, (list, dict, set)):
            return None
        a, b = (lit, value) if flipped else (value, lit)
        compare = _SCALAR_OPS.get(type(op))
        if compare is None or isinstance(op, (ast.Is, ast.IsNot)) and a is not None and b is not None:
            return None  # identity decides nothing about two values but None
        try:
            held = compare(a, b)
        except TypeError:
            return None
        return held if isinstance(held, bool) else None

    def _none_on_run(self, node: ast.AST, fn: ast.AST | None) -> bool:
        """A parameter of solution() that PKB's input factory passes as None (the run's
        `none_args`: `attention_mask`, `softmax_scale`), not rebound before the test."""
        sol = self.functions.get("solution")
        if not isinstance(node, ast.Name) or fn is not sol or sol is None or node.id not in self.run_ctx.none_args:
            return False
        return not any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets)
                       for n in ast.walk(sol))

    def _unset_group(self, node: ast.AST, fn: ast.AST | None) -> bool:
        """A `group=None` parameter of solution(): PKB's inputs are tensors and scalars, and a process
        group only for the parameters its input factory fills (the run's `group_args`), so on
        the run it stays None."""
        if not isinstance(node, ast.Name):
            return False
        if self._helper_param_left_unset(node.id, fn):
            owner = fn  # a helper handed only solution()'s unset groups
        elif self._group_param_left_unset(node.id, fn):
            owner = self.functions["solution"]
        else:
            return False
        # Rebound before the test (`group = group or dist.group.WORLD`): no longer the parameter.
        return not any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets)
                       for n in ast.walk(owner))

    def name_assignments(self, fn: ast.AST) -> dict[str, list[ast.AST]]:
        """`name = value` statements of one function (one target, a plain name), indexed once."""
        cache = self._name_assignments
        found = cache.get(id(fn))
        if found is None:
            found = {}
            for n in ast.walk(fn):
                if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                    found.setdefault(n.targets[0].id, []).append(n.value)
            cache[id(fn)] = found
        return found

    def _flag_on_run(self, test: ast.Name, fn: ast.AST, depth: int) -> bool | None:
        """`use_mc = True` then `if not hasattr(h, "multicast_ptr") or n % 8: use_mc = False`: a
        constant flag set in the function's own body before `test`, whose other assignments all sit
        in branches the run skips, keeps its constant on the run. A global or nonlocal flag, or one
        reassigned anywhere the run may go (a loop, an undecided branch), is left undecided."""
        body = getattr(fn, "body", [])
        if any(isinstance(n, (ast.Global, ast.Nonlocal)) and test.id in n.names for n in ast.walk(fn)):
            return None
        top = [st for st in body if isinstance(st, ast.Assign) and len(st.targets) == 1
               and isinstance(st.targets[0], ast.Name) and st.targets[0].id == test.id]
        if len(top) != 1 or not isinstance(top[0].value, ast.Constant) or not isinstance(top[0].value.value, bool) \
                or top[0].lineno >= test.lineno:
            return None
        for value in self.name_assignments(fn).get(test.id, []):
            if value is not top[0].value and not self._in_skipped_branch(value, fn, depth):
                return None
        return top[0].value.value

    def _in_skipped_branch(self, node: ast.AST, fn: ast.AST, depth: int) -> bool:
        """`node` sits in a branch of an `if` inside `fn` that the run does not take."""
        child, parent = node, self.parents.get(id(node))
        while parent is not None and parent is not fn:
            if isinstance(parent, ast.If) and child is not parent.test:
                taken = self.run_value(parent.test, fn, depth + 1)
                if taken is not None and (child in parent.body) != taken:
                    return True
            child, parent = parent, self.parents.get(id(parent))
        return False

    def _single_assignment(self, name: str, fn: ast.AST) -> ast.AST | None:
        found = self.name_assignments(fn).get(name, [])
        return found[0] if len(found) == 1 else None

    def _is_multicast_expr(self, node: ast.AST, fn: ast.AST | None) -> bool:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "bool") and node.args:
            return self._is_multicast_expr(node.args[0], fn)
        if isinstance(node, ast.Attribute):
            return node.attr in _HANDLE_MULTICAST_ATTRS
        if isinstance(node, ast.Name):
            low = node.id.lower()
            if "multicast" in low or low in ("mc_ptr", "mc_addr", "mc"):
                return True
            if fn is not None:
                value = self._single_assignment(node.id, fn)
                return isinstance(value, (ast.Attribute, ast.Call)) and self._is_multicast_expr(value, None)
        return False

    def _dtype_of(self, node: ast.AST) -> str | None:
        """`torch.bfloat16` -> 'bfloat16'; None for anything else."""
        q = self.qualname(node) if isinstance(node, ast.Attribute) else ""
        if q.startswith("torch.") and q.count(".") == 1:
            return _DTYPE_ALIASES.get(q.split(".")[1], q.split(".")[1])
        return None

    def _is_dtype_expr(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr == "dtype"
        return isinstance(node, ast.Name) and "dtype" in node.id.lower()

    def _small_int(self, node: ast.AST, fn: ast.AST | None, depth: int = 0) -> int | None:
        """The value of a small integer expression of literals, module constants and names bound
        once in `fn` (`numel_per_thread = BYTES_PER_THREAD // 2`); None for anything else."""
        if depth > 3:
            return None
        node = self._constant_of(node, fn)
        value = _literal(node)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(node, ast.Name) and fn is not None:
            bound = self._single_assignment(node.id, fn)
            return self._small_int(bound, fn, depth + 1) if bound is not None else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.FloorDiv, ast.Add, ast.Sub)):
            a, b = self._small_int(node.left, fn, depth + 1), self._small_int(node.right, fn, depth + 1)
            if a is None or b is None or isinstance(node.op, ast.FloorDiv) and b == 0:
                return None
            ops = {ast.Mult: lambda: a * b, ast.FloorDiv: lambda: a // b, ast.Add: lambda: a + b, ast.Sub: lambda: a - b}
            return ops[type(node.op)]()
        return None

    def _is_world_multiple(self, node: ast.AST, fn: ast.AST | None) -> bool:
        """`world_size`, or `k * world_size` for a constant k up to 16 (a vector width)."""
        if self._is_world_expr(node):
            return True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            for a, b in ((node.left, node.right), (node.right, node.left)):
                k = self._small_int(b, fn)
                if self._is_world_expr(a) and k is not None and 0 < k <= 16:
                    return True
        return False

    def _is_world_expr(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in WORLD_NAMES
        if isinstance(node, ast.Attribute):
            return node.attr in ("world_size", "num_ranks")
        if isinstance(node, ast.Call):
            return self.qualname(node.func).endswith("get_world_size")
        return False

    def module_constant(self, name: str) -> ast.AST | None:
        """The value of a module-level name bound once at the top of the file and never rebound
        (`NUM_DEVICES = 8`, `DTYPE_TO_IDX = {torch.float32: 0, ...}`); None otherwise."""
        table = self._module_constants
        if table is None:
            bound: dict[str, list[ast.AST]] = {}
            for st in self.tree.body:
                if isinstance(st, (ast.Assign, ast.AnnAssign)):
                    targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                    for t in targets:
                        if isinstance(t, ast.Name) and st.value is not None:
                            bound.setdefault(t.id, []).append(st.value)
            rebound = {n for node in ast.walk(self.tree) if isinstance(node, ast.Global) for n in node.names}
            table = {k: v[0] for k, v in bound.items() if len(v) == 1 and k not in rebound}
            self._module_constants = table
        return table.get(name)

    def _constant_of(self, node: ast.AST, fn: ast.AST | None) -> ast.AST:
        """`NUM_DEVICES` -> `8` where the name is a module-level integer constant that `fn` does not
        bind itself; the node unchanged otherwise."""
        if isinstance(node, ast.Name) and not (fn is not None and node.id in self.name_assignments(fn)):
            value = self.module_constant(node.id)
            if isinstance(value, ast.Constant) and isinstance(value.value, int) and not isinstance(value.value, bool):
                return value
        return node

    def _dtype_table(self, node: ast.AST, fn: ast.AST | None) -> list[str | None] | None:
        """The dtypes a tuple, list, set or dict literal (or a module-level name bound to one) holds
        as its elements or keys: `(torch.float16, torch.bfloat16)`, `DTYPE_TO_IDX`."""
        if isinstance(node, ast.Name) and not (fn is not None and node.id in self.name_assignments(fn)):
            node = self.module_constant(node.id) or node
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elts = node.elts
        elif isinstance(node, ast.Dict) and None not in node.keys:
            elts = node.keys  # type: ignore[assignment]
        else:
            return None
        return [self._dtype_of(e) for e in elts]

    def _dtype_lookup(self, node: ast.AST, fn: ast.AST | None) -> tuple[bool, ast.AST] | None:
        """`idx = DTYPE_TO_IDX.get(x.dtype, -1)`: (whether the run's dtype is a key, the default)."""
        if isinstance(node, ast.Name) and fn is not None:
            node = self._single_assignment(node.id, fn)
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and len(node.args) == 2 and self._is_dtype_expr(node.args[0]) and _literal(node.args[1]) is not _NO_LITERAL):
            return None
        keys = self._dtype_table(node.func.value, fn)
        if not keys or any(k is None for k in keys) or not self.run_ctx.dtype:
            return None
        if self.run_ctx.dtype not in keys and any(k not in _FLOAT_DTYPES for k in keys):
            return None  # an integer tensor may be what is looked up, and an integer key may hit
        return self.run_ctx.dtype in keys, node.args[1]

    def _input_extent(self, node: ast.AST, fn: ast.AST | None) -> bool:
        """An extent of one of solution()'s inputs: `M` of `M, K = a.shape`, `a.shape[0]`,
        `a.size(1)`, `len(tensors)`. PKB's inputs are never empty, so none of these is 0 on the run."""
        sol = self.functions.get("solution")
        if sol is None or fn is not sol:
            return False
        params = {a.arg for a in sol.args.args}

        def of_param(expr: ast.AST) -> bool:
            if isinstance(expr, ast.Subscript):
                expr = expr.value
            if isinstance(expr, ast.Attribute) and expr.attr == "shape":
                return isinstance(expr.value, ast.Name) and expr.value.id in params
            if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "size":
                return isinstance(expr.func.value, ast.Name) and expr.func.value.id in params
            if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "len" and len(expr.args) == 1:
                return isinstance(expr.args[0], ast.Name) and expr.args[0].id in params
            return False

        if of_param(node):
            return True
        if not isinstance(node, ast.Name) or node.id in params:
            return False
        binds = [n for n in ast.walk(sol) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.NamedExpr))
                 and any(isinstance(t, ast.Name) and t.id == node.id and isinstance(t.ctx, ast.Store)  # not `buf[:n] = x`
                         for tgt in (n.targets if isinstance(n, ast.Assign) else [n.target]) for t in ast.walk(tgt))]
        if len(binds) != 1 or not isinstance(binds[0], ast.Assign) or len(binds[0].targets) != 1:
            return False
        target, value = binds[0].targets[0], binds[0].value
        if isinstance(target, ast.Name):
            return of_param(value) or self._per_rank_extent(node.id, value, fn)
        # `M, K = a.shape`: every name of the unpacking is an extent of `a`
        return isinstance(target, ast.Tuple) and isinstance(value, ast.Attribute) and value.attr == "shape" \
            and isinstance(value.value, ast.Name) and value.value.id in params

    def _per_rank_extent(self, name: str, value: ast.AST, fn: ast.AST | None) -> bool:
        """`name = M // world_size` of an input extent `M`: PKB's sizes are multiples of the world
        size, so each rank's share is never 0 either."""
        if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.FloorDiv)):
            return False
        divisor = value.right
        if isinstance(divisor, ast.Name) and fn is not None:
            divisor = self._single_assignment(divisor.id, fn) or divisor
        if not self._is_world_expr(divisor):
            return False
        # `a = b // ws` and `b = a // ws` would ask each other forever: one name in flight at a time
        if name in self.extents_in_flight:
            return False
        self.extents_in_flight.add(name)
        try:
            return self._input_extent(value.left, fn)
        finally:
            self.extents_in_flight.discard(name)

    def _rounded_down(self, node: ast.AST, fn: ast.AST | None, depth: int = 0) -> str | None:
        """`(n // 8) * 8`, through names bound once (`chunks = n // 8; tail_start = chunks * 8`):
        the text of the size `n` rounded down to a multiple; None for anything else."""
        if isinstance(node, ast.Name) and fn is not None and depth < 3:
            value = self._single_assignment(node.id, fn)
            return self._rounded_down(value, fn, depth + 1) if value is not None else None
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
            return None
        for a, b in ((node.left, node.right), (node.right, node.left)):
            k = _literal(b)
            quotient = a
            if isinstance(a, ast.Name) and fn is not None:
                quotient = self._single_assignment(a.id, fn) or a
            if isinstance(k, int) and isinstance(quotient, ast.BinOp) and isinstance(quotient.op, ast.FloorDiv) \
                    and _literal(quotient.right) == k:
                return ast.unparse(quotient.left)
        return None

    def _compare_value(self, left: ast.AST, op: ast.cmpop, right: ast.AST, fn: ast.AST | None) -> bool | None:
        run = self.run_ctx
        left, right = self._constant_of(left, fn), self._constant_of(right, fn)
        # `res["epoch"] += 1` ... `if res["epoch"] > 1_000_000_000:` (a wrap guard): a counter
        # stepped a little per call never reaches ten million in PKB's few hundred calls.
        for counter, bound, counter_left in ((left, right, True), (right, left, False)):
            limit = _int_value(bound)
            if limit is not None and limit >= _COUNTER_NEVER_REACHES and ast.unparse(counter) in self.call_counters():
                below = {ast.Lt: True, ast.LtE: True, ast.Gt: False, ast.GtE: False, ast.Eq: False, ast.NotEq: True}
                if type(op) in below:
                    held = below[type(op)]
                    return held if counter_left or isinstance(op, (ast.Eq, ast.NotEq)) else not held
        # `tail_start = (n // 8) * 8; if tail_start < n:` the tail of an aligned size is empty.
        if _is_size_expr(right) and self._rounded_down(left, fn) == ast.unparse(right):
            table = {ast.Lt: False, ast.NotEq: False, ast.Eq: True, ast.GtE: True}
            if type(op) in table:
                return table[type(op)]
        # `DTYPE_TO_IDX.get(x.dtype, -1) == -1`: the lookup misses only for a dtype the table lacks.
        lookup = self._dtype_lookup(left, fn)
        if lookup is not None and _literal(right) == _literal(lookup[1]) \
                and isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)):
            missing = not lookup[0]
            return missing if isinstance(op, (ast.Eq, ast.Is)) else not missing
        # dtype: `x.dtype == torch.float32`, `dtype in (torch.float16, torch.bfloat16)`
        if run.dtype and (self._is_dtype_expr(left) or self._is_dtype_expr(right)):
            other = right if self._is_dtype_expr(left) else left
            names = self._dtype_table(right, fn) if isinstance(op, (ast.In, ast.NotIn)) else None
            if names is not None:
                if not names or any(n not in _FLOAT_DTYPES for n in names):
                    return None
                hit = run.dtype in names
                return hit if isinstance(op, ast.In) else not hit
            name = self._dtype_of(other)
            if name not in _FLOAT_DTYPES:
                return None  # index and count tensors are integers whatever the run's precision
            if isinstance(op, (ast.Eq, ast.Is)):
                return run.dtype == name
            if isinstance(op, (ast.NotEq, ast.IsNot)):
                return run.dtype != name
            return None
        # `n >= world_size`, `n >= 8 * world_size`: PKB's inputs hold far more elements than a few
        # per rank.
        if _is_size_expr(left) and self._is_world_multiple(right, fn) or _is_size_expr(right) and self._is_world_multiple(left, fn):
            size_left = _is_size_expr(left)
            if isinstance(op, (ast.GtE, ast.Gt)):
                return size_left
            if isinstance(op, (ast.Lt, ast.LtE)):
                return not size_left
        # world size: `world_size == 1` never holds on a multi-GPU run; with the tree's size, decide all.
        if self._is_world_expr(left) or self._is_world_expr(right):
            other = right if self._is_world_expr(left) else left
            if not (isinstance(other, ast.Constant) and isinstance(other.value, int)):
                return None
            c = other.value
            flipped = not self._is_world_expr(left)
            sizes = [run.world_size] if run.world_size else [2, 3, 4, 8, 16, 1024]
            results = {_cmp(c, op, w) if flipped else _cmp(w, op, c) for w in sizes}
            return results.pop() if len(results) == 1 and None not in results else None
        # `W = dist.get_world_size(group)` then `if W == 1:`: a size-one shortcut never runs on
        # PKB's multi-GPU run (other sizes are left undecided: W may be a subgroup's size), unless
        # the group is the whole world on the run (`group = group or dist.group.WORLD` with the
        # parameter left at None): then W is the run's world size.
        for a, b, ops in ((left, right, (ast.Eq, ast.NotEq, ast.LtE, ast.Gt)), (right, left, (ast.Eq, ast.NotEq))):
            if isinstance(a, ast.Name) and fn is not None and isinstance(b, ast.Constant) and isinstance(b.value, int) \
                    and isinstance(op, ops):
                value = self._single_assignment(a.id, fn)
                if value is None or not self._is_world_expr(value):
                    continue
                if run.world_size and self._whole_world_size(value, fn):
                    return _cmp(run.world_size, op, b.value) if a is left else _cmp(b.value, op, run.world_size)
                if b.value == 1:
                    sizes_one = isinstance(op, (ast.Eq, ast.LtE))
                    return not sizes_one
        # multicast: `hdl.multicast_ptr != 0`, `mc_ptr is None`
        if run.multicast is not None and (self._is_multicast_expr(left, fn) or self._is_multicast_expr(right, fn)):
            other = right if self._is_multicast_expr(left, fn) else left
            if isinstance(other, ast.Constant) and other.value in (0, None):
                present = run.multicast
                if isinstance(op, (ast.Eq, ast.Is)):
                    return not present
                if isinstance(op, (ast.NotEq, ast.IsNot, ast.Gt)):
                    return present
            return None
        # PKB's inputs are large, non-empty and aligned to powers of two.
        if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Mod) and isinstance(right, ast.Constant) and right.value == 0:
            if isinstance(op, ast.Eq):
                return True
            if isinstance(op, ast.NotEq):
                return False
        if isinstance(right, ast.Constant) and right.value == 0 and (_is_size_expr(left) or self._input_extent(left, fn)):
            if isinstance(op, (ast.Eq, ast.LtE)):
                return False
            if isinstance(op, (ast.Gt, ast.NotEq)):
                return True
        return None

    def call_counters(self) -> set[str]:
        """The expressions (`self.calls`, `res["epoch"]`, `_step`) that the module only ever steps
        up by a small constant (`x += 1`), as their source text."""
        if self._call_counters is None:
            stepped: set[str] = set()
            for node in ast.walk(self.tree):
                if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
                    step = _int_value(node.value)
                    if step is not None and 0 < step <= 16:
                        stepped.add(ast.unparse(node.target))
            self._call_counters = stepped
        return self._call_counters

    def _whole_world_size(self, value: ast.AST, fn: ast.AST) -> bool:
        """`dist.get_world_size()`, or of a group that is the whole world on the run: the default
        group (`dist.group.WORLD`), or a name bound once to `group or dist.group.WORLD` where
        `group` is solution()'s group parameter that the run leaves at None."""
        if not isinstance(value, ast.Call) or not self.qualname(value.func).endswith("get_world_size"):
            return False
        arg = value.args[0] if value.args else next((k.value for k in value.keywords if k.arg == "group"), None)
        if arg is None or _is_world_group(arg):
            return True
        if not isinstance(arg, ast.Name):
            return False
        if self._group_param_left_unset(arg.id, fn) and not any(
                isinstance(n, ast.Assign) and n.lineno < value.lineno and any(isinstance(t, ast.Name) and t.id == arg.id for t in n.targets)
                for n in ast.walk(fn)):
            return True  # `dist.get_world_size(group)` with the parameter still None: the default group
        bound = self._single_assignment(arg.id, fn)
        if not (isinstance(bound, ast.BoolOp) and isinstance(bound.op, ast.Or) and len(bound.values) == 2
                and _is_world_group(bound.values[1]) and isinstance(bound.values[0], ast.Name)):
            return False
        return self._group_param_left_unset(bound.values[0].id, fn)

    def _helper_param_left_unset(self, name: str, fn: ast.AST | None) -> bool:
        """`def _reduce(val, group)` called only from solution() as `_reduce(x, fsdp_group)` with
        solution()'s unset group parameter: on the run the helper's `group` is None too."""
        sol = self.functions.get("solution")
        if not isinstance(fn, ast.FunctionDef) or fn is sol or sol is None:
            return False
        params = [a.arg for a in fn.args.args]
        if name not in params:
            return False
        at = params.index(name)
        calls = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == fn.name]
        if not calls:
            return False
        for call in calls:
            arg = call.args[at] if at < len(call.args) else next((k.value for k in call.keywords if k.arg == name), None)
            if not (isinstance(arg, ast.Name) and self.enclosing.get(id(call)) is sol and self._unset_group(arg, sol)):
                return False
        return True

    def _group_param_left_unset(self, name: str, fn: ast.AST) -> bool:
        """solution()'s parameter `name`, a group defaulting to None that PKB's inputs do not fill."""
        sol = self.functions.get("solution")
        if fn is not sol or sol is None or not re.search(r"(^|_)(group|pg)$", name) or name in self.run_ctx.group_args:
            return False
        defaults = dict(zip([a.arg for a in sol.args.args[len(sol.args.args) - len(sol.args.defaults):]], sol.args.defaults))
        defaults.update(zip([a.arg for a in sol.args.kwonlyargs], sol.args.kw_defaults))
        default = defaults.get(name)  # None for a name that is no parameter with a default
        return isinstance(default, ast.Constant) and default.value is None

    def _isinstance_value(self, call: ast.Call, fn: ast.AST | None) -> bool | None:
        """`isinstance(x, (list, tuple))` / `isinstance(x, torch.Tensor)` on the run: a parameter of
        solution() annotated as a tensor is one; split sizes (`input_split_sizes`, a helper's
        parameter that every caller passes split sizes) are Python lists in PKB's inputs."""
        arg, types = call.args
        names = types.elts if isinstance(types, ast.Tuple) else [types]
        kinds = {n.id if isinstance(n, ast.Name) else self.qualname(n) for n in names}
        seq = {"list", "tuple", "List", "Tuple", "Sequence", "collections.abc.Sequence"}
        if not kinds or not (kinds <= seq or kinds <= {"torch.Tensor"}):
            return None
        if not isinstance(arg, ast.Name) or fn is None:
            return None
        is_list = self._list_input(arg.id, fn)
        if is_list is None:
            return None
        return is_list if kinds <= seq else not is_list

    def _list_input(self, name: str, fn: ast.AST, depth: int = 0) -> bool | None:
        """Whether parameter `name` of `fn` holds a Python list on the run (None: unknown)."""
        params = [a.arg for a in getattr(fn, "args", ast.arguments(args=[])).args]
        if name not in params or depth > 2:
            return None
        if fn is self.functions.get("solution"):
            ann = next((a.annotation for a in fn.args.args if a.arg == name), None)
            text = ast.unparse(ann) if ann is not None else ""
            if "Tensor" in text and "List" not in text and "list" not in text:
                return False
            return True if "split" in name.lower() else None
        # A helper: what do its callers pass?
        pos = params.index(name) - (1 if params and params[0] in ("self", "cls") else 0)
        seen: list[bool | None] = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)) and \
                    (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == fn.name:
                a = node.args[pos] if 0 <= pos < len(node.args) else next((k.value for k in node.keywords if k.arg == name), None)
                if a is None:
                    return None
                if "split" in ast.unparse(a).lower():
                    seen.append(True)
                elif isinstance(a, ast.Name) and self.enclosing.get(id(node)) is not None:
                    seen.append(self._list_input(a.id, self.enclosing[id(node)], depth + 1))
                else:
                    seen.append(None)
        return True if seen and all(v is True for v in seen) else None
