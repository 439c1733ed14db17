import ast
import re

from analyzer.facts import PEER_KINDS
from analyzer.rules.base import Rule

_PEER_ARGS = (*PEER_KINDS, "peer_ptr_array", "symm_local")


class PeerBufferReuseWithoutBarrier(Rule):
    """Symmetric buffer rewritten before peers finished with it (no closing barrier).

    ## What it does
    Finds calls that stage data in a symmetric buffer and let peers read it (or write into the
    peers' buffers), synchronised only *before* the peer accesses: nothing after the last peer
    access makes the next call wait until every peer is done.

    ## Why is this bad?
    The next call of `solution()` copies new input into the same buffer while a slower peer is
    still reading the old contents, so that peer mixes two calls' data. Timed loops call the
    solution back to back, which is where this shows: correct in the first call, wrong or
    `nondeterministic` under timing.

    ## Example
    ```python
    buf.copy_(tensor)
    hdl.barrier(channel=0)
    ext.allreduce(hdl.buffer_ptrs_dev, out)   # reads peers' buf
    return out                                # next call overwrites buf at once
    ```

    ## Use instead
    ```python
    buf.copy_(tensor)
    hdl.barrier(channel=0)
    ext.allreduce(hdl.buffer_ptrs_dev, out)
    hdl.barrier(channel=0)                    # nobody reuses buf until all peers are done
    ```
    or alternate between two buffers and two signal channels.
    """

    id = "PKB004"
    name = "peer-buffer-reuse-without-barrier"
    severity = "error"
    message = "symmetric buffer is reused on the next call with no barrier after the peer accesses"
    fix = "add hdl.barrier() (or a device-side barrier) after the last kernel that touches peer memory, or double-buffer"

    def check(self, ctx):
        calls = [c for c in ctx.py.calls if c.path == "timed"]
        peer_calls = [
            c for c in calls
            if c.category in ("ext_kernel", "triton_launch", "cupy_launch", "tensor_copy")
            and any(a.pointer_kind in _PEER_ARGS and a.pointer_kind != "symm_local" for a in c.args)
        ]
        if not peer_calls:
            return
        position = _call_positions(ctx)
        last = max(peer_calls, key=lambda c: position(c.function, c.line))
        last_pos = position(last.function, last.line)
        closing = [
            c for c in calls
            if (c.qualname in ("handle.barrier", "handle.wait_signal") or c.category in ("host_sync", "collective"))
            and position(c.function, c.line) > last_pos
        ]
        if closing:
            return
        # A kernel that ends with its own wait (a spin after its last peer access) closes itself.
        for cuda in ctx.facts.cuda:
            entry = cuda.bindings.get(last.target, last.target)
            kernels = {entry} | {l.kernel for l in cuda.launches if l.caller == entry}
            peer_lines = [a.line for a in cuda.accesses if a.function in kernels and a.pointer_kind in PEER_KINDS]
            if peer_lines and any(w > max(peer_lines) for w in _wait_lines(ctx, cuda, kernels)):
                return
        for t in ctx.py.triton_kernels:
            if t.name == last.target and t.spin_loops and t.peer_loads and max(t.spin_loops) > max(t.peer_loads):
                return
        yield self.finding(ctx, last.line, f"nothing after {last.qualname} waits for the peers")


def _call_positions(ctx):
    """Order of execution, approximately: a call inside a helper sits where solution() calls it."""
    tree = ctx.rec.syntax_tree()
    if tree is None:
        return lambda fn, line: line
    sites: dict[str, list[int]] = {}
    owner: dict[int, str] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for n in ast.walk(fn):
                if isinstance(n, ast.Call):
                    name = n.func.id if isinstance(n.func, ast.Name) else (n.func.attr if isinstance(n.func, ast.Attribute) else "")
                    if name:
                        sites.setdefault(name, []).append(n.lineno)
                        owner.setdefault(n.lineno, fn.name)

    def position(fn: str, line: int, depth: int = 0) -> tuple:
        if fn in ("solution", "") or fn not in sites or depth > 8:
            return (line,)
        site = max(sites[fn])
        return position(owner.get(site, "solution"), site, depth + 1) + (line,)

    return position


def _wait_lines(ctx, cuda, kernels: set[str]) -> list[int]:
    """File lines inside the kernels where they wait on a flag: a spin, or a call of a helper that spins."""
    spinning = {s.function for s in cuda.spin_loops}
    lines = [s.line for s in cuda.spin_loops if s.function in kernels]
    src = ctx.py.cuda_sources[cuda.source_index]
    text = src.text.splitlines()
    for f in cuda.functions:
        if f.name not in kernels:
            continue
        for i in range(f.text_line - 1, min(f.text_end_line, len(text))):
            if any(re.search(rf"\b{re.escape(h)}\s*[<(]", text[i]) for h in spinning if h != f.name):
                lines.append(src.file_line(i + 1))
    return lines
