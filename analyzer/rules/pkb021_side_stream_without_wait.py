import ast
import re

from analyzer.rules.base import Rule, call_positions

# GPU work a call issues on the stream it runs on (a launch, a copy, a symmetric barrier).
_WORK = ("ext_kernel", "triton_launch", "cupy_launch", "tensor_copy", "tensor_fill", "cudart_copy", "collective", "compute")
_HANDLE_WORK = ("handle.barrier", "handle.put_signal", "handle.wait_signal")
_CURRENT = re.compile(r"current_stream\(|default_stream\(")
_STREAM_OF_BLOCK = re.compile(r"\bstream\(\s*(.+?)\s*\)$")


def _base(stream: str) -> str:
    """`streams` of `streams[i]`, `self.comm` of `self.comm`: the name a stream goes by."""
    return stream.split("[", 1)[0].strip()


class SideStreamWithoutWait(Rule):
    """Work on a side stream that does not wait for the current stream's earlier work.

    ## What it does
    Follows the timed path in order. Where the call has issued work on the current stream (a
    copy into a symmetric buffer, `hdl.barrier`, a kernel) and then runs work on a side stream
    (inside `with torch.cuda.stream(s):`, in a helper called there, or a launch handed
    `s.cuda_stream`), it checks that `s` waited for that work first:
    `s.wait_stream(torch.cuda.current_stream())`, `s.wait_event(ev)` after `ev.record()`, an
    event's `wait`, or a host synchronisation of the device or the current stream in between.
    The finding points at the side stream's first unordered work; its related line is the
    current-stream work it is not ordered after.

    The timed loop calls the solution again and again, so the side stream's first work is also
    checked against what the previous call left on the current stream (its closing barrier,
    a GEMM still reading a buffer). Within one call, a symmetric barrier followed by a write of
    this rank's own buffer is not reported: such a barrier says "my data is ready" and guards
    reads of the peers, not later writes.

    A wait does not count where it cannot order the work:
    `torch.cuda.current_stream()` inside the block is the side stream itself, so
    `s.wait_stream(torch.cuda.current_stream())` there waits for `s` (a name bound to the
    current stream before the block is fine); a wait under `if step > 0:` in the loop is skipped
    by the first iteration; work in a branch that returns precedes nothing after it.

    The rule does not follow data between the two streams: current-stream work that the side
    stream neither reads nor overwrites (a GEMM on unrelated operands) needs no wait, and is
    reported all the same; mark such a line `# noqa: PKB021`.

    ## Why is this bad?
    PyTorch's side streams are created non-blocking: they do not wait for the default stream.
    A pull from the peers' buffers on the side stream can run before this rank's
    `hdl.barrier` (and so before the peers stored the data), and a read of a tensor the current
    stream is still producing reads it half written. The results are stale or mixed data that
    show only under load, which is how the timed loop runs.

    ## Example
    ```python
    buf.copy_(x)
    hdl.barrier(channel=0)
    with torch.cuda.stream(copy_stream):
        ext.pull(hdl.buffer_ptrs_dev, out)   # may run before the barrier
    ```

    ## Use instead
    ```python
    buf.copy_(x)
    hdl.barrier(channel=0)
    copy_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(copy_stream):
        ext.pull(hdl.buffer_ptrs_dev, out)
    ```
    """

    id = "PKB021"
    name = "side-stream-without-wait"
    severity = "error"
    message = "side-stream work is not ordered after the current stream's earlier work"
    fix = "make the side stream wait first: s.wait_stream(torch.cuda.current_stream()), or record an event and s.wait_event(ev)"

    def check(self, ctx):
        tree = ctx.rec.syntax_tree()
        timed = [c for c in ctx.py.calls if c.path == "timed"]
        if tree is None or not any(c.stream_context or c.category in _WORK for c in timed):
            return
        position = call_positions(ctx)
        functions = {c.function for c in timed}
        current_aliases = _current_aliases(tree)
        side = {c.stream_context: s for c in timed if c.stream_context
                for s in [_block_stream(c.stream_context)] if s and not _is_current(s, current_aliases)}
        handed = {id(c): s for c in timed if c.category in _WORK for s in [_handed_stream(c, current_aliases)] if s}
        known = {_base(s) for s in [*side.values(), *handed.values()]}
        if not known:
            return
        # each function's side-stream blocks, read once for the streams and the waits
        blocks = {id(fn): _blocks(fn, current_aliases) for fn in ast.walk(tree)
                  if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))}
        stream_of = _stream_of(tree, side, blocks)
        # (position, kind, call or node, stream text) in the order the call runs them
        events = []
        for c in timed:
            stream = handed.get(id(c)) or stream_of(c)
            if c.category in _WORK or c.qualname in _HANDLE_WORK:
                events.append((position(c.function, c.line) + (c.col,), "work", c, stream))
            elif c.category in ("cuda_sync", "host_sync") and not stream and _syncs_current(c.snippet, c.qualname, current_aliases):
                events.append((position(c.function, c.line) + (c.col,), "sync", c, ""))
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in functions:
                for node, stream in _waits(fn, blocks[id(fn)], current_aliases):
                    events.append((position(fn.name, node.lineno) + (node.col_offset,), "wait", node, stream))
        events.sort(key=lambda e: e[0])

        exits = _exiting_branches(tree)
        # current-stream work since the last host sync: (call, streams that waited for it since
        # (base names; "*": every one), issued by the previous call)
        pending: list[tuple] = []
        self_waits: dict[str, int] = {}
        reported: set[str] = set()
        # The timed loop calls solution() again and again: the second pass is the next call,
        # with what the first left on the current stream still pending.
        for next_call in (False, True):
            pending = [(work, waited, True) for work, waited, _ in pending]
            for _, kind, item, stream in events:
                if next_call and not any(previous for _, _, previous in pending):
                    break
                if kind == "sync":
                    pending = []
                elif kind == "wait":
                    if stream.startswith("self:"):
                        self_waits.setdefault(stream[5:], item.lineno)
                    else:
                        # a stream no block names (`for s in streams: s.wait_stream(...)`) may be any
                        name = _base(stream) if _base(stream) in known else "*"
                        for _, waited, _ in pending:
                            waited.add(name)
                elif not stream:
                    pending.append((item, set(), False))
                elif _base(stream) not in reported:
                    unordered = [(work, previous) for work, waited, previous in pending
                                 if previous == next_call and "*" not in waited and _base(stream) not in waited
                                 and not _left_before(work.line, item.line, exits)
                                 # within a call a barrier marks data ready, and a write of this
                                 # rank's own buffer reads nothing it guards; the previous call's
                                 # last one marks the peers done reading, which a write must follow
                                 and not (not previous and work.qualname in _HANDLE_WORK and _writes_local_only(item))]
                    if unordered:
                        reported.add(_base(stream))
                        yield self._finding(ctx, stream, item, *unordered[-1], self_waits)


    def _finding(self, ctx, stream: str, item, work, previous: bool, self_waits: dict[str, int]):
        where = "the previous call left on the current stream" if previous else "on the current stream"
        detail = f"{stream} runs {item.qualname} with no wait for {work.qualname} (line {work.line}) {where}"
        if _base(stream) in self_waits:
            detail += (f"; the wait_stream at line {self_waits[_base(stream)]} is issued inside the block, "
                       "on the side stream itself, so it waits for itself")
        return self.finding(ctx, item.line, detail, related_lines=[work.line])


