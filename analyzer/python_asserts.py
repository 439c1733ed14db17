"""Assumptions a candidate writes down and loops that pipeline: asserts and raising checks on the
timed path (world size, dtype, shape), hard-coded rank counts (`world_size = 8`, `1 - rank`,
`rank % 8`, `range(8)` over peers), side streams, and loops whose iterations overlap a transfer
with compute.

Reads the parsed file, the routes python_reach gave the calls, and the recorded calls.
"""

from __future__ import annotations

import ast
import re

from pkb.facts import AssertFact, ConstantFact

from analyzer.python_api import RANK_NAMES, SYMM_HANDLE_ATTRS, WORLD_NAMES, dotted


class AssertsAndLoops:
    """Asserts, hard-coded constants and pipelined loops (a mixin of PythonPass)."""

    def _asserts_and_constants(self) -> None:
        timed_fns = {f for f, p in self.path_of.items() if p in ("timed", "setup")}
        for node in ast.walk(self.tree):
            fn = self.enclosing.get(id(node))
            fname = getattr(fn, "name", "")
            if isinstance(node, ast.Assert) or (
                isinstance(node, ast.If) and any(isinstance(s, ast.Raise) for s in node.body)
            ):
                if fname not in timed_fns:
                    continue
                test = node.test
                text = ast.unparse(test)
                kind, literal = self._assert_kind(test, text)
                if kind:
                    self.facts.asserts.append(AssertFact(line=node.lineno, kind=kind, snippet=self.snippet(node.lineno), literal=literal))
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id in WORLD_NAMES and node.value.value > 1:
                        self.facts.constants.append(ConstantFact(node.lineno, t.id, str(node.value.value), self.snippet(node.lineno)))
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and isinstance(node.left, ast.Constant) and node.left.value == 1:
                scope = self._scope_for(fn)
                if self._is_rank_expr(node.right, scope):
                    self.facts.constants.append(ConstantFact(node.lineno, "peer", "1 - rank", self.snippet(node.lineno)))
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.right, ast.Constant) and node.right.value in (2, 4, 8, 16):
                scope = self._scope_for(fn)
                if any(self._is_rank_expr(n, scope) for n in ast.walk(node.left)):
                    self.facts.constants.append(ConstantFact(node.lineno, "modulus", str(node.right.value), self.snippet(node.lineno)))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" and len(node.args) == 1:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and arg.value in (2, 4, 8, 16) and fname in timed_fns:
                    if self._range_over_peers(node):
                        self.facts.constants.append(ConstantFact(node.lineno, "range", str(arg.value), self.snippet(node.lineno)))
        for fn in ast.walk(self.tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in timed_fns:
                ladder = _dtype_ladder(fn)
                if ladder:
                    line, dtypes = ladder
                    self.facts.asserts.append(AssertFact(line=line, kind="dtype_set", snippet=self.snippet(line),
                                                         literal=",".join(dtypes)))
        # Streams and loops that pipeline transfers with compute.
        for c in self.facts.calls:
            if c.category == "stream" and c.qualname.endswith("Stream"):
                self.facts.streams.append(c.line)
        recording_loops: dict[str, int] = {}  # event list -> a side-stream transfer loop recording `events[i]`
        waiting_loops: list[tuple[int, set[str]]] = []  # (line, event lists) of compute loops waiting on `events[i]`
        for loop, fname in getattr(self, "loop_nodes", []):
            # The loop's own calls and those of the file's functions it calls (a prefetch helper
            # issues the copies, a block function the compute): one iteration does all of it.
            callees = self._callees_of(loop)
            bodies = [loop, *callees.values()]
            cats = set()
            streamed = False
            for c in self.facts.calls:
                if c.path != "timed":
                    continue
                if loop.lineno <= c.line <= (loop.end_lineno or loop.lineno) or c.function in callees:
                    # Reading a handle's pointer table (`hdl.buffer_ptrs[peer]`) or taking a view of
                    # a peer's buffer moves nothing: the copy through it is the transfer.
                    if c.category == "symm_handle" and c.qualname.split(".")[-1] in (*SYMM_HANDLE_ATTRS, "get_buffer", "get_signal_pad"):
                        continue
                    cats.add(c.category)
                    streamed = streamed or bool(c.stream_context) or c.category in ("event", "stream")
            transfer = cats & {"collective", "p2p", "tensor_copy", "cudart_copy", "ext_kernel", "triton_launch", "cupy_launch", "symm_handle"}
            compute = cats & {"compute", "ext_kernel", "triton_launch"}
            has_matmul = any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult) for b in bodies for n in ast.walk(b))
            per_chunk = self._per_chunk_events(loop, loop.target.id) if isinstance(loop, ast.For) and isinstance(
                loop.target, ast.Name) else {"record": set(), "wait": set()}
            # One stream runs an iteration's transfer and compute one after the other: chunks
            # pipeline only when a side stream or events let the next transfer run under this compute.
            streamed = streamed or self._async_collective_left_in_flight(loop)
            if not (streamed or per_chunk["wait"]):
                continue
            if transfer and (compute - transfer or has_matmul or len(transfer) > 1):
                self.facts.chunk_loops.append(loop.lineno)
            elif per_chunk["record"] & per_chunk["wait"] and len(self._stream_handles(loop)) > 1:
                # One iteration launches on two streams (`ext.step(..., a.cuda_stream)`, then
                # `ext.gather(..., b.cuda_stream)`) linked by this chunk's event: the next chunk's
                # first launch runs while this chunk's second is in flight.
                self.facts.chunk_loops.append(loop.lineno)
            else:
                if transfer and streamed and per_chunk["record"]:
                    recording_loops.update(dict.fromkeys(per_chunk["record"], loop.lineno))
                if (compute or has_matmul) and per_chunk["wait"]:
                    waiting_loops.append((loop.lineno, per_chunk["wait"]))
        # Transfers issued chunk by chunk on a side stream, each recording its own event, and a
        # later compute loop whose iteration waits only on its chunk's event: chunk c computes
        # while later chunks still move, a pipeline split over two loops.
        for line, events in waiting_loops:
            if any(e in recording_loops and recording_loops[e] != line for e in events):
                self.facts.chunk_loops.append(line)

    @staticmethod
    def _async_collective_left_in_flight(loop: ast.AST) -> bool:
        """`req = dist.reduce_scatter(..., async_op=True)` in the loop with no `.wait()` after it
        in the same iteration: the collective runs on NCCL's stream while the next iteration
        computes (a side stream of its own)."""
        issued = [n.lineno for n in ast.walk(loop) if isinstance(n, ast.Call) and any(
            k.arg == "async_op" and isinstance(k.value, ast.Constant) and k.value.value is True for k in n.keywords)]
        waits = [n.lineno for n in ast.walk(loop) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                 and n.func.attr == "wait" and not n.args]
        return bool(issued) and not any(w > min(issued) for w in waits)

    @staticmethod
    def _stream_handles(loop: ast.AST) -> set[str]:
        """The streams whose handles (`s.cuda_stream`) the loop's calls are handed."""
        return {dotted(a.value) for n in ast.walk(loop) if isinstance(n, ast.Call)
                for a in n.args if isinstance(a, ast.Attribute) and a.attr == "cuda_stream"}

    @staticmethod
    def _per_chunk_events(loop: ast.For, var: str) -> dict[str, set[str]]:
        """Event lists indexed by the loop variable that the loop records (`ev[c].record(s)`) or
        waits on (`ev[c].wait(s)`, `s.wait_event(ev[c])`, `ev[c].synchronize()` is a host wait, not counted)."""
        out: dict[str, set[str]] = {"record": set(), "wait": set()}

        def indexed_event(node: ast.AST) -> str:
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name) and node.slice.id == var:
                return dotted(node.value)
            return ""

        for n in ast.walk(loop):
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
                continue
            name = indexed_event(n.func.value)
            if name and n.func.attr == "record":
                out["record"].add(name)
            elif name and n.func.attr == "wait":
                out["wait"].add(name)
            elif n.func.attr == "wait_event" and n.args and indexed_event(n.args[0]):
                out["wait"].add(indexed_event(n.args[0]))
        return out

    def _range_over_peers(self, range_call: ast.Call) -> bool:
        """`for p in range(8): ... buffer_ptrs[p]`: the loop variable picks a rank (a peer's buffer,
        its signal pad, `(rank + p) % ...`), so the literal is a rank count. `range(2)` over two
        buffers of a double buffer, or over stages, is not."""
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.For, ast.comprehension)) and node.iter is range_call and isinstance(node.target, ast.Name):
                var = node.target.id
                body = node.body if isinstance(node, ast.For) else [self.parents.get(id(node)) or node]
                for stmt in body:
                    for sub in ast.walk(stmt):
                        if isinstance(sub, ast.Subscript) and any(isinstance(n, ast.Name) and n.id == var for n in ast.walk(sub.slice)):
                            base = dotted(sub.value).lower()
                            if any(w in base for w in ("buffer_ptrs", "signal_pad", "peer", "ptrs", "remote")):
                                return True
                        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in ("get_buffer", "get_signal_pad") \
                                and sub.args and any(isinstance(n, ast.Name) and n.id == var for n in ast.walk(sub.args[0])):
                            return True
                        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Add) and {
                                n.id for n in ast.walk(sub) if isinstance(n, ast.Name)} >= {var} and any(
                                isinstance(n, ast.Name) and n.id in RANK_NAMES for n in ast.walk(sub)):
                            return True
                        if isinstance(sub, ast.Compare) and any(isinstance(n, ast.Name) and n.id == var for n in [sub.left, *sub.comparators]) \
                                and any(isinstance(n, ast.Name) and n.id in RANK_NAMES for n in [sub.left, *sub.comparators]):
                            return True
        return False

    def _assert_kind(self, test: ast.AST, text: str) -> tuple[str, str]:
        # `world_size == 2` fixes the rank count; `n % world_size == 0` or `world_size == 1` does not.
        for node in ast.walk(test):
            if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.In)):
                sides = [node.left, node.comparators[0]]
                world = [x for x in sides if self._is_world_expr(x)]
                lits = [x for x in sides if isinstance(x, ast.Constant) and isinstance(x.value, int) and x.value > 1]
                if world and lits:
                    return "world_size", str(lits[0].value)
        if ".dtype" in text:
            m = re.search(r"==\s*(torch\.\w+)", text)
            if m:
                return "dtype", m.group(1)
            m = re.search(r"in\s*\((torch\.\w+)\s*,?\)", text)
            if m:
                return "dtype", m.group(1)
        # `x.shape == (4096, 128)` fixes the sizes; `beta.shape == (B, T, H)` only checks that
        # the inputs agree with each other.
        fixed_shape = re.search(r"shape\s*==\s*\(([^)]*)\)", text)
        fixed_shape = fixed_shape and re.search(r"(?<![\w.])[2-9]\d*\b|(?<![\w.])1\d+\b", fixed_shape.group(1))
        if re.search(r"(numel\(\)|shape\[-?\d\]|size\(-?\d?\))\s*%\s*\d+\s*==\s*0", text) or fixed_shape:
            m = re.search(r"%\s*(\d+)", text)
            return "shape", m.group(1) if m else ""
        return "", ""


