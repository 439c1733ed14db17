from collections import Counter

from analyzer.rules.base import Rule


class RankDivergentBarrier(Rule):
    """Barrier or collective reached by only some ranks.

    ## What it does
    Finds barriers (`hdl.barrier`, `dist.barrier`, signal waits) and collectives called inside a
    branch on the rank (`if rank == 0:`) with no matching call on the other branch.

    ## Why is this bad?
    A barrier completes only when every rank arrives. If rank 0 calls it once more than the
    others, rank 0 waits forever (a `hang`), or, with counting barriers such as the
    symmetric-memory signal pad, it pairs with the *next* call's barrier of the other ranks and
    lets them run ahead on data that is not ready.

    ## Example
    ```python
    if rank == 0:
        _ext = compile(...)
        dist.barrier()
    ```

    ## Use instead
    ```python
    if rank == 0:
        _ext = compile(...)
    dist.barrier()          # every rank, every time
    ```
    """

    id = "PKB007"
    name = "rank-divergent-barrier"
    severity = "error"
    message = "barrier or collective is reached by only some ranks"
    fix = "call the barrier on every rank: move it out of the rank-conditional branch"

    SYNC = ("handle.barrier", "handle.wait_signal", "handle.put_signal")

    def check(self, ctx):
        cands = [
            c for c in ctx.py.calls
            if c.rank_conditional and c.path in ("timed", "setup")
            and (c.qualname in self.SYNC or c.category in ("host_sync", "collective"))
        ]
        per_fn = Counter((c.function, c.qualname) for c in cands)
        for c in cands:
            if per_fn[(c.function, c.qualname)] > 1:
                continue  # both branches call it: balanced
            yield self.finding(ctx, c.line, f"{c.qualname} under a rank condition")
