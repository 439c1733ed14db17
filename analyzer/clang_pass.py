"""The libclang pass: one CUDA/C++ source string in, one CudaFacts out.

The candidate's #include lines are blanked (line numbers stay) and our own prelude
(analyzer/cuda_prelude/pkb_prelude.h) is force-included instead, so a parse takes milliseconds
and does not need torch or the CUDA toolkit. The AST is copied once into light `_Node` objects;
every later step (dataflow of pointer kinds, accesses, asm, loops) works on those.

Pointer kinds flow: seeds (from the Python pass) -> host params -> host locals -> launch args ->
kernel params -> __device__ callees, to a fixpoint. Names are a last resort (basis="name").
If libclang is missing or fails, a regex scan gives partial facts instead.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field

from analyzer import cuda_branches, kittens
from pkb.facts import (
    PEER_KINDS,
    ApiCall,
    AsmStmt,
    CudaFacts,
    CudaSource,
    Diagnostic,
    Fence,
    Function,
    Launch,
    MemAccess,
    MemcpyCall,
    Param,
    SpinLoop,
)

PRELUDE_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda_prelude", "pkb_prelude.h")
MAIN_NAME = "pkb_candidate.cu"
# Host-side parse: device and host bodies both get full ASTs (measured: same trees as
# --cuda-device-only for our sources, and clang keeps CUDA attributes in either mode).
BASE_ARGS = [
    "-x", "cuda", "--cuda-gpu-arch=sm_90", "--cuda-host-only", "-nocudainc", "-nocudalib",
    "-std=c++17", "-Wno-unknown-cuda-version", "-ferror-limit=0",
]
PARSE_ARGS = BASE_ARGS + ["-include", PRELUDE_PATH]

# Headers the prelude stands in for; any other include is reported in missing_headers.
MODELED_HEADERS = {
    "cuda_runtime.h", "cuda_runtime_api.h", "cuda.h", "cudaTypedefs.h", "device_launch_parameters.h",
    "vector_types.h", "device_functions.h", "sm_90_rt.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h",
    "cooperative_groups.h", "cooperative_groups/reduce.h", "cooperative_groups/memcpy_async.h",
    "cuda/atomic", "cuda/std/atomic", "cuda/barrier", "cuda/pipeline", "cuda/std/cstdint",
    "nvshmem.h", "nvshmemx.h", "torch/extension.h", "torch/torch.h", "torch/all.h", "torch/python.h",
    "torch/types.h", "ATen/ATen.h", "ATen/cuda/CUDAContext.h", "ATen/cuda/CUDAEvent.h", "ATen/Dispatch.h",
    "c10/cuda/CUDAStream.h", "c10/cuda/CUDAGuard.h", "c10/cuda/CUDAException.h", "c10/util/Half.h",
    "c10/util/BFloat16.h", "pybind11/pybind11.h", "pybind11/stl.h", "torch/csrc/utils/pybind.h",
    "cublas_v2.h", "cublas_api.h", "cublasLt.h", "ATen/cuda/CUDABlas.h", "mma.h", "c10/util/Float8_e4m3fn.h",
    "c10/util/Float8_e5m2.h", "c10/util/complex.h", "ATen/cuda/Atomic.cuh", "math_constants.h", "cuda_fp8.hpp",
    "cstdint", "stdint.h", "cstdio", "stdio.h", "cstdlib", "stdlib.h", "vector", "array", "algorithm",
    "cmath", "math.h", "string", "cstring", "string.h", "cassert", "assert.h", "type_traits", "utility",
    "memory", "mutex", "unordered_map", "map", "optional", "stdexcept", "limits", "climits", "cfloat",
    "initializer_list", "cstddef", "stddef.h",
}

RANK_NAMES = {"rank", "my_rank", "local_rank", "rank_id", "myrank", "my_pe", "mype", "self_rank"}

# Higher wins when two facts about one variable meet: the more specific / more dangerous kind.
_KIND_PRIORITY = {
    k: i
    for i, k in enumerate(
        ["unknown", "local", "symm_local", "peer_tensor", "nvshmem_ptr", "signal_ptr", "peer_ptr",
         "multicast_ptr", "signal_ptr_array", "peer_ptr_array"]
    )
}
_BASIS_PRIORITY = {"": 0, "name": 1, "dataflow": 2, "seed": 3}
ARRAY_KINDS = ("peer_ptr_array", "signal_ptr_array")
_ELEMENT_OF = {"peer_ptr_array": "peer_ptr", "signal_ptr_array": "signal_ptr"}
_ARRAY_OF = {"peer_ptr": "peer_ptr_array", "symm_local": "peer_ptr_array", "nvshmem_ptr": "peer_ptr_array",
             "signal_ptr": "signal_ptr_array", "peer_tensor": "peer_ptr_array"}

_ATOMIC_RE = re.compile(r"^(?:gpuA|a)tomic(Add|Sub|Exch|Max|Min|And|Or|Xor|Inc|Dec|CAS)(_system|_block)?$")
_ATOMIC_REF_METHODS = {"load", "store", "exchange", "compare_exchange_strong", "compare_exchange_weak",
                       "fetch_add", "fetch_sub", "fetch_or", "fetch_and", "fetch_xor", "fetch_max",
                       "fetch_min", "wait"}
_LOAD_INTRINSICS = {"__ldg", "__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv"}
_STORE_INTRINSICS = {"__stcg", "__stcs", "__stwt", "__stwb"}
_FENCE_CALLS = {"__threadfence_system": "system", "__threadfence": "gpu", "__threadfence_block": "cta"}
_HOST_SYNC = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "device_synchronize"}
_ALLOC = {"cudaMalloc", "cudaMallocAsync", "cudaMallocManaged", "cudaMallocHost", "cudaHostAlloc",
          "empty", "empty_like", "zeros", "zeros_like", "ones", "full", "empty_strided", "nvshmem_malloc",
          "nvshmem_align", "nvshmem_calloc"}
_TORCH_ALLOC = {"empty", "empty_like", "zeros", "zeros_like", "ones", "full", "empty_strided"}
_MEMCPY_RE = re.compile(r"^(cudaMemcpy\w*|cuMemcpy\w*)$")
_BLAS_GEMM_RE = re.compile(r"^(cublas\w*[Gg]emm\w*|cublasLtMatmul)$")
_NVSHMEM_SYNC_RE = re.compile(r"^nvshmemx?_(\w+_)?(barrier\w*|sync_all\w*|team_sync|quiet\w*|fence|"
                              r"signal_wait_until\w*|wait_until\w*|wait\w*)$")
_NVSHMEM_XFER_RE = re.compile(r"^nvshmemx?_\w*(put|get|_p|_g|ptr|signal_op)\w*$")
_TENSOR_VIEW_METHODS = {"contiguous", "view", "reshape", "narrow", "slice", "select", "flatten", "t",
                        "transpose", "data", "get", "to", "cuda", "detach", "view_as", "as_strided"}
_DATA_PTR_METHODS = {"data_ptr", "mutable_data_ptr", "const_data_ptr"}
_VECTOR_TYPE_RE = re.compile(r"\b(float|int|uint|double|longlong|ulonglong|short|ushort|char|uchar)[24]\b"
                             r"|\b(__half2|__nv_bfloat162|half2|nv_bfloat162)\b")
_CLOCK_NAMES = {"clock64", "clock", "globaltimer", "__globaltimer"}
_LOOP_KINDS = {"WHILE_STMT", "DO_STMT", "FOR_STMT", "CXX_FOR_RANGE_STMT"}
_EXPR_WRAPPERS = {"UNEXPOSED_EXPR", "PAREN_EXPR", "CSTYLE_CAST_EXPR", "CXX_REINTERPRET_CAST_EXPR",
                  "CXX_STATIC_CAST_EXPR", "CXX_CONST_CAST_EXPR", "CXX_FUNCTIONAL_CAST_EXPR",
                  "CXX_DYNAMIC_CAST_EXPR"}
_IGNORED_DIAGS = ("CUDA version is newer than the latest",)


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def _join(a: tuple[str, str], b: tuple[str, str]) -> tuple[str, str]:
    ka, kb = _KIND_PRIORITY.get(a[0], 0), _KIND_PRIORITY.get(b[0], 0)
    if ka != kb:
        return a if ka > kb else b
    return a if _BASIS_PRIORITY.get(a[1], 0) >= _BASIS_PRIORITY.get(b[1], 0) else b


def _derived(v: tuple[str, str]) -> tuple[str, str]:
    """A value computed from another: seed facts become dataflow facts, name guesses stay guesses."""
    if v[0] == "unknown":
        return ("unknown", "")
    return (v[0], "name" if v[1] == "name" else "dataflow")


def _blank_includes(text: str) -> tuple[str, list[str], list[str]]:
    """Replace #include lines with empty lines; return (text, includes, missing_headers)."""
    includes: list[str] = []
    missing: list[str] = []
    out = []
    for line in text.split("\n"):
        m = re.match(r'\s*#\s*include\s*[<"]([^>"]+)[>"]', line)
        if m:
            name = m.group(1).strip()
            includes.append(name)
            if name not in MODELED_HEADERS and name not in missing:
                missing.append(name)
            out.append("")
        else:
            out.append(line)
    return "\n".join(out), includes, missing


def _split_top(text: str, sep: str, scoped: bool = True) -> list[str]:
    """Split on `sep` outside strings, parentheses, brackets and braces.

    With sep=':' and scoped=True a '::' (C++ scope) does not split; asm statements pass
    scoped=False because there '::' means an empty operand list."""
    parts, depth, cur, i, quote = [], 0, [], 0, ""
    while i < len(text):
        ch = text[i]
        if quote:
            cur.append(ch)
            if ch == "\\" and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
            cur.append(ch)
        elif ch in "([{":
            depth += 1
            cur.append(ch)
        elif ch in ")]}":
            depth -= 1
            cur.append(ch)
        elif depth == 0 and text.startswith(sep, i) and not (
            scoped and sep == ":" and (text.startswith("::", i) or (i and text[i - 1] == ":"))
        ):
            parts.append("".join(cur))
            cur = []
            i += len(sep)
            continue
        else:
            cur.append(ch)
        i += 1
    parts.append("".join(cur))
    return parts


