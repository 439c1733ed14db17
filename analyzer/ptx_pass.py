"""PTX pass: compile a candidate's device code to PTX with nvcc and read what was really emitted.

Templates, CUDA headers (`cuda::atomic_ref`, `cuda::ptx`) and inline asm hide the mechanism from a
source-level pass; the PTX shows it: `multimem.*` (NVLS), `cp.async.bulk*` (TMA), `ld.acquire.sys`
/ `st.release.sys` / `atom.*.sys` (system-scope ordering), `fence.sc.sys` / `membar.sys`, ...

To stay fast and independent of torch's headers, the pass compiles a *device-only translation unit*:
the CUDA text with host-only functions, the PYBIND11_MODULE / TORCH_LIBRARY blocks, torch-only
namespace-scope statements and torch/ATen/c10/pybind11 includes replaced by blanks (so every kept
character stays on its line, and PTX `.loc` lines map back through `CudaSource.line_map`), a tiny
prelude for the torch-ish types device code uses (behind `#line 1`), and explicit instantiations of
template kernels launched with template arguments appended after the source. When that TU does not
compile, the full source is tried once with torch's include paths.

Public API: `find_nvcc`, `analyze_ptx`, `ptx_summary` (and `parse_ptx` for PTX text).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import functools
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pkb.facts import CudaFacts, CudaSource, PtxEntry, PtxFacts, PtxInstr

# Bump when the TU construction or the PTX parser changes: old cache entries then miss.
PASS_VERSION = "ptx-pass-4"

NVCC_FLAGS = [
    "-ptx",
    "-arch=sm_90",
    "-lineinfo",
    "-std=c++17",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "-w",
]

SKIPPED_MESSAGE = "nvcc not found; PTX pass skipped (set PKB_NVCC or put nvcc on PATH)"

_TU_NAME = "pkb_src.cu"  # the name `#line` gives the source inside the TU (what .file/.loc and errors show)
_MAX_ERROR_LINES = 5

# --------------------------------------------------------------------------------------------
# finding nvcc
# --------------------------------------------------------------------------------------------


def find_nvcc() -> str | None:
    """$PKB_NVCC, then $CUDA_HOME/bin/nvcc, then nvcc on PATH; None when none is executable."""
    env = os.environ.get("PKB_NVCC")
    if env:
        p = shutil.which(env) if os.sep not in env else env
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    home = os.environ.get("CUDA_HOME")
    if home:
        p = os.path.join(home, "bin", "nvcc")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return shutil.which("nvcc")


_VERSION_CACHE: dict[tuple, str] = {}


def _nvcc_version(nvcc: str) -> str:
    """`nvcc --version` text, remembered per (path, mtime, size) so repeated calls run nothing."""
    try:
        st = os.stat(nvcc)
        key = (os.path.realpath(nvcc), st.st_mtime_ns, st.st_size)
    except OSError:
        key = (nvcc, 0, 0)
    if key in _VERSION_CACHE:
        return _VERSION_CACHE[key]
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30)
        text = (out.stdout or "") + (out.stderr or "")
        lines = [ln.strip() for ln in text.splitlines() if "release" in ln or ln.startswith("Build")]
        version = " | ".join(lines) or text.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        version = "unknown"
    _VERSION_CACHE[key] = version
    return version


# --------------------------------------------------------------------------------------------
# a light C++ scanner (comments, strings, preprocessor lines masked; braces matched)
# --------------------------------------------------------------------------------------------


def _mask(text: str) -> str:
    """Same length as `text`; comments, string/char literals and preprocessor lines become spaces
    (newlines kept), so brace matching and keyword search only see code."""
    out = list(text)
    n = len(text)
    i = 0
    line_start = True

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and c in " \t\r\f\v":
            i += 1
            continue
        if line_start and c == "#":
            j = i
            while j < n:
                if text[j] == "\n":
                    if j > 0 and text[j - 1] == "\\":
                        j += 1
                        continue
                    break
                if text.startswith("/*", j):  # a block comment may run on past the directive
                    e = text.find("*/", j + 2)
                    j = n if e < 0 else e + 2
                    continue
                j += 1
            blank(i, j)
            i = j
            continue
        line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
            continue
        if c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', text[i:])
            if m:
                end = text.find(")" + m.group(1) + '"', i + m.end())
                j = n if end < 0 else end + len(m.group(1)) + 2
                blank(i, j)
                i = j
                continue
        if c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum())):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            blank(i, j)
            i = j
            continue
        i += 1
    return "".join(out)


def _match_close(masked: str, i: int, open_c: str = "{", close_c: str = "}") -> int:
    """Index of the bracket closing the one at `i` (len(masked) if unbalanced)."""
    depth = 0
    for k in range(i, len(masked)):
        ch = masked[k]
        if ch == open_c:
            depth += 1
        elif ch == close_c:
            depth -= 1
            if depth == 0:
                return k
    return len(masked)


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at `sep` outside (), [], {}, <>."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth = max(depth - 1, 0)
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


# Macros that decide a function's execution space (torch's and common hand-written ones).
_KNOWN_SPACE_MACROS = {
    "C10_HOST_DEVICE": "__host__ __device__",
    "C10_DEVICE": "__device__",
    "C10_HOST": "__host__",
}

_TORCH_NS_RE = re.compile(r"\b(torch|at|c10|caffe2|pybind11|py)\s*::\s*(\w+)")
_TORCH_MISC_RE = re.compile(
    r"\busing\s+namespace\s+(torch|at|c10|pybind11)\b|\bnamespace\s+py\s*=|\bPYBIND11_\w+|\bTORCH_\w+|\bAT_\w+\s*\(|\bC10_(?!HOST|DEVICE|WARP_SIZE|LAUNCH_BOUNDS)\w+"
)
# torch names the prelude can stand in for (device code uses them)
_PRELUDE_NAMES = {"BFloat16", "Half"}
_TORCH_INCLUDE_RE = re.compile(r"^\s*#\s*include\s*[<\"]\s*(torch|ATen|c10|caffe2|pybind11|Python\.h|THC)\b")


def _torchy(text: str) -> bool:
    """Does this namespace-scope text use torch/pybind11 things the device-only TU lacks?"""
    for m in _TORCH_NS_RE.finditer(text):
        if m.group(1) in ("torch", "at", "c10") and m.group(2) in _PRELUDE_NAMES:
            continue
        return True
    return bool(_TORCH_MISC_RE.search(text))


@dataclass
class _Decl:
    kind: str  # function | block (PYBIND11_MODULE/TORCH_LIBRARY) | type | statement | init
    start: int  # first character of the declaration
    end: int  # one past its last character
    header: str  # masked text before the body's '{' (or the whole statement)
    space: str = ""  # global | device | host | host_device (functions)
    name: str = ""
    qualname: str = ""
    is_template: bool = False
    tparams: list[tuple[str, str, bool]] = field(default_factory=list)  # (name, default, is_pack)
    params: list[str] = field(default_factory=list)  # parameter declarations as written (masked)
    constexpr: bool = False


def _space_macros(text: str) -> dict[str, str]:
    macros = dict(_KNOWN_SPACE_MACROS)
    for m in re.finditer(r"^\s*#\s*define\s+(\w+)[ \t]+([^\n]*)$", text, re.M):
        body = m.group(2)
        if re.search(r"__(global|device|host)__", body):
            macros[m.group(1)] = body
    return macros


def _expand(header: str, macros: dict[str, str]) -> str:
    if not macros:
        return header
    return re.sub(r"\b(" + "|".join(map(re.escape, macros)) + r")\b", lambda m: macros[m.group(1)], header)


def _function_parts(header: str) -> tuple[str, bool, list[tuple[str, str, bool]], list[str]]:
    """(name, is_template, template params, params) of a function header (masked text)."""
    h = header.strip()
    is_template = False
    tparams: list[tuple[str, str, bool]] = []
    m = re.match(r"template\s*<", h)
    if m:
        is_template = True
        lt = m.end() - 1
        close = _match_close(h, lt, "<", ">")
        for p in _split_top(h[lt + 1 : close]):
            default = ""
            decl = p
            idx = _top_level_index(p, "=")
            if idx >= 0:
                decl, default = p[:idx].strip(), p[idx + 1 :].strip()
            ids = re.findall(r"[A-Za-z_]\w*", decl)
            name = ids[-1] if ids else ""
            tparams.append((name, default, "..." in decl))
        h = h[close + 1 :].strip()
    # the parameter list: the last top-level (...) group of the header
    depth, close_i, open_i = 0, -1, -1
    for k in range(len(h) - 1, -1, -1):
        ch = h[k]
        if ch == ")":
            if depth == 0 and close_i < 0:
                close_i = k
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0 and close_i >= 0:
                open_i = k
                break
    if open_i < 0:
        return "", is_template, tparams, []
    before = h[:open_i].rstrip()
    nm = re.search(r"([A-Za-z_~][\w]*(?:\s*::\s*[A-Za-z_~]\w*)*)\s*$", before)
    name = re.sub(r"\s+", "", nm.group(1)) if nm else ""
    params = [p for p in _split_top(h[open_i + 1 : close_i]) if p != "void"]
    return name, is_template, tparams, params


def _scan(text: str, masked: str | None = None) -> list[_Decl]:
    """Namespace-scope declarations of a C++/CUDA text (namespaces and extern "C" are transparent)."""
    masked = _mask(text) if masked is None else masked
    macros = _space_macros(text)
    decls: list[_Decl] = []
    ns_stack: list[tuple[str, int]] = []  # (namespace name, index of its closing brace)
    n = len(masked)
    i = 0
    stmt_start = -1

    def ns_prefix() -> str:
        names = [s for s, _ in ns_stack if s]
        return "::".join(names) + "::" if names else ""

    while i < n:
        ch = masked[i]
        if ns_stack and i == ns_stack[-1][1]:
            ns_stack.pop()
            stmt_start = -1
            i += 1
            continue
        if ch.isspace():
            i += 1
            continue
        if stmt_start < 0:
            stmt_start = i
        if ch == ";":
            header = masked[stmt_start : i + 1]
            decls.append(_Decl("statement", stmt_start, i + 1, header))
            stmt_start = -1
            i += 1
            continue
        if ch == "(":  # parentheses never hold a body at namespace scope
            i = _match_close(masked, i, "(", ")") + 1
            continue
        if ch == "}":  # stray closing brace (unbalanced source): reset
            stmt_start = -1
            i += 1
            continue
        if ch != "{":
            i += 1
            continue
        header = masked[stmt_start:i]
        h = header.strip()
        close = _match_close(masked, i)
        mns = re.fullmatch(r"(?:inline\s+)?namespace(?:\s+([\w:]+))?\s*", h)
        if mns or re.fullmatch(r"extern\s*", h):
            ns_stack.append(((mns.group(1) or "") if mns else "", close))
            stmt_start = -1
            i += 1
            continue
        if re.match(r"(PYBIND11_MODULE|TORCH_LIBRARY\w*)\s*\(", h):
            decls.append(_Decl("block", stmt_start, close + 1, header, space="host"))
            stmt_start = -1
            i = close + 1
            continue
        body_is_init = "=" in _strip_nested(_drop_template_header(h).replace("==", "").replace("!=", "")
                                            .replace("<=", "").replace(">=", ""))
        is_type = re.match(r"(template\s*<.*>\s*)?(typedef\s+)?(struct|class|union|enum)\b", h, re.S)
        if is_type or body_is_init or "(" not in h:
            # a type or an initializer: skip its braces, the statement ends at ';'
            j = close + 1
            while j < n and masked[j] != ";" and masked[j] not in "{}":
                if masked[j] == "(":
                    j = _match_close(masked, j, "(", ")")
                j += 1
            end = min(j + 1, n) if j < n and masked[j] == ";" else close + 1
            decls.append(_Decl("type" if is_type else "init", stmt_start, end, masked[stmt_start:end]))
            stmt_start = -1
            i = end
            continue
        eh = _expand(h, macros)
        if "__global__" in eh:
            space = "global"
        elif "__device__" in eh:
            space = "host_device" if "__host__" in eh else "device"
        else:
            space = "host"
        name, is_t, tparams, params = _function_parts(h)
        decls.append(
            _Decl(
                "function",
                stmt_start,
                close + 1,
                header,
                space=space,
                name=name.split("::")[-1],
                qualname=ns_prefix() + name,
                is_template=is_t,
                tparams=tparams,
                params=params,
                constexpr=bool(re.search(r"\bconstexpr\b|\bconsteval\b", h)),
            )
        )
        stmt_start = -1
        i = close + 1
    return decls


# --------------------------------------------------------------------------------------------
# the device-only translation unit
# --------------------------------------------------------------------------------------------


@dataclass
class _TU:
    body: str  # the blanked source, same line count as the original
    prelude: str
    insts: list[tuple[str, str]]  # (what, line of C++) appended after the source
    notes: list[str]
    changed: bool  # anything blanked or a prelude: a full-source retry differs

    def text(self, insts: list[tuple[str, str]] | None = None) -> str:
        insts = self.insts if insts is None else insts
        tail = "".join(line + "\n" for _, line in insts)
        return self.prelude + f'#line 1 "{_TU_NAME}"\n' + self.body + tail

    @property
    def first_appended_line(self) -> int:
        return self.body.count("\n") + 1


def _blank(chars: list[str], a: int, b: int) -> None:
    for k in range(max(a, 0), min(b, len(chars))):
        if chars[k] != "\n":
            chars[k] = " "


def _line_offsets(text: str) -> list[int]:
    offs = [0]
    for m in re.finditer("\n", text):
        offs.append(m.end())
    return offs


def _prelude(text: str, torch_blanked: bool) -> str:
    lines: list[str] = []
    names = {(m.group(1), m.group(2)) for m in re.finditer(r"\b(c10|at|torch)\s*::\s*(BFloat16|Half)\b", text)}
    bf16 = any(n == "BFloat16" for _, n in names)
    half = any(n == "Half" for _, n in names)
    if bf16:
        lines.append("#include <cuda_bf16.h>")
    if half:
        lines.append("#include <cuda_fp16.h>")
    if names:
        c10 = []
        if bf16:
            c10.append("using BFloat16 = __nv_bfloat16;")
        if half:
            c10.append("using Half = __half;")
        lines.append("namespace c10 { " + " ".join(c10) + " }")
        for ns in ("at", "torch"):
            if any(q == ns for q, _ in names):
                lines.append(f"namespace {ns} {{ " + " ".join(f"using c10::{n};" for n in sorted({n for _, n in names})) + " }")
    if torch_blanked:
        # torch's headers bring these in; device code often relies on them without an include
        lines.append("#include <cstdint>")
        lines.append("#include <cstddef>")
        if "std::numeric_limits" in text:
            lines.append("#include <limits>")
        if re.search(r"std::(is_same|enable_if|conditional|decay|remove_\w+)", text):
            lines.append("#include <type_traits>")
    macros = {
        "C10_HOST_DEVICE": "__host__ __device__",
        "C10_DEVICE": "__device__",
        "C10_HOST": "__host__",
        "C10_WARP_SIZE": "32",
    }
    for name, body in macros.items():
        if re.search(rf"\b{name}\b", text):
            lines.append(f"#ifndef {name}\n#define {name} {body}\n#endif")
    if re.search(r"\bC10_LAUNCH_BOUNDS_[012]\b", text):
        lines.append("#ifndef C10_LAUNCH_BOUNDS_0\n#define C10_LAUNCH_BOUNDS_0 __launch_bounds__(256, 4)\n"
                     "#define C10_LAUNCH_BOUNDS_1(a) __launch_bounds__(a)\n"
                     "#define C10_LAUNCH_BOUNDS_2(a, b) __launch_bounds__(a, b)\n#endif")
    return "".join(ln + "\n" for ln in lines)


_BUILTIN_ARG_RE = re.compile(r"^[\w\s:<>,*&.+\-()]*$")


def _template_refs(masked: str, decls: list[_Decl], names: set[str]) -> list[tuple[str, str, int]]:
    """`name<...>` references of template kernels in the text: (name, args, offset)."""
    out = []
    if not names:
        return out
    own = [(d.start, d.start + len(d.header)) for d in decls if d.kind == "function"]
    for m in re.finditer(r"\b(" + "|".join(map(re.escape, sorted(names))) + r")\s*<", masked):
        if any(a <= m.start() < b for a, b in own):
            continue  # the kernel's own declaration
        lt = m.end() - 1
        close = _match_close(masked, lt, "<", ">")
        if close >= len(masked) or close - lt > 400:
            continue
        args = masked[lt + 1 : close].strip()
        if "<<<" in args or ";" in args or "{" in args:
            continue
        out.append((m.group(1), args, m.start()))
    return out


def _make_instantiations(
    src: CudaSource, cuda: CudaFacts | None, decls: list[_Decl], masked: str
) -> tuple[list[tuple[str, str]], list[str]]:
    kernels = {d.name: d for d in decls if d.kind == "function" and d.space == "global" and d.is_template}
    notes: list[str] = []
    wanted: list[tuple[str, str]] = []  # (kernel name, template args without <>)
    if cuda is not None:
        for ln in cuda.launches:
            if ln.template_args.strip():
                args = ln.template_args.strip()
                if args.startswith("<") and args.endswith(">"):
                    args = args[1:-1]
                wanted.append((ln.kernel.split("::")[-1].strip(), args.strip()))
            elif ln.kernel.split("::")[-1] in kernels:
                d = kernels[ln.kernel.split("::")[-1]]
                if d.tparams and all(dflt for _, dflt, _ in d.tparams):
                    wanted.append((d.name, ""))
        clang_templates = {f.name for f in cuda.functions if f.kind == "global" and f.is_template}
    else:
        clang_templates = set()
    for name, args, _ in _template_refs(masked, decls, set(kernels)):
        wanted.append((name, args))
    insts: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for name, args in wanted:
        args = re.sub(r"\s+", " ", args).strip()
        if (name, args) in seen:
            continue
        seen.add((name, args))
        if not _BUILTIN_ARG_RE.match(args):
            notes.append(f"template kernel {name}<{args}> not instantiated (arguments not understood)")
            continue
        if re.search(r"\bscalar_t\b", args):
            args = re.sub(r"\bscalar_t\b", "float", args)
            notes.append(f"{name}<...scalar_t...> instantiated with scalar_t = float")
            if (name, args) in seen:
                continue
            seen.add((name, args))
        d = kernels.get(name)
        if d is None and name not in clang_templates:
            continue  # not a template kernel of this source (a launch of a non-template, or a library's)
        qual = d.qualname if d is not None else name
        what = f"{qual}<{args}>"
        line = ""
        if d is not None and d.tparams and not any(pack for _, _, pack in d.tparams):
            given = _split_top(args)
            subst: dict[str, str] = {}
            ok = len(given) <= len(d.tparams)
            for k, (tn, dflt, _) in enumerate(d.tparams):
                if k < len(given):
                    subst[tn] = given[k]
                elif dflt:
                    subst[tn] = _subst(dflt, subst)
                else:
                    ok = False
            if ok:
                params = []
                for p in d.params:
                    cut = _top_level_index(p, "=")
                    p = p[:cut] if cut >= 0 else p
                    params.append(_subst(re.sub(r"\s+", " ", p).strip(), subst))
                line = f"template __global__ void {qual}<{args}>({', '.join(params)});"
        if not line:
            line = f"static void* const __pkb_inst_{len(insts)} = (void*)&{qual}<{args}>;"
        insts.append((what, line))
    for name, d in kernels.items():
        if not any(w.split("<")[0].split("::")[-1] == name for w, _ in insts):
            notes.append(f"template kernel {name} not instantiated (no launch with template arguments found)")
    return insts, notes


def _top_level_index(p: str, ch: str) -> int:
    depth = 0
    for k, c in enumerate(p):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth = max(depth - 1, 0)
        elif c == ch and depth == 0:
            return k
    return -1


def _drop_template_header(h: str) -> str:
    m = re.match(r"\s*template\s*<", h)
    if not m:
        return h
    return h[_match_close(h, m.end() - 1, "<", ">") + 1 :]


def _strip_nested(p: str) -> str:
    """The text of `p` at bracket depth 0 (to find a default argument's '=')."""
    out, depth = [], 0
    for ch in p:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _subst(text: str, subst: dict[str, str]) -> str:
    if not subst:
        return text
    pat = re.compile(r"(?<![\w:])(" + "|".join(map(re.escape, subst)) + r")\b")
    return pat.sub(lambda m: subst[m.group(1)], text)


def build_device_tu(src: CudaSource, cuda: CudaFacts | None) -> _TU:
    """The device-only translation unit of `src` (see the module docstring)."""
    text = src.text
    masked = _mask(text)
    decls = _scan(text, masked)
    chars = list(text)
    offs = _line_offsets(text)
    notes: list[str] = []

    # includes
    torch_blanked = False
    for k, start in enumerate(offs):
        end = offs[k + 1] - 1 if k + 1 < len(offs) else len(text)
        if _TORCH_INCLUDE_RE.match(text[start:end]):
            _blank(chars, start, end)
            torch_blanked = True

    # host functions
    clang_funcs = [f for f in (cuda.functions if cuda is not None else []) if f.text_line > 0]
    if clang_funcs:
        nlines = len(offs)
        for f in clang_funcs:
            if f.kind != "host":
                continue
            a, b = f.text_line, max(f.text_end_line, f.text_line)
            if a > nlines:
                continue
            b = min(b, nlines)
            seg = text[offs[a - 1] : (offs[b] if b < nlines else len(text))]
            if re.search(r"\bconstexpr\b|\bconsteval\b", seg.split("{")[0]):
                continue  # usable from device code under --expt-relaxed-constexpr
            # a template header or return type on the lines above the name belongs to it
            while a > 1:
                prev = masked[offs[a - 2] : offs[a - 1]].strip()
                if not prev or prev.endswith((";", "}", "{")) or re.search(r"__(global|device)__", prev):
                    break
                a -= 1
            _blank(chars, offs[a - 1], offs[b] - 1 if b < nlines else len(text))
        notes.append("host functions from the clang pass blanked")
    for d in decls:
        if d.kind == "block":
            _blank(chars, d.start, d.end)
        elif d.kind == "function" and not clang_funcs:
            if d.space == "host" and not d.constexpr:
                _blank(chars, d.start, d.end)
        elif d.kind in ("statement", "type", "init"):
            if _torchy(text[d.start : d.end]):
                _blank(chars, d.start, d.end)
    body = "\n".join(ln.rstrip() for ln in "".join(chars).split("\n"))
    if not body.endswith("\n"):
        body += "\n"
    insts, inst_notes = _make_instantiations(src, cuda, decls, masked)
    prelude = _prelude(body + "".join(line + "\n" for _, line in insts), torch_blanked)
    notes.extend(inst_notes)
    changed = body.rstrip("\n") != "\n".join(ln.rstrip() for ln in text.split("\n")).rstrip("\n") or bool(prelude)
    return _TU(body=body, prelude=prelude, insts=insts, notes=notes, changed=changed)


def _needs_rdc(text: str) -> bool:
    return bool(re.search(r"\bnvshmem|\bextern\s+(\"C\"\s+)?__device__", text))


# --------------------------------------------------------------------------------------------
# running nvcc
# --------------------------------------------------------------------------------------------


@dataclass
class _Run:
    ok: bool
    ptx: str
    output: str
    seconds: float
    timed_out: bool = False
    oserror: str = ""


def _run_nvcc(nvcc: str, tu_text: str, flags: list[str], timeout_s: float) -> _Run:
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pkb-ptx-") as tmp:
        cu = Path(tmp) / "pkb_tu.cu"
        out = Path(tmp) / "pkb_tu.ptx"
        cu.write_text(tu_text)
        cmd = [nvcc, *flags, str(cu), "-o", str(out)]
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=tmp,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
        except OSError as e:
            return _Run(False, "", "", time.monotonic() - t0, oserror=str(e))
        try:
            output, _ = proc.communicate(timeout=max(timeout_s, 1.0))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # nvcc's own children (cudafe++, cicc) too
            except OSError:
                proc.kill()
            output, _ = proc.communicate()
            return _Run(False, "", output or "", time.monotonic() - t0, timed_out=True)
        ptx = out.read_text(errors="replace") if proc.returncode == 0 and out.exists() else ""
        return _Run(proc.returncode == 0 and bool(ptx), ptx, output or "", time.monotonic() - t0)


# nvcc's front end: "file(LINE): error: msg"; its preprocessor (gcc's): "file:LINE:COL: fatal error: msg"
_ERR_RE = re.compile(
    r"^(?P<file>[^\n():]*?)(?:\((?P<line>\d+)\)|:(?P<line2>\d+):\d+): (?P<sev>error|catastrophic error|fatal error)[^:\n]*: (?P<msg>.*)$",
    re.M,
)
_AT_LINE_RE = re.compile(r"at line (\d+)(?! of)")


def _error_lines(output: str, src: CudaSource, file: str, appended_from: int | None) -> list[str]:
    msgs: list[str] = []
    for m in _ERR_RE.finditer(output):
        fname, msg = m.group("file"), m.group("msg").strip()
        line = int(m.group("line") or m.group("line2"))
        if os.path.basename(fname) == _TU_NAME:
            if appended_from is not None and line >= appended_from:
                msgs.append(f"{file}: error (in a generated template instantiation): {msg}")
            else:
                msgs.append(f"{file}:{src.file_line(line)}: error: {msg}")
        else:
            msgs.append(f"{fname}({line}): error: {msg}")
        if len(msgs) >= _MAX_ERROR_LINES:
            break
    if not msgs:
        other = [ln.strip() for ln in output.splitlines() if "error" in ln.lower() or "fatal" in ln.lower()]
        msgs = other[:_MAX_ERROR_LINES] or [ln.strip() for ln in output.strip().splitlines()[:_MAX_ERROR_LINES]]
    return msgs


def _missing_headers(output: str) -> list[str]:
    names = re.findall(r"(?:fatal error: |cannot open source file \")([^\s\"]+?)(?:: No such file or directory|\")", output)
    return sorted(set(names))


def _implicated_appended(output: str, appended_from: int) -> set[int]:
    """Appended (instantiation) lines that nvcc's errors point at, directly or via 'at line N'."""
    lines: set[int] = set()
    for m in _ERR_RE.finditer(output):
        line = int(m.group("line") or m.group("line2"))
        if os.path.basename(m.group("file")) == _TU_NAME and line >= appended_from:
            lines.add(line)
    for m in _AT_LINE_RE.finditer(output):
        if int(m.group(1)) >= appended_from:
            lines.add(int(m.group(1)))
    return lines


@functools.lru_cache(maxsize=1)
def _torch_includes() -> tuple[list[str], list[str]]:
    """(include dirs, defines) for compiling a torch extension source; empty when torch is absent.

    Found from torch's package location without importing torch: this runs in nvcc worker
    threads, and an import there compiles modules concurrently with the main thread's ast work,
    which CPython 3.11 does not survive ("AST constructor recursion depth mismatch").
    """
    import importlib.util

    incs: list[str] = []
    defs: list[str] = []
    try:
        spec = importlib.util.find_spec("torch")
        if spec and spec.origin:
            root = Path(spec.origin).parent / "include"
            if root.is_dir():
                incs = [str(root), str(root / "torch" / "csrc" / "api" / "include")]
    except Exception:  # noqa: BLE001
        incs = []
    if not incs:
        return [], []
    try:
        py = sysconfig.get_paths().get("include")
        if py and os.path.isdir(py):
            incs.append(py)
    except Exception:  # noqa: BLE001
        pass
    defs += ["-DTORCH_API_INCLUDE_EXTENSION_H", "-DTORCH_EXTENSION_NAME=pkb_ptx_ext"]
    return incs, defs


def _torch_version() -> str:
    """torch's installed version (the full-source retry depends on its headers), without importing it."""
    try:
        from importlib.metadata import version

        return "torch " + version("torch")
    except Exception:  # noqa: BLE001
        return "no torch"


def _full_tu(src: CudaSource) -> str:
    pre = ""
    if src.origin == "load_inline.cuda_sources":
        pre = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
    elif src.origin == "load_inline.cpp_sources":
        pre = "#include <torch/extension.h>\n"
    return pre + f'#line 1 "{_TU_NAME}"\n' + src.text + ("" if src.text.endswith("\n") else "\n")


# --------------------------------------------------------------------------------------------
# parsing PTX
# --------------------------------------------------------------------------------------------

_FILE_RE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.M)
_LOC_RE = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)(.*)$")
_INLINED_RE = re.compile(r"inlined_at\s+(\d+)\s+(\d+)\s+(\d+)")
_ENTRY_RE = re.compile(r"^\s*((?:\.(?:visible|weak|extern)\s+)*)\.(entry|func)\b\s*(?:\([^)]*\)\s*)?([A-Za-z_$%][\w$]*)")
_LABEL_RE = re.compile(r"^\s*[A-Za-z_$][\w$]*:(?!:)")
_PRED_RE = re.compile(r"^@!?%?[\w$]+\s+")


