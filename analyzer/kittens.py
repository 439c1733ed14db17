"""ThunderKittens / ParallelKittens idioms, read from the CUDA text (the headers are never present).

A ParallelKittens kernel is a `__device__` function `kernel(const globals &G)` in a namespace,
launched by `kittens::py::launch_kernel<config, globals, ns::kernel>(G)`; its peer traffic goes
through fields of `globals` whose types come from kittens.cuh, which the clang pass cannot read:

    pgl<gl<...>, N, mc>  a parallel global layout: G.x[dev] is device dev's copy, G.x.mc_ptr the
                         multicast address
    barrier_t<N>         a barrier in every rank's memory (barrier_all / signal / wait)
    T *x[N]              a pointer table filled from a parallel tensor's ptrs_[i]

This module turns those into the same facts the clang pass writes (kernel functions, accesses
with pointer kinds, API calls), so classification and rules treat them like any kernel:
`tma::store_async`/`load_async` on `G.x[peer]` is TMA, `multimem<T>::ld_reduce/st/red` or
`.mc_ptr` is NVLS, `G.x[peer]` element access is an SM load or store, and `barrier_all`/signals
are device flags with release/acquire ordering (the library's barrier uses them). Where a kernel
touches a parallel field in a way not recognised here, its G parameter is left a peer pointer, so
the classifier answers `unknown` (the headers are missing), never `none`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from analyzer.brackets import closing
from pkb.facts import ApiCall, CudaFacts, CudaSource, Function, MemAccess, Param

_LAUNCH_RE = re.compile(r"\blaunch_kernel\s*<")
_NAMESPACE_RE = re.compile(r"\bnamespace\s+([A-Za-z_]\w*)\s*\{")
_DEVICE_FN_RE = re.compile(r"__(?:device|global)__[^;{()]*?\b([A-Za-z_]\w*)\s*\(\s*(?:const\s+)?([A-Za-z_][\w:]*(?:\s*<[^<>()]*>)?)\s*&?\s*([A-Za-z_]\w*)\s*\)\s*\{")
_PGL_ALIAS_RE = re.compile(r"\busing\s+([A-Za-z_]\w*)\s*=\s*(?:kittens::)?pgl\s*<")
_FIELD_RE = re.compile(r"^\s*(?:kittens::)?([A-Za-z_][\w:]*)\s*(<[^;]*>)?\s+([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*;", re.M)
_PTR_ARRAY_RE = re.compile(r"^\s*(?:const\s+)?[\w:]+\s*\*\s*([A-Za-z_]\w*)\s*\[[^\]]+\]\s*;", re.M)
_PTRS_FILL_RE = re.compile(r"\.([A-Za-z_]\w*)\s*\[\s*\w+\s*\]\s*=\s*[^;]*\bptrs_\s*\[")
_TMA_RE = re.compile(r"\btma::(?:cluster::)?(load_async|store_async|store_add_async|store_min_async|store_max_async|prefetch)\s*\(")
_MULTIMEM_RE = re.compile(r"\bmultimem\s*<[^>]*>\s*::\s*(ld_reduce|st|red)\b")
_BARRIER_RE = re.compile(r"\b(barrier_all|signal_all|signal|wait|sync_on_exit)\s*\(\s*([^,;)]*)")
_ASSIGN_RE = re.compile(r"(?<![=!<>+\-*/%&|^])=(?!=)")


@dataclass
class _Kernel:
    name: str  # namespace-qualified, as launch_kernel names it (all_reduce::kernel)
    short: str
    start: int  # offsets of the body in the text
    end: int
    param: str  # the globals parameter (G)
    kind: str  # device | global


@dataclass
class KittensScan:
    fields: dict[str, str] = field(default_factory=dict)  # field name -> pgl | barrier | ptr_array
    kernels: list[_Kernel] = field(default_factory=list)
    launches: list[tuple[str, int]] = field(default_factory=list)  # (kernel name, text offset)


def uses_kittens(text: str) -> bool:
    return "kittens" in text


def _match_brace(text: str, open_idx: int) -> int:
    end = closing(text, open_idx, "{", "}")
    return end if end >= 0 else len(text)


def _namespace_at(spans: list[tuple[int, int, str]], pos: int) -> str:
    names = [name for start, end, name in spans if start <= pos <= end]
    return "::".join(names)


def scan(text: str) -> KittensScan:
    out = KittensScan()
    aliases = set(_PGL_ALIAS_RE.findall(text))
    for m in _FIELD_RE.finditer(text):
        typ, names = m.group(1), m.group(3)
        base = typ.split("::")[-1]
        for name in (n.strip() for n in names.split(",")):
            if base == "pgl" or base in aliases:
                out.fields[name] = "pgl"
            elif base == "barrier_t":
                out.fields[name] = "barrier"
    # a plain pointer field set from a parallel tensor's multicast address
    for m in re.finditer(r"\.(\w+)\s*=\s*[\w.]+\.mc_ptr\b", text):
        out.fields.setdefault(m.group(1), "mc")
    filled = set(_PTRS_FILL_RE.findall(text))
    for m in _PTR_ARRAY_RE.finditer(text):
        name = m.group(1)
        if name in filled or "peer" in name.lower() or name.endswith("ptrs"):
            out.fields[name] = "ptr_array"
    spans = []
    for m in _NAMESPACE_RE.finditer(text):
        spans.append((m.end() - 1, _match_brace(text, m.end() - 1), m.group(1)))
    for m in _DEVICE_FN_RE.finditer(text):
        short, ptype, pname = m.group(1), m.group(2), m.group(3)
        if "globals" not in ptype and not ptype.endswith("_G"):
            continue
        ns = _namespace_at(spans, m.start())
        kind = "global" if m.group(0).startswith("__global__") else "device"
        out.kernels.append(_Kernel(f"{ns}::{short}" if ns else short, short, m.end() - 1,
                                   _match_brace(text, m.end() - 1), pname, kind))
    for m in _LAUNCH_RE.finditer(text):
        targs = _template_args(text, m.start() + text[m.start():].index("<"))
        if targs:  # the kernel is the last template argument, its own template arguments dropped
            out.launches.append((targs[-1].split("<")[0].strip().lstrip(":"), m.start()))
    return out


def _template_args(text: str, open_idx: int) -> list[str]:
    """Top-level arguments of the `<...>` that opens at `open_idx`."""
    depth, start, args = 0, open_idx + 1, []
    for i in range(open_idx, min(len(text), open_idx + 2000)):
        c = text[i]
        if c in "<([{":
            depth += 1
        elif c in ">)]}":
            depth -= 1
            if depth == 0:
                args.append(text[start:i].strip())
                return args
        elif c == "," and depth == 1:
            args.append(text[start:i].strip())
            start = i + 1
    return args


def _is_local_index(idx: str, param: str) -> bool:
    """`G.x[G.dev_idx]` / `G.x[dev_idx]` / `G.x[rank]` is this rank's own copy."""
    idx = idx.strip()
    return bool(re.fullmatch(rf"(?:{param}\.)?(?:dev_idx|local_rank|rank|my_rank|dev|self_rank)", idx))


