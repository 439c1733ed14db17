"""A light C++ scanner for the PTX pass: comments, strings and preprocessor lines masked, brackets
matched, and the namespace-scope declarations of a CUDA text (functions with their execution
space, template parameters and parameters; types, initializers, statements, PYBIND11_MODULE /
TORCH_LIBRARY blocks). Reads only the text it is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

def mask(text: str) -> str:
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


def match_close(masked: str, i: int, open_c: str = "{", close_c: str = "}") -> int:
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


def split_list(text: str, sep: str = ",") -> list[str]:
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
KNOWN_SPACE_MACROS = {
    "C10_HOST_DEVICE": "__host__ __device__",
    "C10_DEVICE": "__device__",
    "C10_HOST": "__host__",
}


@dataclass
class Decl:
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
    macros = dict(KNOWN_SPACE_MACROS)
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
        close = match_close(h, lt, "<", ">")
        for p in split_list(h[lt + 1 : close]):
            default = ""
            decl = p
            idx = top_level_index(p, "=")
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
    params = [p for p in split_list(h[open_i + 1 : close_i]) if p != "void"]
    return name, is_template, tparams, params


def scan_decls(text: str, masked: str | None = None) -> list[Decl]:
    """Namespace-scope declarations of a C++/CUDA text (namespaces and extern "C" are transparent)."""
    masked = mask(text) if masked is None else masked
    macros = _space_macros(text)
    decls: list[Decl] = []
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
            decls.append(Decl("statement", stmt_start, i + 1, header))
            stmt_start = -1
            i += 1
            continue
        if ch == "(":  # parentheses never hold a body at namespace scope
            i = match_close(masked, i, "(", ")") + 1
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
        close = match_close(masked, i)
        mns = re.fullmatch(r"(?:inline\s+)?namespace(?:\s+([\w:]+))?\s*", h)
        if mns or re.fullmatch(r"extern\s*", h):
            ns_stack.append(((mns.group(1) or "") if mns else "", close))
            stmt_start = -1
            i += 1
            continue
        if re.match(r"(PYBIND11_MODULE|TORCH_LIBRARY\w*)\s*\(", h):
            decls.append(Decl("block", stmt_start, close + 1, header, space="host"))
            stmt_start = -1
            i = close + 1
            continue
        body_is_init = "=" in strip_nested(drop_template_header(h).replace("==", "").replace("!=", "")
                                            .replace("<=", "").replace(">=", ""))
        is_type = re.match(r"(template\s*<.*>\s*)?(typedef\s+)?(struct|class|union|enum)\b", h, re.S)
        if is_type or body_is_init or "(" not in h:
            # a type or an initializer: skip its braces, the statement ends at ';'
            j = close + 1
            while j < n and masked[j] != ";" and masked[j] not in "{}":
                if masked[j] == "(":
                    j = match_close(masked, j, "(", ")")
                j += 1
            end = min(j + 1, n) if j < n and masked[j] == ";" else close + 1
            decls.append(Decl("type" if is_type else "init", stmt_start, end, masked[stmt_start:end]))
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
            Decl(
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


def top_level_index(p: str, ch: str) -> int:
    depth = 0
    for k, c in enumerate(p):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth = max(depth - 1, 0)
        elif c == ch and depth == 0:
            return k
    return -1


def drop_template_header(h: str) -> str:
    m = re.match(r"\s*template\s*<", h)
    if not m:
        return h
    return h[match_close(h, m.end() - 1, "<", ">") + 1 :]


def strip_nested(p: str) -> str:
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