def _interesting(op: str) -> bool:
    parts = op.split(".")
    base, mods = parts[0], set(parts[1:])
    if base in ("multimem", "red", "atom", "fence", "membar", "mbarrier"):
        return True
    if op.startswith(("cp.async.bulk", "cp.reduce.async.bulk")):
        return True
    if base == "ld":
        if mods & {"acquire", "relaxed", "volatile"}:
            return True
        return "global" in mods and bool(mods & {"nc", "v4", "v8"})
    if base == "st":
        if mods & {"release", "relaxed", "volatile"}:
            return True
        return "global" in mods and bool(mods & {"v4", "v8"})
    return False


def _callee(stmt: str) -> str:
    rest = stmt.split(None, 1)[1] if len(stmt.split(None, 1)) > 1 else ""
    rest = rest.strip()
    if rest.startswith("("):
        close = _match_close(rest, 0, "(", ")")
        rest = rest[close + 1 :].lstrip(" ,\t\n")
    m = re.match(r"([A-Za-z_$][\w$]*)", rest)
    return m.group(1) if m else ""


@dataclass
class _RawEntry:
    mangled: str
    kind: str
    instrs: dict[str, list[int]] = field(default_factory=dict)  # mnemonic -> text lines (one per hit; 0 unknown)
    asm: set[str] = field(default_factory=set)  # mnemonics seen inside inline asm