def _string_literals(text: str) -> str:
    """Concatenate the C string literals in `text`, decoding the usual escapes."""
    out = []
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', text, re.S):
        s = m.group(1)
        s = s.replace("\\n", "\n").replace("\\t", "\t").replace('\\"', '"').replace("\\\\", "\\")
        out.append(s)
    return "".join(out)


_PTX_ORDER = {"acquire": "acquire", "release": "release", "relaxed": "relaxed", "acq_rel": "acq_rel",
              "volatile": "volatile", "sc": "seq_cst"}
_PTX_SCOPE = {"sys": "system", "gpu": "gpu", "cta": "cta", "gl": "gpu"}


def _ptx_instructions(template: str) -> list[tuple[str, str]]:
    """(opcode, operand text) for each instruction of an inline-asm template."""
    instrs = []
    for raw in re.split(r"[;\n]", template):
        s = raw.split("//")[0].strip()
        # scope braces ({ .reg .pred p; ... }) are not operands; vector operands ({%0,%1}) stay
        while s.startswith("{"):
            s = s[1:].strip()
        while s.endswith("}") and s.count("}") > s.count("{"):
            s = s[:-1].strip()
        if not s or s.startswith(".") or re.match(r"^[\w$]+:$", s):
            continue
        s = re.sub(r"^@!?%?\w+\s+", "", s)  # predicate guard
        m = re.match(r"([a-z_][\w.:]*)\s*(.*)", s)
        if m:
            instrs.append((m.group(1), m.group(2)))
    return instrs


def _ptx_memop(opcode: str) -> str:
    parts = opcode.split(".")
    head = parts[0]
    if head in ("ld", "ldu"):
        return "load"
    if head == "st":
        return "store"
    if head in ("atom", "red"):
        return "atomic"
    if head == "multimem" and len(parts) > 1:
        return {"ld_reduce": "load", "st": "store", "red": "atomic"}.get(parts[1], "")
    return ""


def _ptx_width(opcode: str) -> int:
    parts = opcode.split(".")
    vec = 1
    bits = 0
    for p in parts[1:]:
        if re.fullmatch(r"v[248]", p):
            vec = int(p[1:])
        m = re.fullmatch(r"[usbfe]?(8|16|32|64|128)(x\d)?", p) or re.fullmatch(r"(?:bf16|f16)(x2)?", p)
        if m and p[0] in "usbf":
            if p.startswith("bf16") or p.startswith("f16"):
                bits = 32 if p.endswith("x2") else 16
            else:
                bits = int(m.group(1))
    return bits * vec


def _ptx_order_scope(opcode: str) -> tuple[str, str]:
    order = scope = ""
    for p in opcode.split("."):
        if p in _PTX_ORDER and not order:
            order = _PTX_ORDER[p]
        if p in _PTX_SCOPE and not scope:
            scope = _PTX_SCOPE[p]
    return order, scope


# --------------------------------------------------------------------------------------------
# the light AST
# --------------------------------------------------------------------------------------------


class _Node:
    __slots__ = ("c", "kind", "spelling", "tline", "so", "eo", "kids", "parent", "_type", "_ref", "_text")

    def __init__(self, c, kind, spelling, tline, so, eo, parent):
        self.c = c
        self.kind = kind
        self.spelling = spelling
        self.tline = tline
        self.so = so
        self.eo = eo
        self.kids: list[_Node] = []
        self.parent = parent
        self._type = None
        self._ref = False
        self._text = None

    @property
    def type(self):
        if self._type is None:
            self._type = self.c.type
        return self._type

    @property
    def ref(self):
        if self._ref is False:
            try:
                self._ref = self.c.referenced
            except Exception:
                self._ref = None
        return self._ref

    def walk(self):
        stack = [self]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(reversed(n.kids))


def _strip(n: _Node) -> _Node:
    while n.kind in _EXPR_WRAPPERS and n.kids:
        n = n.kids[-1]
    return n


@dataclass
class _Func:
    name: str
    kind: str
    node: _Node
    params: list[_Node]
    body: _Node | None
    is_template: bool
    info: Function = field(default=None)  # type: ignore[assignment]


# --------------------------------------------------------------------------------------------
# the pass
# --------------------------------------------------------------------------------------------


