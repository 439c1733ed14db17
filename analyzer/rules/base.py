"""What a rule is, and the registry that finds them.

A rule is one module `analyzer/rules/pkbNNN_<name>.py` holding one subclass of `Rule`. Its
docstring is its documentation, with the sections "What it does", "Why is this bad?", "Example"
and "Use instead"; `pkb-analyze rules PKBnnn` prints exactly that text.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterable, Iterator
from functools import lru_cache

from analyzer.buffer_roots import BufferRoots
from pkb.facts import CallSite, CudaSource
from pkb.record import CandidateRecord, Finding


class RuleContext:
    """What every rule reads: the record with its facts, plus a few shared views."""

    def __init__(self, rec: CandidateRecord):
        self.rec = rec
        self.facts = rec.facts
        self.py = rec.facts.python
        self.lines = rec.source.splitlines()

    def snippet(self, line: int) -> str:
        return self.lines[line - 1].strip()[:200] if 0 < line <= len(self.lines) else ""

    def calls(self, *categories: str, paths: tuple[str, ...] = ("timed",)) -> list[CallSite]:
        return [c for c in self.py.calls if c.category in categories and c.path in paths]

    def sources(self) -> list[CudaSource]:
        return self.py.cuda_sources

    def cuda_lines(self) -> Iterator[tuple[int, str, CudaSource]]:
        """(file line, text line, source) over every CUDA source line."""
        for src in self.py.cuda_sources:
            for i, text in enumerate(src.text.splitlines()):
                yield src.file_line(i + 1), text, src

    def run_cuda_functions(self, source_index: int) -> set[str] | None:
        """Names of the CUDA functions of one source that PKB's run reaches: those reached from the
        extension functions Python calls on the timed path or in set-up. None where the clang pass
        has no facts for that source (then nothing can be ruled out)."""
        cudas = [c for c in self.facts.cuda if c.source_index == source_index and c.functions]
        if not cudas:
            return None
        out: set[str] = set()
        for call in self.calls("ext_kernel", paths=("timed", "setup")):
            for cuda in cudas:
                out |= reached_functions(cuda, cuda.bindings.get(call.target, call.target))
        return out

    def buffer_roots(self):
        """Which buffer each expression of the file stands for (analyzer.buffer_roots); None
        when the file does not parse."""
        if not hasattr(self, "_buffer_roots"):
            tree = self.rec.syntax_tree()
            self._buffer_roots = BufferRoots(tree) if tree is not None else None
        return self._buffer_roots

    def labels(self, axis: str) -> set[str]:
        return set(self.rec.label_values(axis))

    def claims_custom_kernels(self) -> bool:
        return bool(self.py.cuda_sources or self.py.triton_kernels)


def call_positions(ctx):
    """Order of execution, approximately: a call inside a helper sits where solution() calls it."""
    tree = ctx.rec.syntax_tree()
    if tree is None:
        return lambda fn, line: line
    sites: dict[str, list[int]] = {}
    owner: dict[int, str] = {}
    functions = {c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
                 and any(isinstance(m, ast.FunctionDef) and m.name == "forward" for m in c.body)}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for n in ast.walk(fn):
                if isinstance(n, ast.Call):
                    name = n.func.id if isinstance(n.func, ast.Name) else (n.func.attr if isinstance(n.func, ast.Attribute) else "")
                    if name:
                        sites.setdefault(name, []).append(n.lineno)
                        owner.setdefault(n.lineno, fn.name)
                    if name == "apply" and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                            and n.func.value.id in functions:  # `Exchange.apply(x)` runs its forward there
                        sites.setdefault("forward", []).append(n.lineno)

    def position(fn: str, line: int, depth: int = 0) -> tuple:
        if fn in ("solution", "") or fn not in sites or depth > 8:
            return (line,)
        site = max(sites[fn])
        return position(owner.get(site, "solution"), site, depth + 1) + (line,)

    return position


def reached_functions(cuda, entry: str) -> set[str]:
    """`entry` and every function of one CUDA source it calls or launches, transitively."""
    by_name = {f.name: f for f in cuda.functions}
    seen, todo = {entry}, [entry]
    while todo:
        name = todo.pop()
        f = by_name.get(name)
        nxt = list(f.calls) if f else []
        nxt += [la.kernel for la in cuda.launches if la.caller == name]
        for n in nxt:
            if n not in seen and (n in by_name):
                seen.add(n)
                todo.append(n)
    return seen


class Rule:
    id: str = ""
    name: str = ""
    severity: str = "warning"
    message: str = ""  # the one-line message; findings may add detail after it
    fix: str = ""  # one-line fix hint

    def check(self, ctx: RuleContext) -> Iterator[Finding]:
        raise NotImplementedError

    def finding(self, ctx: RuleContext, line: int, detail: str = "", kernel: str = "", pass_name: str = "python",
                related_lines: Iterable[int] = ()) -> Finding:
        msg = self.message if not detail else f"{self.message}: {detail}"
        return Finding(rule=self.id, name=self.name, severity=self.severity, message=msg,
                       file=ctx.rec.path, line=line, snippet=ctx.snippet(line), kernel=kernel,
                       pass_name=pass_name, related_lines=sorted({n for n in related_lines if n != line}))

    @classmethod
    def doc(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def rationale(cls) -> str:
        """The "Why is this bad?" section of the docstring."""
        m = re.search(r"## Why is this bad\?\n(.*?)(?:\n## |\Z)", cls.doc(), re.S)
        return " ".join(m.group(1).split()) if m else ""


@lru_cache(maxsize=1)
def all_rules() -> tuple[Rule, ...]:
    import analyzer.rules as pkg

    found: list[Rule] = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if not re.match(r"pkb\d{3}_", info.name):
            continue
        mod = importlib.import_module(f"analyzer.rules.{info.name}")
        for obj in vars(mod).values():
            if inspect.isclass(obj) and issubclass(obj, Rule) and obj is not Rule and obj.id:
                found.append(obj())
    ids = [r.id for r in found]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise RuntimeError(f"duplicate rule ids: {sorted(dupes)}")
    return tuple(sorted(found, key=lambda r: r.id))


def select_rules(select: list[str] | None = None, ignore: list[str] | None = None) -> list[Rule]:
    """Rules chosen by id prefix, like ruff's --select/--ignore (PKB0 selects PKB001..PKB099)."""
    rules = list(all_rules())
    for code in [*(select or []), *(ignore or [])]:
        if not any(r.id.startswith(code.upper()) or r.name == code for r in rules):
            raise ValueError(f"no rule matches {code!r}; known rules: {', '.join(sorted(r.id for r in rules))}")
    if select:
        rules = [r for r in rules if any(r.id.startswith(s.upper()) or r.name == s for s in select)]
    if ignore:
        rules = [r for r in rules if not any(r.id.startswith(s.upper()) or r.name == s for s in ignore)]
    return rules


def run_rules(rec: CandidateRecord, rules: list[Rule]) -> list[Finding]:
    ctx = RuleContext(rec)
    out: list[Finding] = []
    seen: set[tuple[str, int]] = set()
    for rule in rules:
        for f in rule.check(ctx):
            if (f.rule, f.line) not in seen:
                seen.add((f.rule, f.line))
                out.append(f)
    return sorted(out, key=lambda f: (f.line, f.rule))
