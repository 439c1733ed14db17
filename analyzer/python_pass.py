"""The Python pass: what a candidate file does, read with the standard `ast` module.

It finds the CUDA sources (with their file lines), Triton kernels, every torch.distributed,
symmetric-memory and torch.cuda call, and decides for each call whether it sits on the timed path
(`solution()` runs it on every call), in a cached set-up branch (runs once), at import, or nowhere.
It also follows symmetric-memory pointers (buffer_ptrs, signal pads, get_buffer views) into the
arguments of extension, Triton and CuPy launches, which seeds the C++ dataflow of the clang pass.

Reads one candidate's text (and its parsed tree when the caller has it). This module is the entry
(`analyze_python`) and records every call; each step of the pass is a module of its own, mixed
into PythonPass in the order run() calls them:

    python_api       the torch / symmetric-memory names and each call's category
    python_pointers  what each name points at (peer buffers, signal pads, multicast)
    python_host      which tensors live in host memory (their .item()/.tolist() do not sync)
    python_reach     the call graph from solution() and the route each call runs on
    python_cache     cache guards (set-up that runs once) and buffers returned from a cache
    python_run       the branches PKB's run takes (dtype, world size, multicast)
    python_sources   the CUDA sources compiled and the functions extensions export
    python_triton    Triton kernels' peer parameters and memory operations
    python_asserts   asserts, hard-coded rank counts, pipelined loops
"""

from __future__ import annotations

import ast

from pkb.facts import ArgInfo, CallSite, PythonFacts

from analyzer.python_api import ALLOC_FUNCS, SYMM_HANDLE_ATTRS, CallCategories, dotted, is_metadata_collective
from analyzer.python_asserts import AssertsAndLoops
from analyzer.python_cache import CacheState
from analyzer.python_host import HostTensors
from analyzer.python_pointers import PointerKinds, Scope, stronger
from analyzer.python_reach import Reachability, CallContext
from analyzer.python_run import RunBranches, RunContext, run_context, run_context_of_path
from analyzer.python_sources import ExtensionSources
from analyzer.python_triton import TritonKernels
from analyzer.strings import StringResolver

# Callers read the run's facts and the metadata test from the pass's entry module.
__all__ = ["PythonPass", "RunContext", "analyze_python", "is_metadata_collective", "run_context", "run_context_of_path"]