class _ClangPass:
    def __init__(self, src: CudaSource, file: str, seeds: dict[str, list[str]] | None, text: str):
        self.src = src
        self.file = file
        self.seeds = seeds or {}
        self.text = text
        self.data = text.encode("utf-8", errors="replace")
        self.facts = CudaFacts(source_index=src.index)
        self.funcs: list[_Func] = []
        self.by_name: dict[str, list[_Func]] = {}
        self.env: dict[tuple, tuple[str, str]] = {}
        self.ret: dict[str, tuple[str, str]] = {}
        self.var_types: dict[tuple, object] = {}
        self.var_nodes: dict[tuple, _Node] = {}
        self.changed = False
        self.atomic_refs: dict[tuple, tuple[_Node, str]] = {}
        # device helper -> {param index: how it reads} (for polls through helpers)
        self.helper_reads: dict[str, dict[int, str]] = {}
        self.cur_func: _Func | None = None

    # ---- text and lines ----
    def line(self, n: _Node) -> int:
        return self.src.file_line(n.tline)

    def text_of(self, n: _Node) -> str:
        if n._text is None:
            n._text = self.data[n.so:n.eo].decode("utf-8", errors="replace") if n.eo > n.so else ""
        return n._text

    def snippet(self, n: _Node, limit: int = 160) -> str:
        s = " ".join(self.text_of(n).split())
        return s[:limit]

    # ---- building the tree ----
    def build(self, tu) -> list[_Node]:
        from ctypes import c_void_p, cast

        import clang.cindex as ci

        lib = ci.conf.lib
        kind_names = _kind_names()
        fptr, line_, col_, off_ = ci.c_object_p(), ci.c_uint(), ci.c_uint(), ci.c_uint()
        get_loc = lib.clang_getInstantiationLocation
        byref = ci.byref

        def loc(sl):
            # one C call per location; the file handle is compared as a raw pointer (fast)
            get_loc(sl, byref(fptr), byref(line_), byref(col_), byref(off_))
            return cast(fptr, c_void_p).value, line_.value, off_.value

        main_ptr = None
        tops = []
        for c in tu.cursor.get_children():
            f = c.location.file
            if f is None or f.name != MAIN_NAME:
                continue
            if main_ptr is None:
                main_ptr = loc(c.location)[0]
            tops.append(self._copy(c, None, loc, main_ptr, kind_names))
        return tops

    def _copy(self, c, parent, loc, main_ptr, kind_names) -> _Node:
        ext = c.extent
        sf, sl, so = loc(ext.start)
        ef, _, eo = loc(ext.end)
        lf, ll, _ = loc(c.location)
        if sf != main_ptr:
            so = 0
        if ef != main_ptr:
            eo = so
        tline = ll if lf == main_ptr else sl
        node = _Node(c, kind_names.get(c._kind_id, "UNKNOWN"), c.spelling, tline, so, eo, parent)
        kids = node.kids
        for ch in c.get_children():
            kids.append(self._copy(ch, node, loc, main_ptr, kind_names))
        return node

    # ---- variables ----
    def key_of_decl(self, c) -> tuple:
        f = c.location.file
        if f is not None and f.name == MAIN_NAME:
            return ("v", c.spelling, c.location.offset)
        return ("p", c.spelling)

    def key_of_ref(self, n: _Node) -> tuple | None:
        r = n.ref
        if r is not None and r.kind.name in ("VAR_DECL", "PARM_DECL", "FIELD_DECL"):
            return self.key_of_decl(r)
        if n.spelling:
            return ("u", self.cur_func.name if self.cur_func else "", n.spelling)
        return None

    def setv(self, key: tuple | None, val: tuple[str, str]) -> None:
        if key is None or val[0] == "unknown" or key[0] == "p":
            return
        old = self.env.get(key, ("unknown", ""))
        new = _join(old, val)
        if new != old:
            self.env[key] = new
            self.changed = True

    def getv(self, key: tuple | None) -> tuple[str, str]:
        if key is None:
            return ("unknown", "")
        return self.env.get(key, ("unknown", ""))

    # ---- expression kinds ----
    def is_rank_index(self, n: _Node) -> bool:
        s = _strip(n)
        return s.kind in ("DECL_REF_EXPR", "MEMBER_REF_EXPR") and s.spelling.lower() in RANK_NAMES

    def unary_op(self, n: _Node) -> str:
        t = self.text_of(n).strip()
        for op in ("++", "--", "&", "*", "!", "~", "-", "+"):
            if t.startswith(op):
                return op
        for op in ("++", "--"):
            if t.endswith(op):
                return op
        # macro-expanded text is not visible; guess from the type
        try:
            if n.kids and n.kids[0].type.kind.name == "POINTER" and n.type.kind.name != "POINTER":
                return "*"
        except Exception:
            pass
        return "?"

    def binop(self, n: _Node) -> str:
        try:
            return n.c.binary_operator.name
        except Exception:
            return ""

    def eval(self, n: _Node | None) -> tuple[str, str]:
        if n is None:
            return ("unknown", "")
        k = n.kind
        if k in _EXPR_WRAPPERS:
            return self.eval(n.kids[-1]) if n.kids else ("unknown", "")
        if k == "DECL_REF_EXPR":
            if not n.kids or n.kids[0].kind != "OVERLOADED_DECL_REF":
                return self.getv(self.key_of_ref(n))
            return ("unknown", "")
        if k == "MEMBER_REF_EXPR":
            r = n.ref
            if r is not None and r.kind.name == "FIELD_DECL":
                return self.getv(self.key_of_decl(r))
            return ("unknown", "")
        if k == "ARRAY_SUBSCRIPT_EXPR" and len(n.kids) >= 2:
            base = self.eval(n.kids[0])
            if base[0] in ARRAY_KINDS:
                if base[0] == "peer_ptr_array" and self.is_rank_index(n.kids[1]):
                    return ("symm_local", _derived(base)[1])
                return (_ELEMENT_OF[base[0]], _derived(base)[1])
            return ("unknown", "")
        if k == "UNARY_OPERATOR" and n.kids:
            op = self.unary_op(n)
            inner = _strip(n.kids[0])
            if op == "&":
                if inner.kind == "ARRAY_SUBSCRIPT_EXPR" and inner.kids:
                    return _derived(self.eval(inner.kids[0]))
                return ("unknown", "")
            if op == "*":
                base = self.eval(n.kids[0])
                if base[0] in ARRAY_KINDS:
                    return (_ELEMENT_OF[base[0]], _derived(base)[1])
                return ("unknown", "")
            if op in ("++", "--", "+"):
                return self.eval(n.kids[0])
            return ("unknown", "")
        if k == "BINARY_OPERATOR" and len(n.kids) == 2:
            op = self.binop(n)
            if op in ("Add", "Sub", "Or"):
                a, b = self.eval(n.kids[0]), self.eval(n.kids[1])
                if op == "Sub" and a[0] != "unknown" and b[0] != "unknown":
                    return ("unknown", "")  # pointer difference is a number
                return _derived(_join(a, b))
            if op == "Comma":
                return self.eval(n.kids[1])
            if op == "Assign":
                return self.eval(n.kids[1])
            return ("unknown", "")
        if k == "CONDITIONAL_OPERATOR" and len(n.kids) == 3:
            return _derived(_join(self.eval(n.kids[1]), self.eval(n.kids[2])))
        if k == "CALL_EXPR":
            return self.eval_call(n)
        return ("unknown", "")

    def call_object(self, n: _Node) -> _Node | None:
        if n.kids and n.kids[0].kind == "MEMBER_REF_EXPR" and n.kids[0].kids:
            return n.kids[0].kids[0]
        return None

    def call_args(self, n: _Node) -> list[_Node]:
        if not n.kids:
            return []
        if n.spelling.startswith("operator") and n.kids[0].kind != "MEMBER_REF_EXPR":
            # CXXOperatorCallExpr: object, callee ref, operands
            return [x for x in n.kids if not (x.kind in ("UNEXPOSED_EXPR", "DECL_REF_EXPR") and x.spelling == n.spelling)]
        first = n.kids[0]
        if first.kind in ("MEMBER_REF_EXPR", "UNEXPOSED_EXPR", "DECL_REF_EXPR", "OVERLOADED_DECL_REF") and (
            first.spelling == n.spelling or first.kind == "MEMBER_REF_EXPR"
        ):
            return n.kids[1:]
        if first.kind == "UNEXPOSED_EXPR" and first.kids and _strip(first).spelling == n.spelling:
            return n.kids[1:]
        return n.kids if self.is_constructor(n) else n.kids[1:]

    def is_constructor(self, n: _Node) -> bool:
        try:
            return n.type.spelling.split("<")[0].split("::")[-1].strip() == n.spelling
        except Exception:
            return False

    def eval_call(self, n: _Node) -> tuple[str, str]:
        name = n.spelling
        obj = self.call_object(n)
        if name in _DATA_PTR_METHODS and obj is not None:
            v = self.eval(obj)
            if v[0] == "peer_tensor":
                return ("peer_ptr", _derived(v)[1])
            return _derived(v)
        if name in _TENSOR_VIEW_METHODS and obj is not None:
            return _derived(self.eval(obj))
        if name == "operator[]":
            args = self.call_args(n)
            if len(args) >= 2:
                base = self.eval(args[0])
                if base[0] in ARRAY_KINDS:
                    if base[0] == "peer_ptr_array" and self.is_rank_index(args[1]):
                        return ("symm_local", _derived(base)[1])
                    return (_ELEMENT_OF[base[0]], _derived(base)[1])
            return ("unknown", "")
        if name == "nvshmem_ptr":
            return ("nvshmem_ptr", "dataflow")
        if name in ("nvshmem_malloc", "nvshmem_align", "nvshmem_calloc"):
            return ("symm_local", "dataflow")
        if name in _TORCH_ALLOC and self.cur_func is not None and self.cur_func.kind == "host":
            return ("local", "dataflow")
        if self.is_constructor(n):
            args = self.call_args(n)
            if len(args) == 1:
                return self.eval(args[0])  # copy / conversion
            return ("unknown", "")
        if name in self.ret:
            return _derived(self.ret[name])
        return ("unknown", "")

    # ---- collecting functions ----
    def collect_functions(self, tops: list[_Node]) -> None:
        def visit(n: _Node, in_template: bool):
            if n.kind in ("NAMESPACE", "LINKAGE_SPEC", "STRUCT_DECL", "CLASS_DECL", "CLASS_TEMPLATE", "UNEXPOSED_DECL"):
                for ch in n.kids:
                    visit(ch, in_template or n.kind == "CLASS_TEMPLATE")
                return
            if n.kind not in ("FUNCTION_DECL", "FUNCTION_TEMPLATE", "CXX_METHOD", "CONSTRUCTOR"):
                return
            body = next((ch for ch in n.kids if ch.kind == "COMPOUND_STMT"), None)
            if body is None:
                return
            attrs = {ch.kind for ch in n.kids}
            is_g = "CUDAGLOBAL_ATTR" in attrs
            is_d = "CUDADEVICE_ATTR" in attrs
            is_h = "CUDAHOST_ATTR" in attrs
            kind = "global" if is_g else ("host_device" if is_d and is_h else ("device" if is_d else "host"))
            name = n.spelling
            if name.startswith("pkb_pybind11_init_"):
                name = "PYBIND11_MODULE"
            params = [ch for ch in n.kids if ch.kind == "PARM_DECL"]
            f = _Func(name, kind, n, params, body, is_template=in_template or n.kind == "FUNCTION_TEMPLATE")
            self.funcs.append(f)
            self.by_name.setdefault(name, []).append(f)

        for t in tops:
            visit(t, False)

    def resolve(self, name: str, nargs: int = -1) -> list[_Func]:
        cands = self.by_name.get(name, [])
        if nargs >= 0 and len(cands) > 1:
            exact = [f for f in cands if len(f.params) == nargs]
            if exact:
                return exact
        return cands

    # ---- bindings and seeds ----
    def collect_bindings(self) -> None:
        for f in self.funcs:
            for n in f.body.walk():
                if n.kind == "CALL_EXPR" and n.spelling == "def" and n.kids and n.kids[0].kind == "MEMBER_REF_EXPR":
                    args = n.kids[1:]
                    if len(args) < 2:
                        continue
                    lit = next((x for x in args[0].walk() if x.kind == "STRING_LITERAL"), None)
                    target = next((x for x in args[1].walk() if x.kind in ("DECL_REF_EXPR", "OVERLOADED_DECL_REF")
                                   and x.spelling), None)
                    if lit is not None and target is not None:
                        self.facts.bindings[lit.spelling.strip('"')] = target.spelling

    def apply_seeds(self) -> None:
        for name, kinds in self.seeds.items():
            fname = self.facts.bindings.get(name, name)
            for f in self.by_name.get(fname, []):
                for i, p in enumerate(f.params):
                    if i < len(kinds) and kinds[i] and kinds[i] != "unknown":
                        self.setv(self.key_of_decl(p.c), (kinds[i], "seed"))

    # ---- dataflow ----
    def flow(self) -> None:
        for _ in range(8):
            self.changed = False
            for f in self.funcs:
                self.cur_func = f
                for n in f.body.walk():
                    self.flow_node(n)
            if not self.changed:
                break
        self.cur_func = None

    def lvalue_target(self, n: _Node) -> tuple[str, tuple | None]:
        """('var'|'elem', key) for the thing an assignment writes."""
        s = _strip(n)
        if s.kind == "DECL_REF_EXPR":
            return "var", self.key_of_ref(s)
        if s.kind == "MEMBER_REF_EXPR":
            r = s.ref
            return "var", self.key_of_decl(r) if r is not None else None
        if s.kind == "ARRAY_SUBSCRIPT_EXPR" and s.kids:
            kind, key = self.lvalue_target(s.kids[0])
            return "elem", key
        if s.kind == "CALL_EXPR" and s.spelling == "operator[]":
            args = self.call_args(s)
            if args:
                kind, key = self.lvalue_target(args[0])
                return "elem", key
        return "var", None

    def assign(self, lhs: _Node, val: tuple[str, str]) -> None:
        if val[0] == "unknown":
            return
        kind, key = self.lvalue_target(lhs)
        if kind == "elem":
            arr = _ARRAY_OF.get(val[0], val[0])
            self.setv(key, _derived((arr, val[1])))
        else:
            self.setv(key, _derived(val))

    def flow_node(self, n: _Node) -> None:
        k = n.kind
        if k == "VAR_DECL":
            key = self.key_of_decl(n.c)
            self.var_nodes[key] = n
            exprs = [ch for ch in n.kids if ch.kind not in ("TYPE_REF", "NAMESPACE_REF", "TEMPLATE_REF")
                     and not ch.kind.endswith("_ATTR")]
            tkind = n.type.kind.name
            if tkind in ("CONSTANTARRAY", "INCOMPLETEARRAY") and self.cur_func and self.cur_func.kind != "host":
                if "*" not in n.type.spelling:
                    self.setv(key, ("local", "dataflow"))  # shared / register arrays
            if not exprs:
                return
            init = exprs[-1]
            if init.kind == "INIT_LIST_EXPR":
                v = ("unknown", "")
                for el in init.kids:
                    v = _join(v, self.eval(el))
                if v[0] != "unknown":
                    self.setv(key, _derived((_ARRAY_OF.get(v[0], v[0]), v[1])))
                return
            if init.kind == "CALL_EXPR" and init.spelling in ("atomic_ref",) or "atomic_ref" in n.type.spelling:
                args = self.call_args(init) if init.kind == "CALL_EXPR" else []
                if args:
                    self.atomic_refs[key] = (args[0], n.type.spelling)
                return
            if init.kind == "CALL_EXPR" and self.is_constructor(init) and "vector" in n.type.spelling:
                return
            self.setv(key, _derived(self.eval(init)))
        elif k == "BINARY_OPERATOR" and len(n.kids) == 2 and self.binop(n) == "Assign":
            self.assign(n.kids[0], self.eval(n.kids[1]))
        elif k == "COMPOUND_ASSIGNMENT_OPERATOR" and len(n.kids) == 2:
            if n.spelling in ("+=", "-=") or self.text_of(n).find("+=") >= 0:
                v = self.eval(n.kids[0])
                if v[0] != "unknown":
                    self.assign(n.kids[0], v)
        elif k == "RETURN_STMT" and n.kids and self.cur_func is not None:
            v = self.eval(n.kids[0])
            if v[0] != "unknown":
                old = self.ret.get(self.cur_func.name, ("unknown", ""))
                new = _join(old, _derived(v))
                if new != old:
                    self.ret[self.cur_func.name] = new
                    self.changed = True
        elif k == "CALL_EXPR":
            self.flow_call(n)

    def flow_call(self, n: _Node) -> None:
        name = n.spelling
        obj = self.call_object(n)
        if name in ("push_back", "emplace_back", "push") and obj is not None:
            args = n.kids[1:]
            if args:
                v = self.eval(args[0])
                if v[0] != "unknown":
                    _, key = self.lvalue_target(obj)
                    self.setv(key, _derived((_ARRAY_OF.get(v[0], v[0]), v[1])))
            return
        if self.is_launch(n):
            fname = n.spelling
            args = n.kids[2:]
            self.bind_args(fname, args)
            return
        if name in ("cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cudaLaunchKernelExC"):
            kname, args = self.launch_api_parts(n)
            if kname:
                self.bind_args(kname, args)
            return
        args = self.call_args(n)
        if name in ("cudaMemcpy", "cudaMemcpyAsync") and len(args) >= 2:
            v = self.eval(args[1])
            if v[0] in ARRAY_KINDS:
                self.assign(args[0], v)
            return
        if name in ("cudaIpcOpenMemHandle", "cudaMalloc", "cudaMallocAsync", "cudaMallocManaged") and args:
            tgt = _strip(args[0])
            if tgt.kind == "UNARY_OPERATOR" and tgt.kids:
                kind = "peer_ptr" if name == "cudaIpcOpenMemHandle" else "local"
                self.assign(tgt.kids[0], (kind, "dataflow"))
            return
        if name in self.by_name and not name.startswith("operator"):
            self.bind_args(name, args)

    def bind_args(self, fname: str, args: list[_Node]) -> None:
        for f in self.resolve(fname, len(args)):
            for i, a in enumerate(args[: len(f.params)]):
                v = self.eval(a)
                if v[0] != "unknown":
                    self.setv(self.key_of_decl(f.params[i].c), _derived(v))

    def is_launch(self, n: _Node) -> bool:
        return (n.kind == "CALL_EXPR" and len(n.kids) >= 2 and n.kids[1].kind == "CALL_EXPR"
                and n.kids[1].spelling in ("__cudaPushCallConfiguration", "cudaConfigureCall"))

    def launch_api_parts(self, n: _Node) -> tuple[str, list[_Node]]:
        """Kernel name and argument expressions of cudaLaunchKernel-style calls."""
        args = self.call_args(n)
        if n.spelling == "cudaLaunchKernelExC":
            fn_arg, arr_arg = (args[1], args[2]) if len(args) >= 3 else (None, None)
        else:
            fn_arg, arr_arg = (args[0], args[3]) if len(args) >= 4 else (None, None)
        if fn_arg is None:
            return "", []
        ref = next((x for x in fn_arg.walk() if x.kind in ("DECL_REF_EXPR", "OVERLOADED_DECL_REF") and x.spelling), None)
        kname = ref.spelling if ref is not None else ""
        out: list[_Node] = []
        arr = _strip(arr_arg)
        if arr.kind == "DECL_REF_EXPR":
            decl = self.var_nodes.get(self.key_of_ref(arr))
            init = next((x for x in decl.kids if x.kind == "INIT_LIST_EXPR"), None) if decl is not None else None
            if init is not None:
                for el in init.kids:
                    e = _strip(el)
                    if e.kind == "UNARY_OPERATOR" and e.kids:
                        e = e.kids[0]
                    out.append(e)
        return kname, out

    # ---- name fallback ----
    def name_guess(self, name: str, tspell: str, tkind: str) -> str:
        low = name.lower()
        t = tspell.replace(" ", "")
        is_ptr = "*" in t or tkind in ("POINTER", "CONSTANTARRAY", "INCOMPLETEARRAY")
        multi = ("**" in t or "*const*" in t or "*__restrict*" in t or "vector<" in t
                 or (tkind in ("CONSTANTARRAY", "INCOMPLETEARRAY") and "*" in t)
                 or re.search(r"(int64_t|uint64_t|uintptr_t|intptr_t|longlong|long)\*", t) is not None
                 or "Tensor" in t)
        is_addr_int = re.fullmatch(r"(const)?(int64_t|uint64_t|uintptr_t|intptr_t|long|unsignedlong|longlong|unsignedlonglong|CUdeviceptr)", t) is not None
        if not (is_ptr or is_addr_int or "Tensor" in t or "vector<" in t):
            return ""
        if re.search(r"multicast|mc_ptr|mcptr|mc_buf", low):
            return "multicast_ptr"
        if re.search(r"signal|flag|sig|barrier_flags", low):
            return "signal_ptr_array" if multi else "signal_ptr"
        if re.search(r"remote|peer|buffer_ptrs|ptrs|bufs", low):
            if multi:
                return "peer_ptr_array"
            if re.search(r"remote|peer", low) and (is_ptr or (is_addr_int and re.search(r"ptr|addr|buf", low))):
                return "peer_ptr"
        return ""

    def apply_name_fallback(self) -> None:
        for f in self.funcs:
            decls = list(f.params) + [n for n in f.body.walk() if n.kind == "VAR_DECL"]
            for d in decls:
                key = self.key_of_decl(d.c)
                if self.getv(key)[0] != "unknown":
                    continue
                try:
                    g = self.name_guess(d.spelling, d.type.spelling, d.type.kind.name)
                except Exception:
                    g = ""
                if g:
                    self.setv(key, (g, "name"))
        # struct fields too (kernel argument structs)
        for f in self.funcs:
            for n in f.body.walk():
                if n.kind == "MEMBER_REF_EXPR":
                    r = n.ref
                    if r is not None and r.kind.name == "FIELD_DECL":
                        key = self.key_of_decl(r)
                        if self.getv(key)[0] == "unknown":
                            g = self.name_guess(r.spelling, r.type.spelling, r.type.kind.name)
                            if g:
                                self.setv(key, (g, "name"))

    # ---- facts ----
    def make_functions(self) -> None:
        for f in self.funcs:
            n = f.node
            st, en = n.c.extent.start.line, n.c.extent.end.line
            head = self.data[n.so:f.body.so].decode("utf-8", errors="replace") if f.body.so > n.so else ""
            lb = re.search(r"__launch_bounds__\s*\(([^)]*)\)", head)
            calls: list[str] = []
            for x in f.body.walk():
                nm = ""
                if x.kind == "CALL_EXPR" and x.spelling and not x.spelling.startswith("operator") and not self.is_constructor(x):
                    nm = x.spelling
                elif x.kind == "OVERLOADED_DECL_REF":
                    nm = x.spelling
                if nm and nm not in calls and nm not in ("__cudaPushCallConfiguration", "cudaConfigureCall"):
                    calls.append(nm)
                # A kernel handed by reference to the launch API (cudaLaunchCooperativeKernel(
                # (void*)k, ...)) is launched by this function as surely as k<<<...>>>(...) is.
                if x.kind == "CALL_EXPR" and x.spelling in ("cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cudaLaunchKernelExC"):
                    kname, _ = self.launch_api_parts(x)
                    if kname and kname not in calls:
                        calls.append(kname)
            params = []
            for p in f.params:
                t = p.type
                tk = t.kind.name
                is_ptr = tk in ("POINTER", "CONSTANTARRAY", "INCOMPLETEARRAY") or "*" in t.spelling
                kind, basis = self.getv(self.key_of_decl(p.c))
                params.append(Param(name=p.spelling, type=t.spelling, is_pointer=is_ptr, pointer_kind=kind,
                                    basis=basis))
            f.info = Function(name=f.name, kind=f.kind, line=self.src.file_line(st), end_line=self.src.file_line(en),
                              text_line=st, text_end_line=en, params=params, calls=calls,
                              is_template=f.is_template, launch_bounds=lb.group(1).strip() if lb else "")
            self.facts.functions.append(f.info)

    def scan(self) -> None:
        for f in self.funcs:
            self.cur_func = f
            device = f.kind != "host"
            for n in f.body.walk():
                k = n.kind
                if k == "CALL_EXPR":
                    self.scan_call(f, n, device)
                elif k == "ASM_STMT":
                    self.scan_asm(f, n)
                elif device and k == "ARRAY_SUBSCRIPT_EXPR" and len(n.kids) >= 2:
                    self.plain_access(f, n, n.kids[0], "subscript")
                elif device and k == "UNARY_OPERATOR" and n.kids and self.unary_op(n) == "*":
                    self.plain_access(f, n, n.kids[0], "deref")
                elif device and k == "MEMBER_REF_EXPR" and n.kids:
                    try:
                        arrow = n.kids[0].type.kind.name == "POINTER" and "->" in self.text_of(n)
                    except Exception:
                        arrow = False
                    if arrow and not (n.parent and n.parent.kind == "CALL_EXPR" and n.parent.kids and n.parent.kids[0] is n):
                        self.plain_access(f, n, n.kids[0], "member")
                elif device and k in _LOOP_KINDS:
                    self.scan_loop(f, n)
            if f.kind == "global":
                self.scan_tail(f)
        self.cur_func = None

    def uses(self, n: _Node) -> set[str]:
        """How an lvalue expression is used: {'load'}, {'store'}, both, or nothing (address taken)."""
        cur = n
        while True:
            p = cur.parent
            if p is None:
                return {"load"}
            if p.kind == "PAREN_EXPR":
                cur = p
                continue
            if p.kind == "MEMBER_REF_EXPR" and p.kids and p.kids[0] is cur:
                if p.parent is not None and p.parent.kind == "CALL_EXPR" and p.parent.kids and p.parent.kids[0] is p:
                    return set()  # method call on the element (e.g. atomic type): not a plain access
                cur = p
                continue
            break
        if p.kind == "BINARY_OPERATOR" and self.binop(p) == "Assign":
            return {"store"} if p.kids and p.kids[0] is cur else {"load"}
        if p.kind == "COMPOUND_ASSIGNMENT_OPERATOR":
            return {"load", "store"} if p.kids and p.kids[0] is cur else {"load"}
        if p.kind == "UNARY_OPERATOR":
            op = self.unary_op(p)
            if op == "&":
                return set()
            if op in ("++", "--"):
                return {"load", "store"}
            return {"load"}
        if p.kind == "ARRAY_SUBSCRIPT_EXPR" and p.kids and p.kids[0] is cur:
            return set()
        if p.kind == "CALL_EXPR":
            if p.spelling == "operator=" and p.kids and p.kids[0] is cur:
                return {"store"}
            if p.spelling == "operator=":
                return {"load"}  # the right side of a struct copy (float4 a = b): read whole
            if self.is_constructor(p) and "atomic" not in p.spelling:
                return {"load"}
            return set()  # bound to a reference parameter
        if p.kind == "VAR_DECL":
            try:
                if p.type.kind.name in ("LVALUEREFERENCE", "RVALUEREFERENCE"):
                    return set()
            except Exception:
                pass
            return {"load"}
        return {"load"}

    def base_name(self, n: _Node) -> str:
        s = _strip(n)
        while s.kind in ("ARRAY_SUBSCRIPT_EXPR", "BINARY_OPERATOR", "UNARY_OPERATOR", "MEMBER_REF_EXPR") and s.kids:
            if s.kind == "MEMBER_REF_EXPR" and s.ref is not None and s.ref.kind.name == "FIELD_DECL":
                return s.spelling
            s = _strip(s.kids[0])
        if s.kind == "CALL_EXPR":
            obj = self.call_object(s)
            if obj is not None:
                return self.base_name(obj)
        return s.spelling or self.snippet(s, 40)

    def width_of(self, n: _Node) -> int:
        try:
            sz = n.type.get_size()
            return sz * 8 if sz and sz > 0 else 0
        except Exception:
            return 0

    def is_volatile(self, n: _Node) -> bool:
        try:
            if n.type.is_volatile_qualified():
                return True
            base = _strip(n.kids[0]) if n.kids else None
            t = n.kids[0].type if n.kids else None
            return bool(t is not None and t.kind.name == "POINTER" and t.get_pointee().is_volatile_qualified()) or (
                base is not None and "volatile" in base.type.spelling)
        except Exception:
            return False

    def record(self, f: _Func, n: _Node, kind: str, ptr_expr: _Node, pkind: str, via: str, width: int = 0,
               scope: str = "", order: str = "") -> None:
        name = self.base_name(ptr_expr)
        # helper summary: which params a device function reads through
        if kind in ("load", "atomic") and f.kind != "host":
            for i, p in enumerate(f.params):
                if p.spelling == name:
                    prev = self.helper_reads.setdefault(f.name, {}).get(i, "")
                    if not prev or order in ("acquire", "volatile"):
                        self.helper_reads[f.name][i] = order or ("atomic" if kind == "atomic" else "relaxed")
        if pkind == "local":
            return
        self.facts.accesses.append(MemAccess(function=f.name, line=self.line(n), kind=kind, pointer=name,
                                             pointer_kind=pkind, via=via, width_bits=width, scope=scope,
                                             order=order, snippet=self.snippet(n)))
        if pkind == "multicast_ptr":
            self.api(f, n, "multicast_ptr", "nvls")

    def plain_access(self, f: _Func, n: _Node, ptr: _Node, via: str) -> None:
        pk = self.eval(ptr)[0]
        if pk in ARRAY_KINDS:
            return  # reading the pointer table itself (local memory)
        try:
            if n.type.kind.name in ("CONSTANTARRAY",):
                return  # a row of a 2-D array, not an access yet
        except Exception:
            pass
        uses = self.uses(n)
        if not uses:
            return
        order = "volatile" if self.is_volatile(n) else ""
        for u in sorted(uses):  # 'load' before 'store'
            self.record(f, n, u, ptr, pk, via, self.width_of(n), order=order)

    def api(self, f: _Func, n: _Node, api: str, category: str) -> None:
        line = self.line(n)
        for a in self.facts.api_calls:
            if a.api == api and a.line == line and a.category == category:
                return
        self.facts.api_calls.append(ApiCall(api=api, line=line, function=f.name, category=category,
                                            snippet=self.snippet(n)))

    def address_expr(self, a: _Node) -> _Node:
        s = _strip(a)
        return s

    def scan_call(self, f: _Func, n: _Node, device: bool) -> None:
        name = n.spelling
        args = self.call_args(n)
        if self.is_launch(n):
            self.add_launch(f, n)
            return
        if name in ("cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cudaLaunchKernelExC"):
            kname, kargs = self.launch_api_parts(n)
            coop = name == "cudaLaunchCooperativeKernel"
            self.facts.launches.append(Launch(kernel=kname, line=self.line(n), caller=f.name,
                                              args=[self.snippet(a, 80) for a in kargs],
                                              arg_kinds=[self.eval(a)[0] for a in kargs],
                                              grid=self.snippet(args[1], 60) if len(args) > 1 and not coop or len(args) > 1 else "",
                                              block=self.snippet(args[2], 60) if len(args) > 2 else "",
                                              cooperative=coop,
                                              stream=self.snippet(args[5], 60) if len(args) > 5 else ""))
            if coop:
                self.api(f, n, name, "grid_sync")
            return
        m = _ATOMIC_RE.match(name)
        if m and device and args:
            scope = {"_system": "system", "_block": "cta"}.get(m.group(2) or "", "gpu")
            addr = args[0]
            try:
                width = addr.type.get_pointee().get_size() * 8
                width = max(width, 0)
            except Exception:
                width = 0
            self.record(f, n, "atomic", addr, self.eval(addr)[0], "intrinsic", width, scope, "relaxed")
            return
        if device and (name in _LOAD_INTRINSICS or name in _STORE_INTRINSICS) and args:
            kind = "load" if name in _LOAD_INTRINSICS else "store"
            self.record(f, n, kind, args[0], self.eval(args[0])[0], "intrinsic", self.width_of(n) if kind == "load" else 0,
                        order="volatile" if name == "__ldcv" else "")
            return
        if device and name in _ATOMIC_REF_METHODS and n.kids and n.kids[0].kind == "MEMBER_REF_EXPR":
            obj = self.call_object(n)
            if obj is not None and re.search(r"atomic_ref|atomic<", obj.type.spelling):
                self.atomic_ref_access(f, n, obj, args)
                return
        if name in _FENCE_CALLS:
            self.facts.fences.append(Fence(kind=name, line=self.line(n), function=f.name, scope=_FENCE_CALLS[name]))
            return
        if name == "atomic_thread_fence":
            t = self.snippet(n)
            scope = "gpu" if "thread_scope_device" in t else ("cta" if "thread_scope_block" in t else "system")
            self.facts.fences.append(Fence(kind="atomic_thread_fence", line=self.line(n), function=f.name, scope=scope))
            return
        if _MEMCPY_RE.match(name):
            self.add_memcpy(f, n, args)
            return
        if _BLAS_GEMM_RE.match(name):
            # a GEMM operand that points into a peer's buffer is read by the library's kernel
            # over NVLink: an SM load of peer memory, issued from host code
            for a in args:
                kind = self.eval(a)[0]
                if kind in PEER_KINDS:
                    self.record(f, n, "load", a, kind, "library")
            return
        if name in _HOST_SYNC:
            self.api(f, n, name, "host_sync")
        elif name == "synchronize" and "Event" in (self.call_object(n).type.spelling if self.call_object(n) else ""):
            self.api(f, n, "cudaEventSynchronize", "host_sync")
        elif name == "sync" and self.call_object(n) is not None and "grid_group" in self.grid_type(self.call_object(n)):
            self.api(f, n, "grid.sync", "grid_sync")
        elif name == "sync" and args and "grid_group" in self.grid_type(args[0]):
            self.api(f, n, "cg::sync(grid)", "grid_sync")
        elif name.startswith("nvshmem"):
            if _NVSHMEM_SYNC_RE.match(name):
                self.api(f, n, name, "nvshmem_sync")
            elif _NVSHMEM_XFER_RE.match(name):
                self.api(f, n, name, "nvshmem")
        elif name.startswith("cuTensorMapEncode") or name in ("memcpy_async_tx",) or (
            name == "memcpy_async" and "cuda" in self.snippet(n)) or name.startswith("cp_async_bulk"):
            self.api(f, n, name, "tma")
        elif name.startswith("cuMulticast"):
            self.api(f, n, name, "nvls")
        elif name.startswith("cudaIpc"):
            self.api(f, n, name, "ipc")
        elif name in _ALLOC and (name not in _TORCH_ALLOC or f.kind == "host"):
            if name not in _TORCH_ALLOC or "::" in self.snippet(n) or True:
                self.api(f, n, name if name.startswith(("cuda", "nvshmem")) else "torch::" + name, "alloc")
        elif name in ("cudaEventRecord", "cudaStreamWaitEvent"):
            self.api(f, n, name, "other")

    def grid_type(self, n: _Node) -> str:
        """Type of a group object before implicit conversions (grid_group, thread_block, ...)."""
        try:
            s = _strip(n)
            if s.kind == "CALL_EXPR" and s.spelling == "this_grid":
                return "grid_group"
            return s.type.spelling + " " + n.type.spelling
        except Exception:
            return ""

    def atomic_ref_access(self, f: _Func, n: _Node, obj: _Node, args: list[_Node]) -> None:
        o = _strip(obj)
        target = None
        tspell = obj.type.spelling
        if o.kind == "DECL_REF_EXPR":
            ent = self.atomic_refs.get(self.key_of_ref(o))
            if ent is not None:
                target, tspell = ent
        elif o.kind == "CALL_EXPR":
            a = self.call_args(o)
            target = a[0] if a else None
            tspell = o.type.spelling
        if target is None:
            return
        t = _strip(target)
        if t.kind == "ARRAY_SUBSCRIPT_EXPR" and t.kids:
            ptr = t.kids[0]
        elif t.kind == "UNARY_OPERATOR" and t.kids:
            ptr = t.kids[0]
        else:
            ptr = t
        scope = "system"
        if "thread_scope_device" in tspell:
            scope = "gpu"
        elif "thread_scope_block" in tspell:
            scope = "cta"
        order = "seq_cst"
        for a in args:
            for x in a.walk():
                if x.spelling.startswith("memory_order_"):
                    order = x.spelling[len("memory_order_"):]
        order = {"consume": "acquire"}.get(order, order)
        kind = {"load": "load", "store": "store", "wait": "load"}.get(n.spelling, "atomic")
        self.record(f, n, kind, ptr, self.eval(ptr)[0], "intrinsic", self.width_of(t), scope, order)

    def add_launch(self, f: _Func, n: _Node) -> None:
        text = self.text_of(n)
        m = re.match(r"\s*([\w:]+)\s*(<.*?>)?\s*<<<(.*?)>>>", text, re.S)
        template = grid = block = stream = ""
        if m:
            template = (m.group(2) or "").strip()
            cfg = [c.strip() for c in _split_top(m.group(3), ",")]
            grid = cfg[0] if cfg else ""
            block = cfg[1] if len(cfg) > 1 else ""
            stream = cfg[3] if len(cfg) > 3 else ""
        args = n.kids[2:]
        self.facts.launches.append(Launch(kernel=n.spelling, line=self.line(n), caller=f.name,
                                          args=[self.snippet(a, 80) for a in args],
                                          arg_kinds=[self.eval(a)[0] for a in args], grid=grid, block=block,
                                          template_args=template, stream=stream))

    def add_memcpy(self, f: _Func, n: _Node, args: list[_Node]) -> None:
        name = n.spelling
        text = self.snippet(n, 240)
        km = re.search(r"cudaMemcpy(HostToDevice|DeviceToHost|DeviceToDevice|HostToHost|Default)", text)
        kind_arg = km.group(0) if km else ""
        if name.startswith("cuMemcpy"):
            if "HtoD" in name:
                kind_arg = "HtoD"
            elif "DtoH" in name:
                kind_arg = "DtoH"
        if "2D" in name:
            operand_idx = [0, 2]
        elif name in ("cudaMemcpyPeer", "cudaMemcpyPeerAsync", "cuMemcpyPeer", "cuMemcpyPeerAsync"):
            operand_idx = [0, 2]
        elif "Symbol" in name:
            operand_idx = [0, 1]
        else:
            operand_idx = [0, 1]
        kinds = [self.eval(args[i])[0] for i in operand_idx if i < len(args)]
        peer = "Peer" in name or any(k in PEER_KINDS or k == "peer_ptr" for k in kinds)
        host = kind_arg in ("cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost", "HtoD", "DtoH")
        self.facts.memcpys.append(MemcpyCall(api=name, line=self.line(n), function=f.name, kind_arg=kind_arg,
                                             peer=peer, host=host, snippet=text))

    # ---- inline asm ----
    def scan_asm(self, f: _Func, n: _Node) -> None:
        text = self.text_of(n)
        i = text.find("(")
        j = text.rfind(")")
        if i < 0 or j <= i:
            self.facts.asm.append(AsmStmt(line=self.line(n), function=f.name, mnemonics=[], text=self.snippet(n)))
            return
        sections = _split_top(text[i + 1:j], ":", scoped=False)
        template = _string_literals(sections[0])
        operands: list[tuple[str, str, str]] = []  # (name, constraint, expr text)
        for sec in sections[1:3]:
            for op in _split_top(sec, ","):
                om = re.match(r'\s*(?:\[(\w+)\])?\s*"([^"]*)"\s*\((.*)\)\s*$', op, re.S)
                if om:
                    operands.append((om.group(1) or "", om.group(2), om.group(3).strip()))
        exprs = [k for k in n.kids]
        op_nodes: list[_Node | None] = exprs if len(exprs) == len(operands) else [None] * len(operands)
        instrs = _ptx_instructions(template)
        mnems = [op for op, _ in instrs]
        self.facts.asm.append(AsmStmt(line=self.line(n), function=f.name, mnemonics=mnems,
                                      text=" ".join(template.split())[:300]))
        for op, rest in instrs:
            head = op.split(".")[0]
            if head in ("fence", "membar"):
                kind = "fence.proxy.async" if ".proxy.async" in op or op.startswith("fence.proxy.async") else op
                _, scope = _ptx_order_scope(op)
                self.facts.fences.append(Fence(kind=kind, line=self.line(n), function=f.name, scope=scope))
            if op.startswith("multimem"):
                self.api(f, n, op, "nvls")
            if re.match(r"cp(\.reduce)?\.async\.bulk", op):
                self.api(f, n, op, "tma")
            mem = _ptx_memop(op)
            bracket_ops = re.findall(r"\[\s*%(\d+|\[\w+\])", rest)
            targets: list[tuple[str, str]] = []
            if mem and bracket_ops:
                targets.append((mem, bracket_ops[0]))
            elif op.startswith("cp.async.bulk") and len(bracket_ops) >= 2:
                # dst first: a .global destination is a store, otherwise the source is read
                if re.match(r"cp\.async\.bulk(\.tensor\.\w+)?\.global", op):
                    targets.append(("store", bracket_ops[0]))
                else:
                    targets.append(("load", bracket_ops[1]))
            for mem_kind, ref in targets:
                idx = -1
                if ref.startswith("["):
                    nm = ref.strip("[]")
                    idx = next((q for q, o in enumerate(operands) if o[0] == nm), -1)
                else:
                    idx = int(ref)
                if not (0 <= idx < len(operands)):
                    continue
                node = op_nodes[idx]
                if node is not None:
                    pk = self.eval(node)[0]
                    ptr_node = node
                else:
                    pk = self.kind_by_text(operands[idx][2])
                    ptr_node = None
                if pk == "unknown" and ".shared" in op and not op.startswith(("cp.", "multimem")):
                    continue
                order, scope = _ptx_order_scope(op)
                if ptr_node is not None:
                    self.record(f, n, mem_kind, ptr_node, pk, "asm", _ptx_width(op), scope, order)
                elif pk != "local":
                    self.facts.accesses.append(MemAccess(function=f.name, line=self.line(n), kind=mem_kind,
                                                         pointer=operands[idx][2], pointer_kind=pk, via="asm",
                                                         width_bits=_ptx_width(op), scope=scope, order=order,
                                                         snippet=op))

    def kind_by_text(self, expr: str) -> str:
        m = re.search(r"[A-Za-z_]\w*", expr)
        if not m:
            return "unknown"
        name = m.group(0)
        for key, val in self.env.items():
            if key[1] == name:
                return val[0]
        return "unknown"

    # ---- spin loops ----
    def loop_parts(self, n: _Node) -> tuple[list[_Node], _Node | None]:
        """(condition nodes, body) of a loop."""
        if n.kind == "WHILE_STMT":
            return n.kids[:-1], n.kids[-1] if n.kids else None
        if n.kind == "DO_STMT":
            return n.kids[1:], n.kids[0] if n.kids else None
        if n.kind == "FOR_STMT":
            text = self.text_of(n)
            o = text.find("(")
            parts = _split_top(text[o + 1:], ";") if o >= 0 else []
            if len(parts) < 3:
                return [], n.kids[-1] if n.kids else None
            cs = n.so + len(text[: o + 1 + len(parts[0]) + 1].encode())
            ce = cs + len(parts[1].encode())
            conds = [k for k in n.kids[:-1] if cs <= k.so < ce]
            return conds, n.kids[-1] if n.kids else None
        return [], None

    def reads_memory(self, cond: _Node) -> tuple[str, str] | None:
        """(polled kind, order) if evaluating `cond` reads memory through a pointer."""
        best = None
        for x in cond.walk():
            got = None
            if x.kind in ("ARRAY_SUBSCRIPT_EXPR",) and len(x.kids) >= 2:
                pk = self.eval(x.kids[0])[0]
                if pk not in ARRAY_KINDS and "load" in self.uses(x):
                    got = (pk, "volatile" if self.is_volatile(x) else "relaxed")
            elif x.kind == "UNARY_OPERATOR" and x.kids and self.unary_op(x) == "*":
                pk = self.eval(x.kids[0])[0]
                if pk not in ARRAY_KINDS and "load" in self.uses(x):
                    got = (pk, "volatile" if self.is_volatile(x) else "relaxed")
            elif x.kind == "CALL_EXPR":
                args = self.call_args(x)
                nm = x.spelling
                if _ATOMIC_RE.match(nm) and args:
                    got = (self.eval(args[0])[0], "atomic")
                elif nm in _LOAD_INTRINSICS and args:
                    got = (self.eval(args[0])[0], "volatile" if nm == "__ldcv" else "relaxed")
                elif nm in ("load", "wait") and x.kids and x.kids[0].kind == "MEMBER_REF_EXPR":
                    obj = self.call_object(x)
                    if obj is not None and "atomic" in obj.type.spelling:
                        order = "seq_cst"
                        for a in args:
                            for y in a.walk():
                                if y.spelling.startswith("memory_order_"):
                                    order = y.spelling[len("memory_order_"):]
                        ptr_kind = "unknown"
                        o = _strip(obj)
                        ent = self.atomic_refs.get(self.key_of_ref(o)) if o.kind == "DECL_REF_EXPR" else None
                        tgt = ent[0] if ent else (self.call_args(o)[0] if o.kind == "CALL_EXPR" and self.call_args(o) else None)
                        if tgt is not None:
                            t = _strip(tgt)
                            ptr_kind = self.eval(t.kids[0] if t.kids and t.kind in ("ARRAY_SUBSCRIPT_EXPR", "UNARY_OPERATOR") else t)[0]
                        got = (ptr_kind, "relaxed" if order == "relaxed" else "acquire")
                elif nm in self.helper_reads:
                    for i, order in self.helper_reads[nm].items():
                        if i < len(args):
                            got = (self.eval(args[i])[0], order)
                            break
            if got is not None:
                if best is None or _KIND_PRIORITY.get(got[0], 0) > _KIND_PRIORITY.get(best[0], 0):
                    best = got
        return best

    def mentions_bound(self, cond: _Node, body: _Node | None) -> bool:
        """The condition tests a clock or an iteration counter."""
        modified = set()
        scope = [cond] + ([body] if body is not None else [])
        for s in scope:
            for x in s.walk():
                if x.kind in ("UNARY_OPERATOR", "COMPOUND_ASSIGNMENT_OPERATOR") and x.kids:
                    if x.kind == "COMPOUND_ASSIGNMENT_OPERATOR" or self.unary_op(x) in ("++", "--"):
                        t = _strip(x.kids[0])
                        if t.kind == "DECL_REF_EXPR":
                            modified.add(t.spelling)
        for x in cond.walk():
            if x.kind in ("CALL_EXPR", "DECL_REF_EXPR") and x.spelling in _CLOCK_NAMES:
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

    def exits_in(self, body: _Node) -> list[_Node]:
        """break/return/trap statements that leave this loop."""
        out = []

        def visit(x: _Node, nested: bool):
            if x.kind == "BREAK_STMT" and not nested:
                out.append(x)
            elif x.kind == "RETURN_STMT" or (x.kind == "CALL_EXPR" and x.spelling in ("__trap", "abort", "__brkpt")):
                out.append(x)
            elif x.kind == "ASM_STMT" and re.search(r"\btrap\b|\bexit\b", _string_literals(self.text_of(x))):
                out.append(x)
            elif x.kind == "GOTO_STMT":
                out.append(x)
            for ch in x.kids:
                visit(ch, nested or x.kind in _LOOP_KINDS or x.kind == "SWITCH_STMT")

        visit(body, False)
        return out

    def guarding_if(self, x: _Node, body: _Node) -> _Node | None:
        p = x.parent
        while p is not None and p is not body:
            if p.kind == "IF_STMT" and p.kids:
                return p.kids[0]
            p = p.parent
        return None

    def scan_loop(self, f: _Func, n: _Node) -> None:
        conds, body = self.loop_parts(n)
        cond = conds[0] if conds else None
        polled = self.reads_memory(cond) if cond is not None else None
        if polled is not None:
            has_exit = bool(body is not None and self.exits_in(body)) or self.mentions_bound(cond, body)
            self.facts.spin_loops.append(SpinLoop(line=self.line(n), function=f.name, condition=self.snippet(cond),
                                                  has_exit=has_exit, polls=polled[0], order=polled[1]))
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
        if poll_exit is None:
            return
        if any(x.kind == "CALL_EXPR" and x.spelling in _CLOCK_NAMES for x in body.walk()):
            other_exit = other_exit or any(
                (g := self.guarding_if(e, body)) is not None and self.mentions_bound(g, body) for e in exits)
        g, r = poll_exit
        self.facts.spin_loops.append(SpinLoop(line=self.line(n), function=f.name, condition=self.snippet(g),
                                              has_exit=other_exit, polls=r[0], order=r[1]))

    # ---- tail handling ----
    def scan_tail(self, f: _Func) -> None:
        int_params = set()
        for p in f.params:
            try:
                tk = p.type.get_canonical().kind.name
            except Exception:
                tk = ""
            if tk in ("INT", "UINT", "LONG", "ULONG", "LONGLONG", "ULONGLONG", "SHORT", "USHORT"):
                int_params.add(p.spelling)
        index_vars: set[str] = set()
        derived: dict[str, str] = {}  # local -> param it is computed from
        for x in f.body.walk():
            if x.kind == "VAR_DECL":
                names = {y.spelling for y in x.walk() if y.kind in ("DECL_REF_EXPR", "MEMBER_REF_EXPR")}
                if names & ({"threadIdx", "blockIdx"} | index_vars):
                    index_vars.add(x.spelling)
                for pn in names & int_params:
                    derived.setdefault(x.spelling, pn)
        idx_names = index_vars | {"threadIdx", "blockIdx"}

        def refs(x: _Node) -> set[str]:
            return {y.spelling for y in x.walk() if y.kind in ("DECL_REF_EXPR", "MEMBER_REF_EXPR")}

        def direct_refs(x: _Node) -> set[str]:
            """Names used not under a division or shift (n itself, not n / 4)."""
            out = set()

            def visit(y: _Node, under_div: bool):
                if y.kind == "BINARY_OPERATOR" and self.binop(y) in ("Div", "Shr"):
                    under_div = True
                if y.kind == "DECL_REF_EXPR" and not under_div:
                    out.add(y.spelling)
                for ch in y.kids:
                    visit(ch, under_div)

            visit(x, False)
            return out

        counts = int_params | set(derived)
        checked = False
        guarded_tail = False
        tiles: list[_Node] = []
        for x in f.body.walk():
            if x.kind == "BINARY_OPERATOR" and len(x.kids) == 2:
                op = self.binop(x)
                if op in ("LT", "LE", "GT", "GE"):
                    a, b = refs(x.kids[0]), refs(x.kids[1])
                    if (a & idx_names and b & counts) or (b & idx_names and a & counts):
                        checked = True
                    da, db = direct_refs(x.kids[0]), direct_refs(x.kids[1])
                    if (da | db) & int_params:
                        guarded_tail = True
                elif op == "Rem" and refs(x) & counts:
                    guarded_tail = True
                elif op in ("Div", "Shr"):
                    lhs, rhs = refs(x.kids[0]), _strip(x.kids[1])
                    const_rhs = rhs.kind == "INTEGER_LITERAL" or (rhs.kind == "DECL_REF_EXPR" and rhs.ref is not None and rhs.ref.kind.name in ("NON_TYPE_TEMPLATE_PARAMETER", "VAR_DECL", "ENUM_CONSTANT_DECL") and rhs.spelling not in int_params)
                    if lhs & int_params and const_rhs:
                        tiles.append(x)
            elif x.kind in ("CXX_REINTERPRET_CAST_EXPR", "CSTYLE_CAST_EXPR"):
                try:
                    ts = x.type.spelling
                except Exception:
                    ts = ""
                if "*" in ts and _VECTOR_TYPE_RE.search(ts):
                    tiles.append(x)
            elif x.kind == "CALL_EXPR" and x.spelling in ("min", "max") and refs(x) & int_params:
                guarded_tail = True
        if checked:
            self.facts.bounds_checked.append(f.name)
        if tiles and not guarded_tail:
            for t in tiles:
                ln = self.line(t)
                if ln not in self.facts.unguarded_tiles:
                    self.facts.unguarded_tiles.append(ln)

    # ---- launches missed by the AST (undeclared kernels, dependent templates) ----
    def text_launches(self) -> None:
        seen = {l.line for l in self.facts.launches}
        host_ranges = [(f.node.so, f.body.eo, f) for f in self.funcs]
        for m in re.finditer(r"\b([A-Za-z_]\w*)\s*(<[^<>;]*(?:<[^<>;]*>[^<>;]*)*>)?\s*<<<(.*?)>>>\s*\(", self.text, re.S):
            tl = self.text.count("\n", 0, m.start()) + 1
            fl = self.src.file_line(tl)
            if fl in seen:
                continue
            close = _match_paren(self.text, m.end() - 1)
            argtext = self.text[m.end():close] if close > 0 else ""
            args = [a.strip() for a in _split_top(argtext, ",") if a.strip()]
            cfg = [c.strip() for c in _split_top(m.group(3), ",")]
            off = len(self.text[: m.start()].encode())
            caller = next((f.name for s, e, f in host_ranges if s <= off < e), "")
            self.facts.launches.append(Launch(kernel=m.group(1), line=fl, caller=caller, args=args,
                                              arg_kinds=[self.kind_by_text(a) for a in args],
                                              grid=cfg[0] if cfg else "", block=cfg[1] if len(cfg) > 1 else "",
                                              template_args=(m.group(2) or "").strip(),
                                              stream=cfg[3] if len(cfg) > 3 else ""))

    def run(self, tu) -> None:
        tops = self.build(tu)
        self.collect_functions(tops)
        self.collect_bindings()
        self.apply_seeds()
        self.flow()
        self.apply_name_fallback()
        self.flow()
        self.make_functions()
        # helper summaries first, so polls through helpers are seen wherever the loop sits
        self.scan()
        if self.helper_reads:
            self.facts.spin_loops.clear()
            for f in self.funcs:
                if f.kind != "host":
                    self.cur_func = f
                    for n in f.body.walk():
                        if n.kind in _LOOP_KINDS:
                            self.scan_loop(f, n)
            self.cur_func = None
        self.text_launches()


