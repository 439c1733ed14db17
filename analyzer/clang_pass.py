"""The libclang pass: one CUDA/C++ source string in, one CudaFacts out.

This module is the pass's spine: it parses (analyzer/clang_ast.py), finds the functions, lets
pointer kinds flow (analyzer/cuda_pointers.py), records each function, and walks every body once
with its collaborators, each a mixin with one job: launches, copies and bindings
(cuda_launches.py), memory accesses, fences and API calls (cuda_accesses.py, inline asm decoded
by ptx_ops.py), spin loops (cuda_spin_loops.py) and tail handling (cuda_tail_scan.py).
ThunderKittens idioms (kittens.py) and fallback branches (cuda_branches.py) are added last.
If libclang is missing or fails, a regex scan (cuda_regex_scan.py) gives partial facts instead.
Reads the CudaSource it is given (and the Python pass's pointer-kind seeds).
"""

from __future__ import annotations

import re
import time

from analyzer import clang_ast, cuda_branches, kittens
from analyzer.clang_ast import LOOP_KINDS, AstView, FuncNode, Node
from analyzer.cuda_accesses import AccessScan
from analyzer.cuda_calls import LAUNCH_APIS
from analyzer.cuda_launches import LaunchScan
from analyzer.cuda_pointers import PointerFlow
from analyzer.cuda_regex_scan import regex_scan
from analyzer.cuda_spin_loops import SpinLoopScan
from analyzer.cuda_tail_scan import TailScan
from pkb.facts import CudaFacts, CudaSource, Function, Param


class _ClangPass(PointerFlow, LaunchScan, AccessScan, SpinLoopScan, TailScan, AstView):
    """One source's pass: the state its collaborators share, and the order they run in."""

    def __init__(self, src: CudaSource, file: str, seeds: dict[str, list[str]] | None, text: str):
        self.src = src
        self.file = file
        self.seeds = seeds or {}
        self.text = text
        self.data = text.encode("utf-8", errors="replace")
        self.facts = CudaFacts(source_index=src.index)
        self.funcs: list[FuncNode] = []
        self.by_name: dict[str, list[FuncNode]] = {}
        self.env: dict[tuple, tuple[str, str]] = {}
        self.fields_by_name: dict[str, tuple] = {}  # a struct field's key by its name (cuda_pointers)
        self.ret: dict[str, tuple[str, str]] = {}
        self.var_nodes: dict[tuple, Node] = {}
        self.peer_index_vars: set[tuple] = set()  # locals named like the rank that index peers
        self.geometry_locals: set[tuple[str, str]] = set()  # (function, local) computed from the thread's position
        self._run_flags: dict[str, bool] | None = None  # bools of the source that hold on the run
        self.changed = False
        self.atomic_refs: dict[tuple, tuple[Node, str]] = {}
        # device helper -> {param index: how it reads} (for polls through helpers)
        self.helper_reads: dict[str, dict[int, str]] = {}
        self.cur_func: FuncNode | None = None

    def collect_functions(self, tops: list[Node]) -> None:
        """Every function with a body (namespaces, classes and extern "C" looked into), by kind."""
        def visit(n: Node, in_template: bool):
            if n.kind in ("NAMESPACE", "LINKAGE_SPEC", "STRUCT_DECL", "CLASS_DECL", "CLASS_TEMPLATE", "UNEXPOSED_DECL"):
                for ch in n.kids:
                    visit(ch, in_template or n.kind == "CLASS_TEMPLATE")
                return
            if n.kind not in ("FUNCTION_DECL", "FUNCTION_TEMPLATE", "CXX_METHOD", "CONSTRUCTOR"):
                return
            body = next((ch for ch in n.kids if ch.kind == "COMPOUND_STMT"), None)
            if body is None:
                return
            attrs = {ch.kind for ch in n.kids}
            is_g = "CUDAGLOBAL_ATTR" in attrs
            is_d = "CUDADEVICE_ATTR" in attrs
            is_h = "CUDAHOST_ATTR" in attrs
            kind = "global" if is_g else ("host_device" if is_d and is_h else ("device" if is_d else "host"))
            name = n.spelling
            if name.startswith("pkb_pybind11_init_"):
                name = "PYBIND11_MODULE"
            params = [ch for ch in n.kids if ch.kind == "PARM_DECL"]
            f = FuncNode(name, kind, n, params, body, is_template=in_template or n.kind == "FUNCTION_TEMPLATE")
            self.funcs.append(f)
            self.by_name.setdefault(name, []).append(f)

        for t in tops:
            visit(t, False)

    def resolve(self, name: str, nargs: int = -1) -> list[FuncNode]:
        cands = self.by_name.get(name, [])
        if nargs >= 0 and len(cands) > 1:
            exact = [f for f in cands if len(f.params) == nargs]
            if exact:
                return exact
        return cands

    def make_functions(self) -> None:
        """One Function record per function: kind, lines, calls, parameters with their kinds."""
        for f in self.funcs:
            n = f.node
            st, en = n.c.extent.start.line, n.c.extent.end.line
            head = self.data[n.so:f.body.so].decode("utf-8", errors="replace") if f.body.so > n.so else ""
            lb = re.search(r"__launch_bounds__\s*\(([^)]*)\)", head)
            calls: list[str] = []
            for x in f.body.walk():
                nm = ""
                if x.kind == "CALL_EXPR" and x.spelling and not x.spelling.startswith("operator") and not self.is_constructor(x):
                    nm = x.spelling
                elif x.kind == "OVERLOADED_DECL_REF":
                    nm = x.spelling
                if nm and nm not in calls and nm not in ("__cudaPushCallConfiguration", "cudaConfigureCall"):
                    calls.append(nm)
                # A kernel handed by reference to the launch API (cudaLaunchCooperativeKernel(
                # (void*)k, ...)) is launched by this function as surely as k<<<...>>>(...) is.
                if x.kind == "CALL_EXPR" and x.spelling in LAUNCH_APIS:
                    kname, _ = self.launch_api_parts(x)
                    if kname and kname not in calls:
                        calls.append(kname)
            params = []
            for p in f.params:
                t = p.type
                tk = t.kind.name
                is_ptr = tk in ("POINTER", "CONSTANTARRAY", "INCOMPLETEARRAY") or "*" in t.spelling
                kind, basis = self.getv(self.key_of_decl(p.c))
                params.append(Param(name=p.spelling, type=t.spelling, is_pointer=is_ptr, pointer_kind=kind,
                                    basis=basis))
            f.info = Function(name=f.name, kind=f.kind, line=self.src.file_line(st), end_line=self.src.file_line(en),
                              text_line=st, text_end_line=en, params=params, calls=calls,
                              is_template=f.is_template, launch_bounds=lb.group(1).strip() if lb else "")
            self.facts.functions.append(f.info)

    def scan(self) -> None:
        """Walk every body once, handing each node to the collaborator whose job it is."""
        for f in self.funcs:
            self.cur_func = f
            device = f.kind != "host"
            for n in f.body.walk():
                k = n.kind
                if k == "CALL_EXPR":
                    self.scan_call(f, n, device)
                elif k == "ASM_STMT":
                    self.scan_asm(f, n)
                elif device and k == "ARRAY_SUBSCRIPT_EXPR" and len(n.kids) >= 2:
                    self.plain_access(f, n, n.kids[0], "subscript")
                elif device and k == "UNARY_OPERATOR" and n.kids and self.unary_op(n) == "*":
                    self.plain_access(f, n, n.kids[0], "deref")
                elif device and k == "MEMBER_REF_EXPR" and n.kids:
                    try:
                        arrow = n.kids[0].type.kind.name == "POINTER" and "->" in self.text_of(n)
                    except Exception:
                        arrow = False
                    if arrow and not (n.parent and n.parent.kind == "CALL_EXPR" and n.parent.kids and n.parent.kids[0] is n):
                        self.plain_access(f, n, n.kids[0], "member")
                elif device and k in LOOP_KINDS:
                    self.scan_loop(f, n)
            if f.kind == "global":
                self.scan_tail(f)
        self.cur_func = None

    def run(self, tu) -> None:
        """The pass's order: functions, bindings, seeds, dataflow (twice around the name guesses),
        function records, the body scan, spin loops again once helper summaries exist, text launches."""
        tops = clang_ast.copy_tree(tu)
        self.collect_functions(tops)
        self.collect_bindings()
        self.apply_seeds()
        self.flow()
        self.apply_name_fallback()
        self.flow()
        self.make_functions()
        # helper summaries first, so polls through helpers are seen wherever the loop sits
        self.scan()
        if self.helper_reads:
            self.facts.spin_loops.clear()
            for f in self.funcs:
                if f.kind != "host":
                    self.cur_func = f
                    for n in f.body.walk():
                        if n.kind in LOOP_KINDS:
                            self.scan_loop(f, n)
            self.cur_func = None
        self.text_launches()


