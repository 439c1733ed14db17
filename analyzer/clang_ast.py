"""The libclang front of the clang pass: prepare the text, parse it, copy the tree, read clang's
diagnostics; and the light tree (`Node`) with the reading helpers every clang-pass collaborator
shares (`AstView`).

The candidate's #include lines are blanked (line numbers stay) and our own prelude
(analyzer/cuda_prelude/pkb_prelude.h) is force-included instead, so a parse takes milliseconds
and does not need torch or the CUDA toolkit. The AST is copied once into light `Node` objects;
every later step works on those. Reads the CUDA text it is given and the prelude.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from pkb.facts import CudaSource, Diagnostic, Function

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

LOOP_KINDS = {"WHILE_STMT", "DO_STMT", "FOR_STMT", "CXX_FOR_RANGE_STMT"}
EXPR_WRAPPERS = {"UNEXPOSED_EXPR", "PAREN_EXPR", "CSTYLE_CAST_EXPR", "CXX_REINTERPRET_CAST_EXPR",
                  "CXX_STATIC_CAST_EXPR", "CXX_CONST_CAST_EXPR", "CXX_FUNCTIONAL_CAST_EXPR",
                  "CXX_DYNAMIC_CAST_EXPR"}
IGNORED_DIAGS = ("CUDA version is newer than the latest",)


def blank_includes(text: str) -> tuple[str, list[str], list[str]]:
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


class Node:
    __slots__ = ("c", "kind", "spelling", "tline", "so", "eo", "kids", "parent", "_type", "_ref", "_text")

    def __init__(self, c, kind, spelling, tline, so, eo, parent):
        self.c = c
        self.kind = kind
        self.spelling = spelling
        self.tline = tline
        self.so = so
        self.eo = eo
        self.kids: list[Node] = []
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


def unwrap(n: Node) -> Node:
    while n.kind in EXPR_WRAPPERS and n.kids:
        n = n.kids[-1]
    return n


@dataclass
class FuncNode:
    """A function with a body in the candidate's text, as the clang pass walks it."""

    name: str
    kind: str
    node: Node
    params: list[Node]
    body: Node | None
    is_template: bool
    info: Function = field(default=None)  # type: ignore[assignment]


def copy_tree(tu) -> list[Node]:
    """The main file's top-level cursors, copied (with all their descendants) into Nodes."""
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
        tops.append(_copy(c, None, loc, main_ptr, kind_names))
    return tops


def _copy(c, parent, loc, main_ptr, kind_names) -> Node:
    ext = c.extent
    sf, sl, so = loc(ext.start)
    ef, _, eo = loc(ext.end)
    lf, ll, _ = loc(c.location)
    if sf != main_ptr:
        so = 0
    if ef != main_ptr:
        eo = so
    tline = ll if lf == main_ptr else sl
    node = Node(c, kind_names.get(c._kind_id, "UNKNOWN"), c.spelling, tline, so, eo, parent)
    kids = node.kids
    for ch in c.get_children():
        kids.append(_copy(ch, node, loc, main_ptr, kind_names))
    return node


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


def diagnostics(tu, src: CudaSource) -> list[Diagnostic]:
    """Clang's warnings and errors inside the candidate's own text, at file lines."""
    out = []
    for d in tu.diagnostics:
        if d.severity < 2 or any(s in d.spelling for s in IGNORED_DIAGS):
            continue
        f = d.location.file
        if f is None or f.name != MAIN_NAME:
            continue
        sev = {2: "warning", 3: "error", 4: "fatal"}.get(d.severity, "warning")
        out.append(Diagnostic(severity=sev, message=d.spelling, line=src.file_line(d.location.line)))
    return out


def parse(text: str):
    """The translation unit of `text` (with the precompiled prelude where it works)."""
    idx = _index()
    args = _parse_args()
    try:
        return idx.parse(MAIN_NAME, args=args, unsaved_files=[(MAIN_NAME, text)], options=0)
    except Exception:
        if args is PARSE_ARGS:
            raise
        return idx.parse(MAIN_NAME, args=PARSE_ARGS, unsaved_files=[(MAIN_NAME, text)], options=0)


class AstView:
    """Reading a Node: its file line, its text, its operator, a call's object and arguments.
    Needs `self.src` (the CudaSource) and `self.data` (the parsed text as UTF-8 bytes)."""

    def line(self, n: Node) -> int:
        return self.src.file_line(n.tline)

    def text_of(self, n: Node) -> str:
        if n._text is None:
            n._text = self.data[n.so:n.eo].decode("utf-8", errors="replace") if n.eo > n.so else ""
        return n._text

    def snippet(self, n: Node, limit: int = 160) -> str:
        s = " ".join(self.text_of(n).split())
        return s[:limit]

    def unary_op(self, n: Node) -> str:
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

    def binop(self, n: Node) -> str:
        try:
            return n.c.binary_operator.name
        except Exception:
            return ""

    def call_object(self, n: Node) -> Node | None:
        if n.kids and n.kids[0].kind == "MEMBER_REF_EXPR" and n.kids[0].kids:
            return n.kids[0].kids[0]
        return None

    def call_args(self, n: Node) -> list[Node]:
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
        if first.kind == "UNEXPOSED_EXPR" and first.kids and unwrap(first).spelling == n.spelling:
            return n.kids[1:]
        return n.kids if self.is_constructor(n) else n.kids[1:]

    def is_constructor(self, n: Node) -> bool:
        try:
            return n.type.spelling.split("<")[0].split("::")[-1].strip() == n.spelling
        except Exception:
            return False
