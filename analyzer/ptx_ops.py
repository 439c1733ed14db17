"""What a PTX instruction means: the one place that decodes PTX, for every pass that reads it.

PTX reaches the analyzer two ways: as inline-asm templates written in the CUDA source (the clang
pass and its regex fallback read them) and as nvcc's output (the PTX reader). Both name the same
instructions, so both decode them here: the memory operation an opcode performs (`ld`, `st`,
`atom`, `red`, `multimem.ld_reduce/st/red`), its ordering (`.acquire`, `.release`, `.relaxed`,
`.volatile`, ...) and scope (`.sys`, `.gpu`, `.cta`), its access width, whether it is a fence,
which copy engine it drives (`multimem.*` is NVLS, `cp.async.bulk*` is TMA), and the taxonomy's
ordering words for it (TAXONOMY.md: `release_acquire`, `fence_system`).

Reads nothing but the strings it is given: an opcode (`ld.acquire.sys.global.u32`) or the
text of an `asm(...)` statement.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from analyzer.cuda_text import split_top, string_literals

ORDERS = {"acquire": "acquire", "release": "release", "relaxed": "relaxed", "acq_rel": "acq_rel",
          "volatile": "volatile", "sc": "seq_cst"}
# `.gl` is membar's name for GPU scope (membar.gl == fence.sc.gpu).
SCOPES = {"sys": "system", "gpu": "gpu", "cta": "cta", "gl": "gpu"}
_RELEASE_ACQUIRE = frozenset({"acquire", "release", "acq_rel"})
_ENGINE_PREFIXES = {"nvls": ("multimem.",), "tma": ("cp.async.bulk", "cp.reduce.async.bulk")}
# The instruction summary's feature names (ptx_summary), in the order it lists them.
FEATURES = ("nvls", "tma", "release_acquire", "fence_system", "volatile", "atomic_sys", "red_sys", "relaxed")


@dataclass(frozen=True)
class PtxOp:
    """One decoded opcode. `opcode` is the dotted mnemonic without operands; a PTX reader's
    `call nvshmemx_...` entries decode too (base `call`, nothing else set)."""

    opcode: str
    base: str
    mods: frozenset[str]
    memop: str  # load | store | atomic | '' (not a memory access)
    order: str  # acquire | release | acq_rel | relaxed | volatile | seq_cst | ''
    scope: str  # system | gpu | cta | '' (none written)
    width_bits: int  # bits one access moves (vector count x element width); 0 when unknown

    @property
    def is_fence(self) -> bool:
        return self.base in ("fence", "membar")

    @property
    def is_proxy_fence(self) -> bool:
        return self.is_fence and any("proxy" in m for m in self.mods)

    @property
    def local(self) -> bool:
        """Shared or local state space: memory no peer can see."""
        return any(m.startswith(("shared", "local")) for m in self.mods)

    @property
    def engine(self) -> str:
        """The copy engine the instruction drives: 'nvls' (multimem), 'tma' (bulk copies), ''."""
        for name, prefixes in _ENGINE_PREFIXES.items():
            if self.opcode.startswith(prefixes):
                return name
        return ""

    @property
    def orders_system(self) -> bool:
        """A memory access with release/acquire semantics at system scope (`st.release.sys`,
        `ld.acquire.sys`, `atom.acq_rel.sys`, `multimem.red.release.sys`): TAXONOMY.md's
        `release_acquire`. A fence is not one (its word is `fence_system`), nor is an access
        to shared memory."""
        return (self.memop != "" and self.scope == "system" and self.order in _RELEASE_ACQUIRE
                and not self.local)

    @property
    def fences_system(self) -> bool:
        """A system-scope fence that orders memory between threads (`fence.sc.sys`,
        `fence.acq_rel.sys`, `membar.sys`): TAXONOMY.md's `fence_system`. A proxy fence orders
        one proxy against another, not threads, and is not one."""
        if self.base == "membar":
            return self.scope == "system"
        return (self.base == "fence" and self.scope == "system" and bool(self.mods & {"sc", "acq_rel"})
                and not self.is_proxy_fence)

    @property
    def fence_kind(self) -> str:
        """The Fence record's kind for this fence: every async-proxy fence reads as one kind."""
        return "fence.proxy.async" if ".proxy.async" in self.opcode or self.opcode.startswith("fence.proxy.async") \
            else self.opcode

    def features(self) -> list[str]:
        """The instruction summary's features this instruction shows (see FEATURES)."""
        keys: list[str] = []
        base, mods = self.base, self.mods
        if base == "multimem":
            keys.append("nvls")
        if self.engine == "tma":
            keys.append("tma")
        sys_scope = "sys" in mods
        if self.orders_system:
            keys.append("release_acquire")
        if self.fences_system:
            keys.append("fence_system")
        if base in ("ld", "st") and "volatile" in mods and not self.local:
            keys.append("volatile")
        if base == "atom" and sys_scope and not self.local:
            keys.append("atomic_sys")
        if base == "red" and sys_scope and not self.local:
            keys.append("red_sys")
        if base in ("ld", "st") and "relaxed" in mods and not self.local:
            keys.append("relaxed")
        return keys

    def notable(self) -> bool:
        """Worth keeping from nvcc's output: what the taxonomy or a rule can use (engines,
        atomics, fences, barriers, ordered or volatile accesses, wide global accesses)."""
        base, mods = self.base, self.mods
        if base in ("multimem", "red", "atom", "fence", "membar", "mbarrier"):
            return True
        if self.engine == "tma":
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


