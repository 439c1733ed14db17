from analyzer.rules.base import Rule, reached_functions

BURST_LINES = 5  # host syncs this close to the first of a burst drain the GPU once


class HostSyncInTimedPath(Rule):
    """Host synchronisation inside the timed call.

    ## What it does
    Finds `torch.cuda.synchronize()`, `stream.synchronize()`, `.item()`, `.tolist()`,
    `dist.barrier()` and, in the CUDA host code the timed call reaches, `cudaDeviceSynchronize`,
    `cudaStreamSynchronize`, `cudaEventSynchronize`, a synchronous `cudaMemcpy` to the host and a
    tensor read back in C++ (`sizes.cpu()`, `total.item<int64_t>()`), when they run on every call
    of `solution()` rather than in a cached set-up branch. A wait in an extension's host code (the
    bound function or a host function it calls) is reported at each timed call of that extension
    function (`ext.sync_stream()` called twice waits twice), naming the CUDA call; its line is
    the finding's related line.

    A burst of host syncs within `BURST_LINES` lines of its first (the split sizes of an
    all-to-all read back with `.cpu().tolist()` one after another) is one finding at that first
    line: the host waits once for the GPU to drain, and the reads right after find it idle. The
    burst's other lines are the finding's related lines.

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
        syncs = [(c.line, c.qualname, "", ()) for c in ctx.calls("cuda_sync", "host_sync")]
        ext_calls = ctx.calls("ext_kernel")
        for cuda in ctx.facts.cuda:
            waits: dict[str, list[tuple[int, str]]] = {}  # function -> (line, what) of each host wait in it
            for call in cuda.api_calls:
                if call.category == "host_sync":
                    waits.setdefault(call.function, []).append((call.line, call.api))
            for m in cuda.memcpys:
                if m.blocks_host:
                    waits.setdefault(m.function, []).append((m.line, f"{m.api} {m.kind_arg}"))
            for c in ext_calls:
                entry = cuda.bindings.get(c.target, c.target)
                # the entry's own waits and those of the host functions it calls
                found = sorted(w for fn in reached_functions(cuda, entry) for w in waits.get(fn, []))
                if found:
                    line, what = found[0]
                    syncs.append((c.line, f"{c.target} waits for the GPU: {what} (line {line})", entry,
                                  tuple(n for n, _ in found)))
        burst: list = []
        for item in sorted(set(syncs)):
            if burst and item[0] - burst[0][0] > BURST_LINES:
                yield self._burst_finding(ctx, burst)
                burst = []
            burst.append(item)
        if burst:
            yield self._burst_finding(ctx, burst)

    def _burst_finding(self, ctx, burst):
        line, detail, kernel, waits = burst[0]
        rest = sorted({b[0] for b in burst[1:]} - {line})
        if rest:
            detail += f" (the same burst goes on at line{'s' if len(rest) > 1 else ''} {', '.join(map(str, rest))})"
        # related: the rest of the burst, and the waits inside the extensions' host code
        related = [*rest, *(n for b in burst for n in b[3])]
        return self.finding(ctx, line, detail, kernel=kernel, pass_name="clang" if kernel else "python",
                            related_lines=related)