def analyze_cuda(src: CudaSource, file: str, seeds: dict[str, list[str]] | None = None) -> CudaFacts:
    """Facts about one CUDA/C++ source. Never raises: on failure, falls back to a regex scan."""
    t0 = time.perf_counter()
    try:
        text, includes, missing = clang_ast.blank_includes(src.text or "")
    except Exception:  # pragma: no cover - defensive
        text, includes, missing = src.text or "", [], []
    facts: CudaFacts
    try:
        tu = clang_ast.parse(text)
        p = _ClangPass(src, file, seeds, text)
        p.facts.includes = includes
        p.facts.missing_headers = missing
        p.facts.diagnostics = clang_ast.diagnostics(tu, src)
        p.run(tu)
        facts = p.facts
        errors = [d for d in facts.diagnostics if d.severity in ("error", "fatal")]
        notes = []
        if errors:
            facts.status = "partial"
            shown = "; ".join(f"line {d.line}: {d.message}" for d in errors[:5])
            more = f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""
            notes.append(f"{len(errors)} clang error(s): {shown}{more}")
        if missing:
            notes.append("headers not modeled: " + ", ".join(missing))
        facts.message = "; ".join(notes)
    except Exception as e:  # libclang missing, or it failed on this source
        facts = regex_scan(src, text, seeds)
        facts.includes = includes
        facts.missing_headers = missing
        facts.status = "partial"
        facts.message = f"libclang unavailable or failed ({type(e).__name__}: {e}); regex scan only"
    kittens.augment(facts, src, text)  # ThunderKittens kernels and parallel layouts (headers absent)
    facts.fallback_ranges = cuda_branches.fallback_line_ranges(text, src.file_line)
    facts.seconds = time.perf_counter() - t0
    return facts
