from analyzer.rules.base import Rule


class RendezvousInTimedPath(Rule):
    """Symmetric-memory rendezvous on every call.

    ## What it does
    Finds `symm_mem.rendezvous(...)` (the handle exchange) running on every call of
    `solution()`.

    ## Why is this bad?
    Rendezvous exchanges IPC handles between all ranks through the store and maps peer memory:
    it is a host-side collective that costs far more than the kernel it prepares. In the timed
    loop it dominates the measurement and, if ranks disagree on when it runs, it deadlocks.

    ## Example
    ```python
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)   # inside solution()
    ```

    ## Use instead
    Rendezvous once when the buffer is allocated and keep the handle with the buffer in a
    module-level cache.
    """

    id = "PKB010"
    name = "rendezvous-in-timed-path"
    severity = "warning"
    message = "symmetric-memory rendezvous on the timed path"
    fix = "rendezvous once, next to the cached allocation, and reuse the handle"

    def check(self, ctx):
        for c in ctx.calls("symm_mem"):
            if c.qualname.endswith("rendezvous"):
                yield self.finding(ctx, c.line, c.qualname)
