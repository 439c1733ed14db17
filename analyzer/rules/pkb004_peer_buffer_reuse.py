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
        last = max(peer_calls, key=lambda c: c.line)
        closing = [
            c for c in calls
            if c.function == last.function and c.line > last.line
            and (c.qualname in ("handle.barrier", "handle.wait_signal") or c.category in ("host_sync", "collective"))
        ]
        if closing:
            return
        # A kernel that ends with its own wait (a spin after its last peer access) closes itself.
        kernels = {last.target}
        for cuda in ctx.facts.cuda:
            entry = cuda.bindings.get(last.target, last.target)
            names = {entry} | {l.kernel for l in cuda.launches if l.caller == entry}
            kernels |= names
            peer_lines = [a.line for a in cuda.accesses if a.function in names and a.pointer_kind in PEER_KINDS]
            spins = [s.line for s in cuda.spin_loops if s.function in names or s.function not in {f.name for f in cuda.functions if f.kind == "host"}]
            if peer_lines and spins and max(spins) > max(peer_lines):
                return
        for t in ctx.py.triton_kernels:
            if t.name == last.target and t.spin_loops and t.peer_loads and max(t.spin_loops) > max(t.peer_loads):
                return
        yield self.finding(ctx, last.line, f"nothing after {last.qualname} waits for the peers")
