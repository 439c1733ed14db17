import ast

from analyzer.classify import problem_entry
from analyzer.python_dtypes import DtypeOf
from analyzer.rules.base import Rule
from analyzer.strings import FLOATING_DISPATCH, cpp_element_types

# C++ element types of `data_ptr<T>()` and the torch dtype each one checks for.
_CPP_DTYPE = {
    "int": "int32", "int32_t": "int32", "int64_t": "int64", "long": "int64", "float": "float32", "double": "float64",
    "at::BFloat16": "bfloat16", "c10::BFloat16": "bfloat16", "at::Half": "float16", "c10::Half": "float16",
    "bool": "bool", "uint8_t": "uint8", "int8_t": "int8", "int16_t": "int16", "short": "int16",
    "uint64_t": "uint64", "uint32_t": "uint32", "long long": "int64", "long long int": "int64",
    "unsigned long long": "uint64", "unsigned int": "uint32", "unsigned char": "uint8", "signed char": "int8",
}


_FLOATING = {"float32", "float64", "float16", "bfloat16"}


class DataPtrDtypeMismatch(Rule):
    """A tensor read in C++ as `data_ptr<T>()` of another dtype than it has on the run.

    ## What it does
    For each extension call on the timed path, reads which element type the bound C++ function
    takes each tensor parameter's `data_ptr<T>()` as, and the dtype the Python argument has where
    the file decides it: a cast (`.int()`, `.to(torch.int32)`), a factory's `dtype=` (torch's and
    `symm_mem.empty`), views and copies that keep it, and torch's promotion of integer reductions:
    `counts.sum()` and `counts.cumsum(0)` of int32 counts are int64 unless `dtype=` says otherwise,
    and so is `torch.cat` of an int32 and an int64 tensor. A name is followed into the helper that
    returned it (`bufs, ptrs = get_state(n)`, a cached helper's stored early return passed over),
    into a nested function's closure, and from a helper's parameter to its callers.
    `solution()`'s own tensors have the dtype PKB's input factory gives them where it fixes one:
    the integer and bool tensors it builds whatever the run's precision (labels, counts, offsets,
    masks: the catalogue's `tensor_dtypes`, matched by position), and, for problems whose
    floating inputs are built in one dtype (problem 62's float32, problem 63's float64), those
    read as a floating type. The run tree's precision is not assumed for them: in a bf16 run
    some are float32 (scales, log-sum-exps, optimizer states; assuming bf16 gave 8 false
    findings of 9 new ones on PKB's files). A parameter the C++ reads as several types (a
    dispatch on the dtype) accepts each of them, and `data_ptr<scalar_t>()` under a floating
    dispatch (`AT_DISPATCH_FLOATING_TYPES...`) accepts every floating type; a call under a Python
    `if` on the argument's dtype is not reported (the file dispatches itself), nor is an
    argument whose dtype the file does not decide. The finding sits at the first mismatched call
    of a function: it raises, so the later ones in that function are never reached and become
    its related lines, with where the argument got its dtype and the C++ read.

    ## Why is this bad?
    `data_ptr<T>()` checks the tensor's dtype: `expected scalar type Int but found Long` is a
    RuntimeError at the call, on every call and every rank, before any kernel runs. It is the
    commonest way a file that compiles fails at once: an offsets tensor made with `cumsum` of
    int32 counts and read as `int*`.

    ## Example
    ```python
    counts = torch.zeros(world, dtype=torch.int32, device=dev)
    offsets = counts.cumsum(0) - counts          # int64
    ext.push(buf, offsets)                        # C++: offsets.data_ptr<int>()
    ```

    ## Use instead
    ```python
    offsets = (counts.cumsum(0) - counts).to(torch.int32)
    ```
    or read it as `data_ptr<int64_t>()` in C++.
    """

    id = "PKB022"
    name = "data-ptr-dtype-mismatch"
    severity = "error"
    message = "tensor read with data_ptr<T>() of another dtype than it has on the run"
    fix = "cast the argument to the dtype the C++ reads (.to(torch.int32)), or read it as its own dtype in C++"

    def check(self, ctx):
        tree = ctx.rec.syntax_tree()
        calls = ctx.calls("ext_kernel", paths=("timed", "setup"))
        if tree is None or not calls or not ctx.py.cuda_sources:
            return
        reads = cpp_element_types([s.text for s in ctx.py.cuda_sources], {c.target for c in calls})
        if not reads:
            return
        # solution()'s tensors have the dtype PKB's factory fixes for this problem, where it does:
        # every floating input's (input_dtype), or one integer tensor's exactly (tensor_dtypes, by
        # position: a candidate may name the parameters otherwise)
        entry = problem_entry(ctx.rec)
        sol = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "solution"), None)
        params, exact = {}, set()
        if entry is not None and sol is not None:
            fixed = dict(entry.tensor_dtypes)
            for i, arg in enumerate(sol.args.args):
                pkb_name = entry.params[i] if i < len(entry.params) else None
                if pkb_name in fixed:
                    params[arg.arg] = fixed[pkb_name]
                    exact.add(arg.arg)
                elif entry.input_dtype:
                    params[arg.arg] = entry.input_dtype
        dtypes = DtypeOf(tree, params)
        found: dict[str, list[tuple[int, str, int | None, int]]] = {}  # function -> (line, detail, made, C++ line)
        for c in calls:
            for a in c.args:
                read = reads.get(c.target, {}).get(a.position)
                if not read or a.position < 0:
                    continue
                wanted, source, text_line = read
                accepted = set().union(*({*_FLOATING} if t == FLOATING_DISPATCH else {_CPP_DTYPE.get(t)} for t in wanted))
                if None in accepted:
                    continue  # a type we do not map: say nothing
                try:
                    expr = ast.parse(a.text.strip(), mode="eval").body
                except SyntaxError:
                    continue
                dtypes.used_params = set()
                has = dtypes.dtype_of(expr, c.function, c.line)
                if has is None or has in accepted:
                    continue
                named = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)} | dtypes.used_params
                if _under_dtype_test(tree, c.line, named):
                    continue  # `if idx.dtype == torch.int64: ... else: launch_i32(idx)`: the file dispatches
                if dtypes.used_params - exact and not accepted <= _FLOATING:
                    continue  # the factory fixes the floating inputs; an index or count input may be another
                shown = " or ".join("data_ptr<scalar_t>() under a floating dispatch" if t == FLOATING_DISPATCH
                                    else f"data_ptr<{t}>()" for t in sorted(wanted))
                # related: where the argument got its dtype (`scan = torch.cumsum(valid)`)
                made = dtypes.assigned_at(expr.id, c.function, c.line) if isinstance(expr, ast.Name) else None
                cpp_line = ctx.py.cuda_sources[source].file_line(text_line)
                found.setdefault(c.function, []).append((
                    a.line or c.line, f"{c.target} argument {a.position + 1} `{a.text}` is {has}; the C++ reads it as "
                    f"{shown} ({'/'.join(sorted(accepted))}, line {cpp_line})", made, cpp_line))
        # A mismatched read raises, so a later one that runs only after it is never reached: it
        # becomes a related line (its call and C++ read) of the first. A later read the first does
        # not always precede (the first under a branch or loop the later is not in) is its own finding.
        for reads_in_function in found.values():
            groups: list[list[tuple[int, str, int | None, int]]] = []
            for read in sorted(reads_in_function, key=lambda f: f[0]):
                leader = next((g for g in groups if _always_before(tree, g[0][0], read[0])), None)
                if leader is None:
                    groups.append([read])
                else:
                    leader.append(read)
            for (line, detail, made, cpp_line), *later in groups:
                if later:
                    detail += f"; {len(later)} more such read{'s' * (len(later) > 1)} after it in this function"
                related = [n for n in (made, cpp_line) if n] + [n for at, _, _, cpp in later for n in (at, cpp) if n]
                yield self.finding(ctx, line, detail, related_lines=related)


