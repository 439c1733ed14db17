"""C/C++ text helpers shared by the CUDA passes: splitting at top-level separators, the string
literals of an expression, the parenthesis that closes another. Reads only the text it is given."""

from __future__ import annotations

import re


def split_top(text: str, sep: str, scoped: bool = True) -> list[str]:
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


def string_literals(text: str) -> str:
    """Concatenate the C string literals in `text`, decoding the usual escapes."""
    out = []
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', text, re.S):
        s = m.group(1)
        s = s.replace("\\n", "\n").replace("\\t", "\t").replace('\\"', '"').replace("\\\\", "\\")
        out.append(s)
    return "".join(out)


def match_paren(text: str, open_idx: int) -> int:
    """Index of the parenthesis closing the one at `open_idx`, skipping string and char
    literals; -1 when it is never closed."""
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
