from analyzer.rules.base import Rule

BURST_LINES = 5  # host syncs this close to the first of a burst drain the GPU once


class HostSyncInTimedPath(Rule):
    """Host synchronisation inside the timed call.

    ## What it does
    Finds `torch.cuda.synchronize()`, `stream.synchronize()`, `.item()`, `.tolist()`,
    `dist.barrier()` and, in the CUDA host code the timed call reaches, `cudaDeviceSynchronize`,
    `cudaStreamSynchronize`, `cudaEventSynchronize` and a synchronous `cudaMemcpy` to the host, when they run on every call of
    `solution()` rather than in a cached set-up branch. A wait in an extension's host code is
    reported at each timed call of that extension function (`ext.sync_stream()` called twice
    waits twice), naming the CUDA call and its line.

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
        # (line, what syncs, the kernel-side function or ''): Python's own syncs, and each timed
        # extension call whose host code waits for the GPU, at the call (the place on the timed
        # path a reader changes; a helper called twice per call waits twice)
        syncs = [(c.line, c.qualname, "") for c in ctx.calls("cuda_sync", "host_sync")]
        ext_calls = ctx.calls("ext_kernel")
        for cuda in ctx.facts.cuda:
            waits: dict[str, str] = {}
            for call in cuda.api_calls:
                if call.category == "host_sync":
                    waits.setdefault(call.function, f"{call.api} (line {call.line})")
            for m in sorted(cuda.memcpys, key=lambda m: m.line):
                if m.blocks_host:
                    waits.setdefault(m.function, f"{m.api} {m.kind_arg} (line {m.line})")
            for c in ext_calls:
                entry = cuda.bindings.get(c.target, c.target)
                if entry in waits:
                    syncs.append((c.line, f"{c.target} waits for the GPU: {waits[entry]}", entry))
        burst: list = []
        for item in sorted(set(syncs)):
            if burst and item[0] - burst[0][0] > BURST_LINES:
                yield self._burst_finding(ctx, burst)
                burst = []
            burst.append(item)
        if burst:
            yield self._burst_finding(ctx, burst)

    def _burst_finding(self, ctx, burst):
        line, detail, kernel = burst[0]
        rest = sorted({b[0] for b in burst[1:]} - {line})
        if rest:
            detail += f" (the same burst goes on at line{'s' if len(rest) > 1 else ''} {', '.join(map(str, rest))})"
        return self.finding(ctx, line, detail, kernel=kernel, pass_name="clang" if kernel else "python")
