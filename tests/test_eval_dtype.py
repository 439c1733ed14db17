"""Which input dtype a candidate is evaluated with."""

from types import SimpleNamespace

from pkb.eval import EvalOptions
from pkb.eval import input_dtype


def test_dtype_from_option_then_run_tree_then_problem():
    ref = SimpleNamespace(dtypes=("bfloat16", "float32"))
    fp32_tree = SimpleNamespace(precision="fp32")
    plain = SimpleNamespace(precision="")
    assert input_dtype(fp32_tree, ref, EvalOptions()) == "float32"
    assert input_dtype(plain, ref, EvalOptions()) == "bfloat16"
    assert input_dtype(fp32_tree, ref, EvalOptions(dtype="float16")) == "float16"
