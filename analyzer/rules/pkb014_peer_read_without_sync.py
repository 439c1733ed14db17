from analyzer.rules.base import Rule

_MOVES = ("sm_load", "sm_store", "sm_atomic", "copy_engine", "tma", "nvls", "nvshmem")


class PeerReadWithoutSync(Rule):
    """Peer data read with nothing making it ready.

    ## What it does
    Finds candidates that read (or write) peer memory but have no cross-rank ordering on the
    timed path at all: no symmetric-memory barrier, no device flags, no host barrier, no NCCL
    call. The candidate's synchronization label is `none`.

    ## Why is this bad?
    Each rank copies its input into its symmetric buffer and immediately reads the peers'
    buffers. Whether a peer has already written its part is a race: the result holds the
    previous call's data (`stale`), zeros, or poison (`missing_peer`), and changes from run to
    run.

    ## Example
    ```python
    buf.copy_(x)
    ext.allgather(hdl.buffer_ptrs_dev, out)   # peers may not have copied yet
    ```

    ## Use instead
    ```python
    buf.copy_(x)
    hdl.barrier(channel=0)
    ext.allgather(hdl.buffer_ptrs_dev, out)
    hdl.barrier(channel=0)
    ```
    """

    id = "PKB014"
    name = "peer-read-without-sync"
    severity = "error"
    message = "peer memory is accessed with no cross-rank synchronization"
    fix = "add hdl.barrier() before reading peers (and after, before the buffer is reused)"

    def check(self, ctx):
        if ctx.labels("sync") != {"none"}:
            return
        moving = [lab for lab in ctx.rec.labels.get("mechanism", []) if lab.value in _MOVES]
        if moving:
            ev = moving[0].evidence[0]
            yield self.finding(ctx, ev.line, f"{moving[0].value} with sync none", pass_name=ev.pass_name)