def _memop(parts: list[str]) -> str:
    head = parts[0]
    if head in ("ld", "ldu"):
        return "load"
    if head == "st":
        return "store"
    if head in ("atom", "red"):
        return "atomic"
    if head == "multimem" and len(parts) > 1:
        return {"ld_reduce": "load", "st": "store", "red": "atomic"}.get(parts[1], "")
    return ""


def _width(parts: list[str]) -> int:
    vec = 1
    bits = 0
    for p in parts[1:]:
        if re.fullmatch(r"v[248]", p):
            vec = int(p[1:])
        m = re.fullmatch(r"[usbfe]?(8|16|32|64|128)(x\d)?", p) or re.fullmatch(r"(?:bf16|f16)(x2)?", p)
        if m and p[0] in "usbf":
            if p.startswith("bf16") or p.startswith("f16"):
                bits = 32 if p.endswith("x2") else 16
            else:
                bits = int(m.group(1))
    return bits * vec


@functools.lru_cache(maxsize=4096)
def decode(opcode: str) -> PtxOp:
    """The meaning of one opcode (`atom.acquire.sys.global.cas.b32`); a PTX reader's
    `call name` entry keeps only its first word."""
    op = opcode.split()[0] if opcode else ""
    parts = op.split(".")
    order = scope = ""
    for p in parts:
        if p in ORDERS and not order:
            order = ORDERS[p]
        if p in SCOPES and not scope:
            scope = SCOPES[p]
    return PtxOp(opcode=op, base=parts[0], mods=frozenset(parts[1:]), memop=_memop(parts), order=order,
                 scope=scope, width_bits=_width(parts))


# --------------------------------------------------------------------------------------------
# inline asm statements
# --------------------------------------------------------------------------------------------


def template_instructions(template: str) -> list[tuple[str, str]]:
    """(opcode, operand text) for each instruction of an inline-asm template."""
    instrs = []
    for raw in re.split(r"[;\n]", template):
        s = raw.split("//")[0].strip()
        # scope braces ({ .reg .pred p; ... }) are not operands; vector operands ({%0,%1}) stay
        while s.startswith("{"):
            s = s[1:].strip()
        while s.endswith("}") and s.count("}") > s.count("{"):
            s = s[:-1].strip()
        if not s or s.startswith(".") or re.match(r"^[\w$]+:$", s):
            continue
        s = re.sub(r"^@!?%?\w+\s+", "", s)  # predicate guard
        m = re.match(r"([a-z_][\w.:]*)\s*(.*)", s)
        if m:
            instrs.append((m.group(1), m.group(2)))
    return instrs


@dataclass
class AsmParts:
    """An `asm(...)` statement taken apart: its template and its output and input operands."""

    template: str
    operands: list[tuple[str, str, str]]  # (symbolic name or '', constraint, C++ expression)
    instructions: list[tuple[str, str]]  # (opcode, operand text), as template_instructions

    @property
    def mnemonics(self) -> list[str]:
        return [op for op, _ in self.instructions]

    def operand_index(self, ref: str) -> int:
        """The operand a template reference names: '%1' style (an index) or '%[name]'; -1 when none."""
        if ref.startswith("["):
            name = ref.strip("[]")
            return next((q for q, o in enumerate(self.operands) if o[0] == name), -1)
        return int(ref)


def asm_parts(inside: str) -> AsmParts:
    """Decode the text between an asm statement's parentheses (`"template" : outs : ins : clobbers`)."""
    sections = split_top(inside, ":", scoped=False)
    template = string_literals(sections[0])
    operands: list[tuple[str, str, str]] = []
    for sec in sections[1:3]:
        for op in split_top(sec, ","):
            om = re.match(r'\s*(?:\[(\w+)\])?\s*"([^"]*)"\s*\((.*)\)\s*$', op, re.S)
            if om:
                operands.append((om.group(1) or "", om.group(2), om.group(3).strip()))
    return AsmParts(template, operands, template_instructions(template))


def memory_targets(opcode: str, operand_text: str) -> list[tuple[str, str]]:
    """(load|store|atomic, operand reference) for the memory an instruction touches through an
    asm operand (`[%0]`, `[%[flag]]`). A bulk copy names its destination first: a `.global`
    destination is a store, otherwise its source is read."""
    mem = decode(opcode).memop
    bracket_ops = re.findall(r"\[\s*%(\d+|\[\w+\])", operand_text)
    if mem and bracket_ops:
        return [(mem, bracket_ops[0])]
    if opcode.startswith("cp.async.bulk") and len(bracket_ops) >= 2:
        if re.match(r"cp\.async\.bulk(\.tensor\.\w+)?\.global", opcode):
            return [("store", bracket_ops[0])]
        return [("load", bracket_ops[1])]
    return []


def exits(template: str) -> bool:
    """The template leaves the thread (`trap`, `exit`)."""
    return re.search(r"\btrap\b|\bexit\b", template) is not None
