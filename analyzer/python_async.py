"""Library transfers left in flight under computation: `dist.batch_isend_irecv(ops)`,
`dist.isend`/`irecv` or a collective with `async_op=True` whose requests are waited for only after
some computation. NCCL runs them on its own stream, beside the compute the host issues in the
meantime (a ring that commits step i+1's sends before step i's local attention), which is
`multi_stream` overlap even though the candidate made no stream itself.

Read from the parsed file: the function of solution()'s path that issues the requests (directly, or
through the file's own helpers and methods, `comm.send_recv_kv(k, v)` -> `commit()`), then a
computation, then the wait (`req.wait()`, or a helper that waits), in that order of lines.
"""

from __future__ import annotations

import ast

_ASYNC_CALLS = ("batch_isend_irecv", "isend", "irecv")
_COMPUTE_CALLS = ("matmul", "mm", "bmm", "baddbmm", "addmm", "einsum", "linear", "conv1d", "conv2d", "conv3d",
                  "scaled_dot_product_attention", "softmax", "log_softmax", "layer_norm", "rms_norm")


def _name(call: ast.Call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _issues(call: ast.Call) -> bool:
    return _name(call) in _ASYNC_CALLS or any(
        k.arg == "async_op" and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)


def _waits(call: ast.Call) -> bool:
    return _name(call) == "wait" and not call.args and isinstance(call.func, ast.Attribute)


def _computes(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) or \
        isinstance(node, ast.Call) and _name(node) in _COMPUTE_CALLS


def _closure(functions: dict[str, list[ast.AST]], direct) -> set[str]:
    """Names of the file's functions (methods included) that do `direct`, or call one that does."""
    out = {name for name, defs in functions.items() if any(direct(n) for d in defs for n in ast.walk(d))}
    for _ in range(4):
        more = {name for name, defs in functions.items() if name not in out and any(
            isinstance(n, ast.Call) and _name(n) in out for d in defs for n in ast.walk(d))}
        if not more:
            break
        out |= more
    return out


def async_library_overlap(tree: ast.Module, timed_functions: set[str]) -> tuple[int, int, int] | None:
    """(issue line, compute line, wait line) of the first function on the timed path that issues
    asynchronous library transfers, computes, then waits for them; None where none does."""
    functions: dict[str, list[ast.AST]] = {}
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.setdefault(n.name, []).append(n)
    issuers = _closure(functions, lambda n: isinstance(n, ast.Call) and _issues(n))
    if not issuers and not any(isinstance(n, ast.Call) and _issues(n) for n in ast.walk(tree)):
        return None
    waiters = _closure(functions, lambda n: isinstance(n, ast.Call) and _waits(n))
    computers = _closure(functions, _computes)
    reached = set(timed_functions) & set(functions)
    for _ in range(6):  # the file's functions solution() reaches (its ring helper, its methods)
        more = {_name(n) for f in reached for d in functions[f] for n in ast.walk(d)
                if isinstance(n, ast.Call) and _name(n) in functions} - reached
        if not more:
            break
        reached |= more
    for name in sorted(reached):
        for fn in functions.get(name, []):
            issue = sorted(n.lineno for n in ast.walk(fn) if isinstance(n, ast.Call) and (_issues(n) or _name(n) in issuers))
            if not issue:
                continue
            compute = sorted(n.lineno for n in ast.walk(fn) if _computes(n) or isinstance(n, ast.Call) and _name(n) in computers)
            wait = sorted(n.lineno for n in ast.walk(fn) if isinstance(n, ast.Call) and (_waits(n) or _name(n) in waiters))
            loops = [n for n in ast.walk(fn) if isinstance(n, (ast.For, ast.While, ast.AsyncFor))]
            for a in issue:
                b = next((b for b in compute if b > a), None)
                c = next((c for c in wait if b is not None and c > b), None)
                if b is not None and c is not None:
                    return a, b, c
                # issued inside a loop and waited only after it: the next iteration's compute
                # runs while this iteration's transfer is in flight
                for loop in loops:
                    end = loop.end_lineno or loop.lineno
                    if loop.lineno <= a <= end:
                        b = next((b for b in compute if loop.lineno <= b <= end and b != a), None)
                        later = [c for c in wait if c > a]
                        if b is not None and later and later[0] > end:
                            return a, b, later[0]
    return None
