from analyzer.rules.base import Rule


class HostStagingInTimedPath(Rule):
    """Data staged through host memory on the timed path.

    ## What it does
    Finds `.cpu()`, `.to("cpu")`, `.numpy()`, pinned host buffers, and device-to-host or
    host-to-device `cudaMemcpy` in the CUDA host code, on the timed path.

    ## Why is this bad?
    Host memory is reached over PCIe (tens of GB/s) instead of NVLink (hundreds), every transfer
    synchronises the stream, and the round trip adds the host's latency to every call. The
    candidate is slower than the NCCL reference it was meant to beat, and the communication it
    reports is not GPU to GPU at all.

    ## Example
    ```python
    peers = [hdl.get_buffer(p, x.shape, x.dtype).cpu() for p in range(world)]
    ```

    ## Use instead
    Read peer buffers on the device: `hdl.get_buffer(p, ...)` views are device tensors, and a
    kernel can load from `hdl.buffer_ptrs_dev` directly.
    """

    id = "PKB016"
    name = "host-staging-in-timed-path"
    severity = "warning"
    message = "data staged through host memory on the timed path"
    fix = "keep the data on the GPU: read peer buffers with kernels or device-to-device copies"

    def check(self, ctx):
        for c in ctx.calls("host_transfer"):
            yield self.finding(ctx, c.line, c.qualname)
        for lab in ctx.rec.labels.get("mechanism", []):
            if lab.value == "host_staging":
                for ev in lab.evidence:
                    if ev.pass_name == "clang":
                        yield self.finding(ctx, ev.line, ev.note, pass_name="clang")