def _handed_stream(call, aliases: set[str]) -> str:
    """The side stream a launch is handed as an argument (`ext.copy(dst, src, s.cuda_stream)`)."""
    for arg in call.args:
        m = re.fullmatch(r"(.+)\.cuda_stream", arg.text.strip())
        if m and not _is_current(m.group(1), aliases):
            return m.group(1)
    return ""


def _exiting_branches(tree: ast.AST) -> list[tuple[int, int]]:
    """(first, last line) of each `if` body or `else` that ends in return or raise: work there
    precedes nothing after the `if`."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            for body in (node.body, node.orelse):
                if body and isinstance(body[-1], (ast.Return, ast.Raise)):
                    out.append((body[0].lineno, body[-1].end_lineno or body[-1].lineno))
    return out


def _left_before(line: int, later: int, exits: list[tuple[int, int]]) -> bool:
    """`line` sits in a branch that returns, and `later` outside it: they never run in one call."""
    return any(first <= line <= last and not first <= later <= last for first, last in exits)


def _writes_local_only(call) -> bool:
    """The call's pointers are this rank's own symmetric buffer and plain tensors: it reads no
    peer, so a symmetric barrier before it guards nothing it reads."""
    kinds = {a.pointer_kind for a in call.args}
    return "symm_local" in kinds and kinds <= {"symm_local", "local", "unknown"}


def _stream_of(tree: ast.AST, side: dict[str, str], blocks_of: dict[int, list]):
    """The side stream a call runs on: its own block's, or, in a helper, the block its call site
    sits in (inside the block the current stream is the side stream, for the helper too)."""
    blocks: dict[str, list] = {}  # function -> (first body line, last line, stream) of its side blocks
    sites: dict[str, list] = {}  # function name -> (calling function, line) of each call to it
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            blocks[fn.name] = blocks_of[id(fn)]
            for n in ast.walk(fn):
                if isinstance(n, ast.Call):
                    name = n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
                    sites.setdefault(name, []).append((fn.name, n.lineno))

    def at(function: str, line: int, depth: int) -> str:
        inside = next((s for first, last, s in blocks.get(function, []) if first <= line <= last), "")
        if inside or depth > 8:
            return inside
        # every call site of the helper is in one side stream's block: the helper runs there
        found = {at(caller, site, depth + 1) for caller, site in sites.get(function, []) if caller != function}
        return found.pop() if len(found) == 1 else ""

    return lambda c: side.get(c.stream_context) or at(c.function, c.line, 0)


def _blocks(fn: ast.AST, aliases: set[str]) -> list[tuple[int, int, str]]:
    """(first body line, last line, stream) of each `with torch.cuda.stream(s):` in `fn`, s not
    the current stream."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                text = ast.unparse(item.context_expr)
                s = _block_stream(text) if "stream(" in text else ""
                if s and not _is_current(s, aliases):
                    out.append((node.body[0].lineno, node.end_lineno or node.lineno, s))
    return out