class PythonPass(CallCategories, PointerKinds, HostTensors, Reachability, CacheState, RunBranches, ExtensionSources,
                 TritonKernels, AssertsAndLoops):
    """One candidate's Python facts: run() calls the steps in order over one parsed tree."""

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
        self.module_scope = Scope()
        self.scopes: dict[str, Scope] = {}
        self.returns: dict[str, list[str]] = {}  # function -> kinds of returned tuple items
        self.tuples: dict[str, list[str]] = {}  # name / cache slot -> kinds of a tuple stored there
        self.table_lists: set[str] = set()  # names / dict slots holding a list of address tables
        self.path_of: dict[str, str] = {}  # function -> best path reached
        self.path_of_def: dict[int, str] = {}  # id(function def) -> best path reached (methods apart)
        self.strings = StringResolver(self.tree, text)
        self.global_names: set[str] = set()
        self.handle_names: set[str] = set()  # names bound from symm_mem.rendezvous(...)
        self.caching_fns: set[str] = set()  # functions that return what they cached on a first call
        self.fallback_ranges: list[tuple[int, int]] = []  # (first, last) lines of blocks the run skips
        self.run_ctx = run if run is not None else run_context_of_path(file)
        self.classes: dict[str, dict[str, ast.FunctionDef]] = {}  # class -> method name -> def
        self.instances: dict[str, str] = {}  # name / `*.attr` bound to an instance of a file class
        self.method_class: dict[int, str] = {}  # id(method def) -> its class
        # Filled by the stages of run(), in its order.
        self.enclosing: dict[int, ast.AST] = {}  # id(node) -> the innermost function holding it
        self.stmt_ctx: dict[int, CallContext] = {}  # id(call node) -> the route it runs on
        self.loop_nodes: list[tuple[ast.AST, str]] = []  # loops on the timed path, with their function
        self.parents: dict[int, ast.AST] = {}  # id(node) -> its parent
        self.host_locals: dict[int, set[str]] = {}  # id(function def) -> names bound to host tensors
        self.extents_in_flight: set[str] = set()  # names RunBranches._per_rank_extent is deciding now
        self._dict_values_by_key: dict[str, list[ast.AST]] | None = None
        self._slot_stores_by_name: dict[str, list[ast.AST]] | None = None
        self._name_assignments: dict[int, dict[str, list[ast.AST]]] = {}  # id(function def) -> name -> values
        self._module_constants: dict[str, ast.AST] | None = None  # module-level names bound once
        self._call_counters: set[str] | None = None  # expressions the code steps by `+= 1` (RunBranches)
        self._return_line = 0  # the return statement _reused_returns is looking at

    # ---- entry --------------------------------------------------------------------------------

    def run(self) -> PythonFacts:
        self._imports()
        self._definitions()
        self.enclosing = self._enclosing_functions()
        # reachability reads parents too (a helper called in a conditional expression's branch)
        self.parents = {id(child): parent for parent in ast.walk(self.tree) for child in ast.iter_child_nodes(parent)}
        self._pointer_kinds()
        self._host_tensor_flow()
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
        name = dotted(func)
        if not name:
            # `out[r].copy_`, `(a + b).cpu`: the receiver has no name, the method still counts.
            return "<expr>." + func.attr if isinstance(func, ast.Attribute) else ""
        head, _, rest = name.partition(".")
        if head in self.aliases:
            return self.aliases[head] + ("." + rest if rest else "")
        return name

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
                        if isinstance(sub, (ast.Name, ast.Attribute)) and dotted(sub):
                            self.handle_names.add(dotted(sub))
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

    # ---- calls --------------------------------------------------------------------------------

    def _walk_calls(self) -> None:
        enclosing = self.enclosing
        self._extension_bindings()

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
                if cat in ("collective", "p2p"):
                    for info, a in zip(args, [*node.args, *(kw.value for kw in node.keywords)]):
                        info.read_back = self._read_back_as_numbers(a, fn)
                if cat == "tensor_copy" and isinstance(node.func, ast.Attribute):
                    # the receiver: `peer_view.copy_(x)` pushes into a peer's buffer
                    args.append(self._arg(-1, node.func.value, scope, "self"))
                self._record(node, name, cat, enclosing, args)

    def _arg(self, pos: int, node: ast.AST, scope: Scope, kw: str = "") -> ArgInfo:
        kind = self.kind_of(node, scope)
        origin = 0
        if isinstance(node, ast.Name):
            origin = scope.origin.get(node.id) or self.module_scope.origin.get(node.id, 0)
        return ArgInfo(position=pos, keyword=kw, text=ast.unparse(node)[:120], pointer_kind=kind,
                       origin_line=origin or getattr(node, "lineno", 0),
                       value_type=self._value_type(node, self.enclosing.get(id(node))), line=getattr(node, "lineno", 0),
                       integer_tensor=self._is_integer_tensor(node, self.enclosing.get(id(node))))

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
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            # `res['x_signal']` where a state dict was built as {'x_signal': hdl.signal_pad_ptrs_dev, ...}
            found = {self._value_type(v, self.enclosing.get(id(v)), depth + 1)
                     for v in self._dict_values().get(node.slice.value, [])}
            return found.pop() if len(found) == 1 else ""
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and type(node.slice.value) is int:
            # `_cache[key][3]`, `entry[3]`: an item of a tuple the file built
            return self._item_type(node.value, node.slice.value, fn, depth)
        if isinstance(node, ast.Name):
            value = self._single_assignment(node.id, fn) if fn is not None else None
            if value is None and fn is not None:
                unpacked = self._unpacked_from(node.id, fn)
                if unpacked is not None:  # `buf, hdl, sig = _get_state(...)`
                    return self._item_type(unpacked[0], unpacked[1], fn, depth)
            if value is None:
                found = [n.value for n in self.tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                         and isinstance(n.targets[0], ast.Name) and n.targets[0].id == node.id]
                value = found[0] if len(found) == 1 else None
            return self._value_type(value, fn, depth + 1) if value is not None else ""
        return ""

    def _item_type(self, node: ast.AST, index: int, fn: ast.AST | None, depth: int) -> str:
        found = {self._value_type(v, f, depth + 1) for v, f in self._item_values(node, index, fn)} - {""}
        return found.pop() if len(found) == 1 else ""

    @staticmethod
    def _unpacked_from(name: str, fn: ast.AST) -> tuple[ast.AST, int] | None:
        """`a, b, name = value`: the value unpacked into `name`, and its index there."""
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], (ast.Tuple, ast.List)):
                for i, e in enumerate(n.targets[0].elts):
                    if isinstance(e, ast.Name) and e.id == name:
                        return n.value, i
        return None

    def _item_values(self, node: ast.AST, index: int, fn: ast.AST | None, depth: int = 0) -> list[tuple[ast.AST, ast.AST | None]]:
        """What item `index` of the tuple `node` is (with the function it is written in): followed
        through names, the file's functions' returns and cache slots (`_cache[key] = entry`), the
        way set-up helpers hand their state back."""
        if depth > 4:
            return []
        if isinstance(node, (ast.Tuple, ast.List)):
            item = node.elts[index] if index < len(node.elts) else None
            return [(item, fn)] if item is not None and not isinstance(item, ast.Starred) else []
        if isinstance(node, ast.Name):
            value = self._single_assignment(node.id, fn) if fn is not None else None
            return self._item_values(value, index, fn, depth + 1) if value is not None else []
        out: list[tuple[ast.AST, ast.AST | None]] = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.functions:
            callee = self.functions[node.func.id]
            for r in ast.walk(callee):
                if isinstance(r, ast.Return) and r.value is not None and self.enclosing.get(id(r)) is callee:
                    out += self._item_values(r.value, index, callee, depth + 1)
        elif isinstance(node, ast.Subscript) and isinstance(node.value, (ast.Name, ast.Attribute)):
            for value in self._slot_stores().get(dotted(node.value), []):
                out += self._item_values(value, index, self.enclosing.get(id(value)), depth + 1)
        return out

    def _slot_stores(self) -> dict[str, list[ast.AST]]:
        """Container name -> the values the file stores into it by key (`_cache[k] = v`), indexed once."""
        if self._slot_stores_by_name is None:
            self._slot_stores_by_name = {}
            for n in ast.walk(self.tree):
                if isinstance(n, ast.Assign):
                    for t in n.targets:
                        if isinstance(t, ast.Subscript) and isinstance(t.value, (ast.Name, ast.Attribute)):
                            self._slot_stores_by_name.setdefault(dotted(t.value), []).append(n.value)
        return self._slot_stores_by_name

    def _dict_values(self) -> dict[str, list[ast.AST]]:
        """String key -> the values stored under it in the file's dict literals (indexed once)."""
        if self._dict_values_by_key is None:
            self._dict_values_by_key = {}
            for d in ast.walk(self.tree):
                if isinstance(d, ast.Dict):
                    for k, v in zip(d.keys, d.values):
                        if isinstance(k, ast.Constant) and isinstance(k.value, str):
                            self._dict_values_by_key.setdefault(k.value, []).append(v)
        return self._dict_values_by_key

    def _record(self, node: ast.AST, name: str, cat: str, enclosing: dict[int, ast.AST], args: list[ArgInfo]) -> None:
        fn = enclosing.get(id(node))
        ctx = self.stmt_ctx.get(id(node))
        if ctx is not None:
            path, rank_cond, in_loop, stream = ctx.path, ctx.rank_conditional, ctx.in_loop, ctx.stream
        elif fn is None:
            path, rank_cond, in_loop, stream = "module", False, False, ""
        else:
            path, rank_cond, in_loop, stream = "unreached", False, False, ""
        if path in ("timed", "setup") and self.in_untaken_ifexp(node):
            path = "fallback"
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
                positional if old is None else [stronger(a, b) for a, b in zip(old, positional)] + old[len(positional):]
            )
        if cat == "cupy_launch" and len(args) >= 3:
            tup = node.args[2] if isinstance(node, ast.Call) and len(node.args) >= 3 else None
            if isinstance(tup, (ast.Tuple, ast.List)):
                scope = self._scope_for(fn)
                self.facts.ext_arg_kinds[target] = [self.kind_of(e, scope) for e in tup.elts]


def analyze_python(text: str, file: str, tree: ast.Module | None = None, run: RunContext | None = None) -> PythonFacts:
    """Python facts of one candidate on a run (dtype, world size, multicast; from the file's
    folder when not given); never raises for a file that parses."""
    try:
        return PythonPass(text, file, tree, run).run()
    except SyntaxError as exc:
        return PythonFacts(status="failed", message=f"line {exc.lineno}: {exc.msg}")
    except (RecursionError, SystemError, MemoryError):
        return PythonFacts(status="failed", message="the file nests too deeply for the Python pass")
