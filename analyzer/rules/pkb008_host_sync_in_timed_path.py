from analyzer.rules.base import Rule

BURST_LINES = 5  # host syncs this close to the first of a burst drain the GPU once


class HostSyncInTimedPath(Rule):
    """Host synchronisation inside the timed call.

    ## What it does
    Finds `torch.cuda.synchronize()`, `stream.synchronize()`, `.item()`, `.tolist()`,
    `dist.barrier()` and, in the CUDA host code the timed call reaches, `cudaDeviceSynchronize`,
    `cudaStreamSynchronize`, `cudaEventSynchronize` and a synchronous `cudaMemcpy` to the host, when they run on every call of
    `solution()` rather than in a cached set-up branch.

    A burst of host syncs within `BURST_LINES` lines of its first (the split sizes of an
    all-to-all read back with `.cpu().tolist()` one after another) is one finding at that first
    line: the host waits once for the GPU to drain, and the reads right after find it idle.

    ## Why is this bad?
    The host stops issuing work until the GPU (or every rank) drains, so launch latency and the
    slowest rank's skew are added to every call and nothing overlaps across calls. It is also the
    usual sign that the device-side protocol was not trusted: the kernel may be right only
    because the host serialises it.

    ## Example
    ```python
    ext.allreduce(ptrs, out)
    torch.cuda.synchronize()
    dist.barrier()
    ```

    ## Use instead
    Order the work on the GPU: `hdl.barrier()` (a device-side barrier), device flags with
    release/acquire, or events between streams. Keep host syncs in one-time set-up only.
    """

    id = "PKB008"
    name = "host-sync-in-timed-path"
    severity = "warning"
    message = "host synchronisation on the timed path"
    fix = "replace with a device-side barrier (hdl.barrier) or stream events; keep host syncs in set-up"

    def check(self, ctx):
        burst: list = []
        for c in sorted(ctx.calls("cuda_sync", "host_sync"), key=lambda c: c.line):
            if burst and c.line - burst[0].line > BURST_LINES:
                yield self._burst_finding(ctx, burst)
                burst = []
            burst.append(c)
        if burst:
            yield self._burst_finding(ctx, burst)
        timed_ext = {c.target for c in ctx.calls("ext_kernel")}
        for cuda in ctx.facts.cuda:
            entries = {cuda.bindings.get(n, n) for n in timed_ext}
            for call in cuda.api_calls:
                if call.category == "host_sync" and call.function in entries:
                    yield self.finding(ctx, call.line, call.api, kernel=call.function, pass_name="clang")
            last = None
            for m in sorted((m for m in cuda.memcpys if m.blocks_host and m.function in entries), key=lambda m: m.line):
                if last is None or m.line - last > BURST_LINES:  # copies one after another wait once
                    yield self.finding(ctx, m.line, f"{m.api} {m.kind_arg}", kernel=m.function, pass_name="clang")
                    last = m.line

    def _burst_finding(self, ctx, burst):
        first = burst[0]
        rest = sorted({c.line for c in burst[1:]} - {first.line})
        detail = first.qualname
        if rest:
            detail += f" (the same burst goes on at line{'s' if len(rest) > 1 else ''} {', '.join(map(str, rest))})"
        return self.finding(ctx, first.line, detail)
