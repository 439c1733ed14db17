"""Branches of CUDA/C++ code that do not run on PKB's run: the multicast-missing fallback.

PKB runs on one NVSwitch node where `multicast_ptr != 0`. A host function that launches an NVLS
kernel when the multicast address exists and a peer-load kernel otherwise, or a kernel that tests
the address itself, runs only the first branch there: what the other branch does is a fallback
(reported as such, never as the candidate's mechanism).

Read from the text: `if (COND) {A} else {B}` where COND tests a multicast address (a name with
multicast / mc_ptr / mc in it) against zero, or a bool set from such a test (`bool use_multimem =
multicast_ptr != 0 && n % 8 == 0`). A conjunction decides only when its other terms hold on the run
too (alignment tests: PKB's sizes are multiples of the vector widths); anything else (`||`, a
dtype or size test) leaves both branches possible.
"""

from __future__ import annotations

import re

from analyzer.brackets import closing, enclosing_openers

_MC_NAME = r"\w*(?:multicast|mcast|mc_ptr|mc_addr|mc_base|mcptr|mc_va)\w*|mc"
_IF_RE = re.compile(r"\bif\s*\(")
_ZERO_LIT = r"(?:0|0ULL|0ull|0u|0UL|nullptr|NULL)"
_MC_NONZERO = re.compile(rf"^(?:\(\s*\w+\s*\))?\s*({_MC_NAME})\s*(?:!=\s*{_ZERO_LIT})?$")
_MC_ZERO = re.compile(rf"^(?:!\s*({_MC_NAME})|({_MC_NAME})\s*==\s*{_ZERO_LIT})$")
# PKB's inputs are aligned (sizes are multiples of the vector widths): an alignment test holds.
_ALIGNED = re.compile(r"^[^=!<>]*%\s*\d+\s*\)?\s*==\s*0$")
# A cast's type argument (`reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0` tests the address:
# torch's allocations are aligned far beyond any vector width).
_CAST = re.compile(r"(?<=_cast)\s*<\s*[\w:]+(?:\s*\*)?\s*>|\(\s*(?:uintptr_t|size_t|uint64_t|unsigned long long)\s*\)")


def _unparen(s: str) -> str:
    s = s.strip()
    while s.startswith("(") and closing(s, 0, "(", ")") == len(s) - 1:
        s = s[1:-1].strip()
    return s


def _split_and(cond: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(cond):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0 and cond.startswith("&&", i):
            parts.append(cond[start:i])
            start = i + 2
    parts.append(cond[start:])
    return [_unparen(p) for p in parts]


def _on_run(cond: str, flags: dict[str, bool]) -> bool | None:
    """True / False when `cond` is decided on PKB's run (the multicast address exists, sizes are
    aligned); None otherwise."""
    cond = _unparen(cond)
    if "||" in cond:
        return None
    if _MC_ZERO.match(cond):
        return False
    neg = re.fullmatch(r"!\s*(\w+)", cond)
    if neg and flags.get(neg.group(1)):
        return False
    for t in _split_and(cond):
        if not (_MC_NONZERO.match(t) or flags.get(t) or _ALIGNED.match(_CAST.sub("", t))):
            return None
    return True


def _flag_names(text: str) -> dict[str, bool]:
    """Bools set from a multicast test (`bool use_mc = mc_ptr != 0 && n % 8 == 0;`): name -> True."""
    # a bool parameter named for the multicast path is the caller's multicast test
    out: dict[str, bool] = {m.group(1): True for m in re.finditer(
        r"\bbool\s+((?:use|has|with|enable)_?(?:multimem|multicast|mcast|mc|nvls)\w*)\s*[,)]", text)}
    for m in re.finditer(r"\b(?:const\s+)?bool\s+(\w+)\s*=\s*([^;]+);", text):
        if _on_run(m.group(2), out):
            out[m.group(1)] = True
    return out


def run_flags(text: str) -> dict[str, bool]:
    """The bools of `text` that hold on PKB's run (see _flag_names)."""
    return _flag_names(text)


def decided_on_run(cond: str, flags: dict[str, bool]) -> bool | None:
    """Whether condition `cond` holds on PKB's run (multicast present, sizes aligned); None where
    the run does not decide it."""
    return _on_run(cond, flags)


def _statement_end(text: str, i: int) -> tuple[int, int]:
    """The span of the statement starting at i: a `{...}` block or up to its `;`."""
    while i < len(text) and text[i].isspace():
        i += 1
    if i < len(text) and text[i] == "{":
        return i, closing(text, i, "{", "}")
    j = text.find(";", i)
    return i, (j if j >= 0 else len(text))


def fallback_spans(text: str) -> list[tuple[int, int, str]]:
    """(start offset, end offset, condition) of every branch taken only without multicast."""
    flags = _flag_names(text)
    spans = []
    for m in _IF_RE.finditer(text):
        close = closing(text, m.end() - 1, "(", ")")
        if close < 0:
            continue
        cond = text[m.end() : close].strip()
        taken = _on_run(cond, flags)
        if taken is None:
            continue
        then_start, then_end = _statement_end(text, close + 1)
        if then_end < 0:
            continue
        if taken is False:
            spans.append((then_start, then_end, cond))
            continue
        em = re.match(r"\s*else\b", text[then_end + 1 :])
        if em:
            else_start, else_end = _statement_end(text, then_end + 1 + em.end())
            if else_end > else_start:
                spans.append((else_start, else_end, cond))
        elif _ends_in_return(text, then_start, then_end):
            # `if (use_multimem) { ...; return; }` then the generic path: what follows in the
            # enclosing block runs only without multicast
            block_end = _enclosing_block_end(text, m.start())
            if block_end > then_end + 1 and text[then_end + 1 : block_end].strip():
                spans.append((then_end + 1, block_end, cond))
    return spans


def _ends_in_return(text: str, start: int, end: int) -> bool:
    """The block text[start..end] (a `{...}` or one statement) ends with a plain `return`."""
    if start >= len(text) or end < start:
        return False
    body = text[start + 1 : end] if text[start] == "{" else text[start : end + 1]
    return re.search(r"\breturn\b[^;{}]*;\s*$", body) is not None


def _enclosing_block_end(text: str, pos: int) -> int:
    """The offset of the `}` closing the innermost block that holds `pos`; -1 at file level."""
    start = next(enclosing_openers(text, pos, "{", "}"), None)
    return closing(text, start, "{", "}") if start is not None else -1


def fallback_line_ranges(text: str, file_line) -> list[list[int]]:
    """File-line ranges [first, last] of the multicast-missing branches of `text`."""
    out = []
    for a, b, _ in fallback_spans(text):
        first = file_line(text.count("\n", 0, a) + 1)
        last = file_line(text.count("\n", 0, b) + 1)
        out.append([first, last])
    return out
