"""The Python pass: what a candidate file does, read with the standard `ast` module.

It finds the CUDA sources (with their file lines), Triton kernels, every torch.distributed,
symmetric-memory and torch.cuda call, and decides for each call whether it sits on the timed path
(`solution()` runs it on every call), in a cached set-up branch (runs once), at import, or nowhere.
It also follows symmetric-memory pointers (buffer_ptrs, signal pads, get_buffer views) into the
arguments of extension, Triton and CuPy launches, which seeds the C++ dataflow of the clang pass.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from pkb.facts import (
    ArgInfo,
    AssertFact,
    CallSite,
    ConstantFact,
    CudaSource,
    PythonFacts,
    ReusedReturn,
    TritonKernel,
)
from analyzer.strings import StringResolver, cpp_signatures

COLLECTIVES = {
    "all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "reduce_scatter",
    "reduce_scatter_tensor", "_reduce_scatter_base", "broadcast", "reduce", "all_to_all",
    "all_to_all_single", "gather", "scatter", "all_gather_object", "broadcast_object_list",
    "all_reduce_coalesced", "all_gather_tensor", "reduce_scatter_tensor_coalesced",
    "all_gather_into_tensor_coalesced", "wait_tensor", "permute_tensor",
}
P2P = {"send", "recv", "isend", "irecv", "batch_isend_irecv", "P2POp", "send_object_list",
       "recv_object_list"}
SYMM_HANDLE_METHODS = {"barrier", "put_signal", "wait_signal", "get_buffer", "get_signal_pad"}
SYMM_HANDLE_ATTRS = {
    "buffer_ptrs": "peer_ptr_array",
    "buffer_ptrs_dev": "peer_ptr_array",
    "signal_pad_ptrs": "signal_ptr_array",
    "signal_pad_ptrs_dev": "signal_ptr_array",
    "multicast_ptr": "multicast_ptr",
}
COMPILE_FUNCS = {"load_inline", "compile_cuda_extension", "RawKernel", "RawModule", "load",
                 "compile_parallelkittens_extension"}
ALLOC_FUNCS = {"empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like",
               "full_like", "empty_strided", "randn", "rand"}
COMPUTE_FUNCS = {"matmul", "mm", "bmm", "addmm", "linear", "einsum", "softmax", "layer_norm",
                 "rms_norm", "scaled_dot_product_attention", "baddbmm", "conv2d", "log_softmax",
                 "cross_entropy", "exp", "mul", "add", "sum", "fft", "rfft", "irfft", "rfft2", "irfft2", "fftn",
                 "sort", "argsort", "topk", "cdist", "cos", "sin", "conv1d", "conv3d", "norm", "sqrt", "rsqrt",
                 "logsumexp", "sigmoid", "silu", "gelu", "relu", "div", "pow", "cumsum",
                 "embedding", "_scaled_mm", "bucketize", "searchsorted", "tanh", "log", "max", "min", "mean"}
RANK_NAMES = {"rank", "my_rank", "local_rank", "rank_id", "cur_rank", "self_rank", "myrank"}
WORLD_NAMES = {"world_size", "world", "ws", "num_ranks", "nranks", "n_ranks", "world_sz",
               "num_gpus", "ngpus", "WORLD_SIZE", "NUM_RANKS", "NRANKS", "N_RANKS", "NUM_GPUS",
               "WORLD"}
PEERISH = ("peer_ptr", "peer_ptr_array", "peer_tensor", "signal_ptr", "signal_ptr_array",
           "multicast_ptr", "symm_local", "nvshmem_ptr")
_DEF_RE = re.compile(r'\bm\.def\(\s*"(\w+)"')
# Path ranks: a call reached by several routes keeps the one that runs most often.
_PATH_RANK = {"unreached": 0, "module": 0, "fallback": 1, "setup": 2, "timed": 3}
_FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
_TORCH_DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8": "float8_e4m3fn"}
_DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16",
                  "float32": "float32", "float16": "float16", "float64": "float64"}
# Names that hold small per-call metadata (split sizes, counts, offsets): copying them to the host
# is a host synchronisation, not staging of the payload.
_METADATA_WORDS = ("split", "count", "size", "offset", "len", "num", "idx", "index", "indptr",
                   "cumsum", "nnz", "max", "min", "norm", "scale", "amax", "meta", "shape", "topk")


def is_metadata_collective(call: CallSite) -> bool:
    """A collective or p2p call whose tensors are all split sizes, counts or offsets: it moves a few
    numbers for the host, not the payload (`dist.all_gather_into_tensor(all_counts, counts)`)."""
    tensors = [a.text for a in call.args if a.keyword in ("", "tensor", "output", "input", "output_tensor", "input_tensor")]
    tensors = [t for t in tensors if re.fullmatch(r"[\w.\[\]]+", t) and not t.startswith(("dist.", "group"))]
    return bool(tensors) and all(any(w in t.lower() for w in ("split", "count", "size", "offset", "meta", "num_", "nnz", "len")) for t in tensors)


@dataclass(frozen=True)
class RunContext:
    """What PKB's run fixes about the call (from the run tree's name; None where unknown).

    The tree `solutions_cuda_bf16_h100_8_...` ran at world size 8 on one NVSwitch node, where
    multicast exists, with bfloat16 inputs. Branches that cannot run there are `fallback`.
    """

    dtype: str | None = None  # torch dtype name of the inputs ('bfloat16')
    world_size: int | None = None
    multicast: bool | None = None


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


def _dotted(node: ast.AST) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Call):
        parts.append(_dotted(node.func) + "()")
    else:
        return ""
    return ".".join(reversed(parts))



@dataclass
class _Ctx:
    function: str
    path: str
    rank_conditional: bool = False
    in_loop: bool = False
    stream: str = ""


@dataclass
class _Scope:
    """Per-function pointer kinds of names (flow-insensitive; the most specific kind wins)."""

    kinds: dict[str, str] = field(default_factory=dict)
    origin: dict[str, int] = field(default_factory=dict)
    rank_vars: set[str] = field(default_factory=set)


def _ctx_on(ctx: _Ctx, path: str) -> _Ctx:
    return _Ctx(ctx.function, path, ctx.rank_conditional, ctx.in_loop, ctx.stream)


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


def _stronger(a: str, b: str) -> str:
    order = ("unknown", "local", "symm_local", "multicast_ptr", "signal_ptr", "signal_ptr_array",
             "nvshmem_ptr", "peer_tensor", "peer_ptr", "peer_ptr_array")
    return a if order.index(a) >= order.index(b) else b


class PythonPass:
    def __init__(self, text: str, file: str, tree: ast.Module | None = None, run: RunContext | None = None):
        self.text = text
        self.file = file
        self.lines = text.splitlines()
        self.tree = tree if tree is not None else ast.parse(text)
        self.facts = PythonFacts()
        self.aliases: dict[str, str] = {}  # local name -> dotted module/object name
        self.functions: dict[str, ast.FunctionDef] = {}  # simple name -> def (module and methods)
        self.triton_names: set[str] = set()
        self.cupy_kernels: dict[str, str] = {}  # python var -> kernel name
        self.ext_functions: set[str] = set()
        self.module_scope = _Scope()
        self.scopes: dict[str, _Scope] = {}
        self.returns: dict[str, list[str]] = {}  # function -> kinds of returned tuple items
        self.tuples: dict[str, list[str]] = {}  # name / cache slot -> kinds of a tuple stored there
        self.path_of: dict[str, str] = {}  # function -> best path reached
        self.strings = StringResolver(self.tree, text)
        self.global_names: set[str] = set()
        self.handle_names: set[str] = set()  # names bound from symm_mem.rendezvous(...)
        self.caching_fns: set[str] = set()  # functions that return what they cached on a first call
        self.fallback_ranges: list[tuple[int, int]] = []  # (first, last) lines of blocks the run skips
        self.run_ctx = run if run is not None else run_context_of_path(file)
        self.classes: dict[str, dict[str, ast.FunctionDef]] = {}  # class -> method name -> def
        self.instances: dict[str, str] = {}  # name / `*.attr` bound to an instance of a file class
        self.method_class: dict[int, str] = {}  # id(method def) -> its class

    # ---- entry --------------------------------------------------------------------------------

    def run(self) -> PythonFacts:
        self._imports()
        self._definitions()
        self.enclosing = self._enclosing_functions()
        self._pointer_kinds()
        self._reachability()
        self._walk_calls()
        self._cuda_sources()
        self._ext_signatures()
        self._triton()
        self._asserts_and_constants()
        self._reused_returns()
        self.facts.calls.sort(key=lambda c: (c.line, c.col))
        return self.facts

    def snippet(self, line: int) -> str:
        return self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""

    # ---- names ------------------------------------------------------------------------------

    def _imports(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                    self.facts.imports.append(a.name)
            elif isinstance(node, ast.ImportFrom) and node.module:
                self.facts.imports.append(node.module)
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def qualname(self, func: ast.AST) -> str:
        dotted = _dotted(func)
        if not dotted:
            # `out[r].copy_`, `(a + b).cpu`: the receiver has no name, the method still counts.
            return "<expr>." + func.attr if isinstance(func, ast.Attribute) else ""
        head, _, rest = dotted.partition(".")
        if head in self.aliases:
            return self.aliases[head] + ("." + rest if rest else "")
        return dotted

    def _definitions(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.setdefault(node.name, node)  # type: ignore[arg-type]
                for dec in node.decorator_list:
                    target = dec.func if isinstance(dec, ast.Call) else dec
                    if self.qualname(target).split(".")[-1] in ("jit", "autotune", "heuristics") and (
                        "triton" in self.qualname(target) or self.qualname(target) == "jit"
                    ):
                        self.triton_names.add(node.name)
            elif isinstance(node, ast.Global):
                self.global_names.update(node.names)
        for node in self.tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                self.global_names.update(t.id for t in targets if isinstance(t, ast.Name))
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef):
                methods = {m.name: m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
                self.classes[node.name] = methods  # type: ignore[assignment]
                for m in methods.values():
                    self.method_class[id(m)] = node.name
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and self.qualname(node.value.func).endswith("rendezvous"):
                for t in node.targets:
                    for sub in ast.walk(t):
                        if isinstance(sub, (ast.Name, ast.Attribute)) and _dotted(sub):
                            self.handle_names.add(_dotted(sub))
        # `_runner = Runner(...)`, `self.op = Op()`: calls through these names run the class's methods.
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) \
                    and node.value.func.id in self.classes:
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.instances[t.id] = node.value.func.id
                    elif isinstance(t, ast.Attribute):
                        self.instances["*." + t.attr] = node.value.func.id
        sol = self.functions.get("solution")
        if sol is not None and sol in self.tree.body:
            self.facts.has_solution = True
            self.facts.solution_line = sol.lineno
            self.facts.solution_params = [a.arg for a in sol.args.args]
        elif sol is not None:
            self.facts.has_solution = True
            self.facts.solution_line = sol.lineno
            self.facts.solution_params = [a.arg for a in sol.args.args if a.arg != "self"]

    # ---- pointer kinds ------------------------------------------------------------------------

    def _scope_for(self, fn: ast.AST | None) -> _Scope:
        if fn is None:
            return self.module_scope
        return self.scopes.setdefault(getattr(fn, "name", ""), _Scope())

    def kind_of(self, node: ast.AST, scope: _Scope) -> str:
        """What `node` points at, as far as the dataflow knows."""
        if isinstance(node, ast.Name):
            return scope.kinds.get(node.id) or self.module_scope.kinds.get(node.id, "unknown")
        if isinstance(node, ast.Attribute):
            if node.attr in SYMM_HANDLE_ATTRS:
                return SYMM_HANDLE_ATTRS[node.attr]
            key = _dotted(node)
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
            return "unknown"
        if isinstance(node, ast.BinOp):
            return _stronger(self.kind_of(node.left, scope), self.kind_of(node.right, scope))
        if isinstance(node, (ast.List, ast.Tuple, ast.ListComp)):
            elts = node.elts if not isinstance(node, ast.ListComp) else [node.elt]
            best = "unknown"
            for e in elts:
                best = _stronger(best, self.kind_of(e, scope))
            if best == "peer_ptr":
                return "peer_ptr_array"
            if best == "signal_ptr":
                return "signal_ptr_array"
            return best
        return "unknown"

    def _is_rank_expr(self, node: ast.AST, scope: _Scope) -> bool:
        if isinstance(node, ast.Name):
            return node.id in RANK_NAMES or node.id in scope.rank_vars
        if isinstance(node, ast.Attribute):
            return node.attr in ("rank",)
        if isinstance(node, ast.Call):
            return self.qualname(node.func).endswith("get_rank")
        return False

    def _is_host_tensor(self, value: ast.AST) -> bool:
        if not isinstance(value, ast.Call):
            return False
        last = self.qualname(value.func).split(".")[-1]
        if last in ("cpu", "pin_memory"):
            return True
        consts = [a.value for a in value.args if isinstance(a, ast.Constant)]
        kws = {k.arg: k.value for k in value.keywords if k.arg}
        if last == "to" and "cpu" in consts:
            return True
        pinned = isinstance(kws.get("pin_memory"), ast.Constant) and kws["pin_memory"].value is True
        on_cpu = isinstance(kws.get("device"), ast.Constant) and kws["device"].value == "cpu"
        if last in ALLOC_FUNCS and (pinned or on_cpu):
            return True
        # `torch.arange(n)`, `torch.tensor(sizes)`: a factory with no device makes a CPU tensor.
        q = self.qualname(value.func)
        factory = last in (*ALLOC_FUNCS, "tensor", "arange", "as_tensor", "linspace", "from_numpy") and not last.endswith("_like")
        return q.startswith("torch.") and factory and "device" not in kws and last != "from_numpy" or q == "torch.from_numpy"

    def _is_host_value(self, node: ast.AST) -> bool:
        """A tensor known to live in host memory: a name bound to one, or an expression making one."""
        if isinstance(node, ast.Attribute) and node.attr in ("T", "mT", "data") or isinstance(node, ast.Subscript):
            return self._is_host_value(node.value)  # `cpu_t.T`, `cpu_t[i]`
        if isinstance(node, (ast.Name, ast.Attribute)):
            return _dotted(node) in self.facts.host_tensors
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr not in ("cuda", "to") \
                and self._is_host_value(node.func.value):
            return True  # `cpu_t.sum()`, `cpu_t.long()`: an op on a host tensor stays on the host
        return self._is_host_tensor(node)

    def _is_metadata(self, call: ast.Call) -> bool:
        """`.cpu()` of split sizes, counts or offsets (or read back at once with .tolist()/.item()):
        a few numbers the host needs, not the payload."""
        parent = self.parents.get(id(call))
        if isinstance(parent, ast.Attribute) and parent.attr in ("tolist", "item", "numpy", "long", "int"):
            return True
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in ("int", "list", "tuple", "float", "sum", "max"):
            return True
        names = [_dotted(call.func.value)] if isinstance(call.func, ast.Attribute) else []
        if isinstance(parent, ast.Assign):
            names += [_dotted(t) for t in parent.targets]
            # `counts_cpu = counts.cpu()` then `counts_cpu[i].item()`: read back as numbers
            fn = self.enclosing.get(id(call))
            local = {t.id for t in parent.targets if isinstance(t, ast.Name)}
            for n in ast.walk(fn) if fn is not None else []:
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("item", "tolist") \
                        and {x.id for x in ast.walk(n.func.value) if isinstance(x, ast.Name)} & local:
                    return True
        return any(w in n.lower() for n in names if n for w in _METADATA_WORDS)

    def _assign_kinds(self, targets: list[ast.AST], value: ast.AST, scope: _Scope, line: int) -> None:
        if self._is_host_tensor(value):
            for t in targets:
                name = _dotted(t) if isinstance(t, (ast.Name, ast.Attribute)) else ""
                if name and name not in self.facts.host_tensors:
                    self.facts.host_tensors.append(name)
        if isinstance(value, ast.Dict):
            # State dicts (`st = {"peers": [...]}`) are read back by key, often under another name.
            for key, val in zip(value.keys, value.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    kind = self.kind_of(val, scope)
                    if kind != "unknown":
                        slot = f"*[{key.value!r}]"
                        self.module_scope.kinds[slot] = _stronger(self.module_scope.kinds.get(slot, "unknown"), kind)
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
            if isinstance(t, ast.Tuple):
                kinds = self._tuple_kinds(value)
                for te, k in zip(t.elts, kinds):
                    self._set_kind(te, k, scope, line)
                continue
            self._set_kind(t, self.kind_of(value, scope), scope, line)

    @staticmethod
    def _slot(node: ast.AST) -> str:
        """A key for where a value is stored: a name, an attribute, or any slot of a dict."""
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return "*." + node.attr
        if isinstance(node, ast.Subscript) and isinstance(node.value, (ast.Name, ast.Attribute)):
            return PythonPass._slot(node.value) + "[*]"
        return ""

    def _tuple_kinds(self, value: ast.AST) -> list[str]:
        if isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute)):
            name = value.func.id if isinstance(value.func, ast.Name) else value.func.attr
            return self.returns.get(name, [])
        return self.tuples.get(self._slot(value), [])

    def _set_kind(self, target: ast.AST, kind: str, scope: _Scope, line: int) -> None:
        if kind == "unknown":
            return
        if isinstance(target, ast.Name):
            key = target.id
        elif isinstance(target, ast.Attribute):
            key = _dotted(target)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and isinstance(target.slice, ast.Constant):
            key = f"{target.value.id}[{target.slice.value!r}]"
        else:
            return
        if isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Constant):
            slot = f"*[{target.slice.value!r}]"
            self.module_scope.kinds[slot] = _stronger(self.module_scope.kinds.get(slot, "unknown"), kind)
        dest = self.module_scope if (key.split("[")[0] in self.global_names or isinstance(target, ast.Attribute)) else scope
        dest.kinds[key] = _stronger(dest.kinds.get(key, "unknown"), kind)
        dest.origin.setdefault(key, line)
        if isinstance(target, ast.Attribute):
            slot = "*." + target.attr
            self.module_scope.kinds[slot] = _stronger(self.module_scope.kinds.get(slot, "unknown"), kind)
        if dest is not scope:
            scope.kinds[key] = dest.kinds[key]

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
                        elif isinstance(node, ast.For) and isinstance(node.target, ast.Name):
                            k = self.kind_of(node.iter, scope)
                            if k in ("peer_ptr_array", "signal_ptr_array"):
                                self._set_kind(node.target, "peer_ptr" if k == "peer_ptr_array" else "signal_ptr", scope, node.lineno)
                if fn is not None:
                    for node in ast.walk(fn):
                        if isinstance(node, ast.Return) and node.value is not None:
                            vals = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                            kinds = [self.kind_of(v, scope) for v in vals]
                            stored = self._tuple_kinds(node.value)
                            if len(vals) == 1 and stored:
                                kinds = stored
                            old = self.returns.get(fn.name)  # type: ignore[union-attr]
                            if old is None or len(old) != len(kinds):
                                self.returns[fn.name] = kinds  # type: ignore[union-attr]
                            else:
                                self.returns[fn.name] = [_stronger(a, b) for a, b in zip(old, kinds)]  # type: ignore[union-attr]

    # ---- timed path -----------------------------------------------------------------------------

    def _is_cache_guard(self, test: ast.AST, body: list[ast.stmt], fn: ast.AST | None = None) -> bool:
        """`if _ext is None:` / `if key not in _cache:` / `if not self._ready:` whose body fills it.

        The test may name a local read from the cache first (`res = _cache.get(key)` then
        `if res is not None: return res`): the local stands for the cache it was read from."""
        names: set[str] = set()
        t = test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else test
        if isinstance(t, ast.BoolOp):
            parts = t.values
        else:
            parts = [t]
        for p in parts:
            if isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.Not):
                p = p.operand
            if isinstance(p, ast.Compare):
                for side in [p.left, *p.comparators]:
                    d = _dotted(side)
                    if d:
                        names.add(d)
            elif isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id == "hasattr":
                if p.args:
                    names.add(_dotted(p.args[0]))
            else:
                d = _dotted(p)
                if d:
                    names.add(d)
        if fn is not None:
            for n in list(names):
                if "." not in n and n not in self.global_names:
                    names |= self._cache_reads(n, fn)
        # Module globals, attributes of self/cls, and attributes of the file's functions and
        # classes (`solution._state`, `hasattr(solution, "mgr")`) outlive the call.
        module_defs = {n.name for n in self.tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        cached = {n for n in names if n.split(".")[0] in self.global_names or n.startswith("self.") or n.split(".")[0] in ("cls",)
                  or ("." in n or n in module_defs) and n.split(".")[0] in module_defs}
        if not cached:
            return False
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
                    for sub in ast.walk(tg):
                        d = _dotted(sub) if isinstance(sub, (ast.Name, ast.Attribute)) else ""
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
            d = _dotted(v) if isinstance(v, (ast.Name, ast.Attribute)) else ""
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

    def _is_rank_test(self, test: ast.AST, fn: ast.AST | None) -> bool:
        scope = self._scope_for(fn)
        for node in ast.walk(test):
            if isinstance(node, ast.Compare) and any(self._is_rank_expr(x, scope) for x in [node.left, *node.comparators]):
                return True
            if isinstance(node, ast.Name) and node is test and self._is_rank_expr(node, scope):
                return True
        return False

    def _reachability(self) -> None:
        """Which functions run on every call of solution(), and which only once."""
        sol = self.functions.get("solution")
        self.stmt_ctx: dict[int, _Ctx] = {}  # id(call node) -> context
        if sol is None:
            return
        self._visit_function(sol, "timed", False, set())

    def _visit_function(self, fn: ast.AST, path: str, rank_cond: bool, stack: set[str]) -> None:
        name = getattr(fn, "name", "")
        prev = self.path_of.get(name)
        if (prev is not None and _PATH_RANK[prev] >= _PATH_RANK[path]) or name in stack:
            return
        decos = [self.qualname(d.func if isinstance(d, ast.Call) else d) for d in getattr(fn, "decorator_list", [])]
        if path == "timed" and any(d.split(".")[-1] in ("lru_cache", "cache", "cached_property") for d in decos):
            path = "setup"
            self.caching_fns.add(name)
            if prev is not None and _PATH_RANK[prev] >= _PATH_RANK[path]:
                return
        self.path_of[name] = path
        ctx = _Ctx(function=name, path=path, rank_conditional=rank_cond)
        self._visit_block(fn.body, ctx, fn, stack | {name})  # type: ignore[attr-defined]

    def _visit_block(self, body: list[ast.stmt], ctx: _Ctx, fn: ast.AST, stack: set[str]) -> None:
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

    def _mark_fallback(self, block: list[ast.stmt]) -> None:
        if block:
            self.fallback_ranges.append((block[0].lineno, max(getattr(b, "end_lineno", b.lineno) or b.lineno for b in block)))

    def _in_fallback(self, line: int) -> tuple[int, int] | None:
        return next((r for r in self.fallback_ranges if r[0] <= line <= r[1]), None)

    def _is_cache_guard_early(self, stmt: ast.If, rest: list[ast.stmt], fn: ast.AST | None = None) -> bool:
        return self._is_cache_guard(stmt.test, rest, fn)

    # ---- the run's branch ---------------------------------------------------------------------

    def run_value(self, test: ast.AST, fn: ast.AST | None, depth: int = 0) -> bool | None:
        """Whether `test` holds on PKB's run (its dtype, world size, multicast, large aligned CUDA
        inputs); None where the run does not decide it."""
        if depth > 4:
            return None
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
        if isinstance(test, ast.Name) and fn is not None:
            if self._unset_group(test, fn):
                return False
            if self._is_multicast_expr(test, fn):
                return self.run_ctx.multicast
            value = self._single_assignment(test.id, fn)
            return self.run_value(value, fn, depth + 1) if value is not None else None
        if isinstance(test, ast.Attribute):
            if test.attr in ("is_cuda",):
                return True
            if self._is_multicast_expr(test, fn):
                return self.run_ctx.multicast
            return None
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Attribute) and test.func.attr == "is_contiguous" and not test.args:
            return True
        if isinstance(test, ast.Call) and self.qualname(test.func) in (
                "torch.distributed.is_initialized", "torch.distributed.is_available", "torch.cuda.is_available"):
            return True  # PKB runs every candidate under an initialised process group on GPUs
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance" and len(test.args) == 2:
            return self._isinstance_value(test, fn)
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            if isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None \
                    and isinstance(test.ops[0], (ast.Is, ast.IsNot)) and self._unset_group(test.left, fn):
                return isinstance(test.ops[0], ast.Is)
            return self._compare_value(test.left, test.ops[0], test.comparators[0], fn)
        return None

    def _unset_group(self, node: ast.AST, fn: ast.AST | None) -> bool:
        """A `group=None` parameter of solution(): PKB's inputs are tensors and scalars, never a
        process group, so on the run it stays None."""
        sol = self.functions.get("solution")
        if fn is not sol or sol is None or not isinstance(node, ast.Name) or not re.search(r"(^|_)(group|pg)$", node.id):
            return False
        args = sol.args.args
        defaults = dict(zip([a.arg for a in args[len(args) - len(sol.args.defaults):]], sol.args.defaults))
        default = defaults.get(node.id)
        if default is None:
            kw = dict(zip([a.arg for a in sol.args.kwonlyargs], sol.args.kw_defaults))
            default = kw.get(node.id)
        if not (isinstance(default, ast.Constant) and default.value is None):
            return False
        # Rebound before the test (`group = group or dist.group.WORLD`): no longer the parameter.
        return not any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets)
                       for n in ast.walk(sol))

    def _single_assignment(self, name: str, fn: ast.AST) -> ast.AST | None:
        found = [n.value for n in ast.walk(fn) if isinstance(n, ast.Assign) and len(n.targets) == 1
                 and isinstance(n.targets[0], ast.Name) and n.targets[0].id == name]
        return found[0] if len(found) == 1 else None

    def _is_multicast_expr(self, node: ast.AST, fn: ast.AST | None) -> bool:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "bool") and node.args:
            return self._is_multicast_expr(node.args[0], fn)
        if isinstance(node, ast.Attribute):
            return node.attr in ("multicast_ptr", "mc_ptr", "multicast_addr")
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

    def _is_world_expr(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return node.id in WORLD_NAMES
        if isinstance(node, ast.Attribute):
            return node.attr in ("world_size", "num_ranks")
        if isinstance(node, ast.Call):
            return self.qualname(node.func).endswith("get_world_size")
        return False

    def _compare_value(self, left: ast.AST, op: ast.cmpop, right: ast.AST, fn: ast.AST | None) -> bool | None:
        run = self.run_ctx
        # dtype: `x.dtype == torch.float32`, `dtype in (torch.float16, torch.bfloat16)`
        if run.dtype and (self._is_dtype_expr(left) or self._is_dtype_expr(right)):
            other = right if self._is_dtype_expr(left) else left
            if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)):
                names = [self._dtype_of(e) for e in right.elts]
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
        if isinstance(right, ast.Constant) and right.value == 0 and _is_size_expr(left):
            if isinstance(op, (ast.Eq, ast.LtE)):
                return False
            if isinstance(op, (ast.Gt, ast.NotEq)):
                return True
        return None

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
    def _visit_stmt(self, stmt: ast.stmt, ctx: _Ctx, fn: ast.AST, stack: set[str]) -> None:
        if isinstance(stmt, ast.If):
            self._visit_expr(stmt.test, ctx, fn, stack)
            body_ctx, else_ctx = ctx, ctx
            if ctx.path == "timed" and self._is_cache_guard(stmt.test, stmt.body, fn):
                body_ctx = _ctx_on(ctx, "setup")
                self.caching_fns.add(getattr(fn, "name", ""))
            taken = self.run_value(stmt.test, fn) if ctx.path != "fallback" else None
            if taken is True:
                else_ctx = _ctx_on(else_ctx, "fallback")
                self._mark_fallback(stmt.orelse)
            elif taken is False:
                body_ctx = _ctx_on(body_ctx, "fallback")
                self._mark_fallback(stmt.body)
            if self._is_rank_test(stmt.test, fn):
                body_ctx = _Ctx(body_ctx.function, body_ctx.path, True, body_ctx.in_loop, body_ctx.stream)
                else_ctx = _Ctx(else_ctx.function, else_ctx.path, True, else_ctx.in_loop, else_ctx.stream)
            self._visit_block(stmt.body, body_ctx, fn, stack)
            self._visit_block(stmt.orelse, else_ctx, fn, stack)
            return
        if isinstance(stmt, (ast.For, ast.While, ast.AsyncFor)):
            head = stmt.iter if isinstance(stmt, (ast.For, ast.AsyncFor)) else stmt.test
            self._visit_expr(head, ctx, fn, stack)
            loop_ctx = _Ctx(ctx.function, ctx.path, ctx.rank_conditional, True, ctx.stream)
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
                    inner = _Ctx(ctx.function, ctx.path, ctx.rank_conditional, ctx.in_loop, ast.unparse(item.context_expr))
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

    def _visit_expr(self, node: ast.AST, ctx: _Ctx, fn: ast.AST, stack: set[str]) -> None:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                self._set_ctx(sub, ctx)
                callee = self._local_callee(sub, fn)
                if callee is not None:
                    self._visit_function(callee, ctx.path, ctx.rank_conditional, stack)
            elif isinstance(sub, ast.Attribute) and sub.attr in SYMM_HANDLE_ATTRS:
                self._set_ctx(sub, ctx)

    def _set_ctx(self, node: ast.AST, ctx: _Ctx) -> None:
        # A call reached both from set-up (or a fallback) and per call runs per call.
        old = self.stmt_ctx.get(id(node))
        if old is None or _PATH_RANK[ctx.path] > _PATH_RANK[old.path]:
            self.stmt_ctx[id(node)] = ctx

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

    def _is_handle_receiver(self, node: ast.AST) -> bool:
        """A receiver that is a symmetric-memory handle (bound from rendezvous, or named so)."""
        name = _dotted(node)
        last = name.split(".")[-1].lower()
        if "hdl" in last or "handle" in last or last in ("h", "sm", "symm"):
            return True
        return name in self.handle_names

    # ---- calls --------------------------------------------------------------------------------

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

    def _walk_calls(self) -> None:
        enclosing = self.enclosing
        self.parents = {id(child): parent for parent in ast.walk(self.tree) for child in ast.iter_child_nodes(parent)}
        # Names bound to compiled extensions, and the functions they export.
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

        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute) and node.attr in SYMM_HANDLE_ATTRS and isinstance(node.ctx, ast.Load):
                self._record(node, f"handle.{node.attr}", "symm_handle", enclosing, [])
            if not isinstance(node, ast.Call):
                continue
            q = self.qualname(node.func)
            last = q.split(".")[-1]
            cat, name = self._categorize(node, q, last)
            if cat:
                fn = enclosing.get(id(node))
                scope = self._scope_for(fn)
                args = [self._arg(i, a, scope) for i, a in enumerate(node.args)]
                args += [self._arg(-1, kw.value, scope, kw.arg or "") for kw in node.keywords]
                if cat == "tensor_copy" and isinstance(node.func, ast.Attribute):
                    # the receiver: `peer_view.copy_(x)` pushes into a peer's buffer
                    args.append(self._arg(-1, node.func.value, scope, "self"))
                self._record(node, name, cat, enclosing, args)

    def _assigned_names(self, call: ast.Call) -> list[str]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and node.value is call:
                return [_dotted(t) for t in node.targets if _dotted(t)]
        return []

    def _str_list(self, node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.List, ast.Tuple)):
            return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return []

    def _arg(self, pos: int, node: ast.AST, scope: _Scope, kw: str = "") -> ArgInfo:
        kind = self.kind_of(node, scope)
        origin = 0
        if isinstance(node, ast.Name):
            origin = scope.origin.get(node.id) or self.module_scope.origin.get(node.id, 0)
        return ArgInfo(position=pos, keyword=kw, text=ast.unparse(node)[:120], pointer_kind=kind,
                       origin_line=origin or getattr(node, "lineno", 0),
                       value_type=self._value_type(node, self.enclosing.get(id(node))), line=getattr(node, "lineno", 0))

    def _value_type(self, node: ast.AST, fn: ast.AST | None, depth: int = 0) -> str:
        """'int' for an address (a handle's buffer_ptrs_dev, signal_pad_ptrs_dev, multicast_ptr, a
        data_ptr(), int(...)), 'tensor' for a tensor factory's result, '' where unknown."""
        if depth > 3:
            return ""
        if isinstance(node, ast.Attribute) and node.attr in ("buffer_ptrs_dev", "signal_pad_ptrs_dev", "multicast_ptr"):
            return "int"
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return "int"
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "int":
                return "int"
            if isinstance(f, ast.Attribute) and f.attr == "data_ptr":
                return "int"
            q = self.qualname(f)
            if q.startswith("torch.") and q.split(".")[-1] in (*ALLOC_FUNCS, "tensor", "as_tensor", "arange", "from_numpy"):
                return "tensor"
            return ""
        if isinstance(node, ast.Name):
            value = self._single_assignment(node.id, fn) if fn is not None else None
            if value is None:
                found = [n.value for n in self.tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                         and isinstance(n.targets[0], ast.Name) and n.targets[0].id == node.id]
                value = found[0] if len(found) == 1 else None
            return self._value_type(value, fn, depth + 1) if value is not None else ""
        return ""

    def _categorize(self, node: ast.Call, q: str, last: str) -> tuple[str, str]:
        dist_mod = q.startswith("torch.distributed.") and "_symmetric_memory" not in q
        funcol = "_functional_collectives" in q or q.startswith("funcol.")
        if (dist_mod or funcol) and last in COLLECTIVES:
            return "collective", q
        if dist_mod and last in P2P:
            return "p2p", q
        if dist_mod and last in ("barrier", "monitored_barrier"):
            return "host_sync", q
        if "_symmetric_memory" in q or q.startswith("torch.ops.symm_mem"):
            return "symm_mem", q
        if isinstance(node.func, ast.Attribute):
            base_kind = "handle" if last in SYMM_HANDLE_METHODS else ""
            # `ext.wait_signal(...)`: the extension's own function, not the handle's method.
            if base_kind and last in self.ext_functions and not self._is_handle_receiver(node.func.value):
                base_kind = ""
            if base_kind and last in ("barrier", "put_signal", "wait_signal", "get_buffer", "get_signal_pad"):
                if last != "barrier" or not q.startswith("torch.distributed"):
                    return "symm_handle", f"handle.{last}"
        if q in ("torch.cuda.synchronize", "torch.cuda.current_stream().synchronize") or (
            last == "synchronize" and ("stream" in q.lower() or "event" in q.lower() or q.startswith("torch.cuda"))
        ):
            return "cuda_sync", q
        if last in ("item", "tolist") and isinstance(node.func, ast.Attribute) and not node.args:
            receiver = node.func.value
            if self._is_host_value(receiver) or (isinstance(receiver, ast.Call) and self._categorize(receiver, self.qualname(receiver.func), self.qualname(receiver.func).split(".")[-1])[0] in ("cuda_sync", "host_transfer")):
                return "", ""  # already on the host (or the copy that brought it is the sync)
            return "cuda_sync", f"tensor.{last}"
        to_cpu = last == "to" and any(
            isinstance(a, ast.Constant) and a.value == "cpu" for a in [*node.args, *(k.value for k in node.keywords)])
        if (last in ("cpu", "numpy") and isinstance(node.func, ast.Attribute) and not node.args) or to_cpu:
            if isinstance(node.func, ast.Attribute) and self._is_host_value(node.func.value):
                return "", ""
            name = "tensor.to(cpu)" if to_cpu else f"tensor.{last}"
            if self._is_metadata(node):
                return "cuda_sync", name  # the host waits for a few numbers; the payload stays on the GPU
            return "host_transfer", name
        if last == "pin_memory" or (last in ALLOC_FUNCS and any(k.arg == "pin_memory" for k in node.keywords)):
            return "host_transfer", q
        if q in ("torch.cuda.Stream",) or last == "Stream" and "cuda" in q:
            return "stream", q
        if last in ("wait_stream", "stream") and ("cuda" in q or isinstance(node.func, ast.Attribute)) and (
            last == "wait_stream" or q.startswith("torch.cuda")
        ):
            return "stream", q
        if q in ("torch.cuda.Event",) or last == "Event" and "cuda" in q:
            return "event", q
        if last in ("record", "wait_event", "record_event") and isinstance(node.func, ast.Attribute):
            return "event", f"event.{last}" if last == "record" else f"stream.{last}"
        if last in COMPILE_FUNCS and (last != "load" or "cpp_extension" in q):
            return "compile", q
        if q.startswith("torch.") and last in ALLOC_FUNCS:
            return "alloc", q
        if isinstance(node.func, ast.Subscript) and isinstance(node.func.value, ast.Name) and node.func.value.id in self.triton_names:
            return "triton_launch", node.func.value.id
        if isinstance(node.func, ast.Name) and node.func.id in self.cupy_kernels:
            return "cupy_launch", node.func.id
        if isinstance(node.func, ast.Attribute) and node.func.attr in self.ext_functions:
            return "ext_kernel", f"ext.{node.func.attr}"
        if last in ("copy_", "clone", "copy") and isinstance(node.func, ast.Attribute):
            return "tensor_copy", f"tensor.{last}"
        if last in COMPUTE_FUNCS and (q.startswith("torch.") or q.startswith("F.") or "functional" in q):
            return "compute", q
        return "", ""

    def _record(self, node: ast.AST, name: str, cat: str, enclosing: dict[int, ast.AST], args: list[ArgInfo]) -> None:
        fn = enclosing.get(id(node))
        ctx = self.stmt_ctx.get(id(node))
        if ctx is not None:
            path, rank_cond, in_loop, stream = ctx.path, ctx.rank_conditional, ctx.in_loop, ctx.stream
        elif fn is None:
            path, rank_cond, in_loop, stream = "module", False, False, ""
        else:
            path, rank_cond, in_loop, stream = "unreached", False, False, ""
        target = ""
        if cat == "ext_kernel":
            target = name.split(".", 1)[1]
        elif cat in ("triton_launch", "cupy_launch"):
            target = name if cat == "triton_launch" else self.cupy_kernels.get(name, name)
        self.facts.calls.append(
            CallSite(
                qualname=name, category=cat, line=node.lineno, col=node.col_offset,
                end_line=getattr(node, "end_lineno", node.lineno) or node.lineno,
                snippet=self.snippet(node.lineno), function=getattr(fn, "name", ""), path=path,
                args=args, rank_conditional=rank_cond, in_loop=in_loop, stream_context=stream,
                target=target,
            )
        )
        if cat == "ext_kernel":
            positional = [a.pointer_kind for a in args if a.position >= 0]
            old = self.facts.ext_arg_kinds.get(target)
            self.facts.ext_arg_kinds[target] = (
                positional if old is None else [_stronger(a, b) for a, b in zip(old, positional)] + old[len(positional):]
            )
        if cat == "cupy_launch" and len(args) >= 3:
            tup = node.args[2] if isinstance(node, ast.Call) and len(node.args) >= 3 else None
            if isinstance(tup, (ast.Tuple, ast.List)):
                scope = self._scope_for(fn)
                self.facts.ext_arg_kinds[target] = [self.kind_of(e, scope) for e in tup.elts]

    # ---- CUDA sources -------------------------------------------------------------------------

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

    # ---- returned buffers ----------------------------------------------------------------------

    _VIEWS = ("view", "reshape", "reshape_as", "view_as", "narrow", "flatten", "squeeze", "unsqueeze", "t",
              "transpose", "permute", "as_strided", "contiguous", "unflatten", "expand", "expand_as", "detach",
              "select", "split", "chunk", "unbind", "__getitem__")

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
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in self._VIEWS:
                node = node.func.value
            else:
                break
        if isinstance(node, ast.Call):
            last = self.qualname(node.func).split(".")[-1]
            if last in ("get_buffer",):
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
            got = self._kept(value, fn, depth + 1)
            if got is None:
                return None  # fresh on some route: not reported
            found = found or (got[0], node.id, line)
        return found

    def _is_cache_read(self, node: ast.AST) -> bool:
        """`_cache[key]`, `self.bufs[i]`, `_STATE.get(key)` where the container persists across calls."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            node = ast.Subscript(value=node.func.value, slice=ast.Constant(0))
        if not isinstance(node, ast.Subscript):
            return False
        base = _dotted(node.value)
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

    # ---- Triton -----------------------------------------------------------------------------

    def _triton(self) -> None:
        launches = [c for c in self.facts.calls if c.category == "triton_launch"]
        for name in sorted(self.triton_names):
            fn = self.functions[name]
            params = [a.arg for a in fn.args.args]
            kernel = TritonKernel(name=name, line=fn.lineno, end_line=fn.end_lineno or fn.lineno, params=params)
            for launch in launches:
                if launch.target != name:
                    continue
                for a in launch.args:
                    pname = params[a.position] if 0 <= a.position < len(params) else a.keyword
                    if pname and a.pointer_kind in PEERISH and a.pointer_kind != "symm_local":
                        kernel.peer_params[pname] = a.pointer_kind
            for p in params:
                low = p.lower()
                if p not in kernel.peer_params:
                    if any(k in low for k in ("remote", "peer", "ptrs", "buffer_ptrs")):
                        kernel.peer_params[p] = "peer_ptr_array" if "ptrs" in low else "peer_ptr"
                    elif any(k in low for k in ("signal", "flag")):
                        kernel.peer_params[p] = "signal_ptr_array" if "ptrs" in low or "pads" in low else "signal_ptr"
            peer_vars = dict(kernel.peer_params)
            # Follow `ptr = tl.load(ptrs + r).to(tl.pointer_type(...))` and `p = ptr + offs`.
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    names = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
                    hit = [peer_vars[n] for n in names if n in peer_vars]
                    if hit:
                        k = hit[0]
                        if "pointer_type" in ast.unparse(node.value) and k.endswith("_array"):
                            k = k.replace("_array", "")
                        peer_vars[node.targets[0].id] = k
            for node in ast.walk(fn):
                if isinstance(node, ast.Call):
                    q = self.qualname(node.func)
                    last = q.split(".")[-1]
                    if not (q.startswith("triton.language") or q.startswith("tl.")):
                        continue
                    ptr = node.args[0] if node.args else None
                    names = {n.id for n in ast.walk(ptr) if isinstance(n, ast.Name)} if ptr is not None else set()
                    kinds = {peer_vars[n] for n in names if n in peer_vars}
                    peer = any(k in ("peer_ptr", "peer_tensor", "nvshmem_ptr") for k in kinds)
                    if last == "load":
                        kernel.loads.append(node.lineno)
                        if peer and "pointer_type" not in ast.unparse(node):
                            kernel.peer_loads.append(node.lineno)
                    elif last == "store":
                        kernel.stores.append(node.lineno)
                        if peer:
                            kernel.peer_stores.append(node.lineno)
                    elif last.startswith("atomic_"):
                        kernel.atomics.append(node.lineno)
                        if peer:
                            kernel.peer_atomics.append(node.lineno)
                elif isinstance(node, ast.While):
                    if any(isinstance(s, ast.Call) and self.qualname(s.func).split(".")[-1] in ("load", "atomic_cas", "atomic_add", "atomic_xchg") for s in ast.walk(node.test)) or (
                        isinstance(node.test, ast.Constant) and node.test.value
                    ):
                        kernel.spin_loops.append(node.lineno)
            self.facts.triton_kernels.append(kernel)

    # ---- asserts and constants -----------------------------------------------------------------

    def _asserts_and_constants(self) -> None:
        timed_fns = {f for f, p in self.path_of.items() if p in ("timed", "setup")}
        for node in ast.walk(self.tree):
            fn = self.enclosing.get(id(node))
            fname = getattr(fn, "name", "")
            if isinstance(node, ast.Assert) or (
                isinstance(node, ast.If) and any(isinstance(s, ast.Raise) for s in node.body)
            ):
                if fname not in timed_fns:
                    continue
                test = node.test
                text = ast.unparse(test)
                kind, literal = self._assert_kind(test, text)
                if kind:
                    self.facts.asserts.append(AssertFact(line=node.lineno, kind=kind, snippet=self.snippet(node.lineno), literal=literal))
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id in WORLD_NAMES and node.value.value > 1:
                        self.facts.constants.append(ConstantFact(node.lineno, t.id, str(node.value.value), self.snippet(node.lineno)))
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and isinstance(node.left, ast.Constant) and node.left.value == 1:
                scope = self._scope_for(fn)
                if self._is_rank_expr(node.right, scope):
                    self.facts.constants.append(ConstantFact(node.lineno, "peer", "1 - rank", self.snippet(node.lineno)))
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.right, ast.Constant) and node.right.value in (2, 4, 8, 16):
                scope = self._scope_for(fn)
                if any(self._is_rank_expr(n, scope) for n in ast.walk(node.left)):
                    self.facts.constants.append(ConstantFact(node.lineno, "modulus", str(node.right.value), self.snippet(node.lineno)))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" and len(node.args) == 1:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and arg.value in (2, 4, 8, 16) and fname in timed_fns:
                    if self._range_over_peers(node):
                        self.facts.constants.append(ConstantFact(node.lineno, "range", str(arg.value), self.snippet(node.lineno)))
        # Streams and loops that pipeline transfers with compute.
        for c in self.facts.calls:
            if c.category == "stream" and c.qualname.endswith("Stream"):
                self.facts.streams.append(c.line)
        for loop, fname in getattr(self, "loop_nodes", []):
            # The loop's own calls and those of the file's functions it calls (a prefetch helper
            # issues the copies, a block function the compute): one iteration does all of it.
            callees = self._callees_of(loop)
            bodies = [loop, *callees.values()]
            cats = set()
            streamed = False
            for c in self.facts.calls:
                if c.path != "timed":
                    continue
                if loop.lineno <= c.line <= (loop.end_lineno or loop.lineno) or c.function in callees:
                    cats.add(c.category)
                    streamed = streamed or bool(c.stream_context) or c.category in ("event", "stream")
            # One stream runs an iteration's transfer and compute one after the other: chunks
            # pipeline only when a side stream or events let the next transfer run under this compute.
            if not streamed:
                continue
            transfer = cats & {"collective", "p2p", "tensor_copy", "ext_kernel", "triton_launch", "cupy_launch", "symm_handle"}
            compute = cats & {"compute", "ext_kernel", "triton_launch"}
            has_matmul = any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult) for b in bodies for n in ast.walk(b))
            if transfer and (compute - transfer or has_matmul or len(transfer) > 1):
                self.facts.chunk_loops.append(loop.lineno)

    def _range_over_peers(self, range_call: ast.Call) -> bool:
        """`for p in range(8): ... buffer_ptrs[p]`: the loop variable picks a rank (a peer's buffer,
        its signal pad, `(rank + p) % ...`), so the literal is a rank count. `range(2)` over two
        buffers of a double buffer, or over stages, is not."""
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.For, ast.comprehension)) and node.iter is range_call and isinstance(node.target, ast.Name):
                var = node.target.id
                body = node.body if isinstance(node, ast.For) else [self.parents.get(id(node)) or node]
                for stmt in body:
                    for sub in ast.walk(stmt):
                        if isinstance(sub, ast.Subscript) and any(isinstance(n, ast.Name) and n.id == var for n in ast.walk(sub.slice)):
                            base = _dotted(sub.value).lower()
                            if any(w in base for w in ("buffer_ptrs", "signal_pad", "peer", "ptrs", "remote")):
                                return True
                        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in ("get_buffer", "get_signal_pad") \
                                and sub.args and any(isinstance(n, ast.Name) and n.id == var for n in ast.walk(sub.args[0])):
                            return True
                        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Add) and {
                                n.id for n in ast.walk(sub) if isinstance(n, ast.Name)} >= {var} and any(
                                isinstance(n, ast.Name) and n.id in RANK_NAMES for n in ast.walk(sub)):
                            return True
                        if isinstance(sub, ast.Compare) and any(isinstance(n, ast.Name) and n.id == var for n in [sub.left, *sub.comparators]) \
                                and any(isinstance(n, ast.Name) and n.id in RANK_NAMES for n in [sub.left, *sub.comparators]):
                            return True
        return False

    def _loop_body_text(self, range_call: ast.Call) -> str:
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.For, ast.comprehension)) and node.iter is range_call:
                body = node.body if isinstance(node, ast.For) else []
                return "\n".join(ast.unparse(s) for s in body) if body else ast.unparse(node)
        return ""

    def _assert_kind(self, test: ast.AST, text: str) -> tuple[str, str]:
        # `world_size == 2` fixes the rank count; `n % world_size == 0` or `world_size == 1` does not.
        for node in ast.walk(test):
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.In)):
                sides = [node.left, node.comparators[0]]
                world = [x for x in sides if self._is_world_expr(x)]
                lits = [x for x in sides if isinstance(x, ast.Constant) and isinstance(x.value, int) and x.value > 1]
                if world and lits:
                    return "world_size", str(lits[0].value)
        if ".dtype" in text:
            m = re.search(r"==\s*(torch\.\w+)", text)
            if m:
                return "dtype", m.group(1)
            m = re.search(r"in\s*\((torch\.\w+)\s*,?\)", text)
            if m:
                return "dtype", m.group(1)
        if re.search(r"(numel\(\)|shape\[-?\d\]|size\(-?\d?\))\s*%\s*\d+\s*==\s*0", text) or re.search(r"shape\s*==\s*\(", text):
            m = re.search(r"%\s*(\d+)", text)
            return "shape", m.group(1) if m else ""
        return "", ""

    # The loop list is filled during reachability; declared here so it exists before it runs.
    loop_nodes: list = []


def analyze_python(text: str, file: str, tree: ast.Module | None = None, run: RunContext | None = None) -> PythonFacts:
    """Python facts of one candidate on a run (dtype, world size, multicast; from the file's
    folder when not given); never raises for a file that parses."""
    try:
        p = PythonPass(text, file, tree, run)
        p.loop_nodes = []
        return p.run()
    except SyntaxError as exc:
        return PythonFacts(status="failed", message=f"line {exc.lineno}: {exc.msg}")
    except (RecursionError, SystemError, MemoryError):
        return PythonFacts(status="failed", message="the file nests too deeply for the Python pass")
