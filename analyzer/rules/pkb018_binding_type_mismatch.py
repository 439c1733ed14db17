from analyzer.rules.base import Rule


def _declared(ctype: str) -> str:
    """'tensor' for torch::Tensor / at::Tensor parameters, 'int' for integer ones, '' otherwise."""
    t = ctype.replace("const", "").replace("&", "").strip()
    if t.endswith("Tensor") and "<" not in t:
        return "tensor"
    if t.rstrip("*").strip() != t:
        return ""  # a raw pointer parameter: pybind11 will not take an int for it either, but say nothing
    ints = ("int", "int64_t", "int32_t", "uint64_t", "uint32_t", "long", "long long", "unsigned long",
            "unsigned long long", "size_t", "intptr_t", "uintptr_t", "unsigned", "unsigned int")
    return "int" if t in ints else ""


class BindingTypeMismatch(Rule):
    """An argument whose type the extension's binding does not accept.

    ## What it does
    Compares each call of a compiled extension function with the parameter types its binding
    declares (the C++ declaration or definition behind `m.def(...)` / `load_inline(functions=
    [...])`, or a `TORCH_LIBRARY` schema). It flags an integer (a handle's `buffer_ptrs_dev`,
    `signal_pad_ptrs_dev` or `multicast_ptr`, a `data_ptr()`, an `int(...)`) passed where the
    binding declares `torch::Tensor`, and a freshly made tensor passed where it declares an integer.

    ## Why is this bad?
    pybind11 converts by declared type and refuses the call: `TypeError: incompatible function
    arguments` on every call of `solution()`, on every rank. The kernel never runs. The handle's
    `*_dev` properties are device addresses (Python ints) of the pointer arrays, not tensors.

    ## Example
    ```python
    # C++: void allreduce(torch::Tensor ptrs, torch::Tensor out, int64_t n);
    ext.allreduce(hdl.buffer_ptrs_dev, out, n)
    ```

    ## Use instead
    ```python
    # C++: void allreduce(uint64_t ptrs, torch::Tensor out, int64_t n);
    ext.allreduce(hdl.buffer_ptrs_dev, out, n)
    ```
    or keep the `torch::Tensor` parameter and pass
    `torch.tensor(hdl.buffer_ptrs, dtype=torch.int64, device=dev)` (built once, cached).
    """

    id = "PKB018"
    name = "binding-type-mismatch"
    severity = "error"
    message = "argument type does not match the extension binding"
    fix = "declare the parameter as an integer (uint64_t/int64_t) for addresses, or pass a tensor"

    def check(self, ctx):
        sigs = ctx.py.ext_signatures
        for c in ctx.calls("ext_kernel", paths=("timed", "setup")):
            params = sigs.get(c.target)
            if not params:
                continue
            for a in c.args:
                if a.position < 0 or a.position >= len(params):
                    continue
                want = _declared(params[a.position])
                if want == "tensor" and a.value_type == "int":
                    yield self.finding(ctx, a.line or c.line, f"{c.target} argument {a.position + 1} `{a.text}` is an integer; "
                                       f"the binding declares `{params[a.position]}`")
                    break
                if want == "int" and a.value_type == "tensor":
                    yield self.finding(ctx, a.line or c.line, f"{c.target} argument {a.position + 1} `{a.text}` is a tensor; "
                                       f"the binding declares `{params[a.position]}`")
                    break
