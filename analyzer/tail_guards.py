"""Where a vectorised kernel's tail is handled outside the vector loop (for PKB006).

A kernel that reads `n / 8` uint4 vectors loses the last `n % 8` elements only if nothing else
handles them. Real files handle them in three other places, all of which count:
  - the kernel itself, with a bit mask instead of `%` (`rem = nbytes & 15; if (tid < rem) ...`);
  - the count handed in is already padded (`n_padded_bytes`: the Python side pads the buffer);
  - the Python side: the extension call sits under a test of the remainder (`if n % 8 == 0:`),
    after an assert or a raise on it, or next to a copy of the tail (`out[n_main:] = ...`).
"""

from __future__ import annotations

import ast
import re

from analyzer.brackets import enclosing_openers, opening
from pkb.facts import CudaFacts, CudaSource, Function

_MASK_TAIL = re.compile(r"&\s*(?:0x[0-9a-fA-F]+|\d+)\b|\b(?:rem|tail|remainder|leftover)\w*\b", re.I)
_PADDED = re.compile(r"pad|aligned|round", re.I)


def kernel_handles_tail(src: CudaSource, fn: Function) -> bool:
    body = "\n".join(src.text.split("\n")[fn.text_line - 1 : fn.text_end_line])
    body = re.sub(r'"(?:[^"\\]|\\.)*"', '""', body)  # asm templates use %0, &...
    if any(_MASK_TAIL.search(line) for line in body.split("\n")[1:]):
        return True
    return any(p.is_pointer is False and _PADDED.search(p.name) for p in fn.params)


_DIVISIBLE = re.compile(r"%\s*(?:\w+|\d+)\s*\)?\s*==\s*0")
# an address's alignment (`(uintptr_t)src % 16 == 0`) or a thread's position (`tid % 2 == 0`)
# says nothing of the count
_NOT_A_COUNT = re.compile(r"uintptr_t|_cast\s*<|\(\s*(?:const\s+)?(?:unsigned|size_t|uint64_t|int64_t|long|char|void)[\w\s]*\*?\s*\)"
                          r"|ptr|data\(\)|threadIdx|blockIdx|\btid\b|\blane|\bwarp|\brank\b|\b[ijk]\b|step|iter")


def _tests_count_divides(cond: str) -> bool:
    """`cond` holds only if a count divides (`(n % 8) == 0 && ...`): a conjunction with such a
    term, where the term's left side is no address and no thread index."""
    if "||" in cond:
        return False
    for term in cond.split("&&"):
        m = _DIVISIBLE.search(term)
        if m and not _NOT_A_COUNT.search(term[: m.start()]):
            return True
    return False


def vector_path_needs_divisibility(src: CudaSource, fn: Function, line: int) -> bool:
    """The vector code at file line `line` runs only under a test that the count divides
    (`if (n % 8 == 0) {...}`, or `bool aligned = ... && (d % 8) == 0; if (aligned) {...}`): the
    other sizes take another path, so no tail is lost."""
    lines = src.text.split("\n")
    body = "\n".join(lines[fn.text_line - 1 : fn.text_end_line])
    body = re.sub(r'"(?:[^"\\]|\\.)*"', '""', body)
    text_line = next((i + 1 for i, _ in enumerate(lines) if src.file_line(i + 1) == line), None)
    if text_line is None or not fn.text_line <= text_line <= fn.text_end_line:
        return False
    pos = sum(len(ln) + 1 for ln in body.split("\n")[: text_line - fn.text_line])
    flags = {m.group(1) for m in re.finditer(r"\bbool\s+(\w+)\s*=\s*([^;]+);", body) if _tests_count_divides(m.group(2))}
    for i in enclosing_openers(body, pos, "{", "}"):  # every block that holds the line, innermost first
        cond = _if_condition_before(body[:i].rstrip())
        if cond is not None and (_tests_count_divides(cond) or cond.strip() in flags):
            return True
    return False


def _if_condition_before(head: str) -> str | None:
    """The condition of the `if (...)` that `head` ends with; None when it ends otherwise."""
    if not head.endswith(")"):
        return None
    j = opening(head, len(head) - 1, "(", ")")
    return head[j + 1 : -1] if j >= 0 and re.search(r"\bif\s*$", head[:j]) else None


def _mentions_remainder(node: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(node))


def _tail_slice(node: ast.AST) -> bool:
    """`x[n_main:]`, `out[k * 8:]`: a slice from a computed start to the end."""
    return any(isinstance(n, ast.Slice) and n.lower is not None and n.upper is None and not isinstance(n.lower, ast.Constant)
               for n in ast.walk(node))


def _pads(node: ast.AST) -> bool:
    """`F.pad(x, ...)`, `torch.nn.functional.pad(...)`: a tensor padded up to a size."""
    return isinstance(node, ast.Call) and (
        isinstance(node.func, ast.Attribute) and node.func.attr == "pad" or isinstance(node.func, ast.Name) and node.func.id == "pad")


def python_guards_tail(tree: ast.AST | None, call_lines: list[int]) -> bool:
    """Every call at `call_lines` sits under a remainder test, after a check of the remainder in
    its function, or in a function that also copies the tail."""
    if tree is None or not call_lines:
        return False
    parents: dict[int, ast.AST] = {}
    for p in ast.walk(tree):
        for ch in ast.iter_child_nodes(p):
            parents[id(ch)] = p
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno in call_lines]
    if not calls:
        return False
    for call in calls:
        guarded = False
        node: ast.AST | None = call
        fn = None
        while node is not None:
            parent = parents.get(id(node))
            if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and _mentions_remainder(parent.test):
                guarded = True
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
                fn = parent
                break
            node = parent
        if not guarded and fn is not None:
            for st in ast.walk(fn):
                if getattr(st, "lineno", 10**9) >= call.lineno and not isinstance(st, ast.Assign):
                    continue
                if isinstance(st, ast.Assert) and _mentions_remainder(st.test):
                    guarded = True
                elif isinstance(st, ast.If) and _mentions_remainder(st.test) and any(
                        isinstance(b, (ast.Raise, ast.Return)) or _pads(b) for b in ast.walk(st)):
                    # rejected, or padded up to a multiple (`if K % 64: A = F.pad(A, ...)`)
                    guarded = True
            if any(isinstance(st, (ast.Assign, ast.AugAssign, ast.Expr)) and _tail_slice(st) for st in ast.walk(fn)):
                guarded = True
        if not guarded:
            return False
    return True


def ext_call_lines(py, cuda: CudaFacts, kernel: str) -> list[int]:
    """Python lines of the extension calls whose host function launches `kernel`."""
    by_name = {f.name: f for f in cuda.functions}
    hosts = {la.caller for la in cuda.launches if la.kernel == kernel}
    # host functions reached from a binding, transitively
    bound = {}
    for pyname, cname in cuda.bindings.items():
        seen, todo = {cname}, [cname]
        while todo:
            f = by_name.get(todo.pop())
            for c in f.calls if f else []:
                if c not in seen and c in by_name and by_name[c].kind == "host":
                    seen.add(c)
                    todo.append(c)
        bound[pyname] = seen
    names = {p for p, reach in bound.items() if reach & hosts} | {h for h in hosts}
    return [c.line for c in py.calls if c.category == "ext_kernel" and c.path == "timed" and c.target in names]
