import re

from analyzer.rules.base import Rule

# 32- and 64-bit integer pointee types a flag slot is accessed as.
_WIDE = r"(?:u?int32_t|u?int64_t|unsigned\s+int|unsigned|int|unsigned\s+long\s+long|long\s+long|uint|ulong|unsigned\s+long)"
_CAST_RE = re.compile(
    rf"reinterpret_cast\s*<\s*(?:const\s+)?(?:volatile\s+)?({_WIDE})\s*(?:volatile\s+)?\*\s*>\s*\("
    rf"|\(\s*(?:const\s+)?(?:volatile\s+)?({_WIDE})\s*(?:volatile\s+)?\*\s*\)\s*\("
)
# An integer variable that holds an address (not a pointer: adding to it adds bytes).
_INT_ADDR_DECL = re.compile(
    r"\b(?:const\s+)?(?:uint64_t|uintptr_t|size_t|int64_t|intptr_t|unsigned\s+long\s+long|long\s+long|CUdeviceptr)"
    r"\s+(\w+)\s*=\s*([^;]+);"
)
_INT_ADDR_PARAM = re.compile(r"(?:uint64_t|uintptr_t|int64_t|intptr_t|unsigned\s+long\s+long|CUdeviceptr)\s+(\w+)\s*[,)]")
_SIGNAL_NAME = re.compile(r"signal|flag|sig_|_sig\b|sync|barrier|sema|ready|arrive", re.I)
# An offset scaled to the slot width: sizeof(...), * 4 / * 8, << 2 / << 3, or a literal multiple.
# A literal may carry an integer suffix (`* 4ull`).
_SCALED = re.compile(r"sizeof\s*\(|\*\s*(?:4|8|16|32|64)[uUlL]*\b|\b(?:4|8|16|32|64)[uUlL]*\s*\*|<<\s*[2-6][uUlL]*\b")


def _match_paren(text: str, i: int) -> int:
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return -1


