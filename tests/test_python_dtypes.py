"""The dtype of a Python expression where the file decides it, and None everywhere else."""

import ast
import textwrap

import pytest

from analyzer.python_dtypes import DtypeOf

SRC = textwrap.dedent('''
    import torch

    def helper(offsets):
        return offsets

    def solution(x, dev):
        counts = torch.zeros(8, dtype=torch.int32, device=dev)
        starts = counts.cumsum(0) - counts
        fixed = starts.to(torch.int32)
        moved = counts.to(dev)
        other = counts.to(x)
        same = torch.empty_like(counts)
        flags = counts > 0
        total = flags.sum()
        dt = x.dtype
        made = torch.zeros(4, dtype=dt)
        helper(starts)
        counts = counts.long()
        return counts
''')


@pytest.mark.parametrize("expr, want", [
    ("counts", "int32"),
    ("starts", "int64"),                 # an int32 cumsum is int64, and so is int64 - int32
    ("counts.sum()", "int64"),
    ("counts.sum(dtype=torch.int32)", "int32"),
    ("fixed", "int32"),
    ("moved", "int32"),                  # a move to a device keeps the dtype
    ("other", None),                     # .to(tensor) takes that tensor's dtype: not followed
    ("same", "int32"),
    ("total", "int64"),                  # a bool sum
    ("counts[1:].contiguous().view(-1)", "int32"),
    ("counts * 2", "int32"),
    ("counts * 2.0", None),
    ("x", None),                         # solution()'s own tensors: not known without the run
    ("made", None),                      # x.dtype: x unknown
    ("torch.zeros(4)", None),            # the default dtype is not assumed
])
def test_dtype_of_an_expression_before_the_helper_call(expr, want):
    dtypes = DtypeOf(ast.parse(SRC))
    line = next(i for i, ln in enumerate(SRC.splitlines(), 1) if "helper(starts)" in ln)
    assert dtypes.dtype_of(ast.parse(expr, mode="eval").body, "solution", line) == want


def test_a_name_is_read_as_it_was_before_the_line_and_a_parameter_through_its_callers():
    dtypes = DtypeOf(ast.parse(SRC))
    end = next(i for i, ln in enumerate(SRC.splitlines(), 1) if "return counts" in ln)
    assert dtypes.dtype_of(ast.Name("counts"), "solution", end) is None  # int32, then .long(): two values
    inside = next(i for i, ln in enumerate(SRC.splitlines(), 1) if "return offsets" in ln)
    assert dtypes.dtype_of(ast.Name("offsets"), "helper", inside) == "int64"
    assert dtypes.assigned_at("offsets", "helper", inside) == next(
        i for i, ln in enumerate(SRC.splitlines(), 1) if "starts = counts.cumsum(0)" in ln)
    # what the run gives solution()'s tensors, where the caller says so
    given = DtypeOf(ast.parse(SRC), params={"x": "float32"})
    assert given.dtype_of(ast.parse("made", mode="eval").body, "solution", end) == "float32"
    assert given.used_params == {"x"}


HELPERS = textwrap.dedent('''
    import torch
    _cache = None

    def make_state(n, dev):
        global _cache
        if _cache is not None:
            c = _cache
            return c["buf"], c["ptrs"]
        buf = torch.empty(n, dtype=torch.bfloat16, device=dev)
        ptrs = torch.tensor([0] * 8, dtype=torch.int64, device=dev)
        _cache = {"buf": buf, "ptrs": ptrs}
        return buf, ptrs

    def offsets_of(counts):
        if counts.numel() == 0:
            return counts.to(torch.int32)
        return counts.cumsum(0)

    def one(dev):
        return torch.zeros(4, dtype=torch.int32, device=dev)

    def solution(x, dev):
        buf, ptrs = make_state(64, dev)
        *rest, last = make_state(64, dev)
        offs = offsets_of(torch.zeros(8, dtype=torch.int32))
        single = one(dev)
        pair = make_state(64, dev)
        return x
''')


@pytest.mark.parametrize("expr, want", [
    ("ptrs", "int64"),     # element 1 of the helper's return; its cached early return is passed over
    ("buf", "bfloat16"),
    ("last", None),        # a starred unpacking: not followed
    ("offs", None),        # the helper's returns disagree (int32 and int64)
    ("single", "int32"),
    ("pair", None),        # a whole tuple is no tensor
])
def test_a_helpers_result_has_the_dtype_its_returns_agree_on(expr, want):
    dtypes = DtypeOf(ast.parse(HELPERS))
    line = next(i for i, ln in enumerate(HELPERS.splitlines(), 1) if "return x" in ln)
    assert dtypes.dtype_of(ast.parse(expr, mode="eval").body, "solution", line) == want


def test_a_nested_function_reads_its_closures_names_as_they_were_at_its_definition():
    src = textwrap.dedent('''
        import torch

        def solution(x):
            meta = torch.empty(8, 8, dtype=torch.int32).view(64)
            def pull(meta_local):
                starts = meta[:4].sum(dim=0)
                return starts
            meta = meta.long()
            return pull(torch.zeros(2, dtype=torch.int64))
    ''')
    dtypes = DtypeOf(ast.parse(src))
    line = next(i for i, ln in enumerate(src.splitlines(), 1) if "return starts" in ln)
    assert dtypes.dtype_of(ast.Name("starts"), "pull", line) == "int64"  # the int32 meta, summed
    assert dtypes.dtype_of(ast.Name("meta"), "pull", line) == "int32"    # not the later .long()
    assert dtypes.dtype_of(ast.Name("meta_local"), "pull", line) == "int64"  # a parameter: its caller's
