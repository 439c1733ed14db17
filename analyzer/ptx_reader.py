"""Reading nvcc's PTX: entries (.entry and defined .func) with their notable instructions and the
CUDA-text lines `.loc` gives them (inlined code followed back to the candidate's line), demangled
names, and those lines mapped to file lines. Which instructions are notable is ptx_ops' to say.
Reads PTX text (and the CUDA text, to fix the lines of multi-line asm statements).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from analyzer import ptx_ops
from analyzer.brackets import opening
from analyzer.cpp_scan import match_close
from analyzer.device_tu import TU_NAME
from pkb.facts import CudaSource, PtxEntry, PtxFacts, PtxInstr

_FILE_RE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.M)
_LOC_RE = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+(\d+)(.*)$")
_INLINED_RE = re.compile(r"inlined_at\s+(\d+)\s+(\d+)\s+(\d+)")
_ENTRY_RE = re.compile(r"^\s*((?:\.(?:visible|weak|extern)\s+)*)\.(entry|func)\b\s*(?:\([^)]*\)\s*)?([A-Za-z_$%][\w$]*)")
_LABEL_RE = re.compile(r"^\s*[A-Za-z_$][\w$]*:(?!:)")
_PRED_RE = re.compile(r"^@!?%?[\w$]+\s+")


def _callee(stmt: str) -> str:
    rest = stmt.split(None, 1)[1] if len(stmt.split(None, 1)) > 1 else ""
    rest = rest.strip()
    if rest.startswith("("):
        close = match_close(rest, 0, "(", ")")
        rest = rest[close + 1 :].lstrip(" ,\t\n")
    m = re.match(r"([A-Za-z_$][\w$]*)", rest)
    return m.group(1) if m else ""


@dataclass
class RawEntry:
    mangled: str
    kind: str
    instrs: dict[str, list[int]] = field(default_factory=dict)  # mnemonic -> text lines (one per hit; 0 unknown)
    asm: set[str] = field(default_factory=set)  # mnemonics seen inside inline asm


def fix_asm_lines(raw: list[RawEntry], text: str) -> None:
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


def parse_ptx(ptx: str, tu_name: str = TU_NAME) -> list[RawEntry]:
    """Entries (.entry and defined .func) with their interesting instructions and CUDA-text lines."""
    ours = {int(m.group(1)) for m in _FILE_RE.finditer(ptx) if os.path.basename(m.group(2)) == tu_name}
    entries: list[RawEntry] = []
    cur: RawEntry | None = None
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
        if ptx_ops.decode(op).notable():
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
                cur = RawEntry(pending[0], pending[1])
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
    open_i = opening(d, len(d) - 1, "(", ")")
    if open_i < 0:
        open_i = d.rfind("(")
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


def entries_from_raw(raw: list[RawEntry], max_line: int) -> list[PtxEntry]:
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


def map_lines(facts: PtxFacts, src: CudaSource) -> PtxFacts:
    for e in facts.entries:
        for ins in e.instructions:
            ins.lines = sorted({src.file_line(ln) for ln in ins.lines})
    return facts
