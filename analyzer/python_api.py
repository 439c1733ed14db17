"""Which torch, torch.distributed, symmetric-memory and CUDA calls a candidate makes: the names the
Python pass recognises, and the category it gives each call (collective, p2p, host_sync, symm_mem,
symm_handle, cuda_sync, host_transfer, stream, event, compile, alloc, launches, tensor_copy,
tensor_fill, compute, library_load).

Reads the parsed file through the pass's state (import aliases, extension functions, Triton and
CuPy kernel names, host-tensor names); the library collectives are pkb/collectives.py's.
"""

from __future__ import annotations

import ast
import re

from pkb import collectives
from pkb.facts import CallSite

# Library collectives come from the one list in pkb/collectives.py; the P2P descriptor class counts
# as p2p for the static pass (a candidate that builds one hands it to batch_isend_irecv).
COLLECTIVES = collectives.STATIC_COLLECTIVES
P2P = collectives.P2P | {collectives.P2P_OP_CLASS}
HOST_SYNCS = collectives.HOST_SYNCS

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
# NCCL, RCCL or MPI reached past torch.distributed, through ctypes or cffi: their entry points
# by name (`lib.ncclAllReduce(...)`), and the loading of the library itself, which is the route
# even where the entry point's name is built at run time (`getattr(lib, name)`).
LIBRARY_LOADERS = {"CDLL", "PyDLL", "LoadLibrary", "dlopen", "find_library"}


def collective_library_named(call: ast.Call) -> str:
    """The collective library a loader call names in a string of its arguments ('libnccl.so.2'),
    or ''."""
    for arg in [*call.args, *(k.value for k in call.keywords)]:
        for node in ast.walk(arg):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and collectives.COLLECTIVE_LIBRARY.search(node.value):
                return node.value
    return ""


PEERISH = ("peer_ptr", "peer_ptr_array", "peer_tensor", "signal_ptr", "signal_ptr_array",
           "multicast_ptr", "symm_local", "nvshmem_ptr")


# Names that hold small per-call metadata (split sizes, counts, offsets): copying them to the host
# is a host synchronisation, not staging of the payload.
_METADATA_WORDS = ("split", "count", "size", "offset", "len", "num", "idx", "index", "indptr",
                   "cumsum", "nnz", "max", "min", "norm", "scale", "amax", "meta", "shape", "topk")


# Words that name a collective's argument as split sizes, counts or offsets.
METADATA_ARG_WORDS = ("split", "count", "size", "offset", "meta", "num_", "nnz", "len", "shape")
_METADATA_NAME = re.compile("|".join(w if w != "shape" else r"(?<!re)shape" for w in METADATA_ARG_WORDS))


def names_metadata(text: str) -> bool:
    """An argument named for sizes, counts, offsets or shapes (`split_sizes`, `shape_list`), not a
    reshaped payload (`x_reshaped`)."""
    return bool(_METADATA_NAME.search(text.lower()))


def is_metadata_collective(call: CallSite) -> bool:
    """A collective or p2p call whose tensors are all split sizes, counts or offsets: it moves a few
    numbers for the host, not the payload (`dist.all_gather_into_tensor(all_counts, counts)`)."""
    args = [a for a in call.args if a.keyword in ("", "tensor", "output", "input", "output_tensor", "input_tensor", "tensor_list")
            and (a.integer_tensor or re.fullmatch(r"[\w.\[\]]+", a.text) and not a.text.startswith(("dist.", "group")))]
    # Named as sizes or counts, or made as a tensor of integers (`torch.empty(w * w, dtype=torch.int64)`):
    # the payloads of these problems are floating point. Or its output is only read back to the
    # host as numbers.
    if any(a.read_back for a in call.args if a.position == 0 or a.keyword in ("output", "output_tensor", "tensor_list", "tensor")):
        return True
    return bool(args) and all(a.integer_tensor or names_metadata(a.text) for a in args)


