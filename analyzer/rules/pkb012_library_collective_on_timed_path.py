from analyzer.python_pass import is_metadata_collective
from analyzer.rules.base import Rule


class LibraryCollectiveOnTimedPath(Rule):
    """A library collective still carries data on the timed path of a custom-kernel candidate.

    ## What it does
    Finds `torch.distributed` collectives and point-to-point calls (and functional collectives)
    on the timed path of a candidate that also builds its own kernels, and NCCL, RCCL or MPI
    loaded by the candidate itself through ctypes or cffi (`ctypes.CDLL("libnccl.so.2")`): the
    same library, reached where no `torch.distributed` name shows it.

    ## Why is this bad?
    The task is to replace NCCL with direct NVLink transfers. A candidate that keeps
    `dist.all_reduce` for the communication and writes a kernel only for the local arithmetic is
    measured against the very library it should beat; its speedup comes from the epilogue, if
    any, and the report would credit a mechanism it does not use.

    ## Example
    ```python
    partial = ext.local_gemm(a, b)
    dist.all_reduce(partial)
    ```

    ## Use instead
    Move the reduction into the kernel through symmetric memory (peer loads or stores with a
    device barrier), or say plainly that the candidate is an NCCL baseline.
    """

    id = "PKB012"
    name = "library-collective-on-timed-path"
    severity = "warning"
    message = "library collective on the timed path of a custom-kernel candidate"
    fix = "move the transfer into the kernel through symmetric-memory pointers"

    def check(self, ctx):
        if not ctx.claims_custom_kernels():
            return
        for c in ctx.calls("collective", "p2p"):
            if not is_metadata_collective(c):  # exchanging split sizes is not moving the payload
                yield self.finding(ctx, c.line, c.qualname)
        # loaded at import, as a rule: its calls, whatever their spelling, run on the timed path
        for c in ctx.calls("library_load", paths=("timed", "setup", "module")):
            yield self.finding(ctx, c.line, c.qualname)