def _fix_asm_lines(raw: list[_RawEntry], text: str) -> None:
    """nvcc's .loc for an asm statement written over several lines names a later line (its
    operands); move such hits to the line above that holds the instruction's text."""
    lines = text.split("\n")
    for r in raw:
        for mnem in r.asm:
            op = mnem.split()[0]
            keys = [op, ".".join(op.split(".")[:2])]
            fixed = []
            for ln in r.instrs[mnem]:
                if 0 < ln <= len(lines) and not any(k in lines[ln - 1] for k in keys):
                    for back in range(1, 7):
                        if ln - back < 1:
                            break
                        if any(k in lines[ln - back - 1] for k in keys):
                            ln -= back
                            break
                fixed.append(ln)
            r.instrs[mnem] = fixed


def parse_ptx(ptx: str, tu_name: str = _TU_NAME) -> list[_RawEntry]:
    """Entries (.entry and defined .func) with their interesting instructions and CUDA-text lines."""
    ours = {int(m.group(1)) for m in _FILE_RE.finditer(ptx) if os.path.basename(m.group(2)) == tu_name}
    entries: list[_RawEntry] = []
    cur: _RawEntry | None = None
    pending: tuple[str, str] | None = None
    depth = 0
    loc_line: int | None = None
    locmap: dict[tuple[int, int, int], int] = {}
    buf = ""
    buf_line: int | None = None

    in_asm = False

    def emit(stmt: str, line: int | None) -> None:
        s = stmt.strip()
        while True:
            m = _LABEL_RE.match(s)
            if not m:
                break
            s = s[m.end() :].strip()
        s = _PRED_RE.sub("", s).strip()
        if not s or s.startswith("."):
            return
        op = s.split()[0]
        if op.startswith("call"):
            callee = _callee(s)
            if "nvshmem" in callee:
                cur.instrs.setdefault(f"{op} {callee}", []).append(line or 0)
            return
        if _interesting(op):
            cur.instrs.setdefault(op, []).append(line or 0)
            if in_asm:
                cur.asm.add(op)

    for raw in ptx.splitlines():
        if "// begin inline asm" in raw:
            in_asm = True
        elif "// end inline asm" in raw:
            in_asm = False
        code = raw.split("//", 1)[0]
        st = code.strip()
        if not st:
            continue
        if cur is None:
            if pending is None:
                m = _ENTRY_RE.match(code)
                if m and ".extern" not in m.group(1):
                    pending = (m.group(3), m.group(2))
                    if st.endswith(";"):
                        pending = None
                continue
            if st.startswith("{"):
                cur = _RawEntry(pending[0], pending[1])
                entries.append(cur)
                pending = None
                depth = 0
                loc_line = None
                buf, buf_line = "", None
            elif st.endswith(";"):
                pending = None
                continue
            else:
                continue
        lm = _LOC_RE.match(code)
        if lm:
            f, ln, col = int(lm.group(1)), int(lm.group(2)), int(lm.group(3))
            resolved: int | None = None
            if f in ours:
                resolved = ln
            else:
                im = _INLINED_RE.search(lm.group(4))
                if im:
                    key = (int(im.group(1)), int(im.group(2)), int(im.group(3)))
                    resolved = key[1] if key[0] in ours else locmap.get(key)
            if resolved is not None:
                locmap[(f, ln, col)] = resolved
                loc_line = resolved
            continue
        if st.startswith((".pragma", ".file", ".section")):
            continue
        opens, closes = code.count("{"), code.count("}")
        depth += opens - closes
        text = code.replace("{", " ").replace("}", " ")
        pieces = text.split(";")
        for piece in pieces[:-1]:
            emit(buf + " " + piece, buf_line if buf.strip() else loc_line)
            buf, buf_line = "", None
        last = pieces[-1]
        if not buf.strip():
            while True:  # a label on its own line belongs to nothing
                lm2 = _LABEL_RE.match(last)
                if not lm2:
                    break
                last = last[lm2.end() :]
        if last.strip():
            if not buf.strip():
                buf_line = loc_line
            buf += " " + last
        if depth <= 0:
            cur = None
            buf, buf_line = "", None
    return entries


