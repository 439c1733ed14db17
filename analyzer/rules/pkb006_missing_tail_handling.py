import ast
import re

from analyzer import tail_guards
from analyzer.rules.base import Rule

# A count divided by a vector/tile width in host code: `out.numel() / 8`, `rows * cols / 4`.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')  # inline-asm templates use %0, %1 ...
_HOST_DIV = re.compile(r"=\s*([^;=]*\b(numel\(\)|size\(|rows|cols|numel|count|\bn\b|elems|N)\b[^;=]*?)\s*(/|>>)\s*(2|3|4|8|16|32)\s*;")


class MissingTailHandling(Rule):
    """Element count that is not a multiple of the tile or vector width is not handled.

    ## What it does
    Finds kernels that process elements in vectors or tiles (`float4` reinterpretation,
    `n / 4`, `n / TILE` blocks) with no guard or remainder loop for the last partial tile, and
    Triton loads and stores without a `mask=`. Not flagged where the Python side handles the
    tail before the launch: a remainder test that rejects the size or pads the input up to a
    multiple of the block (`if K % 64: A = F.pad(A, (0, 64 - K % 64))`), or a tail copy; nor
    where the kernel takes the vector path only when the count divides
    (`if ((n % 8) == 0) { vector loop } else { scalar loop }`).

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
        tree = ctx.rec.syntax_tree()
        for cuda in ctx.facts.cuda:
            src = ctx.py.cuda_sources[cuda.source_index]
            kernels = [f for f in cuda.functions if f.kind != "host"]
            handled: dict[str, bool] = {}
            for line in cuda.unguarded_tiles:
                fn = next((f for f in kernels if f.line <= line <= f.end_line), None)
                if fn is not None:
                    if fn.name not in handled:
                        # the tail may be handled beside the vector loop: a mask in the kernel,
                        # a padded count, or the Python side (a remainder test, a tail copy)
                        handled[fn.name] = tail_guards.kernel_handles_tail(src, fn) or tail_guards.python_guards_tail(
                            tree, tail_guards.ext_call_lines(ctx.py, cuda, fn.name))
                    if handled[fn.name] or tail_guards.vector_path_needs_divisibility(src, fn, line):
                        continue
                yield self.finding(ctx, line, pass_name="clang")
            yield from self._host_side(ctx, cuda)
        if not ctx.py.triton_kernels:
            return
        tree = ctx.rec.syntax_tree()
        if tree is None:
            return
        names = {t.name for t in ctx.py.triton_kernels}
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name in names:
                # the launches sit under a remainder test that pads or rejects the inputs
                launches = [c.line for c in ctx.py.calls if c.category == "triton_launch" and c.target == fn.name]
                if tail_guards.python_guards_tail(tree, launches):
                    continue
                uses_arange = "arange" in ast.unparse(fn)
                # `tl.load(ptrs + r).to(tl.pointer_type(...))` reads one address from the peer
                # table: a scalar, nothing to mask.
                scalar_loads = {
                    id(n.func.value) for n in ast.walk(fn)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "to"
                    and "pointer_type" in ast.unparse(n)
                }
                params = {a.arg for a in fn.args.args}
                for node in ast.walk(fn):
                    if id(node) in scalar_loads:
                        continue
                    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in params:
                        continue  # `tl.load(A_ptr)`: one scalar at a parameter's address, nothing to mask
                    if (
                        uses_arange and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("load", "store") and not any(k.arg == "mask" for k in node.keywords)
                        and len(node.args) < (3 if node.func.attr == "store" else 2)
                        and "pointer_type" not in ast.unparse(node)
                    ):
                        yield self.finding(ctx, node.lineno, f"tl.{node.func.attr} without mask in {fn.name}", kernel=fn.name)

    def _host_side(self, ctx, cuda):
        """The division happens in host code and the kernel only ever sees the vector count.

        Counted as unhandled when neither the host function nor a kernel it launches looks at
        the remainder (a `%`), and no check rejects sizes that do not divide (that is PKB013).
        """
        src = ctx.py.cuda_sources[cuda.source_index]
        text = src.text.splitlines()
        by_name = {f.name: f for f in cuda.functions}
        for f in cuda.functions:
            if f.kind != "host":
                continue
            body = text[f.text_line - 1 : f.text_end_line]
            if any("%" in _STRING.sub("", line) for line in body):
                continue
            launched = [by_name[l.kernel] for l in cuda.launches if l.caller == f.name and l.kernel in by_name]
            if not launched:
                continue
            if any("%" in _STRING.sub("", line) for k in launched for line in text[k.text_line - 1 : k.text_end_line]):
                continue
            for i, line in enumerate(body):
                code = line.split("//")[0]
                if _HOST_DIV.search(code) and "+" not in code.split("=", 1)[1]:
                    yield self.finding(ctx, src.file_line(f.text_line + i), f"{f.name} divides the count and launches {launched[0].name} on the quotient only", kernel=f.name, pass_name="clang")
                    break

