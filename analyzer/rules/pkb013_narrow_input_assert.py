import ast
import re

from analyzer.classify import problem_entry
from analyzer.rules.base import Rule
from problems import spec as problem_spec

_PRECISION_DTYPE = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}
_TORCH_DTYPE = {"torch.float32": "float32", "torch.float": "float32", "torch.bfloat16": "bfloat16",
                "torch.float16": "float16", "torch.half": "float16", "torch.float64": "float64", "torch.double": "float64"}
_CUDA_DTYPE_CHECK = re.compile(
    r"TORCH_CHECK\s*\([^;]*(scalar_type\(\)|dtype\(\))\s*==\s*(torch::|at::|c10::ScalarType::|at::ScalarType::)?k?(Float|BFloat16|Half)\b"
)
_CUDA_SHAPE_CHECK = re.compile(r"TORCH_CHECK\s*\([^;]*(numel\(\)|size\(\s*-?\d\s*\))\s*%\s*(\d+)\s*==\s*0")


def _problem_block_sizes(ctx) -> set[int]:
    """Integer defaults of solution()'s size parameters (`block_size: int = 128`): the problem's
    own tile, which its inputs are built to divide."""
    tree = ctx.rec.syntax_tree()
    sol = next((n for n in (tree.body if tree is not None else []) if isinstance(n, ast.FunctionDef)
                and n.name == "solution"), None)
    if sol is None:
        return set()
    args = [*sol.args.args, *sol.args.kwonlyargs]
    defaults = [*([None] * (len(sol.args.args) - len(sol.args.defaults))), *sol.args.defaults, *sol.args.kw_defaults]
    return {d.value for a, d in zip(args, defaults) if isinstance(d, ast.Constant) and type(d.value) is int
            and re.search(r"block|tile|group_size|chunk", a.arg)}


class NarrowInputAssert(Rule):
    """Dtype or shape asserted narrower than the problem's inputs.

    ## What it does
    Finds assertions and `TORCH_CHECK`s that accept only one dtype when the problem is run in
    another (a `bf16` run tree with `assert x.dtype == torch.float32`), or only sizes that are
    a multiple of a tile (`assert x.numel() % 1024 == 0`), and dtype dispatch functions that
    return for some floating dtypes and raise for the rest (`if dt == torch.bfloat16: return 0`
    ... `raise TypeError`) when the run's dtype is not among them. The run's dtype is the run
    tree's precision, or the one PKB's input factory fixes whatever the tree (problem 63's
    float64 inputs). A multiple of the problem's own block size (the default of a `block_size`
    parameter of `solution()`) asks no more than the problem.

    ## Why is this bad?
    The harness feeds the problem's inputs, not the ones the kernel was written for. The
    assertion turns into a `runtime_error` at the first call, or, for dtype checks in host code
    that cast instead of failing, a `tolerance` or `nan_inf` wrong result.

    ## Example
    ```python
    assert tensor.dtype == torch.float32
    ```

    ## Use instead
    Dispatch on the dtype (instantiate the kernel for float, half and bfloat16), and handle sizes
    that are not multiples of the tile with a tail path.
    """

    id = "PKB013"
    name = "narrow-input-assert"
    severity = "warning"
    message = "dtype or shape asserted narrower than the problem's inputs"
    fix = "support every dtype and size the problem passes (dispatch on dtype; handle the tail)"

    def _accepted(self, ctx) -> set[str]:
        accepted: set[str] = set()
        entry = problem_entry(ctx.rec)
        if entry is not None and entry.input_dtype and ctx.rec.precision in _PRECISION_DTYPE:
            return {entry.input_dtype}  # PKB's factory builds these inputs in one dtype whatever the tree
        if ctx.rec.precision in _PRECISION_DTYPE:
            accepted.add(_TORCH_DTYPE[_PRECISION_DTYPE[ctx.rec.precision]])
        spec = problem_spec(ctx.rec.problem_id) if ctx.rec.problem_id is not None else None
        if spec is not None and not accepted:
            accepted.update(spec.dtypes)
        return accepted

    def check(self, ctx):
        accepted = self._accepted(ctx)
        for a in ctx.py.asserts:
            if a.kind == "dtype":
                asserted = _TORCH_DTYPE.get(a.literal)
                if asserted and accepted and (accepted - {asserted}):
                    yield self.finding(ctx, a.line, f"accepts only {a.literal}; the problem passes {', '.join(sorted(accepted))}")
            elif a.kind == "dtype_set":
                # a dispatch over floating dtypes that raises for the rest (`_dtype_enum`)
                taken = {_TORCH_DTYPE.get(d, "") for d in a.literal.split(",")}
                if accepted and "" not in taken and not accepted <= taken:
                    yield self.finding(ctx, a.line, f"dispatches only {', '.join(sorted(taken))} and raises otherwise; "
                                                    f"the problem passes {', '.join(sorted(accepted))}")
            elif a.kind == "shape":
                yield self.finding(ctx, a.line, "accepts only sizes that are a multiple of a tile")
        names = {"Float": "float32", "BFloat16": "bfloat16", "Half": "float16"}
        blocks = _problem_block_sizes(ctx)
        spelled = {"bfloat16": ("BFloat16", "bfloat16", "bf16"), "float16": ("Half", "half", "__half"), "float32": ("Float", "float")}
        for line, text, src in ctx.cuda_lines():
            m = _CUDA_DTYPE_CHECK.search(text)
            # A check in one branch of a dtype dispatch is not narrow when another branch takes
            # the problem's dtype: only flag sources that never mention the accepted dtype.
            supported = {d for d in accepted if any(w in src.text for w in spelled.get(d, ())) and d != (names[m.group(3)] if m else "")}
            if m and accepted and (accepted - {names[m.group(3)]}) and not supported:
                yield self.finding(ctx, line, f"TORCH_CHECK accepts only {names[m.group(3)]}", pass_name="clang")
            elif (shape := _CUDA_SHAPE_CHECK.search(text)) and int(shape.group(2)) not in blocks:
                yield self.finding(ctx, line, "TORCH_CHECK accepts only multiples of a tile", pass_name="clang")
