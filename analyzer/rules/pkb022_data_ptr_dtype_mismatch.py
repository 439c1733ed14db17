import ast

from analyzer.classify import problem_entry
from analyzer.python_dtypes import DtypeOf
from analyzer.rules.base import Rule
from analyzer.strings import cpp_element_types

# C++ element types of `data_ptr<T>()` and the torch dtype each one checks for.
_CPP_DTYPE = {
    "int": "int32", "int32_t": "int32", "int64_t": "int64", "long": "int64", "float": "float32", "double": "float64",
    "at::BFloat16": "bfloat16", "c10::BFloat16": "bfloat16", "at::Half": "float16", "c10::Half": "float16",
    "bool": "bool", "uint8_t": "uint8", "int8_t": "int8", "int16_t": "int16", "short": "int16",
    "uint64_t": "uint64", "uint32_t": "uint32",
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
    into a nested function's closure, and from a helper's parameter to its callers; and, where
    PKB's input factory builds a problem's floating inputs in one dtype whatever the run tree
    (problem 62's float32, problem 63's float64), `solution()`'s tensors read as a floating
    type. The run tree's precision is not assumed for `solution()`'s tensors: in a bf16 run
    some of them are float32 (scales, log-sum-exps, optimizer states; assuming bf16 gave 8
    false findings of 9 new ones on PKB's files). A parameter
    the function reads as several types (a dispatch on the dtype) accepts each of them; an
    argument whose dtype the file does not decide is not reported. The finding sits at the
    Python call; its related lines are where the argument got its dtype and the C++ read.

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
        # solution()'s tensors have the dtype PKB's factory fixes for this problem, where it does
        entry = problem_entry(ctx.rec)
        sol = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "solution"), None)
        params = {a.arg: entry.input_dtype for a in sol.args.args} if entry is not None and entry.input_dtype and sol else {}
        dtypes = DtypeOf(tree, params)
        for c in calls:
            for a in c.args:
                read = reads.get(c.target, {}).get(a.position)
                if not read or a.position < 0:
                    continue
                wanted, source, text_line = read
                accepted = {_CPP_DTYPE.get(t) for t in wanted}
                if None in accepted:
                    continue  # a type we do not map: say nothing
                try:
                    expr = ast.parse(a.text.strip(), mode="eval").body
                except SyntaxError:
                    continue
                dtypes.used_params = False
                has = dtypes.dtype_of(expr, c.function, c.line)
                if has is None or has in accepted:
                    continue
                if dtypes.used_params and not accepted <= _FLOATING:
                    continue  # the factory fixes the floating inputs; an index or count input may be another
                shown = " or ".join(f"data_ptr<{t}>()" for t in sorted(wanted))
                # related: where the argument got its dtype (`scan = torch.cumsum(valid)`)
                made = dtypes.assigned_at(expr.id, c.function, c.line) if isinstance(expr, ast.Name) else None
                cpp_line = ctx.py.cuda_sources[source].file_line(text_line)
                yield self.finding(ctx, a.line or c.line,
                                   f"{c.target} argument {a.position + 1} `{a.text}` is {has}; the C++ reads it as "
                                   f"{shown} ({'/'.join(sorted(accepted))}, line {cpp_line})",
                                   related_lines=[n for n in (made, cpp_line) if n])
