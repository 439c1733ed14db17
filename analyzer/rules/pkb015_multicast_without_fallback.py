import ast
import re

from analyzer.python_pass import run_context
from analyzer.rules.base import Rule

_CHECK = re.compile(r"multicast_ptr\s*(==|!=|>|<=|is not|is)\s*(0|None)|(if|assert|not)\s+\S*multicast_ptr|\bmc\w*\s*(==|!=)\s*0|if\s+(not\s+)?mc\w*\b")


class MulticastWithoutFallback(Rule):
    """Multicast address used with no check that it exists.

    ## What it does
    Finds uses of `hdl.multicast_ptr` (NVLink SHARP through a multicast object) with no test
    that it is non-zero and no fallback path.

    Where the run is known to have multicast (a PKB run tree on an NVSwitch node, `h100_8`), the
    hazard cannot happen on that run and nothing is reported.

    ## Why is this bad?
    `multicast_ptr` is 0 when the fabric, the driver or the allocator does not provide multicast
    (it is disabled on shared machines with `TORCH_SYMM_MEM_DISABLE_MULTICAST=1`, and absent on
    most PCIe and older NVLink systems). The kernel then dereferences address 0: an
    `illegal_address` runtime error, or, if the kernel checks on device, a result with no peer
    data at all.

    ## Example
    ```python
    ext.multimem_allreduce(hdl.multicast_ptr, out)
    ```

    ## Use instead
    ```python
    if hdl.multicast_ptr:
        ext.multimem_allreduce(hdl.multicast_ptr, out)
    else:
        ext.peer_load_allreduce(hdl.buffer_ptrs_dev, out)
    ```
    """

    id = "PKB015"
    name = "multicast-without-fallback"
    severity = "warning"
    message = "multicast_ptr used with no check that multicast is available"
    fix = "test hdl.multicast_ptr != 0 and fall back to peer loads/stores"

    def check(self, ctx):
        if run_context(ctx.rec.precision, ctx.rec.hardware).multicast:
            return  # the run's machine has multicast (an NVSwitch node): the hazard cannot happen there
        uses = [c for c in ctx.py.calls if c.qualname == "handle.multicast_ptr" and c.path in ("timed", "setup")]
        if not uses:
            return
        tree = ctx.rec.syntax_tree()
        prose = _docstring_lines(tree)
        code = (line.split("//")[0] for i, line in enumerate(ctx.lines, 1) if i not in prose and not line.lstrip().startswith("#"))
        if any(_CHECK.search(line) for line in code) or _tests_multicast(tree):
            return
        yield self.finding(ctx, uses[0].line)


def _docstring_lines(tree: ast.AST | None) -> set[int]:
    """Lines of the module's, classes' and functions' docstrings: prose that says "multicast_ptr is
    0" checks nothing."""
    out: set[int] = set()
    for node in ast.walk(tree) if tree else []:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return out


def _is_multicast(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and "multicast" in sub.attr:
            return True
        if isinstance(sub, ast.Name) and ("multicast" in sub.id.lower() or sub.id.lower() in ("mc_ptr", "mc_addr", "mc")):
            return True
    return False


def _tests_multicast(tree: ast.AST | None) -> bool:
    """A branch, assert or conditional on the multicast address (`if int(hdl.multicast_ptr) != 0:`,
    `use_mc = hdl.multicast_ptr != 0`, `mc if mc else fallback`): the file checks that it exists."""
    if not tree:
        return False
    for node in ast.walk(tree):
        test = node.test if isinstance(node, (ast.If, ast.IfExp, ast.Assert, ast.While)) else None
        if isinstance(node, (ast.Compare, ast.BoolOp)) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)):
            test = node
        if test is not None and _is_multicast(test):
            return True
    return False
