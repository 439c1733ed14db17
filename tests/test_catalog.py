"""problems/pkb_catalog.json: well-formed, and consistent with our problems and (with PKB_ROOT) PKB."""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import json
import os
import re
from pathlib import Path

import pytest

import problems
from problems import catalog

RAW = json.loads(catalog.CATALOG_PATH.read_text(encoding="utf-8"))


def test_json_is_well_formed():
    assert set(RAW) == {"source", "problems"} and "dab08304" in RAW["source"]
    rows = RAW["problems"]
    assert [r["id"] for r in rows] == list(range(1, 88))
    assert len({r["name"] for r in rows}) == 87
    allowed = set(problems.CATEGORIES) | set(catalog.EXTRA_CATEGORIES)
    for r in rows:
        assert set(r) <= {"id", "name", "params", "required", "has_compute", "category", "min_world_size", "min_world_size_why",
                          "group_args", "none_args", "communicates", "has_compute_why", "input_dtype", "input_dtype_why", "scalar_args",
                          "tensor_dtypes"}, r["id"]
        assert set(r.get("tensor_dtypes", {})) <= set(r["params"]) - set(r.get("scalar_args", {})), r
        assert set(r.get("tensor_dtypes", {}).values()) <= {"int8", "int16", "int32", "int64", "uint8", "bool"}, r
        assert set(r.get("scalar_args", {})) <= set(r["params"]) - set(r.get("group_args", ())) - set(r.get("none_args", ())), r
        assert all(isinstance(v, (bool, int, float, str)) for v in r.get("scalar_args", {}).values()), r
        assert bool(r.get("input_dtype")) == bool(r.get("input_dtype_why")), r  # a fixed dtype says where it is built
        assert r.get("communicates", True) in (True, False), r
        assert set(r.get("group_args", ())) <= set(r["params"]), r  # a group is passed to a parameter
        assert set(r.get("none_args", ())) <= set(r["params"]) - set(r.get("group_args", ())), r
        assert r["name"] and r["name"].isidentifier(), r
        assert all(isinstance(p, str) and p.isidentifier() for p in r["params"]) and len(set(r["params"])) == len(r["params"])
        assert 0 <= r["required"] <= len(r["params"]), r
        assert isinstance(r["has_compute"], bool), r  # every problem classified
        assert r["category"] in allowed, r
        assert isinstance(r["min_world_size"], int) and r["min_world_size"] >= 1, r
        assert bool(r.get("min_world_size_why")) == (r["min_world_size"] > 1), r  # a minimum above 1 says why


def test_entries_api_keeps_its_shape():
    entry = catalog.entries()[33]
    assert entry.stem == "33_ulysses_all_to_all_tensor_primitive"
    assert catalog.by_name("ulysses_all_to_all_tensor_primitive") is entry
    assert catalog.by_name("no_such_problem") is None
    assert entry.params == ("x", "scatter_dim", "gather_dim", "group") and entry.required == 3
    assert (entry.has_compute, entry.category, entry.min_world_size) == (False, "sequence_parallel", 1)
    # the older four-field construction still works
    assert catalog.CatalogEntry(1, "allreduce", ("tensor",), 1, False).min_world_size == 1


def test_every_category_is_used_and_collectives_do_not_compute():
    rows = catalog.entries().values()
    assert {e.category for e in rows} >= set(catalog.EXTRA_CATEGORIES)
    assert all(not e.has_compute for e in rows if e.category == "collective")
    assert sum(e.has_compute for e in rows) > 60  # most PKB problems fuse compute with communication


@pytest.mark.parametrize("pid", problems.ids())
def test_consistent_with_our_problem(pid):
    ours = problems.get(pid)
    entry = catalog.entries()[pid]
    assert entry.name == ours.name
    assert entry.params == tuple(inspect.signature(ours.module.solution).parameters)
    assert entry.has_compute is ours.spec.has_compute
    assert entry.category == ours.spec.category
    ours.module.make_inputs(0, entry.min_world_size, 0, "cpu", "float32")  # our inputs exist at PKB's minimum


