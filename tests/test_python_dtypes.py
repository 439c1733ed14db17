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
    assert given.used_params