def _split_plus(expr: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(expr):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c in "+" and depth == 0 and expr[i - 1 : i] != "+" and expr[i + 1 : i + 2] != "+":
            parts.append(expr[start:i])
            start = i + 1
        elif c == "-" and depth == 0 and expr[i + 1 : i + 2] not in ("-", ">") and expr[i - 1 : i] not in ("-", "e", "E"):
            parts.append(expr[start:i])
            start = i + 1
    parts.append(expr[start:])
    return [" ".join(p.split()) for p in parts if p.strip()]


def _strip_casts(term: str) -> str:
    t = term.strip()
    while True:
        m = re.match(r"^\(\s*[\w\s]+\)\s*(.*)$", t) or re.match(r"^static_cast\s*<[^>]*>\s*\((.*)\)$", t)
        if not m or m.group(1) == t:
            return t
        t = m.group(1).strip()


def _aligned(term: str, width_bytes: int) -> bool:
    t = _strip_casts(term)
    if re.fullmatch(r"\(?\s*0[uUlL]*\s*\)?", t):
        return True
    lit = re.fullmatch(r"\(?\s*(\d+)[uUlL]*\s*\)?", t)
    if lit:
        return int(lit.group(1)) % width_bytes == 0
    return bool(_SCALED.search(t))


def _resolve(text: str, term: str, before: int) -> str:
    """A lone variable's initializer (its last declaration before the cast), else the term."""
    name = _strip_casts(term)
    if not re.fullmatch(r"\w+", name) or name.isdigit():
        return term
    decls = list(re.finditer(rf"\b[\w:]+\s+{name}\s*=\s*([^;]+);", text[:before]))
    return decls[-1].group(1) if decls else term


def misaligned_slots(text: str) -> list[tuple[int, str, str]]:
    """(text offset, pointee type, offending term) of every cast of `signal integer + byte offset`
    to a 32- or 64-bit pointer."""
    # name -> [(offset, initializer)]: a name declared in several functions (`remote_base` of a
    # barrier and of a data kernel) means, at a cast, its last declaration before that cast.
    decls: dict[str, list[tuple[int, str]]] = {}
    for m in _INT_ADDR_DECL.finditer(text):
        decls.setdefault(m.group(1), []).append((m.start(), m.group(2)))
    int_addrs: dict[str, str] = {name: inits[-1][1] for name, inits in decls.items()}
    for m in _INT_ADDR_PARAM.finditer(text):
        int_addrs.setdefault(m.group(1), m.group(1))
    out = []
    for m in _CAST_RE.finditer(text):
        ctype = m.group(1) or m.group(2)
        close = _match_paren(text, m.end() - 1)
        if close < 0:
            continue
        expr = text[m.end() : close]
        terms = _split_plus(expr)
        if len(terms) < 2:
            continue
        base = _strip_casts(terms[0])
        base_name = re.match(r"\w+", base)
        if not base_name:
            continue
        name = base_name.group(0)
        if "[" in base:  # signal_pad_ptrs[peer] + off: an element of an integer address table
            is_signal = bool(_SIGNAL_NAME.search(name)) and name in int_addrs or bool(_SIGNAL_NAME.search(name) and re.search(rf"\b(?:u?int64_t|uintptr_t)\s*\*\s*(?:const\s+)?(?:__restrict__\s+)?{name}\b", text))
        else:
            before = [init for at, init in decls.get(name, []) if at < m.start()]
            init = before[-1] if before else int_addrs.get(name)
            is_signal = init is not None and bool(_SIGNAL_NAME.search(name) or _SIGNAL_NAME.search(init))
        if not is_signal:
            continue
        width = 8 if "64" in ctype or "long" in ctype else 4
        bad = [t for t in terms[1:] if not _aligned(_resolve(text, t, m.start()), width)]
        if bad:
            out.append((m.start(), ctype, bad[0]))
    return out


class MisalignedSignalAtomic(Rule):
    """Byte offset added to an integer signal address before a 32- or 64-bit flag access.

    ## What it does
    Finds a flag slot computed as an integer address (`uint64_t base = signal_pad_ptrs[peer]`)
    plus an index that is not scaled to the slot's width (`base + block_id * world_size + rank`),
    then cast to `uint32_t*` / `uint64_t*` for an atomic, a `ld.acquire` or a `st.release`.
    One finding per slot formula, at the first barrier function that PKB's run reaches and
    computes it; its send and its wait share the formula, and other barrier functions that
    repeat it are the finding's related lines. A barrier only a skipped branch calls is not
    reported.

    ## Why is this bad?
    Adding to an integer adds bytes, not elements: slot `rank` lands at byte `rank`, so for every
    rank not a multiple of 4 (or 8) the 32-bit (64-bit) atomic is misaligned. On the GPU that is a
    `misaligned address` fault (the kernel dies, the context is lost) on the first call where such
    a rank signals; where it happens to be aligned, neighbouring ranks' flags overlap in one word
    and a signal from one rank is seen as another's.

    ## Example
    ```cuda
    uint64_t remote = signal_pad_ptrs[peer];
    uint32_t* slot = reinterpret_cast<uint32_t*>(remote + block_id * world_size + rank);
    asm volatile("atom.global.release.sys.cas.b32 %0, [%1], 0, 1;" : "=r"(t) : "l"(slot));
    ```

    ## Use instead
    Cast first, then index (pointer arithmetic scales by the element size), or scale the offset:
    ```cuda
    uint32_t* slot = reinterpret_cast<uint32_t*>(signal_pad_ptrs[peer]) + block_id * world_size + rank;
    ```
    """

    id = "PKB017"
    name = "misaligned-signal-atomic"
    severity = "error"
    message = "byte offset added to an integer signal address before a 32/64-bit flag access (misaligned)"
    fix = "cast the signal address to uint32_t* (or uint64_t*) first and index it, or scale the offset by sizeof(slot)"

    def check(self, ctx):
        # slot formula -> (cast type, file line of each barrier function computing it, in order)
        formulas: dict[str, tuple] = {}
        for index, src in enumerate(ctx.sources()):
            text = src.text
            run = ctx.run_cuda_functions(index)
            functions = [f for c in ctx.facts.cuda if c.source_index == index for f in c.functions]
            # The same slot formula in a send and its wait, or copied into a second barrier
            # function, is one mistake with one fix: one finding, the other functions as related lines.
            seen: set[str] = set()
            for off, ctype, term in misaligned_slots(text):
                text_line = text.count("\n", 0, off) + 1
                owner = min((f for f in functions if f.text_line <= text_line <= f.text_end_line),
                            key=lambda f: f.text_end_line - f.text_line, default=None)
                if run is not None and owner is not None and owner.name not in run:
                    continue  # a barrier only a branch the run never takes would call
                key = owner.name if owner is not None else str(text_line)
                if key in seen:
                    continue
                seen.add(key)
                formula = " ".join(term.split())
                formulas.setdefault(formula, (ctype, []))[1].append(src.file_line(text_line))
        for term, (ctype, lines) in formulas.items():
            detail = f"`{term}` bytes added before the cast to {ctype}*"
            if len(lines) > 1:
                detail += "; the same formula in the barrier function" + ("s" if len(lines) > 2 else "") + \
                    " at line" + ("s " if len(lines) > 2 else " ") + ", ".join(map(str, lines[1:]))
            yield self.finding(ctx, lines[0], detail, pass_name="clang", related_lines=lines[1:])
