"""The device-only translation unit the PTX pass compiles, and the full-source one it falls back to.

The CUDA text with host-only functions, the PYBIND11_MODULE / TORCH_LIBRARY blocks, torch-only
namespace-scope statements and torch/ATen/c10/pybind11 includes replaced by blanks (so every kept
character stays on its line, and PTX `.loc` lines map back through `CudaSource.line_map`), a tiny
prelude for the torch-ish types device code uses (behind `#line 1`), and explicit instantiations
of template kernels launched with template arguments appended after the source. Reads the
CudaSource and the clang pass's facts about it (its host functions and launches).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from analyzer.cpp_scan import Decl, mask, match_close, scan_decls, split_list, top_level_index
from pkb.facts import CudaFacts, CudaSource

TU_NAME = "pkb_src.cu"  # the name `#line` gives the source inside the TU (what .file/.loc and errors show)


_TORCH_NS_RE = re.compile(r"\b(torch|at|c10|caffe2|pybind11|py)\s*::\s*(\w+)")
_TORCH_MISC_RE = re.compile(
    r"\busing\s+namespace\s+(torch|at|c10|pybind11)\b|\bnamespace\s+py\s*=|\bPYBIND11_\w+|\bTORCH_\w+|\bAT_\w+\s*\(|\bC10_(?!HOST|DEVICE|WARP_SIZE|LAUNCH_BOUNDS)\w+"
)
# torch names the prelude can stand in for (device code uses them)
_PRELUDE_NAMES = {"BFloat16", "Half"}
TORCH_INCLUDE_RE = re.compile(r"^\s*#\s*include\s*[<\"]\s*(torch|ATen|c10|caffe2|pybind11|Python\.h|THC)\b")


def _torchy(text: str) -> bool:
    """Does this namespace-scope text use torch/pybind11 things the device-only TU lacks?"""
    for m in _TORCH_NS_RE.finditer(text):
        if m.group(1) in ("torch", "at", "c10") and m.group(2) in _PRELUDE_NAMES:
            continue
        return True
    return bool(_TORCH_MISC_RE.search(text))


@dataclass
class DeviceTU:
    body: str  # the blanked source, same line count as the original
    prelude: str
    insts: list[tuple[str, str]]  # (what, line of C++) appended after the source
    notes: list[str]
    changed: bool  # anything blanked or a prelude: a full-source retry differs

    def text(self, insts: list[tuple[str, str]] | None = None) -> str:
        insts = self.insts if insts is None else insts
        tail = "".join(line + "\n" for _, line in insts)
        return self.prelude + f'#line 1 "{TU_NAME}"\n' + self.body + tail

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


def _template_refs(masked: str, decls: list[Decl], names: set[str]) -> list[tuple[str, str, int]]:
    """`name<...>` references of template kernels in the text: (name, args, offset)."""
    out = []
    if not names:
        return out
    own = [(d.start, d.start + len(d.header)) for d in decls if d.kind == "function"]
    for m in re.finditer(r"\b(" + "|".join(map(re.escape, sorted(names))) + r")\s*<", masked):
        if any(a <= m.start() < b for a, b in own):
            continue  # the kernel's own declaration
        lt = m.end() - 1
        close = match_close(masked, lt, "<", ">")
        if close >= len(masked) or close - lt > 400:
            continue
        args = masked[lt + 1 : close].strip()
        if "<<<" in args or ";" in args or "{" in args:
            continue
        out.append((m.group(1), args, m.start()))
    return out


def _make_instantiations(
    src: CudaSource, cuda: CudaFacts | None, decls: list[Decl], masked: str
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
            given = split_list(args)
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
                    cut = top_level_index(p, "=")
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


def _subst(text: str, subst: dict[str, str]) -> str:
    if not subst:
        return text
    pat = re.compile(r"(?<![\w:])(" + "|".join(map(re.escape, subst)) + r")\b")
    return pat.sub(lambda m: subst[m.group(1)], text)


def build_device_tu(src: CudaSource, cuda: CudaFacts | None) -> DeviceTU:
    """The device-only translation unit of `src` (see the module docstring)."""
    text = src.text
    masked = mask(text)
    decls = scan_decls(text, masked)
    chars = list(text)
    offs = _line_offsets(text)
    notes: list[str] = []

    # includes
    torch_blanked = False
    for k, start in enumerate(offs):
        end = offs[k + 1] - 1 if k + 1 < len(offs) else len(text)
        if TORCH_INCLUDE_RE.match(text[start:end]):
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
    return DeviceTU(body=body, prelude=prelude, insts=insts, notes=notes, changed=changed)


def needs_rdc(text: str) -> bool:
    return bool(re.search(r"\bnvshmem|\bextern\s+(\"C\"\s+)?__device__", text))


def full_tu(src: CudaSource) -> str:
    pre = ""
    if src.origin == "load_inline.cuda_sources":
        pre = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
    elif src.origin == "load_inline.cpp_sources":
        pre = "#include <torch/extension.h>\n"
    return pre + f'#line 1 "{TU_NAME}"\n' + src.text + ("" if src.text.endswith("\n") else "\n")
