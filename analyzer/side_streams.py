"""Overlap through side streams, for the labelling (a mixin of analyzer.classify.Classifier): which
`with torch.cuda.stream(s):` blocks (or launches handed a side stream's handle) the timed path
runs, and whether other work is issued while each runs, before the streams are joined.

Reads the Python pass's calls and the file's lines through the classifier (`self.facts`,
`self.rec`, `self.lines`, `self.timed`), and which extension calls launch computing kernels
(`self._kernels_reached`, `self.computes`).
"""

from __future__ import annotations

import ast
import re

from pkb.facts import CallSite

# Calls on host numbers that issue no GPU work (`peer = (rank + i) % len(streams)`).
_NOT_WORK = {"int", "len", "range", "min", "max", "float", "abs", "divmod", "isinstance", "tuple", "list",
             "str", "bool", "size", "numel", "element_size", "data_ptr", "dim", "stride", "get_rank",
             "get_world_size", "current_stream", "cuda_stream"}
# `ready.record(...)`: the event a call records (its name in group 1).
_RECORDS = re.compile(r"([\w\[\]+\-. ]+)\.record\(")


class SideStreams:
    """The side-stream half of the overlap labels (see the module docstring)."""

    def _side_stream_blocks(self) -> list[tuple[str, int, int, int]]:
        """(function, with line, first body line, last body line) of each `with torch.cuda.stream(s):`
        on the timed path whose stream is not the current one."""
        tree = self.rec.syntax_tree()
        timed = {c.line for c in self.timed("stream") if c.qualname.endswith("stream")}
        out = []
        for node in ast.walk(tree) if tree else []:
            if not isinstance(node, (ast.With, ast.AsyncWith)) or node.lineno not in timed:
                continue
            for item in node.items:
                text = ast.unparse(item.context_expr)
                if re.search(r"\bstream\(", text) and not re.search(r"current_stream|default_stream", text):
                    fn = next((c.function for c in self.timed("stream") if c.line == node.lineno), "")
                    out.append((fn, node.lineno, node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno))
        # An extension launch handed a side stream's handle (`ext.copy(dst, src, n, s.cuda_stream)`)
        # runs on that stream as surely as one inside `with torch.cuda.stream(s):`.
        in_blocks = [(first, last) for _, _, first, last in out]
        for c in self.timed("ext_kernel"):
            if any(first <= c.line <= last for first, last in in_blocks):
                continue  # judged with its `with` block
            for a in c.args:
                m = re.fullmatch(r"([\w.\[\]]+)\.cuda_stream", a.text.strip())
                if m and not re.search(r"current_stream|default_stream", m.group(1)) and not re.search(
                        rf"(?<![\w.]){re.escape(m.group(1))}\s*=\s*torch\.cuda\.(?:current|default)_stream", self.rec.source):
                    out.append((c.function, c.line, c.line, c.end_line))
                    break
        return out

    def _side_stream_overlaps(self, block: tuple[str, int, int, int], matmul_lines: list[int]) -> bool:
        """Work on a side stream overlaps only if other work is issued between the side-stream
        block and the point where the streams are joined (`wait_stream`, a synchronize, a wait on
        the event recorded in that block). A side stream joined before the compute it should hide
        is serial."""
        calls = self.facts.python.calls
        fn, with_line, first, last = block
        mine = [c for c in calls if first <= c.line <= last]
        recorded = {m.group(1) for c in mine for m in [_RECORDS.search(c.snippet)] if m}
        # An event recorded after the block (`ev.record(s)` in a loop over the side streams) and
        # waited on is a join too.
        recorded |= {m.group(1) for c in calls if c.path == "timed" and c.function == fn and c.line > last
                     for m in [re.search(r"([\w\[\]+\-. ]+)\.record\(\s*\w", c.snippet)] if m}
        joins = [c.line for c in calls if c.path == "timed" and c.function == fn and c.line > last
                 and ("wait_stream" in c.qualname or c.category == "cuda_sync" and "synchronize" in c.qualname
                      or "wait_event" in c.qualname and any(a.text in recorded for a in c.args))]
        if not joins:
            return True  # joined elsewhere (the caller, the next iteration): work can run between
        end = min(joins)
        between = list(range(last + 1, end)) + self._before_block_unawaited(fn, with_line, mine)
        # Inside a loop joined only after it: the next iteration's work (before the block in the
        # loop body) also runs while this iteration's side-stream work is in flight.
        loop = self._enclosing_loop(first)
        loop_end = (loop.end_lineno or loop.lineno) if loop is not None else 0
        if loop is not None and loop_end < end:
            computes = any(first <= m <= last for m in matmul_lines) or any(first <= c.line <= last for c in self.timed("compute")) \
                or any(self.computes.get(k, False) for k in self._kernels_reached(
                    {c.target for c in self.timed("ext_kernel") if first <= c.line <= last}))
            if computes and self._stream_per_iteration(with_line, loop):
                # each iteration's block on its own stream, all joined after the loop: the next
                # chunk's transfer runs beside this chunk's compute
                return True
            between += list(range(loop.body[0].lineno, first))
        elif loop is not None and not self._side_stream_waits_current(block, loop):
            # Joined inside the loop: the work issued after the join (this chunk's compute) runs
            # while the next iteration's side-stream work (the next chunk's transfer) is in flight,
            # unless each iteration makes the side stream wait for the current one first.
            between += list(range(end + 1, loop_end + 1))
        on_same_stream = self._lines_on_the_same_stream(block)
        for i in between:
            if i in on_same_stream:
                continue  # queued behind the block's own work: it runs after it, not beside it
            code = self.lines[i - 1].split("#")[0].strip()
            # Work is a call that is not stream plumbing nor a builtin on host numbers.
            called = [m.group(1) for m in re.finditer(r"([\w.]+)\s*\(", code)]
            work = [c for c in called if c.split(".")[-1] not in _NOT_WORK]
            if work and not re.search(r"\b(wait_stream|wait_event|record|synchronize|Event|stream)\(", code) \
                    and not code.startswith(("def ", "return", "if ", "for ", "with ", "elif ")):
                return True
        # A matmul written as `@` or a Triton launch (`kernel[grid](...)`, no name before its
        # parenthesis) between the block and the join counts as other work.
        launches = {c.line for c in calls if c.category in ("triton_launch", "cupy_launch")}
        return any(m in between for m in matmul_lines) or any(i in launches for i in between)

    def _stream_named(self, with_line: int) -> str | None:
        """The stream a side-stream block's head names (`side` of `with torch.cuda.stream(side):`)."""
        m = re.search(r"\bstream\(\s*([\w.\[\]]+)\s*\)", self.lines[with_line - 1])
        return m.group(1) if m else None

    def _lines_on_the_same_stream(self, block: tuple[str, int, int, int]) -> set[int]:
        """Body lines of the function's other `with torch.cuda.stream(s):` blocks on the stream of
        `block`: work issued there waits for the block's work in stream order."""
        fn, with_line, _, _ = block
        stream = self._stream_named(with_line)
        if stream is None:
            return set()
        return {i for other_fn, other_with, first, last in self._side_stream_blocks()
                if other_fn == fn and other_with != with_line and self._stream_named(other_with) == stream
                for i in range(other_with, last + 1)}

    def _stream_per_iteration(self, with_line: int, loop: ast.AST) -> bool:
        """`with torch.cuda.stream(streams[i]):` in `for i in ...`: another stream each iteration, so
        one iteration's side-stream work runs beside the next one's."""
        target = getattr(loop, "target", None)
        if not isinstance(target, ast.Name):
            return False
        head = self.lines[with_line - 1]
        indexed = rf"[\w.]+\[\s*{re.escape(target.id)}\s*\]"
        if re.search(rf"\bstream\(\s*{indexed}\s*\)", head):
            return True
        # `s = streams[peer]` in the loop body, then `with torch.cuda.stream(s):`
        m = re.search(r"\bstream\(\s*(\w+)\s*\)", head)
        body = self.lines[loop.body[0].lineno - 1 : with_line - 1]
        return m is not None and any(re.match(rf"\s*{m.group(1)}\s*=\s*{indexed}\s*(#.*)?$", ln) for ln in body)

    def _before_block_unawaited(self, fn: str, with_line: int, mine: list[CallSite]) -> list[int]:
        """Lines the current stream issues after recording the event the side stream waits on
        (`s.wait_event(ready)` in the block, `ready.record()` before it) and before the block: the
        side stream does not wait for that work, so it runs beside the block's. A side stream that
        waits for the whole current stream (`wait_stream`) waits for it too."""
        if any("wait_stream" in c.qualname for c in mine):
            return []
        awaited = {a.text for c in mine if "wait_event" in c.qualname for a in c.args}
        records = [c.line for c in self.facts.python.calls if c.path == "timed" and c.function == fn
                   and c.line < with_line for m in [_RECORDS.search(c.snippet)]
                   if m and m.group(1).strip() in awaited]
        return list(range(max(records) + 1, with_line)) if records else []

    def _side_stream_waits_current(self, block: tuple[str, int, int, int], loop: ast.AST) -> bool:
        """Whether the side stream of `block` waits for the whole current stream
        (`s.wait_stream(torch.cuda.current_stream())`) in the loop body before the block."""
        _, with_line, first, _ = block
        head = self.lines[with_line - 1]
        m = re.search(r"\bstream\(\s*([\w.\[\]]+)\s*\)", head) or re.search(r"([\w.\[\]]+)\.cuda_stream", head)
        if m is None:
            return True  # the side stream is not named: keep the serial reading
        waits = re.compile(rf"(?<![\w.]){re.escape(m.group(1))}\.wait_stream\(")
        return any(waits.search(self.lines[i - 1].split("#")[0]) for i in range(loop.body[0].lineno, first))

    def _enclosing_loop(self, line: int) -> ast.AST | None:
        """The innermost `for`/`while` whose body holds `line`."""
        tree = self.rec.syntax_tree()
        loops = [n for n in ast.walk(tree) if isinstance(n, (ast.For, ast.While)) and n.body
                 and n.body[0].lineno <= line <= (n.end_lineno or n.lineno)] if tree else []
        return max(loops, key=lambda n: n.lineno, default=None)
