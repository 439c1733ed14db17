from analyzer.rules.base import Rule


class CompileInTimedPath(Rule):
    """JIT compilation reached on every call.

    ## What it does
    Finds `load_inline`, `compile_cuda_extension`, `cupy.RawKernel`/`RawModule` and
    `cpp_extension.load` calls that run on every call of `solution()`, not behind a cache.

    ## Why is this bad?
    Even when torch finds the built library in its cache, every call re-hashes the sources,
    takes a file lock and imports the module: milliseconds per call, inside the timed region. On
    a fresh cache it is a full nvcc build (about a minute) per call and per rank.

    ## Example
    ```python
    def solution(x):
        ext = load_inline(name="ar", cpp_sources="", cuda_sources=SRC, functions=["ar"])
        return ext.ar(x)
    ```

    ## Use instead
    ```python
    _ext = None
    def _get_ext():
        global _ext
        if _ext is None:
            _ext = load_inline(name="ar", cpp_sources="", cuda_sources=SRC, functions=["ar"])
        return _ext
    ```
    """

    id = "PKB011"
    name = "compile-in-timed-path"
    severity = "warning"
    message = "JIT compile on the timed path"
    fix = "compile once behind a module-level cache (or at import)"

    def check(self, ctx):
        for c in ctx.calls("compile"):
            yield self.finding(ctx, c.line, c.qualname)