@pytest.mark.skipif(not os.environ.get("PKB_ROOT"), reason="set PKB_ROOT to a ParallelKernelBench checkout")
def test_ids_names_and_params_are_pkbs():
    refs = sorted(Path(os.environ["PKB_ROOT"], "reference").glob("*_*.py"))
    seen = {}
    for path in refs:
        head, name = path.stem.split("_", 1)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "solution")
        params = tuple(a.arg for a in fn.args.args)
        seen[int(head)] = (name, params, len(params) - len(fn.args.defaults))
    assert {i: (e.name, e.params, e.required) for i, e in catalog.entries().items()} == seen


@pytest.mark.skipif(not os.environ.get("PKB_ROOT"), reason="set PKB_ROOT to a ParallelKernelBench checkout")
def test_communicates_is_false_exactly_where_the_reference_moves_no_data():
    silent = re.compile(r"\bdist\.(?!get_rank|get_world_size|is_initialized)\w+\(|symm_mem|_symmetric_memory|funcol|"
                        r"all_reduce|all_gather|all_to_all|reduce_scatter")
    refs = sorted(Path(os.environ["PKB_ROOT"], "reference").glob("*_*.py"))
    local = {int(p.stem.split("_", 1)[0]) for p in refs if not silent.search(p.read_text(encoding="utf-8"))}
    assert local and {i for i, e in catalog.entries().items() if not e.communicates} == local


def test_local_reduction_of_an_input_is_compute():
    # 26 sums its expert mask into the counts it returns; 28 reduces it to the routing map it
    # returns and permutes tokens by expert: work besides the exchange, so overlap is not `n/a`.
    table = catalog.entries()
    for pid in (26, 28):
        assert table[pid].has_compute is True and "expert_mask" in table[pid].has_compute_why, pid
    # split-size bookkeeping stays a bare exchange
    assert table[70].has_compute is False and table[67].has_compute is False
    # 66 multiplies the exchanged rows by a sparse matrix (a scatter-add summing repeated seeds)
    assert table[66].has_compute is True and "sparse.mm" in table[66].has_compute_why


def test_constants_the_factory_passes_at_world_size_8():
    # read from create_input_tensor on 8 CPU ranks: the same value on every rank
    table = catalog.entries()
    assert dict(table[80].scalar_args) == {"teacher_temp": 0.07, "n_iterations": 3}
    assert dict(table[54].scalar_args) == {"causal": True} and dict(table[57].scalar_args) == {"causal": False}
    assert dict(table[4].scalar_args) == {"dst": 0} and table[1].scalar_args == ()


def test_integer_tensors_the_factory_passes_whatever_the_precision():
    # read by problems/read_pkb_inputs.py: labels, counts, offsets and masks keep their dtype in a
    # bf16 and an fp32 run; a floating input never appears here
    table = catalog.entries()
    assert dict(table[23].tensor_dtypes) == {"local_valid_tokens": "int64", "global_valid_tokens": "int64"}
    assert dict(table[29].tensor_dtypes)["routing_map"] == "bool" and dict(table[25].tensor_dtypes) == {"labels": "int64"}
    assert table[1].tensor_dtypes == () and table[12].tensor_dtypes == ()


@pytest.mark.skipif(not os.environ.get("PKB_ROOT"), reason="set PKB_ROOT to a ParallelKernelBench checkout")
def test_integer_tensor_dtypes_are_what_pkbs_factory_builds():
    from problems.read_pkb_inputs import main as read_inputs

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        read_inputs([os.environ["PKB_ROOT"]])
    read = json.loads(out.getvalue())["tensor_dtypes"]
    assert {int(k): v for k, v in read.items()} == {i: dict(e.tensor_dtypes) for i, e in catalog.entries().items() if e.tensor_dtypes}


def test_inputs_the_factory_builds_in_a_fixed_dtype():
    # PKB's input factory builds these problems' floating inputs in one dtype whatever the run's
    # precision (utils/input_output_tensors.py); every other problem's follow the run tree's
    table = catalog.entries()
    fixed = {pid: e.input_dtype for pid, e in table.items() if e.input_dtype}
    assert fixed == {59: "float32", 60: "complex64", 62: "float32", 63: "float64", 66: "float32", 80: "float32"}