def _match_paren(text: str, open_idx: int) -> int:
    depth = 0
    quote = ""
    i = open_idx
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


# --------------------------------------------------------------------------------------------
# libclang driver
# --------------------------------------------------------------------------------------------

_INDEX = None
_KIND_NAMES: dict[int, str] = {}


def _kind_names() -> dict[int, str]:
    if not _KIND_NAMES:
        import clang.cindex as ci

        for k in ci.CursorKind.get_all_kinds():
            _KIND_NAMES[k.value] = k.name
    return _KIND_NAMES


def _index():
    global _INDEX
    if _INDEX is None:
        import clang.cindex as ci

        _INDEX = ci.Index.create()
    return _INDEX


_PCH_ARGS: list[str] | None = None


def _parse_args() -> list[str]:
    """Prefer a precompiled prelude (parse ~10 ms instead of ~30 ms); build it once per prelude
    version in the temp dir, and fall back to -include when that does not work."""
    global _PCH_ARGS
    if _PCH_ARGS is not None:
        return _PCH_ARGS
    _PCH_ARGS = PARSE_ARGS
    try:
        import hashlib
        import tempfile

        import clang.cindex as ci

        with open(PRELUDE_PATH, "rb") as fh:
            digest = hashlib.sha1(fh.read() + " ".join(BASE_ARGS).encode() + ci.__file__.encode()).hexdigest()[:16]
        path = os.path.join(tempfile.gettempdir(), f"pkb_prelude_{digest}.pch")
        if not os.path.exists(path):
            tu = _index().parse(PRELUDE_PATH, args=BASE_ARGS, options=ci.TranslationUnit.PARSE_INCOMPLETE)
            if any(d.severity >= 3 for d in tu.diagnostics):
                return _PCH_ARGS
            tmp = f"{path}.{os.getpid()}.tmp"
            tu.save(tmp)
            os.replace(tmp, path)  # atomic, so concurrent analyzers never read half a file
        _PCH_ARGS = BASE_ARGS + ["-include-pch", path]
    except Exception:
        _PCH_ARGS = PARSE_ARGS
    return _PCH_ARGS