def _block_stream(context: str) -> str:
    m = _STREAM_OF_BLOCK.search(context.strip())
    return m.group(1) if m else ""


def _current_aliases(tree: ast.AST) -> set[str]:
    """Names bound to the current or default stream (`comp = torch.cuda.current_stream()`)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _CURRENT.search(ast.unparse(node.value)) and isinstance(node.value, ast.Call):
            for t in node.targets:
                out.add(ast.unparse(t))
    return out


def _is_current(stream: str, aliases: set[str]) -> bool:
    return bool(_CURRENT.search(stream)) or stream in aliases


def _syncs_current(snippet: str, qualname: str, aliases: set[str]) -> bool:
    """A host wait that covers the current stream's work: the device, the current stream, or a
    value read back from a tensor (`.item()`); not another stream's `synchronize`."""
    if not qualname.endswith("synchronize") or qualname == "torch.cuda.synchronize":
        return True
    m = re.search(r"([\w.\[\]()]+)\.synchronize\(", snippet)
    return m is None or _is_current(m.group(1), aliases)


def _waits(fn: ast.AST, blocks: list[tuple[int, int, str]], aliases: set[str]):
    """(call, stream) for each wait in `fn`: the stream that waits, `*` where it cannot be told
    (an event's `wait()` outside a block, a loop variable), `self:<s>` for a side stream told to
    wait for the current stream inside its own block. Inside a block `torch.cuda.current_stream()`
    is the block's stream; a name bound to the current stream before the block still names the
    stream that was current then."""
    later = _later_iterations_only(fn)
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("wait_stream", "wait_event", "wait")):
            continue
        if any(first <= node.lineno <= last for first, last in later):
            continue  # `if step >= 2: s.wait_event(...)`: the first iteration's work goes unordered
        inside = next((s for first, last, s in blocks if first <= node.lineno <= last), "")

        def evaluated(text: str) -> str:
            return inside if inside and _CURRENT.search(text) else text

        on = evaluated(ast.unparse(node.func.value))
        if node.func.attr == "wait":
            # ev.wait(s) makes s wait; ev.wait() the current stream (the block's, inside one)
            arg = evaluated(ast.unparse(node.args[0])) if node.args else ""
            yield node, (arg if arg and not _is_current(arg, aliases) else inside or "*")
            continue
        if _is_current(on, aliases):
            continue  # the current stream waits (for a side stream): nothing for the side streams
        target = evaluated(ast.unparse(node.args[0])) if node.args else ""
        if node.func.attr == "wait_stream" and inside and _base(on) == _base(inside) == _base(target):
            yield node, f"self:{_base(inside)}"
            continue
        yield node, on


def _later_iterations_only(fn: ast.AST) -> list[tuple[int, int]]:
    """(first, last line) of each `if` body in a `for` loop whose test the first iteration fails:
    `if i > 0:`, `if step >= k:` (k not 0), `if i:`, `if i != 0:` on the loop's counter."""
    out = []
    for loop in ast.walk(fn):
        if not isinstance(loop, (ast.For, ast.AsyncFor)):
            continue
        counters = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
        for node in ast.walk(loop):
            if isinstance(node, ast.If) and node.body and _fails_at_start(node.test, counters):
                out.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno))
    return out


def _fails_at_start(test: ast.AST, counters: set[str]) -> bool:
    def counter(e):
        return isinstance(e, ast.Name) and e.id in counters

    def zero(e):
        return isinstance(e, ast.Constant) and e.value == 0

    if counter(test):
        return True
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_fails_at_start(v, counters) for v in test.values)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if counter(right):  # `0 < i` reads as `i > 0`
        left, right = right, left
        op = {ast.Lt: ast.Gt(), ast.LtE: ast.GtE(), ast.Gt: ast.Lt(), ast.GtE: ast.LtE()}.get(type(op), op)
    if not counter(left):
        return False
    return (isinstance(op, ast.Gt) and not isinstance(right, ast.UnaryOp)
            or isinstance(op, ast.GtE) and not zero(right) and not isinstance(right, ast.UnaryOp)
            or isinstance(op, ast.NotEq) and zero(right))
