from analyzer.rules.base import Rule


class UnboundedSpin(Rule):
    """Spin loop with no exit or timeout.

    ## What it does
    Finds loops that poll memory (a flag, a counter, a peer value) until it changes, with no
    iteration bound, no clock-based timeout and no `break`/`__trap()` path.

    ## Why is this bad?
    When a peer never signals (it crashed, it took another branch, the flag was already consumed,
    a barrier count differs between ranks) the kernel spins forever. The process cannot be
    interrupted, the GPU stays busy, and the harness can only report a `hang` with no hint of
    which wait never finished.

    ## Example
    ```cuda
    while (ld_acquire(&flags[src]) < epoch) {}
    ```

    ## Use instead
    ```cuda
    unsigned long long spins = 0;
    while (ld_acquire(&flags[src]) < epoch) {
        if (++spins > (1ull << 32)) { printf("rank %d: timeout waiting for %d\n", rank, src); __trap(); }
    }
    ```
    """

    id = "PKB003"
    name = "unbounded-spin"
    severity = "warning"
    message = "spin loop has no exit or timeout"
    fix = "bound the loop (iteration count or clock64 timeout) and __trap() with a message when it expires"

    def check(self, ctx):
        for cuda in ctx.facts.cuda:
            for loop in cuda.spin_loops:
                if not loop.has_exit:
                    yield self.finding(ctx, loop.line, f"in {loop.function}", kernel=loop.function, pass_name="clang")
        for t in ctx.py.triton_kernels:
            for line in t.spin_loops:
                yield self.finding(ctx, line, f"in Triton kernel {t.name}", kernel=t.name)