def _names_cpu(node: ast.AST) -> bool:
    """`"cpu"` or `torch.device("cpu")`."""
    if isinstance(node, ast.Constant):
        return node.value == "cpu"
    return isinstance(node, ast.Call) and dotted(node.func).endswith("device") and bool(node.args) and _names_cpu(node.args[0])


def dotted(node: ast.AST) -> str:
    """`torch.cuda.synchronize` for that attribute chain, `f().x` for a call's attribute; '' otherwise."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Call):
        parts.append(dotted(node.func) + "()")
    else:
        return ""
    return ".".join(reversed(parts))


_INT_DTYPES = {"int32", "int64", "int", "long", "int16", "int8", "uint8", "short"}
# Methods a value passes through on its way to being read back as host numbers (`.cpu().tolist()`).
_HOST_READ_STEPS = {"cat", "stack", "detach", "cpu", "to", "contiguous", "view", "reshape", "flatten", "float",
                    "double", "int", "long", "clone", "sort", "sum", "max", "min"}



def _non_blocking(call: ast.Call) -> bool:
    """`non_blocking=True` among a call's keywords (`.to("cpu", non_blocking=True)`)."""
    return any(k.arg == "non_blocking" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)

class CallCategories:
    """How the Python pass names and sorts the calls it finds (a mixin of PythonPass)."""

    def _is_integer_tensor(self, node: ast.AST, fn: ast.AST | None, seen: frozenset = frozenset(), hops: int = 0) -> bool:
        """A tensor of integers: made with an integer dtype, cast to one (`.int()`, `.to(torch.int32)`),
        a view or element of one, a list of them, a name every assignment of which is one, or a
        helper's parameter that every caller fills with one named for sizes or counts."""
        if isinstance(node, (ast.List, ast.Tuple)):
            return bool(node.elts) and all(self._is_integer_tensor(e, fn, seen, hops) for e in node.elts)
        if isinstance(node, ast.ListComp):
            return self._is_integer_tensor(node.elt, fn, seen, hops)
        if isinstance(node, ast.Subscript):
            return self._is_integer_tensor(node.value, fn, seen, hops)
        if isinstance(node, ast.Name):
            if node.id in seen or fn is None:
                return node.id in seen  # `all_in = all_in.view(w, w)`: as integer as before
            values = self.name_assignments(fn).get(node.id, [])
            if not values and hops < 2:
                # a helper's parameter (`def _all_gather_int64(t, ...)`): what every caller passes,
                # named for sizes or counts there (index and node-id payloads are integers too)
                passed = self.arguments_passed(fn, node.id)
                return bool(passed) and all(
                    names_metadata(ast.unparse(a))
                    and self._is_integer_tensor(a, caller, frozenset(), hops + 1) for a, caller in passed)
            return bool(values) and all(self._is_integer_tensor(v, fn, seen | {node.id}, hops) for v in values)
        if not isinstance(node, ast.Call):
            return False
        if self.qualname(node.func).startswith("torch.") and self.qualname(node.func).endswith("_like") and node.args \
                and not any(k.arg == "dtype" for k in node.keywords):
            return self._is_integer_tensor(node.args[0], fn, seen, hops)  # `torch.empty_like(counts)`
        dtypes = [k.value for k in node.keywords if k.arg == "dtype"] + [a for a in node.args if isinstance(a, ast.Attribute)]
        if any(isinstance(d, ast.Attribute) and dotted(d).startswith("torch.") and d.attr in _INT_DTYPES for d in dtypes):
            return True
        if isinstance(node.func, ast.Attribute):
            if node.func.attr in ("int", "long", "short") and not node.args:
                return True
            if node.func.attr in ("view", "reshape", "contiguous", "flatten", "clone", "to", "cuda", "narrow", "t", "T"):
                return self._is_integer_tensor(node.func.value, fn, seen, hops)
        return False

    def _read_back_as_numbers(self, node: ast.AST, fn: ast.AST | None) -> bool:
        """Every later use of the name `node` in its function reads it back to the host as numbers:
        a chain of views, concatenations and copies (`torch.cat(parts).cpu()`) ending in
        `.tolist()` or `.item()`. A collective whose output only feeds host decisions (the
        splitters of a sample sort) moves metadata, not the payload."""
        if not isinstance(node, ast.Name) or fn is None:
            return False
        uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == node.id and isinstance(n.ctx, ast.Load)
                and n.lineno > node.lineno]
        return bool(uses) and all(self._ends_on_host(u) for u in uses)

    def _ends_on_host(self, node: ast.AST) -> bool:
        """`node` flows through views, copies and reductions into `.tolist()` or `.item()`."""
        for _ in range(8):
            parent = self.parents.get(id(node))
            if isinstance(parent, ast.Attribute) and parent.value is node:
                if parent.attr in ("tolist", "item"):
                    return True
                if parent.attr not in _HOST_READ_STEPS:
                    return False
                call = self.parents.get(id(parent))
                node = call if isinstance(call, ast.Call) and call.func is parent else parent
            elif isinstance(parent, ast.Call) and node in parent.args and dotted(parent.func).split(".")[-1] in ("cat", "stack"):
                node = parent
            elif isinstance(parent, (ast.List, ast.Tuple, ast.Subscript)):
                node = parent
            else:
                return False
        return False

    def _is_torch_cudart(self, receiver: ast.AST, fn: ast.AST | None) -> bool:
        """`torch.cuda.cudart()`, or a name bound only to it in `fn` or at module level."""
        if isinstance(receiver, ast.Call):
            return self.qualname(receiver.func) == "torch.cuda.cudart"
        if isinstance(receiver, ast.Name):
            values = self.name_assignments(fn).get(receiver.id, []) if fn is not None else []
            if not values:
                values = [v for st in self.tree.body if isinstance(st, ast.Assign) and len(st.targets) == 1
                          and isinstance(st.targets[0], ast.Name) and st.targets[0].id == receiver.id for v in [st.value]]
            return bool(values) and all(isinstance(v, ast.Call) and self.qualname(v.func) == "torch.cuda.cudart" for v in values)
        return False

    def arguments_passed(self, fn: ast.AST, name: str) -> list[tuple[ast.AST, ast.AST | None]] | None:
        """What the file's calls of function `fn` pass for its parameter `name`, each with the
        function the call sits in; None where `name` is no parameter, `fn` is solution() (PKB
        calls it), or some call passes nothing for it (a default) or unpacks its arguments."""
        params = [a.arg for a in getattr(fn, "args", ast.arguments(args=[])).args]
        if name not in params or fn is self.functions.get("solution"):
            return None
        pos = params.index(name) - (1 if params[0] in ("self", "cls") else 0)
        out: list[tuple[ast.AST, ast.AST | None]] = []
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)) and \
                    (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == fn.name:
                if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                    return None
                arg = node.args[pos] if 0 <= pos < len(node.args) else next((k.value for k in node.keywords if k.arg == name), None)
                if arg is None:
                    return None
                out.append((arg, self.enclosing.get(id(node))))
        return out or None

    def _is_host_tensor(self, value: ast.AST) -> bool:
        if not isinstance(value, ast.Call):
            return False
        last = self.qualname(value.func).split(".")[-1]
        if last in ("cpu", "pin_memory"):
            return True
        kws = {k.arg: k.value for k in value.keywords if k.arg}
        if last in ("to", "tensor", "as_tensor") + tuple(ALLOC_FUNCS) and any(_names_cpu(a) for a in [*value.args, *kws.values()]):
            return True  # `.to("cpu")`, `.to(torch.device("cpu"), non_blocking=True)`, `device="cpu"`
        pinned = isinstance(kws.get("pin_memory"), ast.Constant) and kws["pin_memory"].value is True
        on_cpu = isinstance(kws.get("device"), ast.Constant) and kws["device"].value == "cpu"
        if last in ALLOC_FUNCS and (pinned or on_cpu):
            return True
        # `torch.arange(n)`, `torch.tensor(sizes)`: a factory with no device makes a CPU tensor.
        q = self.qualname(value.func)
        factory = last in (*ALLOC_FUNCS, "tensor", "arange", "as_tensor", "linspace", "from_numpy") and not last.endswith("_like")
        return q.startswith("torch.") and factory and "device" not in kws and last != "from_numpy" or q == "torch.from_numpy"

    def _element_of_tensor_param(self, arg: ast.AST, call: ast.Call) -> bool:
        """`k_ranges[d, 0]` where k_ranges is a parameter the function declares `torch.Tensor`:
        PKB hands the inputs on the GPU, so reading one element waits for the device."""
        if not (isinstance(arg, ast.Subscript) and isinstance(arg.value, ast.Name)) or self._is_host_value(arg):
            return False
        fn = self.enclosing.get(id(call))
        args = getattr(getattr(fn, "args", None), "args", [])
        declared = next((a.annotation for a in args if a.arg == arg.value.id), None)
        if declared is None or "Tensor" not in ast.unparse(declared) or "List" in ast.unparse(declared) or "list" in ast.unparse(declared):
            return False
        rebound = any(isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and any(
            isinstance(t, ast.Name) and t.id == arg.value.id for t in (n.targets if isinstance(n, ast.Assign) else [n.target]))
            for n in ast.walk(fn))
        return not rebound

    def _is_host_value(self, node: ast.AST) -> bool:
        """A tensor known to live in host memory: a name bound to one, or an expression making one."""
        if isinstance(node, ast.Attribute) and node.attr in ("T", "mT", "data") or isinstance(node, ast.Subscript):
            return self._is_host_value(node.value)  # `cpu_t.T`, `cpu_t[i]`
        if isinstance(node, ast.Name) and self._in_host_locals(node):
            return True
        if isinstance(node, ast.Name) and self._before_host_binding(node):
            return False  # read before this function rebinds the name to a host copy
        if isinstance(node, (ast.Name, ast.Attribute)):
            return dotted(node) in self.facts.host_tensors or self._host_attribute_elsewhere(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr not in ("cuda", "to") \
                and self._is_host_value(node.func.value):
            return True  # `cpu_t.sum()`, `cpu_t.long()`: an op on a host tensor stays on the host
        if isinstance(node, ast.Call) and node.args and self.qualname(node.func).startswith("torch.") \
                and self.qualname(node.func).endswith("_like") and not any(k.arg == "device" for k in node.keywords):
            return self._is_host_value(node.args[0])  # `torch.zeros_like(cpu_t)` is made where cpu_t lives
        if isinstance(node, ast.Call) and node.args and self._torch_op_on_host(node):
            return True  # `torch.cumsum(cpu_t, 0)`, `torch.cat([cpu_a, cpu_b])`: computed where the inputs live
        return self._is_host_tensor(node)

    def _host_attribute_elsewhere(self, node: ast.AST) -> bool:
        """`cache.shapes_host` where the class sets `self.shapes_host = torch.empty(..., pin_memory=True)`:
        the instance is reached under another name, and every binding of that attribute in the
        module is `self.<attr>`, a host tensor."""
        if not isinstance(node, ast.Attribute) or f"self.{node.attr}" not in self.facts.host_tensors:
            return False
        targets = [dotted(t) for n in ast.walk(self.tree) if isinstance(n, ast.Assign)
                   for t in n.targets if isinstance(t, ast.Attribute) and t.attr == node.attr]
        return bool(targets) and all(t in self.facts.host_tensors for t in targets)

    def _torch_op_on_host(self, call: ast.Call) -> bool:
        """A torch function whose first argument (or every tensor of a list there) is a host tensor,
        with no device given: its result is made on the host too."""
        q = self.qualname(call.func)
        if not q.startswith("torch.") or q.count(".") != 1 or any(k.arg == "device" for k in call.keywords):
            return False  # torch.cuda.*, torch.distributed.* are no tensor ops
        first = call.args[0]
        if isinstance(first, (ast.List, ast.Tuple)):
            return bool(first.elts) and all(self._is_host_value(e) for e in first.elts)
        return self._is_host_value(first)

    def _is_metadata(self, call: ast.Call) -> bool:
        """`.cpu()` of split sizes, counts or offsets (or read back at once with .tolist()/.item()):
        a few numbers the host needs, not the payload."""
        parent = self.parents.get(id(call))
        if isinstance(parent, ast.Attribute) and parent.attr in ("tolist", "item", "numpy", "long", "int"):
            return True
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in ("int", "list", "tuple", "float", "sum", "max"):
            return True
        names = [dotted(call.func.value)] if isinstance(call.func, ast.Attribute) else []
        if isinstance(parent, ast.Assign):
            names += [dotted(t) for t in parent.targets]
            # `counts_cpu = counts.cpu()` then `counts_cpu[i].item()`: read back as numbers
            fn = self.enclosing.get(id(call))
            local = {t.id for t in parent.targets if isinstance(t, ast.Name)}
            for n in ast.walk(fn) if fn is not None else []:
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("item", "tolist") \
                        and {x.id for x in ast.walk(n.func.value) if isinstance(x, ast.Name)} & local:
                    return True
        return any(w in n.lower() for n in names if n for w in _METADATA_WORDS)

    def _categorize(self, node: ast.Call, q: str, last: str) -> tuple[str, str]:
        dist_mod = q.startswith("torch.distributed.") and "_symmetric_memory" not in q
        funcol = "_functional_collectives" in q or q.startswith("funcol.")
        if (dist_mod or funcol) and last in COLLECTIVES:
            return "collective", q
        if dist_mod and last in P2P:
            return "p2p", q
        if dist_mod and last in HOST_SYNCS:
            return "host_sync", q
        if "_symmetric_memory" in q or q.startswith("torch.ops.symm_mem"):
            return "symm_mem", q
        entry = collectives.COLLECTIVE_ENTRY.fullmatch(last) if isinstance(node.func, ast.Attribute) else None
        if entry:
            moved = entry.group("nccl") or entry.group("mpi")
            return ("p2p" if moved.lower().lstrip("i") in ("send", "recv") else "collective"), f"{'mpi' if entry.group('mpi') else last[:4]}.{last}"
        if last in LIBRARY_LOADERS:
            library = collective_library_named(node)
            if library:
                return "library_load", f"{q}({library!r})"
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
        if isinstance(node.func, ast.Name) and node.func.id in ("int", "float", "bool") and len(node.args) == 1 \
                and self._element_of_tensor_param(node.args[0], node):
            return "cuda_sync", f"tensor.__{node.func.id}__"  # `int(k_ranges[d, 0])`: one element to the host
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
                if to_cpu and _non_blocking(node):
                    # an asynchronous copy into pinned memory: the host waits only where it later
                    # synchronizes or reads the numbers, and that is the sync found there
                    return "", ""
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
        if last in ("zero_", "fill_") and isinstance(node.func, ast.Attribute):
            return "tensor_fill", f"tensor.{last}"  # a flag buffer reset from the host side, per call
        if re.fullmatch(r"cudaMemcpy(Peer)?(Async)?|cudaMemcpy2D(Async)?|cuMemcpy\w*", last) and isinstance(node.func, ast.Attribute):
            if self._is_torch_cudart(node.func.value, self.enclosing.get(id(node))):
                # torch's _cudart binds no copy (only error strings, the profiler, host register,
                # streams and memory info): the call raises AttributeError and moves nothing
                return "", ""
            return "cudart_copy", f"cudart.{last}"  # `ctypes.CDLL("libcudart.so").cudaMemcpyAsync(dst, src, n, kind, s)`
        if last in COMPUTE_FUNCS and (q.startswith("torch.") or q.startswith("F.") or "functional" in q):
            return "compute", q
        return "", ""

    def _is_handle_receiver(self, node: ast.AST) -> bool:
        """A receiver that is a symmetric-memory handle (bound from rendezvous, or named so)."""
        name = dotted(node)
        last = name.split(".")[-1].lower()
        if "hdl" in last or "handle" in last or last in ("h", "sm", "symm"):
            return True
        return name in self.handle_names