# The bodies that may not run: an `if`'s branches, a loop's body and `else`, a `try`'s handlers and `else`.
_CONDITIONAL = {ast.If: ("body", "orelse"), ast.For: ("body", "orelse"), ast.AsyncFor: ("body", "orelse"),
                ast.While: ("body", "orelse"), ast.Try: ("handlers", "orelse")}


def _branch_bodies(tree: ast.AST, line: int) -> set[tuple[int, str]]:
    """The conditional bodies (node, field) whose statements hold `line`."""
    held = set()
    for node in ast.walk(tree):
        for field in _CONDITIONAL.get(type(node), ()):
            body = getattr(node, field)
            if body and body[0].lineno <= line <= (body[-1].end_lineno or body[-1].lineno):
                held.add((id(node), field))
    return held


def _always_before(tree: ast.AST, first: int, later: int) -> bool:
    """Whether the statement at `first` runs whenever the one at `later` (after it) does: every
    branch, loop body or handler holding `first` also holds `later`."""
    return _branch_bodies(tree, first) <= _branch_bodies(tree, later)


def _under_dtype_test(tree: ast.AST, line: int, names: set[str]) -> bool:
    """Whether `line` sits in a branch of an `if` that tests the dtype of one of `names`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and node.lineno < line <= (node.end_lineno or node.lineno):
            if any(isinstance(t, ast.Attribute) and t.attr == "dtype" and isinstance(t.value, ast.Name) and t.value.id in names
                   for t in ast.walk(node.test)):
                return True
    return False