def _diagnostics(tu, src: CudaSource) -> list[Diagnostic]:
    out = []
    for d in tu.diagnostics:
        if d.severity < 2 or any(s in d.spelling for s in _IGNORED_DIAGS):
            continue
        f = d.location.file
        if f is None or f.name != MAIN_NAME:
            continue
        sev = {2: "warning", 3: "error", 4: "fatal"}.get(d.severity, "warning")
        out.append(Diagnostic(severity=sev, message=d.spelling, line=src.file_line(d.location.line)))
    return out


def analyze_cuda(src: CudaSource, file: str, seeds: dict[str, list[str]] | None = None) -> CudaFacts:
    """Facts about one CUDA/C++ source. Never raises: on failure, falls back to a regex scan."""
    t0 = time.perf_counter()
    try:
        text, includes, missing = _blank_includes(src.text or "")
    except Exception:  # pragma: no cover - defensive
        text, includes, missing = src.text or "", [], []
    facts: CudaFacts
    try:
        idx = _index()
        args = _parse_args()
        try:
            tu = idx.parse(MAIN_NAME, args=args, unsaved_files=[(MAIN_NAME, text)], options=0)
        except Exception:
            if args is PARSE_ARGS:
                raise
            tu = idx.parse(MAIN_NAME, args=PARSE_ARGS, unsaved_files=[(MAIN_NAME, text)], options=0)
        p = _ClangPass(src, file, seeds, text)
        p.facts.includes = includes
        p.facts.missing_headers = missing
        p.facts.diagnostics = _diagnostics(tu, src)
        p.run(tu)
        facts = p.facts
        errors = [d for d in facts.diagnostics if d.severity in ("error", "fatal")]
        notes = []
        if errors:
            facts.status = "partial"
            shown = "; ".join(f"line {d.line}: {d.message}" for d in errors[:5])
            more = f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""
            notes.append(f"{len(errors)} clang error(s): {shown}{more}")
        if missing:
            notes.append("headers not modeled: " + ", ".join(missing))
        facts.message = "; ".join(notes)
    except Exception as e:  # libclang missing, or it failed on this source
        facts = _regex_scan(src, text, seeds)
        facts.includes = includes
        facts.missing_headers = missing
        facts.status = "partial"
        facts.message = f"libclang unavailable or failed ({type(e).__name__}: {e}); regex scan only"
    kittens.augment(facts, src, text)  # ThunderKittens kernels and parallel layouts (headers absent)
    facts.fallback_ranges = cuda_branches.fallback_line_ranges(text, src.file_line)
    facts.seconds = time.perf_counter() - t0
    return facts


