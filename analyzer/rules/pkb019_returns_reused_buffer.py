from analyzer.rules.base import Rule


class ReturnsReusedBuffer(Rule):
    """solution() returns a buffer that the next call overwrites.

    ## What it does
    Finds a `return` on the per-call path of `solution()` whose value is a buffer the candidate
    keeps between calls: a symmetric-memory buffer (`hdl.get_buffer(...)`, or the tensor given to
    `rendezvous`, held in a cache), an output allocated once and kept in a cache, a global or an
    attribute, or a view of one (`buf[:n]`, `buf.view(shape)`, `buf.reshape_as(x)`, a name
    rebound to a view of itself, `_unflatten_dense_tensors(buf, like)` spread into the returned
    tuple, the `.data_` of a ParallelKittens tensor from `get_or_create_parallel_tensor`). A buffer
    returned on several routes is one finding, at its first return.

    ## Why is this bad?
    The caller gets an alias, not a result. The next call writes the same memory, so a caller that
    keeps outputs (a training step holding activations, a harness comparing several calls) reads
    the later call's data. Peers write a symmetric buffer on their own schedule: ranks still
    running the next call's kernel can overwrite it while this rank reads it, with no error.

    ## Example
    ```python
    def solution(x):
        buf, hdl = _resources(x)  # cached symmetric buffer
        ext.allreduce(hdl.buffer_ptrs_dev, buf, x.numel())
        return buf.view_as(x)
    ```

    ## Use instead
    ```python
    def solution(x):
        buf, hdl = _resources(x)
        out = torch.empty_like(x)
        ext.allreduce_into(hdl.buffer_ptrs_dev, out, x.numel())  # or: return buf.clone()
        return out
    ```
    """

    id = "PKB019"
    name = "returns-reused-buffer"
    severity = "warning"
    message = "solution() returns a buffer that the next call overwrites"
    fix = "return a fresh tensor (write the result into torch.empty_like(x), or clone the buffer)"

    def check(self, ctx):
        # one finding per buffer: the same cached `out` returned by the small-input branch and by
        # the chunked one is one defect, reported at its first return
        first: dict[tuple[str, int], object] = {}
        for r in sorted(ctx.py.reused_returns, key=lambda r: r.line):
            first.setdefault((r.name, r.origin_line), r)
        for r in first.values():
            what = "a symmetric buffer" if r.reason == "symmetric" else "a buffer kept between calls"
            origin = f" (from line {r.origin_line})" if r.origin_line else ""
            yield self.finding(ctx, r.line, f"`{r.name}` is {what}{origin}")
