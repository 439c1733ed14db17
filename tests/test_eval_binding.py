"""A pybind-bound function called with types its C++ signature does not take is
runtime_error/binding_mismatch, with the function, the declared and the passed types; every
python_exception says the exception's class (details.exception_type)."""

from __future__ import annotations

from test_eval_support import quick_options, run_eval, write_candidate

from pkb.eval.classify import binding_details, classify_exception

# torch._C._data_address is bound with pybind11 as (arg0: torch.Tensor) -> int; an int pointer
# passed to it fails the way `handle.signal_pad_ptrs_dev` fails against a `torch::Tensor` parameter.
BINDING = """
def solution(x):
    ptr = x.data_ptr()  # an int, as symmetric memory's signal_pad_ptrs_dev is
    torch._C._data_address(ptr)
    return x.clone()
"""

NAME_ERROR = """
def solution(x):
    return x * undefined_scale
"""


def test_binding_mismatch_and_exception_types_through_the_ranks(tmp_path):
    binding = write_candidate(tmp_path / "c", "1_allreduce_binding.py", BINDING)
    name_error = write_candidate(tmp_path / "c", "1_allreduce_name_error.py", NAME_ERROR)
    rec_b, rec_n = run_eval([binding, name_error], quick_options(tmp_path, world_size=1, trials=1))

    ev = rec_b.evaluation
    assert (ev["outcome"], ev["subtype"]) == ("runtime_error", "binding_mismatch"), ev["reason"]
    assert ev["details"]["exception_type"] == "TypeError"
    b = ev["details"]["binding"]
    assert b["function"] == "_data_address" and b["declared"] == ["(arg0: torch.Tensor) -> int"] and b["passed"] == ["int"]
    assert b["mismatches"] == [{"arg": 0, "name": "arg0", "declared": "torch.Tensor", "passed": "int"}]
    assert "_data_address() binding mismatch: argument 0 (arg0) declared torch.Tensor, passed int" in ev["reason"]

    ev = rec_n.evaluation
    assert (ev["outcome"], ev["subtype"]) == ("runtime_error", "python_exception"), ev["reason"]
    assert ev["details"]["exception_type"] == "NameError"


def test_binding_details_pick_the_closest_overload_and_read_reprs():
    msg = (
        "launch(): incompatible function arguments. The following argument types are supported:\n"
        "    1. (arg0: int) -> None\n"
        "    2. (x: torch.Tensor, pads: torch.Tensor, n: int, scale: float = 1.0) -> None\n\n"
        "Invoked with: tensor([[1., 2.],\n        [3., 4.]], device='cuda:0'), 140211, 4, 0.5"
    )
    assert classify_exception(TypeError(msg)) == ("runtime_error", "binding_mismatch")
    b = binding_details(msg)
    assert b["passed"] == ["torch.Tensor", "int", "int", "float"]
    assert b["mismatches"] == [{"arg": 1, "name": "pads", "declared": "torch.Tensor", "passed": "int"}]
    # an ordinary TypeError stays a python_exception
    assert classify_exception(TypeError("unsupported operand type(s) for +: 'int' and 'str'")) == ("runtime_error", "python_exception")
    assert binding_details("f() takes 2 positional arguments but 3 were given") is None


def test_binding_mismatch_reads_the_same_under_emulation(tmp_path):
    from pkb.emulate import emulated_evaluate

    path = write_candidate(tmp_path / "c", "1_allreduce_binding.py", BINDING)
    rec = emulated_evaluate(path, 1, 4, trials=1, device="cpu", dtype="float32", call_timeout_s=20.0)
    assert (rec["outcome"], rec["subtype"]) == ("runtime_error", "binding_mismatch"), rec["reason"]
    assert rec["details"]["binding"]["mismatches"] == [{"arg": 0, "name": "arg0", "declared": "torch.Tensor", "passed": "int"}]
    assert "_data_address() binding mismatch: argument 0 (arg0) declared torch.Tensor, passed int" in rec["reason"]