def _demangle_all(names: list[str]) -> dict[str, str]:
    """mangled -> readable name (no return type), via c++filt when present, else a heuristic."""
    bases = sorted({re.sub(r"\$\d+$", "", n) for n in names})
    out: dict[str, str] = {}
    mangled = [b for b in bases if b.startswith("_Z")]
    filt = shutil.which("c++filt") if mangled else None
    if filt:
        try:
            r = subprocess.run([filt], input="\n".join(mangled) + "\n", capture_output=True, text=True, timeout=20)
            lines = r.stdout.splitlines()
            if r.returncode == 0 and len(lines) == len(mangled):
                for m, d in zip(mangled, lines):
                    if d and d != m:
                        out[m] = _strip_return_type(d.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    for b in bases:
        if b not in out:
            out[b] = _heuristic_demangle(b) if b.startswith("_Z") else b
    return {n: out[re.sub(r"\$\d+$", "", n)] for n in names}


def _strip_return_type(d: str) -> str:
    """'void ns::k<float, 256>(float*)' -> 'ns::k<float, 256>(float*)' (templates carry a return type)."""
    if not d.endswith(")"):
        return d
    close = len(d) - 1
    open_i = d.rfind("(")
    depth = 0
    for k in range(close, -1, -1):
        if d[k] == ")":
            depth += 1
        elif d[k] == "(":
            depth -= 1
            if depth == 0:
                open_i = k
                break
    depth = 0
    for k in range(open_i - 1, -1, -1):
        ch = d[k]
        if ch == ">":
            depth += 1
        elif ch == "<":
            depth -= 1
        elif ch == " " and depth == 0:
            return d[k + 1 :]
    return d


def _heuristic_demangle(m: str) -> str:
    s = m[2:]
    if s.startswith("N"):
        s = s[1:]
        parts = []
        while s and s[0].isdigit():
            mm = re.match(r"(\d+)", s)
            k = int(mm.group(1))
            s = s[mm.end() :]
            parts.append(s[:k])
            s = s[k:]
        return "::".join(parts) or m
    mm = re.match(r"(\d+)", s)
    if not mm:
        return m
    k = int(mm.group(1))
    return s[mm.end() : mm.end() + k] or m


def _entries_from_raw(raw: list[_RawEntry], max_line: int) -> list[PtxEntry]:
    """PtxEntry objects with CUDA-text lines (1-based; lines past the source dropped)."""
    names = _demangle_all([r.mangled for r in raw])
    out = []
    for r in raw:
        instrs = []
        for mnem, lines in r.instrs.items():
            ls = sorted({ln for ln in lines if 0 < ln <= max_line})
            instrs.append(PtxInstr(mnemonic=mnem, count=len(lines), lines=ls))
        instrs.sort(key=lambda i: (i.lines[0] if i.lines else 1 << 30, i.mnemonic))
        out.append(PtxEntry(name=names.get(r.mangled, r.mangled), mangled=r.mangled, instructions=instrs))
    return out


def _map_lines(facts: PtxFacts, src: CudaSource) -> PtxFacts:
    for e in facts.entries:
        for ins in e.instructions:
            ins.lines = sorted({src.file_line(ln) for ln in ins.lines})
    return facts


# --------------------------------------------------------------------------------------------
# cache
# --------------------------------------------------------------------------------------------


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pkb-analyze" / "ptx"


def _cache_load(cache_dir: Path | None, key: str) -> dict | None:
    if cache_dir is None:
        return None
    p = cache_dir / key[:2] / f"{key}.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def _cache_store(cache_dir: Path | None, key: str, data: dict, ptx: str) -> None:
    if cache_dir is None:
        return
    try:
        d = cache_dir / key[:2]
        d.mkdir(parents=True, exist_ok=True)
        for name, content in ((f"{key}.ptx", ptx), (f"{key}.json", json.dumps(data, indent=1))):
            tmp = d / f".{name}.{os.getpid()}.tmp"
            tmp.write_text(content)
            os.replace(tmp, d / name)
    except OSError:
        pass


# --------------------------------------------------------------------------------------------
# the pass
# --------------------------------------------------------------------------------------------


def analyze_ptx(
    src: CudaSource,
    cuda: CudaFacts | None,
    file: str,
    nvcc: str | None,
    cache_dir: Path | None = None,
    timeout_s: float = 120,
    skip_decided: bool = False,
) -> PtxFacts:
    """Compile `src`'s device code to sm_90 PTX and record its entries' taxonomy-relevant
    instructions with file lines. Never raises. With `skip_decided`, a source whose labels the
    source passes already decide is not compiled (status skipped, with the reason)."""
    t0 = time.monotonic()
    index = getattr(src, "index", 0)
    if nvcc is None:
        return PtxFacts(source_index=index if isinstance(index, int) else 0, status="skipped", message=SKIPPED_MESSAGE)
    try:
        facts = _analyze(src, cuda, file, nvcc, cache_dir, timeout_s, t0, skip_decided)
    except Exception as e:  # noqa: BLE001 - this pass must never break the analysis
        facts = PtxFacts(source_index=index, status="failed", message=f"PTX pass error: {type(e).__name__}: {e}")
    facts.source_index = index
    facts.seconds = round(time.monotonic() - t0, 4)
    return facts


def _analyze(
    src: CudaSource,
    cuda: CudaFacts | None,
    file: str,
    nvcc: str | None,
    cache_dir: Path | None,
    timeout_s: float,
    t0: float,
    skip_decided: bool = True,
) -> PtxFacts:
    if nvcc is None:
        return PtxFacts(source_index=src.index, status="skipped", message=SKIPPED_MESSAGE)
    text = src.text or ""
    if not re.search(r"__global__|__device__", _mask(text)):
        return PtxFacts(source_index=src.index, status="ok", message="no device code in this source; nothing to compile")
    reason = skip_reason(src, cuda, nvcc) if skip_decided else ""
    if reason:
        return PtxFacts(source_index=src.index, status="skipped", message="not compiled: " + reason)
    tu = build_device_tu(src, cuda)
    flags = list(NVCC_FLAGS) + (["-rdc=true"] if _needs_rdc(text) else [])
    tu_text = tu.text()
    version = _nvcc_version(nvcc)
    key = hashlib.sha256(
        "\0".join(
            [PASS_VERSION, tu_text, version, " ".join(flags), (_full_tu(src) + _torch_version()) if tu.changed else ""]
        ).encode()
    ).hexdigest()
    cache_dir = _default_cache_dir() if cache_dir is None else Path(cache_dir)
    hit = _cache_load(cache_dir, key)
    if hit is not None and isinstance(hit.get("facts"), dict):
        try:
            from pkb.serde import from_data

            facts = from_data(PtxFacts, hit["facts"])
            facts.message = (facts.message + " " if facts.message else "") + "(from cache)"
            return _map_lines(facts, src)
        except Exception:  # noqa: BLE001 - a damaged cache entry is a miss
            pass

    def remaining() -> float:
        return timeout_s - (time.monotonic() - t0)

    max_line = tu.first_appended_line - 1
    notes = list(tu.notes)
    # 1. the device-only TU (and once more without the instantiations nvcc rejected)
    insts = list(tu.insts)
    run = _run_nvcc(nvcc, tu.text(insts), flags, remaining())
    device_runs = [run]
    if not run.ok and not run.timed_out and insts:
        bad = _implicated_appended(run.output, tu.first_appended_line)
        if bad:
            first = tu.first_appended_line
            dropped = [w for k, (w, _) in enumerate(insts) if first + k in bad]
            insts = [it for k, it in enumerate(insts) if first + k not in bad]
            notes.append("templates not instantiated (nvcc rejected the instantiation): " + ", ".join(dropped))
            if remaining() > 1:
                run = _run_nvcc(nvcc, tu.text(insts), flags, remaining())
                device_runs.append(run)
    device_s = sum(r.seconds for r in device_runs)
    path = ""
    cacheable = True
    if run.ok:
        path = f"device-only TU compiled in {device_s:.2f} s"
    elif run.oserror:
        return PtxFacts(source_index=src.index, status="failed", message=f"nvcc could not be run: {run.oserror}")
    device_errors = _error_lines(run.output, src, file, tu.first_appended_line) if not run.ok else []
    missing = _missing_headers(run.output) if not run.ok else []
    if not run.ok and missing and not any(_TORCH_INCLUDE_RE.match(f"#include <{h}>") for h in missing):
        # a header that is not torch's is missing: the full source cannot find it either
        msg = "nvcc failed (missing header " + ", ".join(missing) + "): " + " | ".join(device_errors)
        facts = PtxFacts(source_index=src.index, status="failed", message=msg)
        _cache_store(cache_dir, key, {"key": key, "facts": _data(facts)}, "")
        return facts
    if not run.ok:
        if run.timed_out:
            cacheable = False
            msg = f"nvcc timed out after {run.seconds:.1f} s on the device-only TU (limit {timeout_s:g} s)"
            return PtxFacts(source_index=src.index, status="failed", message=msg)
        if not tu.changed:
            msg = "nvcc failed on the source: " + " | ".join(device_errors)
            facts = PtxFacts(source_index=src.index, status="failed", message=msg)
            _cache_store(cache_dir, key, {"key": key, "facts": _data(facts)}, "")
            return facts
        # 2. the full source with torch's include paths
        incs, defs = _torch_includes()
        full_flags = flags + [f"-I{d}" for d in incs] + defs
        left = remaining()
        if left <= 1:
            msg = "device-only TU failed: " + " | ".join(device_errors) + "; no time left for the full-source retry"
            return PtxFacts(source_index=src.index, status="failed", message=msg)
        full = _run_nvcc(nvcc, _full_tu(src), full_flags, left)
        if full.ok:
            run = full
            path = (
                f"full source compiled with torch headers in {full.seconds:.2f} s "
                f"(device-only TU failed after {device_s:.2f} s: {device_errors[0] if device_errors else '?'})"
            )
            max_line = src.text.count("\n") + 1
        else:
            if full.timed_out:
                cacheable = False
                full_msg = f"timed out after {full.seconds:.1f} s"
            else:
                full_msg = " | ".join(_error_lines(full.output, src, file, None))
            torch_note = "" if incs else " (torch not importable: no torch include paths)"
            msg = (
                "nvcc failed. device-only TU: " + " | ".join(device_errors)
                + f" ; full source with torch headers{torch_note}: " + full_msg
            )
            facts = PtxFacts(source_index=src.index, status="failed", message=msg)
            if cacheable:
                _cache_store(cache_dir, key, {"key": key, "facts": _data(facts)}, "")
            return facts
    raw = parse_ptx(run.ptx)
    _fix_asm_lines(raw, src.text)
    entries = _entries_from_raw(raw, max_line)
    message = path + (f" (nvcc {version.split('|')[0].strip()})" if version else "")
    if "-rdc=true" in flags:
        message += "; compiled with -rdc=true (extern device functions)"
    if notes:
        message += "; " + "; ".join(notes)
    facts = PtxFacts(source_index=src.index, status="ok", message=message, entries=entries)
    if cacheable:
        _cache_store(cache_dir, key, {"key": key, "facts": _data(facts)}, run.ptx)
    return _map_lines(facts, src)


def _data(facts: PtxFacts) -> dict:
    from pkb.serde import to_data

    return to_data(facts)


# --------------------------------------------------------------------------------------------
# summary for the taxonomy
# --------------------------------------------------------------------------------------------

SUMMARY_KEYS = ("nvls", "tma", "release_acquire", "fence_system", "volatile", "atomic_sys", "red_sys", "relaxed")


def _feature_keys(mnemonic: str) -> list[str]:
    op = mnemonic.split()[0]
    parts = op.split(".")
    base, mods = parts[0], set(parts[1:])
    local = any(m.startswith(("shared", "local")) for m in mods)
    keys: list[str] = []
    if base == "multimem":
        keys.append("nvls")
    if op.startswith(("cp.async.bulk", "cp.reduce.async.bulk")):
        keys.append("tma")
    sys_scope = "sys" in mods
    if sys_scope and not local:
        if (base == "ld" and "acquire" in mods) or (base == "st" and "release" in mods):
            keys.append("release_acquire")
        elif base in ("atom", "red") and mods & {"acq_rel", "acquire", "release"}:
            keys.append("release_acquire")
    if (base == "fence" and sys_scope and mods & {"sc", "acq_rel"} and not any("proxy" in m for m in mods)) or (
        base == "membar" and sys_scope
    ):
        keys.append("fence_system")
    if base in ("ld", "st") and "volatile" in mods and not local:
        keys.append("volatile")
    if base == "atom" and sys_scope and not local:
        keys.append("atomic_sys")
    if base == "red" and sys_scope and not local:
        keys.append("red_sys")
    if base in ("ld", "st") and "relaxed" in mods and not local:
        keys.append("relaxed")
    return keys


def ptx_summary(ptx: PtxFacts) -> dict[str, list[int]]:
    """Taxonomy features -> sorted file lines where the PTX shows them (empty lists when absent)."""
    out: dict[str, set[int]] = {k: set() for k in SUMMARY_KEYS}
    for e in ptx.entries if ptx is not None else []:
        for ins in e.instructions:
            for k in _feature_keys(ins.mnemonic):
                out[k].update(ins.lines)
    return {k: sorted(v) for k, v in out.items()}


if __name__ == "__main__":  # pragma: no cover - manual use: python -m analyzer.ptx_pass file.cu
    from pkb.serde import to_data

    for arg in sys.argv[1:]:
        t = Path(arg).read_text()
        s = CudaSource(index=0, origin="file", text=t, line_map=list(range(1, t.count("\n") + 2)))
        f = analyze_ptx(s, None, arg, find_nvcc())
        print(json.dumps(to_data(f), indent=1))
        print(json.dumps(ptx_summary(f)))


# --------------------------------------------------------------------------------------------
# when the PTX pass has nothing to add
# --------------------------------------------------------------------------------------------

# Headers whose device code the clang prelude does not stand in for: templates in them can emit
# multimem / bulk-copy / system-scope instructions the source pass cannot see.
_DEVICE_HEADER_RE = re.compile(r"^(cuda/ptx|cuda/(?!atomic|std/atomic|barrier|pipeline|std/cstdint)|cub/|cute/|cutlass/|cooperative_groups/|nvshmem|cuda_pipeline|cuda_awbarrier)")
_HOST_HEADER_RE = re.compile(r"^(torch|ATen|c10|caffe2|pybind11|Python\.h|THC|cublas|cublasLt|cusparse|cufft|curand|nccl|cuda_runtime|cuda\.h|std|[a-z_]+(\.h)?$)")


@functools.lru_cache(maxsize=8)
def _cuda_include_dirs(nvcc: str | None) -> tuple[str, ...]:
    """Where nvcc finds the toolkit's headers (following a shell wrapper's `exec .../bin/nvcc`)."""
    roots = []
    for p in filter(None, [nvcc, os.environ.get("CUDA_HOME"), "/usr/local/cuda"]):
        real = os.path.realpath(p)
        if os.path.isfile(real) and os.path.getsize(real) < 4096:
            try:
                m = re.search(r"exec\s+\"?(\S+?)/bin/nvcc", Path(real).read_text(errors="replace"))
            except OSError:
                m = None
            if m:
                roots.append(m.group(1))
        roots.append(os.path.dirname(os.path.dirname(real)) if real.endswith("/bin/nvcc") else real)
    dirs = []
    for r in roots:
        for d in (os.path.join(r, "include"), os.path.join(r, "include", "cccl")):
            if os.path.isdir(d) and d not in dirs:
                dirs.append(d)
    return tuple(dirs)


def skip_reason(src: CudaSource, cuda: CudaFacts | None, nvcc: str | None = None) -> str:
    """Why compiling `src` to PTX would add nothing, or '' when the PTX pass should run.

    It is skipped (1) where the source includes a header nvcc cannot find either (ThunderKittens'
    kittens.cuh: the compile would fail; the source pass reads those idioms), and (2) where the
    clang pass saw every line of device code: no parse error inside a kernel or device function,
    and no included header whose device templates the prelude does not model (cuda/ptx, cub,
    cute, ...). Then the PTX could only repeat what the source already decided."""
    if cuda is None or cuda.status == "failed":
        return ""
    unavailable = [h for h in cuda.missing_headers if not _HOST_HEADER_RE.match(h)
                   and not any(os.path.exists(os.path.join(d, h)) for d in _cuda_include_dirs(nvcc))]
    if unavailable:
        return ("header " + ", ".join(unavailable[:3]) + " is not installed, so nvcc cannot compile this source;"
                " the source pass read its device code")
    if any(_DEVICE_HEADER_RE.match(h) for h in cuda.missing_headers):
        return ""
    device = [(f.line, f.end_line) for f in cuda.functions if f.kind != "host"]
    errors = [d for d in cuda.diagnostics if d.severity in ("error", "fatal")]
    if any(d.line == 0 or any(a <= d.line <= b for a, b in device) for d in errors):
        return ""
    return "the source pass saw all device code (no parse error in a kernel or device function, no unmodeled device header)"
