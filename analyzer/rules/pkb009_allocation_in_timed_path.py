from analyzer.rules.base import Rule


class AllocationInTimedPath(Rule):
    """Symmetric-memory or device allocation on every call.

    ## What it does
    Finds `symm_mem.empty(...)` and, in CUDA host code reached by the timed call, `cudaMalloc`
    or `cudaMallocAsync`, when they run on every call of `solution()` instead of once in a cached
    set-up branch.

    ## Why is this bad?
    A symmetric allocation is a collective: every rank maps every other rank's memory, which
    costs milliseconds and needs a rendezvous. `cudaMalloc` synchronises the device. Either one
    inside the timed region measures set-up, not the kernel, and can exhaust memory over a
    timed loop of hundreds of calls.

    ## Example
    ```python
    def solution(x):
        buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
    ```

    ## Use instead
    ```python
    _buf = None
    def solution(x):
        global _buf
        if _buf is None or _buf.numel() < x.numel():
            _buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
    ```
    """

    id = "PKB009"
    name = "allocation-in-timed-path"
    severity = "warning"
    message = "symmetric-memory or device allocation on the timed path"
    fix = "allocate once (cache keyed by size and dtype) and reuse"

    def check(self, ctx):
        for c in ctx.calls("symm_mem"):
            if c.qualname.endswith(".empty") or c.qualname.endswith("empty_strided_p2p"):
                yield self.finding(ctx, c.line, c.qualname)
        timed_ext = {c.target for c in ctx.calls("ext_kernel")}
        for cuda in ctx.facts.cuda:
            entries = {cuda.bindings.get(n, n) for n in timed_ext}
            for call in cuda.api_calls:
                if call.category == "alloc" and call.function in entries and call.api.startswith("cuda"):
                    yield self.finding(ctx, call.line, call.api, kernel=call.function, pass_name="clang")
