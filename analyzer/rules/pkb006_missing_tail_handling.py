import ast

from analyzer.rules.base import Rule


class MissingTailHandling(Rule):
    """Element count that is not a multiple of the tile or vector width is not handled.

    ## What it does
    Finds kernels that process elements in vectors or tiles (`float4` reinterpretation,
    `n / 4`, `n / TILE` blocks) with no guard or remainder loop for the last partial tile, and
    Triton loads and stores without a `mask=`.

    ## Why is this bad?
    The reference accepts any size. With a size that is not a multiple of the width, the tail is
    either never written (`unwritten`/`tail_only` wrong result) or read and written past the end
    of the buffer (`illegal_address`), which on symmetric memory can corrupt a peer's data.

    ## Example
    ```cuda
    int n4 = n / 4;
    for (int i = tid; i < n4; i += stride) out4[i] = in4[i];   // last n % 4 elements lost
    ```

    ## Use instead
    ```cuda
    for (int i = tid; i < n4; i += stride) out4[i] = in4[i];
    for (int i = n4 * 4 + tid; i < n; i += stride) out[i] = in[i];   // scalar tail
    ```
    """

    id = "PKB006"
    name = "missing-tail-handling"
    severity = "warning"
    message = "element count not a multiple of the tile/vector width is not handled"
    fix = "add a scalar tail loop or a bounds check on the last tile (Triton: mask=offs < n)"

    def check(self, ctx):
        for cuda in ctx.facts.cuda:
            for line in cuda.unguarded_tiles:
                yield self.finding(ctx, line, pass_name="clang")
        if not ctx.py.triton_kernels:
            return
        try:
            tree = ast.parse(ctx.rec.source)
        except SyntaxError:
            return
        names = {t.name for t in ctx.py.triton_kernels}
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name in names:
                uses_arange = "arange" in ast.unparse(fn)
                for node in ast.walk(fn):
                    if (
                        uses_arange and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("load", "store") and not any(k.arg == "mask" for k in node.keywords)
                        and len(node.args) < (3 if node.func.attr == "store" else 2)
                        and "pointer_type" not in ast.unparse(node)
                    ):
                        yield self.finding(ctx, node.lineno, f"tl.{node.func.attr} without mask in {fn.name}", kernel=fn.name)
