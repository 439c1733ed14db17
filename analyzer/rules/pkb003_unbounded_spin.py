from analyzer.python_pass import run_context
from analyzer.rules.base import Rule


class UnboundedSpin(Rule):
    """Spin loop with no exit or timeout.

    ## What it does
    Finds loops that poll memory (a flag, a counter, a peer value) until it changes, with no
    iteration bound, no clock-based timeout and no `break`/`__trap()` path.

    Where the run is known (a PKB run tree: every rank runs the same code and signals), a spin
    that reads memory on each test (a `volatile` or atomic load, an acquire, a load helper or
    asm) sees the peer's store and ends on that run, as torch's own unbounded CAS barrier does:
    it is not reported there. A spin on a plain load or a read through the non-coherent cache
    (`__ldg`) is: the compiler may keep the value in a register (a branch to itself) and the
    rank spins forever even though its peer signalled.

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
        if (++spins > (1ull << 32)) { printf("rank %d: timeout waiting for %d\\n", rank, src); __trap(); }
    }
    ```
    """

    id = "PKB003"
    name = "unbounded-spin"
    severity = "warning"
    message = "spin loop has no exit or timeout"
    fix = "bound the loop (iteration count or clock64 timeout) and __trap() with a message when it expires"

    def check(self, ctx):
        # On a known run a poll that reaches memory ends once the peers signal; only one that may
        # never see the store (hoisted or cached) hangs it.
        run_known = run_context(ctx.rec.precision, ctx.rec.hardware).world_size is not None
        for cuda in ctx.facts.cuda:
            for loop in cuda.spin_loops:
                if not loop.has_exit and (loop.cached or not run_known):
                    yield self.finding(ctx, loop.line, f"in {loop.function}", kernel=loop.function, pass_name="clang")
        for t in ctx.py.triton_kernels:
            for line in t.spin_loops:
                yield self.finding(ctx, line, f"in Triton kernel {t.name}", kernel=t.name)