def _line_of(text: str, off: int) -> int:
    return text.count("\n", 0, off) + 1


def augment(facts: CudaFacts, src: CudaSource, text: str) -> None:
    """Add ThunderKittens kernels, accesses and calls found in `text` to `facts` (in place)."""
    if not uses_kittens(text):
        return
    sc = scan(text)
    if not sc.kernels:
        return
    launched = {name for name, _ in sc.launches}
    by_short: dict[str, list[_Kernel]] = {}
    for k in sc.kernels:
        by_short.setdefault(k.short, []).append(k)
    existing = {f.name: f for f in facts.functions}

    def fl(off: int) -> int:
        return src.file_line(_line_of(text, off))

    def snippet(off: int) -> str:
        a = text.rfind("\n", 0, off) + 1
        b = text.find("\n", off)
        return text[a : b if b >= 0 else len(text)].strip()[:160]

    wrappers = [f for f in facts.functions if f.kind == "global"]
    for k in sc.kernels:
        callers = [w for w in wrappers if k.short in w.calls and w.name != k.short]
        is_entry = k.kind == "global" or bool(callers) or k.name in launched or any(n.endswith("::" + k.name) or k.name.endswith("::" + n) for n in launched)
        if not is_entry:
            continue
        for w in callers:  # `__global__ void wrapper(globals G) { ns::kernel(G); }`
            if k.name not in w.calls:
                w.calls.append(k.name)
        body = text[k.start : k.end]
        seen_parallel = False  # the kernel touches a parallel field
        undecided = False  # ... in a way not recognised here
        accesses: list[MemAccess] = []
        calls: list[ApiCall] = []
        G = re.escape(k.param)
        for m in _MULTIMEM_RE.finditer(body):
            off = k.start + m.start()
            kind = {"ld_reduce": "load", "st": "store", "red": "atomic"}[m.group(1)]
            accesses.append(MemAccess(k.name, fl(off), kind, "mc_ptr", "multicast_ptr", "intrinsic", snippet=snippet(off)))
            calls.append(ApiCall(f"multimem::{m.group(1)}", fl(off), k.name, "nvls", snippet(off)))
        for m in re.finditer(rf"{G}\.(\w+)\.mc_ptr\b", body):
            seen_parallel = True
            off = k.start + m.start()
            line = fl(off)
            if not any(c.line == line for c in calls):
                line_start = body.rfind("\n", 0, m.start()) + 1
                after = body[m.end() : body.find("\n", m.end())].split(";")[0]
                kind = "store" if _ASSIGN_RE.search(after) and not _ASSIGN_RE.search(body[line_start : m.start()]) else "load"
                accesses.append(MemAccess(k.name, line, kind, f"{m.group(1)}.mc_ptr", "multicast_ptr", "subscript", snippet=snippet(off)))
                calls.append(ApiCall("mc_ptr", line, k.name, "nvls", snippet(off)))
        for m in re.finditer(rf"{G}\.(\w+)\b(?!\s*[\[.(])", body):
            if sc.fields.get(m.group(1)) != "mc":
                continue
            seen_parallel = True
            off = k.start + m.start()
            accesses.append(MemAccess(k.name, fl(off), "store", m.group(1), "multicast_ptr", "subscript", snippet=snippet(off)))
            calls.append(ApiCall("mc_ptr", fl(off), k.name, "nvls", snippet(off)))
        tma_spans = []
        for m in _TMA_RE.finditer(body):
            close = _args_end(body, m.end() - 1)
            args = body[m.end() : close]
            tma_spans.append((m.start(), close))
            for fm in re.finditer(rf"{G}\.(\w+)\s*\[([^\]]*)\]", args):
                if sc.fields.get(fm.group(1)) != "pgl":
                    continue
                seen_parallel = True
                if _is_local_index(fm.group(2), k.param):
                    continue
                off = k.start + m.start()
                kind = "load" if m.group(1) in ("load_async", "prefetch") else "store"
                accesses.append(MemAccess(k.name, fl(off), kind, f"{fm.group(1)}[{fm.group(2).strip()}]", "peer_ptr", "tma", snippet=snippet(off)))
                calls.append(ApiCall(f"tma::{m.group(1)}", fl(off), k.name, "tma", snippet(off)))
        aliases: dict[str, int] = {}
        for fm in re.finditer(rf"{G}\.(\w+)\s*\[([^\]]*)\]", body):
            fkind = sc.fields.get(fm.group(1))
            if fkind not in ("pgl", "ptr_array") or any(a <= fm.start() <= b for a, b in tma_spans):
                continue
            seen_parallel = True
            if _is_local_index(fm.group(2), k.param):
                continue
            off = k.start + fm.start()
            line_start = body.rfind("\n", 0, fm.start()) + 1
            line_end = body.find("\n", fm.end())
            before, after = body[line_start : fm.start()], body[fm.end() : line_end if line_end >= 0 else len(body)]
            if re.search(r"\batomic\w*\s*\(\s*&?\s*$", before):
                kind = "atomic"
            elif _ASSIGN_RE.search(after.split(";")[0]) and not _ASSIGN_RE.search(before):
                kind = "store"
            else:
                am = re.search(r"\*\s*(\w+)\s*=\s*[^=]*$", before)
                if am:  # `T *p = &G.x[peer](...)`: how p is used decides
                    aliases[am.group(1)] = off
                    continue
                kind = "load"
            accesses.append(MemAccess(k.name, fl(off), kind, f"{fm.group(1)}[{fm.group(2).strip()}]", "peer_ptr", "subscript", snippet=snippet(off)))
        for name, off in aliases.items():
            rest = text[off : k.end]
            derived = _derived_pointers(name, rest)
            for n in derived - {name}:  # a declaration `T* p = name + off;` is no store through p
                rest = re.sub(rf"\*\s*{re.escape(n)}\s*=(?!=)", " ", rest)
            store = any(re.search(rf"(?:\*\s*\(?\s*[\w\s*()]*\b{n}\b[^=;]*|\b{n}\s*\[[^\]]*\][^=;]*)(?<![=!<>])=(?!=)", rest)
                        for n in derived)
            accesses.append(MemAccess(k.name, fl(off), "store" if store else "load", name, "peer_ptr", "subscript", snippet=snippet(off)))
        for m in _BARRIER_RE.finditer(body):
            arg = m.group(2)
            target = re.match(rf"{G}\.(\w+)", arg.strip())
            if m.group(1) in ("signal", "wait", "sync_on_exit") and not (target and sc.fields.get(target.group(1)) == "barrier"):
                continue
            seen_parallel = True
            off = k.start + m.start()
            kind = "load" if m.group(1) == "wait" else "atomic"
            accesses.append(MemAccess(k.name, fl(off), kind, target.group(1) if target else "barrier", "signal_ptr", "library",
                                      scope="system", order="acq_rel", snippet=snippet(off)))
        if not accesses and any(re.search(rf"{G}\.{re.escape(f)}\b", body) for f, fk in sc.fields.items() if fk != "barrier"):
            seen_parallel = True
        undecided = seen_parallel and not accesses
        params = [Param(k.param, "globals", True, "peer_ptr" if undecided else "local", "name")]
        fn = existing.get(k.name)
        if fn is None or fn.kind != "global":
            fn = Function(k.name, "global", fl(k.start), fl(k.end), _line_of(text, k.start), _line_of(text, k.end), params)
            facts.functions.append(fn)
            existing[k.name] = fn
        else:
            fn.params = fn.params or params
            if undecided:
                fn.params = params
        facts.accesses.extend(a for a in accesses if a not in facts.accesses)
        facts.api_calls.extend(c for c in calls if c not in facts.api_calls)
    # Host functions that launch through launch_kernel call the kernel they name.
    hosts = sorted((f for f in facts.functions if f.kind == "host"), key=lambda f: f.text_line)
    for name, off in sc.launches:
        line = _line_of(text, off)
        host = next((f for f in hosts if f.text_line <= line <= f.text_end_line), None)
        target = name if name in existing else next((k.name for k in sc.kernels if k.name.endswith("::" + name) or name.endswith("::" + k.name)), name)
        if host is not None and target not in host.calls:
            host.calls.append(target)
    # clang drops an m.def whose bound function's signature uses a type of a missing header
    # (TKParallelTensor &), while keeping the others: fill in each binding it lost.
    for m in re.finditer(r"\bm\.def\(\s*\"(\w+)\"\s*,\s*&?\s*([\w:]+)\s*[,)]", text):
        facts.bindings.setdefault(m.group(1), m.group(2).split("::")[-1])


def _derived_pointers(name: str, text: str) -> set[str]:
    """`name` and the pointers declared from it (`T* p = name + off;`, `U* q = (U*)(p + 4);`):
    models offset the peer slot's base before writing through it."""
    names = {name}
    for _ in range(4):
        found = {m.group(1) for n in names
                 for m in re.finditer(rf"\*\s*(\w+)\s*=\s*[^;=]*\b{re.escape(n)}\b[^;]*;", text)} - names
        if not found:
            break
        names |= found
    return names


def _args_end(text: str, open_idx: int) -> int:
    end = closing(text, open_idx, "(", ")")
    return end if end >= 0 else len(text)