def _dtype_ladder(fn: ast.AST) -> tuple[int, list[str]] | None:
    """(raise line, dtypes) of a function that returns for some dtypes and raises for the rest:
    `if dt == torch.bfloat16: return 0` ... `raise TypeError(...)`, or the same as an if/elif/else
    chain. Every test compares one and the same expression with torch dtypes."""
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if not body:
        return None
    last = body[-1]
    if isinstance(last, ast.Raise):
        raise_node, branches = last, body[:-1]
    elif isinstance(last, ast.If):
        branches, node = list(body[:-1]), last
        while True:  # down the elif chain to the final else
            branches.append(node)
            if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
                node = node.orelse[0]
            else:
                break
        if not (node.orelse and isinstance(node.orelse[-1], ast.Raise)):
            return None
        raise_node = node.orelse[-1]
    else:
        return None
    subject, dtypes = None, set()
    for stmt in branches:
        if not (isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], ast.Return)):
            return None
        test = stmt.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is, ast.In))):
            return None
        right = test.comparators[0]
        names = [ast.unparse(o) for o in (right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [right])]
        if not names or not all(n.startswith("torch.") for n in names) or subject not in (None, ast.unparse(test.left)):
            return None
        subject = ast.unparse(test.left)
        dtypes.update(names)
    return (raise_node.lineno, sorted(dtypes)) if dtypes else None
