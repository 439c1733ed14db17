import ast
import re

from pkb.facts import PEER_KINDS
from analyzer import cuda_waits
from analyzer.brackets import closing
from analyzer.cuda_text import match_paren
from analyzer.rules.base import Rule, call_positions, reached_functions as _reached

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
    or alternate between two buffers and two signal channels. A closing barrier may be split
    over two launches (publish a ready flag or an ack to the peers, then wait for theirs); a
    launch that only signals or waits is no peer access of the buffer. A buffer the next call
    rewrites only after a barrier of a buffer set up on the same process group (a metadata
    buffer's barrier before the data buffer is restaged) is ordered by that barrier; a barrier
    of another group (the CP pair's before the TP buffer's rewrite) is not. With buffers on
    several groups, each peer access is checked on its own: a CP gather whose only later barrier
    is the TP pair's is not closed, however many barriers follow it.

    The finding points at the last peer access; where the next call writes a buffer before any
    barrier, that write is the other end of the race and is named as the finding's related line
    (SARIF `relatedLocations`).

    Not reported either where each buffer read after the call's last barrier is rewritten by the
    next call only behind a barrier, whatever the names it goes by (the buffer a helper's closure
    addresses as `crop_hdl.buffer_ptrs[owner]`, the `res["grad"].narrow(...)` view a GEMM writes
    and the `res["grad_ptrs"]` a reduction reads are each one buffer; two calls of one cached
    set-up helper are two); where a helper hands out two buffers in turn (`cache["idx"] = (idx +
    1) % 2`); and where a persistent kernel waits for the peers' flags in every round of its tile
    loop before reading their tile (round i's reads are closed by round i+1's wait, the last
    round's by the next call's first).

    A push is also reported when no barrier comes before it: the call's first store into peers'
    buffers precedes every barrier, and after the call's last barrier the receivers still read
    their own copy (solution() returns a view of the symmetric buffer, or copies out of it). A
    closing barrier then orders nothing for the next call, whose push lands in a slow peer's
    buffer while that peer is still reading the previous result; an entry barrier (or two buffers
    used in turn) is the fix.
    """

    id = "PKB004"
    name = "peer-buffer-reuse-without-barrier"
    severity = "error"
    message = "symmetric buffer is reused on the next call with no barrier after the peer accesses"
    fix = "add hdl.barrier() (or a device-side barrier) after the last kernel that touches peer memory, or double-buffer"

    def check(self, ctx):
        found = list(self._check_last(ctx))
        yield from found
        flagged = {f.line for f in found}
        for call in _unclosed_on_their_group(ctx, self._is_barrier):
            if call.line not in flagged:
                flagged.add(call.line)
                yield self.finding(ctx, call.line, f"no barrier of its group follows {call.qualname}, which reads "
                                                   "peers' buffers; a barrier of another group does not wait for them")
        push = self._unguarded_push(ctx)
        if push is not None and push.line not in flagged:
            yield self.finding(ctx, push.line, f"{push.qualname} stores into peers' buffers with no barrier before it, "
                                               "while this call still reads its own copy after its last barrier")

    def _is_barrier(self, ctx, c) -> bool:
        tells = any(a.pointer_kind in ("signal_ptr_array", "peer_ptr_array") for a in c.args) or self._ext_accesses_peers(ctx, c)
        return (c.qualname in ("handle.barrier", "handle.wait_signal") or c.category in ("host_sync", "collective")
                or (c.category == "ext_kernel" and self._ext_waits(ctx, c) and tells))

    def _check_last(self, ctx):
        calls = [c for c in ctx.py.calls if c.path == "timed"]
        peer_calls = [
            c for c in calls
            if c.category in ("ext_kernel", "triton_launch", "cupy_launch", "tensor_copy", "cudart_copy")
            and any(a.pointer_kind in _PEER_ARGS and a.pointer_kind != "symm_local" for a in c.args)
            and not _only_flags(ctx, c)
        ]
        if not peer_calls:
            return
        position = call_positions(ctx)
        last = max(peer_calls, key=lambda c: position(c.function, c.line))
        last_pos = position(last.function, last.line)
        def tells_peers(c) -> bool:
            # handed every peer's signal pad or buffer, or seen writing peer memory
            return (any(a.pointer_kind in ("signal_ptr_array", "peer_ptr_array") for a in c.args)
                    or self._ext_accesses_peers(ctx, c))

        def is_barrier(c) -> bool:
            # An extension kernel closes the exchange only if it both tells the peers and waits:
            # a receiver spinning on its own flag tells nobody that it is done.
            return (c.qualname in ("handle.barrier", "handle.wait_signal") or c.category in ("host_sync", "collective")
                    or (c.category == "ext_kernel" and self._ext_waits(ctx, c) and tells_peers(c)))

        closing = [c for c in calls if is_barrier(c) and position(c.function, c.line) > last_pos]
        if closing:
            return
        # A barrier split over two launches (publish a ready flag to the peers, then wait for
        # theirs or for an ack) closes the exchange as well.
        later = [c for c in calls if c.category == "ext_kernel" and position(c.function, c.line) > last_pos]
        told = [position(c.function, c.line) for c in later if tells_peers(c)]
        if told and any(position(c.function, c.line) > min(told) and self._ext_waits(ctx, c) for c in later):
            return
        # The next call's entry barrier: a barrier before anything of the call writes a buffer
        # orders that write after every peer's accesses of the previous call.
        writers = [c for c in calls if c.category in ("tensor_copy", "ext_kernel", "triton_launch", "cupy_launch")
                   and not (c.category == "ext_kernel" and self._ext_waits(ctx, c) and not self._ext_accesses_peers(ctx, c))]
        first_writer = min(writers, key=lambda c: position(c.function, c.line), default=None)
        first_write = None if first_writer is None else position(first_writer.function, first_writer.line)
        if first_write is not None and any(is_barrier(c) and position(c.function, c.line) < first_write for c in calls):
            return
        if _entry_barrier_per_buffer(ctx, calls, peer_calls, writers, position, is_barrier):
            return
        if _rewritten_behind_barrier(ctx, calls, peer_calls, position, is_barrier):
            return
        if _double_buffered(ctx, last):
            return
        # A kernel that ends with its own wait (a spin after its last peer access) closes itself.
        inside = None  # a kernel that waits before its peer reads but not after: (line, kernel) of the last read
        for cuda in ctx.facts.cuda:
            entry = cuda.bindings.get(last.target, last.target)
            kernels = _reached(cuda, entry)
            peer_lines = [a.line for a in cuda.accesses if a.function in kernels and a.pointer_kind in PEER_KINDS]
            src = ctx.py.cuda_sources[cuda.source_index]
            waits = cuda_waits.wait_lines(cuda, src, kernels)
            # in the kernel's own order: a device helper defined above the kernel runs where it is called
            order = _KernelOrder(cuda, src, kernels)
            if peer_lines and any(order(w) > max(map(order, peer_lines)) for w in waits):
                return
            if peer_lines and waits:
                last_wait = max(order(w)[0] for w in waits)
                inside = (order.kernel_line(max(peer_lines, key=order), after=last_wait), entry)
            # the data accesses: a release/acquire or system-scope atomic on a peer is a flag
            data_lines = [a.line for a in cuda.accesses if a.function in kernels and a.pointer_kind in PEER_KINDS
                          and a.order not in ("acquire", "release", "acq_rel")
                          and not (a.kind == "atomic" and a.scope == "system")]
            if data_lines and _waits_each_round(cuda, src, kernels, data_lines, waits):
                return
        for t in ctx.py.triton_kernels:
            if t.name == last.target and t.spin_loops and t.peer_loads and max(t.spin_loops) > max(t.peer_loads):
                return
        # the other end of the race: where the next call writes before any barrier
        if first_writer is not None and first_writer.line == last.line:
            first_writer = None  # the launch rewrites its own buffers: the message says it already
        rewrite = ("" if first_writer is None else
                   f"; the next call writes first at line {first_writer.line} ({first_writer.qualname}), before any barrier")
        if inside is not None:
            # the launch's own barrier orders the reads before it; name the kernel line left unclosed
            yield self.finding(ctx, last.line, f"nothing after {last.qualname} waits for the peers: its kernel's own "
                                               f"barrier comes before its last peer read (line {inside[0]}){rewrite}",
                               related_lines=[first_writer.line] if first_writer else [])
            return
        yield self.finding(ctx, last.line, f"nothing after {last.qualname} waits for the peers{rewrite}",
                           related_lines=[first_writer.line] if first_writer else [])


    def _unguarded_push(self, ctx):
        """A push with no barrier before it: the call's first store into peers' buffers comes
        before any barrier, and the call reads its own copy of a symmetric buffer after its last
        barrier (copies it out, or returns a view of it). A fast rank's next call then overwrites a
        slow peer's buffer while that peer is still reading the previous result. A push kernel
        that waits itself, or two buffers used in turn, are left alone (the order inside a kernel
        is not followed)."""
        calls = [c for c in ctx.py.calls if c.path == "timed"]
        position = call_positions(ctx)
        pushes = [c for c in calls if c.category in ("ext_kernel", "triton_launch")
                  and _stores_into_peers(ctx, c) and not _only_flags(ctx, c)]
        if not pushes:
            return None
        first = min(pushes, key=lambda c: position(c.function, c.line))
        first_pos = position(first.function, first.line)
        barriers = [position(c.function, c.line) for c in calls if self._is_barrier(ctx, c)]
        if not barriers or min(barriers) <= first_pos or max(barriers) < first_pos:
            return None  # an entry barrier, or no closing one (the main check's case)
        if first.category == "ext_kernel" and self._ext_waits(ctx, first):
            return None
        bundles = _unpacked_bundles(ctx)
        pushed = {bundles[(first.function, a.text)][0] for a in first.args
                  if a.pointer_kind in _PEER_ARGS and (first.function, a.text) in bundles}
        read_after = any(r.reason == "symmetric" for r in ctx.py.reused_returns) or any(
            position(c.function, c.line) > max(barriers) and any(
                a.pointer_kind == "symm_local" and bundles.get((c.function, a.text), (None,))[0] in pushed for a in c.args)
            for c in calls)
        if not read_after or _double_buffered(ctx, first):
            return None
        return first

    @staticmethod
    def _ext_waits(ctx, call) -> bool:
        """The extension function `call` reaches waits for peers (a device barrier kernel)."""
        for cuda in ctx.facts.cuda:
            entry = cuda.bindings.get(call.target, call.target)
            if entry not in {f.name for f in cuda.functions}:
                continue
            src = ctx.py.cuda_sources[cuda.source_index]
            if _reached(cuda, entry) & cuda_waits.waiting_functions(cuda, src):
                return True
        return False

    @staticmethod
    def _ext_accesses_peers(ctx, call) -> bool:
        for cuda in ctx.facts.cuda:
            kernels = _reached(cuda, cuda.bindings.get(call.target, call.target))
            if any(a.function in kernels and a.pointer_kind in PEER_KINDS for a in cuda.accesses):
                return True
        return False


def _unclosed_on_their_group(ctx, is_barrier):
    """Peer accesses of a buffer set up on one process group (`cp_buf, cp_hdl, cp_ptrs =
    _get(cp_group, ...)`) that no later barrier of that group closes (the only later barrier is
    another group's, `tp_hdl.barrier()`), whose buffer the next call rewrites before any barrier
    of its group. Buffers the file does not bundle with a group are left to the main check."""
    calls = [c for c in ctx.py.calls if c.path == "timed"]
    bundles = _unpacked_bundles(ctx)
    groups = {g for _, g in bundles.values() if g}
    if len(groups) < 2:
        return  # one group: any barrier waits for every reader
    position = call_positions(ctx)
    writers = [c for c in calls if c.category in ("tensor_copy", "ext_kernel", "triton_launch", "cupy_launch")]

    def group_of_barrier(c) -> str | None:
        # None: a barrier whose group is not known (a host sync, a collective, a device barrier)
        if c.qualname != "handle.barrier":
            return None
        handle = bundles.get((c.function, c.snippet.split(".barrier", 1)[0].strip()))
        return handle[1] if handle is not None and handle[1] else None

    for c in calls:
        if c.category not in ("ext_kernel", "triton_launch", "cupy_launch", "tensor_copy", "cudart_copy") \
                or _only_flags(ctx, c):
            continue
        peer = [a for a in c.args if a.pointer_kind in _PEER_ARGS and a.pointer_kind != "symm_local"]
        read = {bundles.get((c.function, a.text)) for a in peer}
        if not peer or None in read or len({g for _, g in read}) != 1 or not next(iter(read))[1]:
            continue
        group = next(iter(read))[1]
        here = position(c.function, c.line)
        later = [b for b in calls if is_barrier(ctx, b) and position(b.function, b.line) > here]
        if not later or any(group_of_barrier(b) in (None, group) for b in later):
            continue  # closed by its group's barrier (or by one we cannot place), or left to the main check

        def reused(names: frozenset) -> bool:
            # rewritten by the next call before any barrier of the group
            rewrites = [position(w.function, w.line) for w in writers
                        if any(a.pointer_kind == "symm_local" and a.text in names for a in w.args)]
            return bool(rewrites) and not any(
                group_of_barrier(b) in (None, group) and position(b.function, b.line) < min(rewrites)
                for b in calls if is_barrier(ctx, b))

        # every buffer the access reads, in a fixed order (sets of names hash differently per run)
        if any(reused(names) for names in sorted((n for n, _ in read), key=sorted)) and not _double_buffered(ctx, c):
            yield c


def _entry_barrier_per_buffer(ctx, calls, peer_calls, writers, position, is_barrier) -> bool:
    """The next call's entry barrier, buffer by buffer: every buffer read by a peer access after
    the call's last barrier is first rewritten behind a barrier of the handle of a buffer set up on
    the same process group. (`meta` is written before any barrier, but `data_buf`, which the
    unclosed gather reads, only after `meta_hdl.barrier()`: on the same group, so every peer has
    finished the previous gather.) A barrier of another group (the CP pair's before the TP
    buffer's rewrite) orders nothing for these readers."""
    bundles = _unpacked_bundles(ctx)
    barrier_pos = [position(c.function, c.line) for c in calls if is_barrier(c)]
    if not barrier_pos:
        return False
    unclosed = [c for c in peer_calls if position(c.function, c.line) > max(barrier_pos)]
    read = set()
    for c in unclosed:
        for a in c.args:
            if a.pointer_kind in _PEER_ARGS and a.pointer_kind != "symm_local":
                bundle = bundles.get((c.function, a.text))
                if bundle is None or not bundle[1] and any(g for _, g in bundles.values()):
                    return False  # not a buffer of a known process group: keep the finding
                read.add(bundle)
    if not read:
        return False
    for names, group in read:
        rewrites = [position(c.function, c.line) for c in writers
                    if any(a.pointer_kind == "symm_local" and a.text in names and bundles.get((c.function, a.text), (None,))[0] == names
                           for a in c.args)]
        if not rewrites:
            return False  # rewritten through a name we do not follow
        ordered = False
        for c in calls:
            if c.qualname != "handle.barrier" or position(c.function, c.line) >= min(rewrites):
                continue
            receiver = c.snippet.split(".barrier", 1)[0].strip()
            handle = bundles.get((c.function, receiver))
            if handle is not None and handle[1] == group:
                ordered = True
        if not ordered:
            return False
    return True


_WRITERS = ("tensor_copy", "ext_kernel", "triton_launch", "cupy_launch", "cudart_copy")


def _rewritten_behind_barrier(ctx, calls, peer_calls, position, is_barrier) -> bool:
    """The next call's entry barrier, followed by what each buffer is: every buffer that a peer
    access after the call's last barrier reads is first written, in the call, only after some
    barrier. Every peer reaches that barrier of the next call after its own reads of this one,
    so the rewrite cannot overtake them. A buffer is known by its roots (analyzer.buffer_roots):
    `crop_hdl.buffer_ptrs[owner]` handed out by a helper, `res["grad_ptrs"]` and the
    `res["grad"].narrow(...)` view a GEMM writes are each one buffer. A buffer read whose
    rewrite is not found, or not found behind a barrier, keeps the finding."""
    roots = ctx.buffer_roots()
    barriers = [position(c.function, c.line) for c in calls if is_barrier(c)]
    if roots is None or not barriers:
        return False
    unclosed = [c for c in peer_calls if position(c.function, c.line) > max(barriers)]
    read: list[frozenset] = []
    for c in unclosed:
        node = roots.call_at(c.line, c.col, c.qualname)
        if node is None:
            return False
        for a in c.args:
            if a.pointer_kind in _PEER_ARGS and a.pointer_kind != "symm_local":
                expr = _arg_node(node, a)
                got = roots.roots(expr) if expr is not None else frozenset()
                if not got:
                    return False
                read.append(got)
    if not read:
        return False
    written: list[tuple[tuple, frozenset]] = []
    for c in calls:
        if c.category not in _WRITERS:
            continue
        node = roots.call_at(c.line, c.col, c.qualname)
        if node is None:
            return False  # a writer we cannot place might write anything
        targets = []
        if c.category == "tensor_copy" and isinstance(node.func, ast.Attribute):
            targets.append(node.func.value)  # dst.copy_(src) writes dst
        elif c.category == "cudart_copy" and node.args:
            targets.append(node.args[0])
        else:
            pushes = _stores_into_peers(ctx, c)
            for a in c.args:
                if a.pointer_kind in _PEER_ARGS and a.pointer_kind != "symm_local" and not pushes:
                    continue  # reads the peers' copies; writes none of them
                expr = _arg_node(node, a)
                if expr is not None:
                    targets.append(expr)
        for t in targets:
            written.append((position(c.function, c.line), roots.roots(t)))
    several = len(roots.groups()) > 1

    def site_groups(got: frozenset) -> set[str]:
        return {roots.site_group(int(r.split(">", 1)[0])) for r in got if re.match(r"\d+>", r)} - {""}

    def orders(barrier, buffer: frozenset) -> bool:
        # with buffers on several groups, only a barrier of the buffer's own group waits for its readers
        if not several or barrier.qualname != "handle.barrier" and barrier.category != "ext_kernel":
            return True
        node = roots.call_at(barrier.line, barrier.col, barrier.qualname)
        if node is None:
            return False
        if barrier.category == "ext_kernel":  # a device barrier: the group of the pads it is handed
            handle = frozenset().union(*(roots.roots(a) for a in [*node.args, *(k.value for k in node.keywords)]))
        elif isinstance(node.func, ast.Attribute):
            handle = roots.roots(node.func.value)
        else:
            return False
        return bool(handle & buffer) or bool(site_groups(handle)) and site_groups(handle) == site_groups(buffer)

    for buffer in read:
        rewrites = [pos for pos, got in written if got & buffer]
        if not rewrites or not any(position(b.function, b.line) < min(rewrites) and orders(b, buffer)
                                   for b in calls if is_barrier(b)):
            return False
    return True


def _arg_node(call: ast.Call, arg) -> ast.AST | None:
    if arg.position >= 0:
        return call.args[arg.position] if arg.position < len(call.args) else None
    return next((k.value for k in call.keywords if k.arg == arg.keyword), None)


_LOOP_HEAD = re.compile(r"\b(for|while)\s*\(")


class _KernelOrder:
    """File lines of the code a launch reaches, in the order the kernel runs them: a line of a
    `__device__` helper stands at the line of the kernel that calls it (its last call, so that a
    wait or a peer access in a helper counts where it last happens; through helpers of helpers),
    then at its own line. Lines of the kernel itself keep theirs."""

    def __init__(self, cuda, src, kernels):
        text = src.text.split("\n")
        by_name = {f.name: f for f in cuda.functions if f.name in kernels}
        self.calls_at: dict[str, list[int]] = {}  # every line of the kernel that calls the helper (directly or not)
        for g in (f for f in by_name.values() if f.kind == "global"):
            frontier = [(g, None)]
            while frontier:
                fn, at = frontier.pop(0)
                for callee in fn.calls:
                    if callee not in by_name or callee in self.calls_at or by_name[callee].kind == "global":
                        continue
                    lines = at
                    if lines is None:  # calls in the kernel's own body: their lines there
                        call = re.compile(rf"\b{re.escape(callee)}\s*(<[^;()]*>)?\s*\(")
                        lines = [src.file_line(i + 1) for i in range(fn.text_line, min(fn.text_end_line, len(text)))
                                 if call.search(text[i].split("//")[0])] or [fn.line]
                    self.calls_at[callee] = lines
                    frontier.append((by_name[callee], lines))
        self.spans = sorted(((f.line, f.end_line, f.name) for f in by_name.values() if f.name in self.calls_at),
                            key=lambda t: t[1] - t[0])

    def _helper(self, line: int) -> str | None:
        return next((name for lo, hi, name in self.spans if lo <= line <= hi), None)

    def __call__(self, line: int) -> tuple[int, int]:
        inner = self._helper(line)
        return (max(self.calls_at[inner]), line) if inner is not None else (line, line)

    def kernel_line(self, line: int, after: int = 0) -> int:
        """Where the kernel runs `line`: its own line, or the first call of the helper holding it
        after `after` (the kernel's last wait), else the helper's last call."""
        inner = self._helper(line)
        if inner is None:
            return line
        return min((c for c in self.calls_at[inner] if c > after), default=max(self.calls_at[inner]))


def _waits_each_round(cuda, src, kernels, peer_lines, waits) -> bool:
    """A kernel whose every peer read sits in a loop (over tiles) that also waits for the peers'
    flags before it: round i's reads are closed by round i+1's wait, which the peers pass only
    after they are done, and the next call rewrites the last round's data only after its own
    first wait (a per-tile flag barrier in a persistent kernel)."""
    text = src.text
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    file_of = {src.file_line(i + 1): i for i in range(len(starts) - 1)}
    spans = []  # (first, last) text line of each loop body of the kernels
    for f in cuda.functions:
        if f.name not in kernels or f.kind == "host":
            continue
        body = text[starts[f.text_line - 1]:starts[min(f.text_end_line, len(starts) - 1)]]
        for m in _LOOP_HEAD.finditer(body):
            head_end = match_paren(body, m.end() - 1)
            brace = body.find("{", head_end) if head_end >= 0 else -1
            if brace < 0 or body[head_end + 1:brace].strip():
                continue  # a loop without braces, or a do-while's tail
            end = closing(body, brace, "{", "}")
            if end < 0:
                continue
            first = body.count("\n", 0, brace) + f.text_line - 1
            spans.append((first, body.count("\n", 0, end) + f.text_line - 1))
    if not spans:
        return False

    def loops_of(file_line: int) -> set[tuple[int, int]]:
        i = file_of.get(file_line)
        return {s for s in spans if i is not None and s[0] <= i <= s[1]}

    for p in peer_lines:
        rounds = loops_of(p)
        if not any(w < p and loops_of(w) & rounds for w in waits):
            return False
    return True


def _unpacked_bundles(ctx) -> dict[tuple[str, str], tuple[frozenset, str]]:
    """(function, name) -> (the names unpacked with it, the process group its set-up helper was
    given): `data_buf, data_hdl, data_ptrs = _get_data_resources(group, ...)` makes the buffer,
    its handle and its peer addresses one bundle on `group`. A name unpacked twice is left out."""
    tree = ctx.rec.syntax_tree()
    out: dict[tuple[str, str], tuple[frozenset, str]] = {}
    if tree is None:
        return out
    seen: set[tuple[str, str]] = set()
    helpers = {f.name: f for f in tree.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for n in ast.walk(fn):
            if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Tuple)
                    and isinstance(n.value, ast.Call) and all(isinstance(e, ast.Name) for e in n.targets[0].elts)):
                continue
            elts = [e.id for e in n.targets[0].elts]
            group = next((ast.unparse(a) for a in [*n.value.args, *(k.value for k in n.value.keywords)]
                          if re.search(r"(^|_)(group|pg)$", ast.unparse(a))), "")
            helper = helpers.get(n.value.func.id) if isinstance(n.value.func, ast.Name) else None
            roots = _returned_roots(helper) if helper is not None else None
            if roots is None or len(roots) != len(elts):
                roots = ["*"] * len(elts)  # one bundle: the helper's tuple is not followed
            for name, root in zip(elts, roots):
                key = (fn.name, name)
                if key in seen:
                    out.pop(key, None)
                    continue
                seen.add(key)
                out[key] = (frozenset(e for e, r in zip(elts, roots) if r == root), group)
    return out


def _returned_roots(helper: ast.AST) -> list[str] | None:
    """For each element of the tuple a set-up helper returns, the symmetric buffer it stands for:
    `hdl = rendezvous(buf, g)` and `ptrs = torch.tensor(hdl.buffer_ptrs)` both stand for `buf`, so
    `(buf, hdl, grad, grad_hdl, ptrs, grad_ptrs)` is two buffers. None when the return is no tuple
    of names."""
    assigned: dict[str, ast.AST] = {}
    tuples: dict[str, ast.Tuple] = {}
    returned = None
    for n in ast.walk(helper):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            assigned[n.targets[0].id] = n.value
            if isinstance(n.value, ast.Tuple):
                tuples[n.targets[0].id] = n.value
        elif isinstance(n, ast.Return) and n.value is not None:
            value = tuples.get(n.value.id) if isinstance(n.value, ast.Name) else n.value
            if isinstance(value, ast.Tuple):
                returned = value
    if returned is None or not all(isinstance(e, ast.Name) for e in returned.elts):
        return None

    def root(name: str, depth: int = 0) -> str:
        value = assigned.get(name)
        if value is None or depth > 4:
            return name
        for sub in ast.walk(value):
            if isinstance(sub, ast.Call) and isinstance(sub.func, (ast.Name, ast.Attribute)) \
                    and (sub.func.id if isinstance(sub.func, ast.Name) else sub.func.attr) == "rendezvous" \
                    and sub.args and isinstance(sub.args[0], ast.Name):
                return root(sub.args[0].id, depth + 1)
            if isinstance(sub, ast.Attribute) and sub.attr in ("buffer_ptrs", "buffer_ptrs_dev", "signal_pad_ptrs",
                                                               "signal_pad_ptrs_dev") and isinstance(sub.value, ast.Name):
                return root(sub.value.id, depth + 1)
        return name

    return [root(e.id) for e in returned.elts]


def _stores_into_peers(ctx, call) -> bool:
    """The kernels `call` launches store into peers' memory or through a multicast address."""
    if call.category == "triton_launch":
        return any(t.name == call.target and t.peer_stores for t in ctx.py.triton_kernels)
    for cuda in ctx.facts.cuda:
        kernels = _reached(cuda, cuda.bindings.get(call.target, call.target))
        if any(a.function in kernels and a.kind in ("store", "atomic") and a.pointer_kind in (*PEER_KINDS, "multicast_ptr")
               for a in cuda.accesses):
            return True
        if any(asm.function in kernels and any(m.startswith(("multimem.st", "multimem.red")) for m in asm.mnemonics)
               for asm in cuda.asm):
            return True
    return False


def _only_flags(ctx, call) -> bool:
    """An extension call whose kernels touch peers only through flags (a ready signal, an ack):
    it moves no buffer data, so it is not the exchange's last peer access."""
    if call.category != "ext_kernel":
        return False
    reports = {k.name: k for k in ctx.rec.kernels if k.language == "cuda"}
    seen = False
    for cuda in ctx.facts.cuda:
        entry = cuda.bindings.get(call.target, call.target)
        if entry not in {f.name for f in cuda.functions}:
            continue
        for name in _reached(cuda, entry):
            k = reports.get(name)
            if k is None or k.source_index != cuda.source_index:
                continue
            seen = True
            mech = {lab.value for lab in k.labels.get("mechanism", [])}
            if mech - {"none"} or "device_flags" not in {lab.value for lab in k.labels.get("sync", [])}:
                return False
    return seen


# A parity kept across calls (an attribute, a cache entry, a global): `bufs[st["i"] % 2]`,
# `self.parity ^= 1`, `_state["p"] = 1 - _state["p"]` (or `1 - idx` of a local read from it). A
# loop's own `step % 2` is not one.
_STATE = r"(?:\w+\.\w+|\w+\[[^\]]+\])"
_TOGGLE = re.compile(rf"\[\s*{_STATE}\s*%\s*2\s*\]|{_STATE}\s*=\s*\(?\s*(?:{_STATE}|\w+)\s*\+\s*1\s*\)?\s*%\s*2\b"
                     rf"|{_STATE}\s*\^=\s*1\b|{_STATE}\s*=\s*1\s*-\s*(?:{_STATE}|\w+)\b")


def _double_buffered(ctx, last) -> bool:
    """Two buffers used alternately from call to call (a parity kept across calls flips), and the
    launch's peer buffer is the one the parity picks: in solution() or the function of the access
    (`ptrs = state["ptrs"][idx]` with `state["next"] = 1 - idx`), or handed out by a helper that
    flips it (a cached pool whose `cache["idx"] = (idx + 1) % 2` gives the other buffer next call).
    A parity that picks only the outputs (`full = state["outs"][idx]`) leaves a single symmetric
    buffer single."""
    tree = ctx.rec.syntax_tree()
    if tree is None:
        return False
    functions = {fn.name: fn for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef)}
    callers = [functions[n] for n in ("solution", last.function) if n in functions]
    called = {n.func.id for fn in callers for n in ast.walk(fn)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in functions}
    flipping = [fn for fn in [*callers, *(functions[n] for n in sorted(called))] if _TOGGLE.search(ast.unparse(fn))]
    if not flipping:
        return False
    helpers = {fn.name for fn in flipping if fn not in callers}
    # what the launch's peer arguments are, and what made them in the calling functions
    peer = [a.text for a in last.args if a.pointer_kind in _PEER_ARGS]
    made = list(peer)
    for fn in callers:
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and any(ast.unparse(t) in peer or isinstance(t, ast.Tuple) and
                                                 any(ast.unparse(e) in peer for e in t.elts) for t in n.targets):
                made.append(ast.unparse(n.value))
    if any(re.match(rf"\s*{re.escape(h)}\s*\(", m) for m in made for h in helpers):
        return True  # handed out by the helper that flips the parity
    # the parity's names: those in the flip, and the names read from its slot
    flips = [m.group(0) for fn in callers for m in _TOGGLE.finditer(ast.unparse(fn))]
    names = {w for f in flips for w in re.findall(r"[A-Za-z_]\w*", f)}
    for fn in callers:
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                    and any(slot in ast.unparse(n.value) for f in flips for slot in re.findall(_STATE, f)):
                names.add(n.targets[0].id)
    picked = re.compile(r"\[[^\]]*(?:%\s*2|\b(?:" + "|".join(map(re.escape, sorted(names))) + r")\b)[^\]]*\]") if names else None
    return any((picked and picked.search(m)) or re.search(r"\[[^\]]*%\s*2[^\]]*\]", m) for m in made)
