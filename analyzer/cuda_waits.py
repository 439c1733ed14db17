"""Where CUDA code waits for peers (for the rules that ask whether something orders peer access).

A wait is a spin loop the clang pass saw, or an acquire / volatile read of a flag inside a
`while` / `do ... while` (an inline-asm `ld.acquire.sys` or `atom.acquire.cas` polled into a
local, which the pass does not see as polling memory, or read by a helper that a loop calls), or a
call of a function that waits.
"""

from __future__ import annotations

import re

from pkb.facts import CudaFacts, CudaSource

_LOOP = re.compile(r"\bwhile\s*\(")


_CAS = re.compile(r"\bcas\b|\.cas\.|atomicCAS", re.IGNORECASE)


def _is_cas(access) -> bool:
    return access.kind == "atomic" and bool(_CAS.search(access.snippet or ""))


# `atomicAdd_system(flag, 0u)`, `atomicOr(flag, 0)`: an atomic that adds nothing only reads the flag
_ATOMIC_READ = re.compile(r"\batomic(?:Add|Or|Xor|Sub)\w*\s*\([^;]*,\s*\(?\s*(?:\(\w+\)\s*)?0+[uUlL]*\s*\)?\s*\)")


def _is_atomic_read(access) -> bool:
    return access.kind == "atomic" and bool(_ATOMIC_READ.search(access.snippet or ""))


_CAS_EXPECTED = re.compile(r"atomicCAS\w*\s*\(\s*[^,()]*(?:\([^()]*\)[^,()]*)*,\s*(\w+)\s*,")


def _is_cas_update(access, fn_text: str) -> bool:
    """The lock-free update idiom, `do { assumed = old; old = atomicCAS(a, assumed, f(assumed)); }
    while (assumed != old);` (atomic max of a float): the compared value is the last one the CAS
    returned, so the loop retries only when another thread updated first. It never waits for a
    peer to act, unlike a CAS polled for a constant (`while (atomicCAS(flag, 1, 0) != 1)`)."""
    m = _CAS_EXPECTED.search(access.snippet or "")
    if not m:
        return False
    expected = m.group(1)
    got = re.search(rf"(\w+)\s*=\s*atomicCAS\w*\s*\([^,]+,\s*{expected}\s*,", fn_text)
    return bool(got) and re.search(rf"\b{expected}\s*=\s*{got.group(1)}\s*;", fn_text) is not None


def waiting_functions(cuda: CudaFacts, src: CudaSource) -> set[str]:
    """Names of the functions that wait, directly or through a callee (ThunderKittens'
    barrier_all and signal waits included)."""
    lines = src.text.split("\n")
    by_name = {f.name: f for f in cuda.functions}
    out = {s.function for s in cuda.spin_loops}
    readers = set()  # functions that read a flag with acquire / volatile semantics
    for a in cuda.accesses:
        fn = by_name.get(a.function)
        if fn is None:
            continue
        if a.via == "library" and a.pointer_kind in ("signal_ptr", "signal_ptr_array"):
            out.add(fn.name)  # a library barrier waits for every peer
        elif a.kind in ("load", "atomic") and a.order in ("acquire", "acq_rel", "volatile") or _is_cas(a) or _is_atomic_read(a):
            # a compare-and-swap retried until the peer's flag is there (torch's own barrier,
            # `atom.relaxed.sys.cas` in a do/while), or an atomic add of 0 polled in one, waits
            # whatever its order; PKB001 judges the order
            body = "\n".join(lines[fn.text_line - 1 : fn.text_end_line])
            if _is_cas(a) and a.order not in ("acquire", "acq_rel", "volatile") and _is_cas_update(a, body):
                continue
            readers.add(fn.name)
            if _LOOP.search(body):
                out.add(fn.name)
    # `do { v = ld_acquire(addr); } while (v != token);`: the loop is in the reader's caller
    for f in cuda.functions:
        if f.kind != "host" and set(f.calls) & readers and _LOOP.search("\n".join(lines[f.text_line - 1 : f.text_end_line])):
            out.add(f.name)
    changed = True
    while changed:  # device callers of waiters wait too (a host launch is not a wait in a kernel)
        changed = False
        for f in cuda.functions:
            if f.kind != "host" and f.name not in out and any(c in out for c in f.calls):
                out.add(f.name)
                changed = True
    return out


def wait_lines(cuda: CudaFacts, src: CudaSource, functions: set[str]) -> list[int]:
    """File lines inside `functions` where they wait: a spin, or a call of a function that waits."""
    waiters = waiting_functions(cuda, src)
    text = src.text.split("\n")
    out = [s.line for s in cuda.spin_loops if s.function in functions]
    out += [a.line for a in cuda.accesses if a.function in functions and a.via == "library"
            and a.pointer_kind in ("signal_ptr", "signal_ptr_array")]
    for f in cuda.functions:
        if f.name not in functions or f.kind == "host":
            continue
        own_poll = f.name in waiters and not any(c in waiters for c in f.calls)
        for i in range(f.text_line - 1, min(f.text_end_line, len(text))):
            line = text[i]
            if any(re.search(rf"\b{re.escape(h)}\s*[<(]", line) for h in waiters if h != f.name) or (
                    own_poll and _LOOP.search(line)):
                out.append(src.file_line(i + 1))
    return sorted(set(out))