# --------------------------------------------------------------------------------------------
# regex fallback
# --------------------------------------------------------------------------------------------

_FUNC_RE = re.compile(
    r"((?:template\s*<[^{;]*?>\s*)?)((?:extern\s+\"C\"\s+)?(?:static\s+)?(?:inline\s+)?"
    r"(?:__global__|__device__|__host__|__forceinline__|__noinline__|static|inline|\s)*)"
    r"\s*(?:__launch_bounds__\s*\(([^)]*)\)\s*)?([\w:<>,\s\*&]+?)\s+\**\s*([A-Za-z_]\w*)\s*\(([^;{)]*(?:\([^)]*\)[^;{)]*)*)\)\s*"
    r"(?:const\s*)?\{",
    re.S,
)


def _regex_scan(src: CudaSource, text: str, seeds: dict[str, list[str]] | None) -> CudaFacts:
    facts = CudaFacts(source_index=src.index)

    def fl(off: int) -> int:
        return src.file_line(text.count("\n", 0, off) + 1)

    env: dict[str, str] = {}
    for m in _FUNC_RE.finditer(text):
        quals, name = m.group(2) or "", m.group(5)
        if name in ("if", "for", "while", "switch", "return", "sizeof"):
            continue
        kind = "global" if "__global__" in quals else (
            "host_device" if "__device__" in quals and "__host__" in quals else ("device" if "__device__" in quals else "host"))
        open_idx = m.end() - 1
        depth, i = 0, open_idx
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        params = []
        for ptxt in [p.strip() for p in _split_top(m.group(6), ",") if p.strip()]:
            pm = re.match(r"(.*?)([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*(=.*)?$", ptxt, re.S)
            if not pm:
                continue
            ptype, pname = pm.group(1).strip(), pm.group(2)
            seeded = (seeds or {}).get(name, [])
            pk = seeded[len(params)] if len(params) < len(seeded) else "unknown"
            basis = "seed" if pk != "unknown" else ""
            if pk == "unknown":
                tk = "POINTER" if "*" in ptype else ""
                g = _ClangPass.name_guess(None, pname, ptype, tk)  # type: ignore[arg-type]
                if g:
                    pk, basis = g, "name"
            env[pname] = pk
            params.append(Param(name=pname, type=ptype, is_pointer="*" in ptype, pointer_kind=pk, basis=basis))
        st, en = text.count("\n", 0, m.start()) + 1, text.count("\n", 0, i) + 1
        facts.functions.append(Function(name=name, kind=kind, line=src.file_line(st), end_line=src.file_line(en),
                                        text_line=st, text_end_line=en, params=params,
                                        is_template=bool(m.group(1).strip()),
                                        launch_bounds=(m.group(3) or "").strip()))
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*(<[^<>;]*>)?\s*<<<(.*?)>>>\s*\(", text, re.S):
        close = _match_paren(text, m.end() - 1)
        args = [a.strip() for a in _split_top(text[m.end():close], ",") if a.strip()] if close > 0 else []
        cfg = [c.strip() for c in _split_top(m.group(3), ",")]
        facts.launches.append(Launch(kernel=m.group(1), line=fl(m.start()), caller="", args=args,
                                     arg_kinds=[env.get(a, "unknown") for a in args],
                                     grid=cfg[0] if cfg else "", block=cfg[1] if len(cfg) > 1 else "",
                                     template_args=(m.group(2) or "").strip()))
    for m in re.finditer(r"\b(cudaLaunchCooperativeKernel|cudaLaunchKernel)\s*\(", text):
        facts.launches.append(Launch(kernel="", line=fl(m.start()), caller="",
                                     cooperative=m.group(1) == "cudaLaunchCooperativeKernel"))
    for m in re.finditer(r"\basm\s*(?:volatile|__volatile__)?\s*\(", text):
        close = _match_paren(text, m.end() - 1)
        body = text[m.end():close] if close > 0 else ""
        template = _string_literals(_split_top(body, ":", scoped=False)[0])
        mn = [op for op, _ in _ptx_instructions(template)]
        facts.asm.append(AsmStmt(line=fl(m.start()), function="", mnemonics=mn, text=" ".join(template.split())[:300]))
        for op in mn:
            if op.split(".")[0] in ("fence", "membar"):
                facts.fences.append(Fence(kind="fence.proxy.async" if "proxy.async" in op else op, line=fl(m.start()),
                                          function="", scope=_ptx_order_scope(op)[1]))
            if op.startswith("multimem"):
                facts.api_calls.append(ApiCall(api=op, line=fl(m.start()), function="", category="nvls"))
            if re.match(r"cp(\.reduce)?\.async\.bulk", op):
                facts.api_calls.append(ApiCall(api=op, line=fl(m.start()), function="", category="tma"))
    for m in re.finditer(r"\b(__threadfence_system|__threadfence_block|__threadfence)\s*\(", text):
        facts.fences.append(Fence(kind=m.group(1), line=fl(m.start()), function="", scope=_FENCE_CALLS[m.group(1)]))
    for m in re.finditer(r"\b(cudaMemcpy\w*|cuMemcpy\w*)\s*\(", text):
        close = _match_paren(text, m.end() - 1)
        call = text[m.start():close + 1] if close > 0 else text[m.start():m.end()]
        km = re.search(r"cudaMemcpy(HostToDevice|DeviceToHost|DeviceToDevice|HostToHost|Default)", call)
        kind_arg = km.group(0) if km else ""
        args = [a.strip() for a in _split_top(text[m.end():close], ",")] if close > 0 else []
        peer = "Peer" in m.group(1) or any(env.get(a, "") in PEER_KINDS for a in args[:3])
        facts.memcpys.append(MemcpyCall(api=m.group(1), line=fl(m.start()), function="", kind_arg=kind_arg, peer=peer,
                                        host=kind_arg in ("cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost"),
                                        snippet=" ".join(call.split())[:240]))
    for m in re.finditer(r"\b(atomic(?:Add|Sub|Exch|Max|Min|And|Or|Xor|Inc|Dec|CAS)(_system|_block)?)\s*\(\s*&?\s*([A-Za-z_]\w*)", text):
        scope = {"_system": "system", "_block": "cta"}.get(m.group(2) or "", "gpu")
        facts.accesses.append(MemAccess(function="", line=fl(m.start()), kind="atomic", pointer=m.group(3),
                                        pointer_kind=env.get(m.group(3), "unknown"), via="intrinsic", scope=scope,
                                        order="relaxed", snippet=m.group(0)))
    for m in re.finditer(r"\b(cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize)\s*\(", text):
        facts.api_calls.append(ApiCall(api=m.group(1), line=fl(m.start()), function="", category="host_sync"))
    for m in re.finditer(r"\b(nvshmemx?_\w+)\s*\(", text):
        nm = m.group(1)
        cat = "nvshmem_sync" if _NVSHMEM_SYNC_RE.match(nm) else ("nvshmem" if _NVSHMEM_XFER_RE.match(nm) else "")
        if cat:
            facts.api_calls.append(ApiCall(api=nm, line=fl(m.start()), function="", category=cat))
    for m in re.finditer(r"\b(this_grid\s*\(\s*\)\s*\.\s*sync|grid\s*\.\s*sync)\s*\(", text):
        facts.api_calls.append(ApiCall(api="grid.sync", line=fl(m.start()), function="", category="grid_sync"))
    for m in re.finditer(r"\b(cudaIpc\w+)\s*\(", text):
        facts.api_calls.append(ApiCall(api=m.group(1), line=fl(m.start()), function="", category="ipc"))
    return facts
