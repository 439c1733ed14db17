"""Which problem a file answers: the ordered rules of pkb.problem_match, on the cases PKB's initial
commit holds (written here as small files of our own), through the corpus reader, the evaluation's
resolve (catalog, our registry, a PKB checkout) and, with PKB_ROOT set, over every generated file."""

from __future__ import annotations

import ast
import collections
import os
from pathlib import Path

import pytest

from pkb.corpus import load_corpus, parse_candidate_name, read_candidate
from pkb.eval import problem_source
from pkb.eval.options import EvalOptions
from pkb.problem_match import (
    Reference,
    catalog_references,
    checkout_references,
    match_problem,
    params_score,
    solution_params,
)

CATALOG = catalog_references()


def _match(stem: str, params: tuple[str, ...] | None):
    pid, name, _ = parse_candidate_name(stem)
    return match_problem(pid, name, params, CATALOG)


@pytest.mark.parametrize(
    "stem, params, rule, want",
    [
        ("1_allreduce", ("tensor",), "exact_stem", "1_allreduce"),
        # PKB's generator numbered the files from 34 on one past the reference
        ("34_ulysses_all_to_all_tensor_primitive", ("x", "scatter_dim", "gather_dim", "group"), "shifted_name", "33_ulysses_all_to_all_tensor_primitive"),
        ("88_conv2d_boundary_exchange", None, "shifted_name", "87_conv2d_boundary_exchange"),
        # the model's own words for the problem
        ("11_gemm_allgather_AT", ("A_local", "B"), "token_set", "11_allgather_gemm_AT"),
        ("12_gemm_allgather", ("A_local", "B"), "token_set", "12_allgather_gemm"),
        ("14_gemm_allscatter", ("A", "B"), "fuzzy_name", "14_gemm_allgather"),
        ("18_rms_norm", ("local_hidden_states", "local_weight", "variance_epsilon"), "fuzzy_name", "18_tp_rms_norm"),
        # our variants of a problem
        ("1_allreduce_alias_input", ("x",), "name_variant", "1_allreduce"),
        ("allreduce_local_only", ("tensor",), "name_variant", "1_allreduce"),
        ("broadcast", ("tensor", "src"), "name_only", "3_broadcast"),
    ],
)
def test_rules_on_the_cases_of_pkbs_initial_commit(stem, params, rule, want):
    m = _match(stem, params)
    assert (m.rule, m.stem) == (rule, want), m.detail


def test_a_name_elsewhere_wins_only_when_the_parameters_say_so():
    # `gemm_allgather` is exactly reference 14's name; file 12's solution(A_local, B) is 12's.
    assert _match("12_gemm_allgather", ("A_local", "B")).id == 12
    # The same name with reference 14's parameters is reference 14.
    m = _match("12_gemm_allgather", ("A", "B"))
    assert (m.rule, m.id, m.params_agree) == ("name_elsewhere", 14, True)
    # Parameters unknown (the file does not parse): the id stays in charge.
    assert _match("12_gemm_allgather", None).id == 12


def test_parameters_decide_between_id_and_id_minus_one_when_the_name_says_nothing():
    refs = {5: Reference(5, "alpha", ("x", "y")), 4: Reference(4, "beta", ("q",))}
    m = match_problem(5, "zzz_unrelated", ("q",), refs)
    assert (m.rule, m.id) == ("params", 4)
    m = match_problem(5, "zzz_unrelated", ("w",), refs)
    assert (m.rule, m.id, m.params_agree) == ("id_only", 5, False)


def test_an_unmatched_file_says_what_to_do_and_keeps_its_id():
    m = match_problem(None, "my_kernel_experiment", ("t",), CATALOG)
    assert m.rule == "unmatched" and m.id is None and "--problem ID" in m.detail
    m = match_problem(901, "custom", ("t",), CATALOG)
    assert m.rule == "unmatched" and m.id == 901  # a problem file of the user's may hold it
    # a module with no solution() (a helper beside the candidates) is told apart
    m = match_problem(None, "util", None, CATALOG)
    assert m.rule == "unmatched" and "has no solution()" in m.detail and "--problem ID" in m.detail


def test_parameter_reading_and_score():
    tree = ast.parse("def helper(a):\n    pass\n\ndef solution(A_local, B, *, k=1):\n    pass\n")
    assert solution_params(tree) == ("A_local", "B")
    assert solution_params(ast.parse("def solution(*args):\n    pass\n")) is None
    assert solution_params(ast.parse("solution = print\n")) is None
    assert params_score(("A_local", "B"), ("A", "B")) == 0.5
    assert params_score(("A", "B"), ("A", "B")) == 1.0
    assert params_score(None, ("A",)) is None


def test_the_corpus_reader_records_the_rule_and_the_stem(tmp_path):
    run = tmp_path / "solutions_cuda_bf16_h100_8_openai_some-model"
    run.mkdir()
    (run / "34_ulysses_all_to_all_tensor_primitive_cuda.py").write_text("def solution(x, scatter_dim, gather_dim, group=None):\n    return x\n")
    (run / "12_gemm_allgather_cuda.py").write_text("def solution(A_local, B):\n    return A_local @ B\n")
    (run / "8_alltoall_cuda.py").write_text("def solution(t:\n")  # does not parse: name and id only
    recs = {Path(r.path).name: r for r in load_corpus(tmp_path)}
    r34 = recs["34_ulysses_all_to_all_tensor_primitive_cuda.py"]
    assert (r34.problem_id, r34.problem_name) == (33, "ulysses_all_to_all_tensor_primitive")
    assert r34.problem_match["rule"] == "shifted_name" and r34.problem_match["stem"] == "33_ulysses_all_to_all_tensor_primitive"
    assert r34.problem_match["file_id"] == 34 and r34.problem_match["params_agree"] is True
    assert r34.to_json_line()["problem_match"]["rule"] == "shifted_name"
    r12 = recs["12_gemm_allgather_cuda.py"]
    assert (r12.problem_id, r12.problem_name, r12.problem_match["rule"]) == (12, "allgather_gemm", "token_set")
    r8 = recs["8_alltoall_cuda.py"]
    assert r8.parse_status == "syntax_error" and r8.problem_match["rule"] == "exact_stem" and r8.problem_match["params"] is None


# ---- the evaluation's resolve ------------------------------------------------------------------


def _options(tmp_path, **over):
    return EvalOptions(store_path=str(tmp_path / "s.sqlite"), work_dir=str(tmp_path / "w"), **over)


def test_our_registry_follows_the_same_matching(tmp_path):
    f = tmp_path / "34_ulysses_all_to_all_tensor_primitive_cuda.py"
    f.write_text("def solution(x, scatter_dim, gather_dim, group=None):\n    return x\n")
    rec = read_candidate(f)
    ref = problem_source.resolve(rec.problem_id, rec.problem_name, _options(tmp_path), rec.problem_match)
    assert (ref.id, ref.stem, ref.job_problem["kind"]) == (33, "33_ulysses_all_to_all_tensor_primitive", "registry")
    assert ref.match["rule"] == "shifted_name"


def test_resolve_says_what_to_do_when_a_problem_cannot_be_found(tmp_path):
    loose = tmp_path / "my_kernel_experiment.py"
    loose.write_text("def solution(t):\n    return t\n")
    rec = read_candidate(loose)
    with pytest.raises(LookupError, match=r"--problem ID"):
        problem_source.resolve(rec.problem_id, rec.problem_name, _options(tmp_path), rec.problem_match)
    ref = problem_source.resolve(rec.problem_id, rec.problem_name, _options(tmp_path, problem=1), rec.problem_match)
    assert (ref.id, ref.match["rule"], ref.match["file_name"]) == (1, "given", "my_kernel_experiment")
    scatter = tmp_path / "5_scatter_cuda.py"  # PKB has it, problems/ does not
    scatter.write_text("def solution(tensor, src=0):\n    return tensor\n")
    rec = read_candidate(scatter)
    with pytest.raises(LookupError, match=r"5_scatter.*--pkb-root"):
        problem_source.resolve(rec.problem_id, rec.problem_name, _options(tmp_path), rec.problem_match)


def _checkout(root: Path, refs: dict[str, str]) -> Path:
    (root / "reference").mkdir(parents=True)
    for stem, params in refs.items():
        (root / "reference" / f"{stem}.py").write_text(f"def solution({params}):\n    return None\n")
    return root


def test_a_checkout_is_matched_by_its_own_reference_folder(tmp_path):
    # A checkout whose numbering differs from the catalog's: its own files decide.
    root = _checkout(tmp_path / "pkb", {"33_ulysses_all_to_all_tensor_primitive": "x, scatter_dim, gather_dim, group=None", "34_something_else": "x"})
    refs = checkout_references(root)
    assert refs[33].params == ("x", "scatter_dim", "gather_dim", "group")
    f = tmp_path / "34_ulysses_all_to_all_tensor_primitive_cuda.py"
    f.write_text("def solution(x, scatter_dim, gather_dim, group=None):\n    return x\n")
    rec = read_candidate(f)
    ref = problem_source.resolve(rec.problem_id, rec.problem_name, _options(tmp_path, pkb_root=str(root)), rec.problem_match)
    assert ref.job_problem["stem"] == "33_ulysses_all_to_all_tensor_primitive" and ref.match["against"] == "checkout"
    other = tmp_path / "90_unknown_thing_cuda.py"
    other.write_text("def solution(x):\n    return x\n")
    rec = read_candidate(other)
    with pytest.raises(LookupError, match=r"--problem ID"):
        problem_source.resolve(rec.problem_id, rec.problem_name, _options(tmp_path, pkb_root=str(root)), rec.problem_match)


def test_a_checkout_without_references_is_said_once_not_blamed_on_each_name(tmp_path):
    # A checkout whose reference/ folder is empty (or vanished mid-run) must not turn every
    # candidate into "no reference matches <its name>".
    root = _checkout(tmp_path / "pkb", {})
    with pytest.raises(LookupError, match=r"no reference <id>_<name>.py under .*complete"):
        checkout_references(root)
    f = tmp_path / "4_reduce_cuda.py"
    f.write_text("def solution(x):\n    return x\n")
    rec = read_candidate(f)
    with pytest.raises(LookupError, match=r"is the PKB checkout complete"):
        problem_source.resolve(rec.problem_id, rec.problem_name, _options(tmp_path, pkb_root=str(root)), rec.problem_match)


def test_references_are_read_again_when_the_folder_changes(tmp_path):
    root = _checkout(tmp_path / "pkb", {"4_reduce": "x"})
    assert set(checkout_references(root)) == {4}
    (root / "reference" / "5_scatter.py").write_text("def solution(x, src):\n    return x\n")
    assert set(checkout_references(root)) == {4, 5}


# ---- PKB's own files (only with a checkout: PKB_ROOT) -----------------------------------------------


@pytest.mark.skipif(not os.environ.get("PKB_ROOT"), reason="PKB_ROOT not set (a ParallelKernelBench checkout)")
def test_every_generated_file_maps_to_a_reference_whose_parameters_it_shares():
    root = Path(os.environ["PKB_ROOT"])
    refs = checkout_references(root)
    rules: collections.Counter[str] = collections.Counter()
    wrong = []
    files = sorted(root.glob("solutions_*/*.py"))
    assert files, f"no solutions_*/ files under {root}"
    for f in files:
        rec = read_candidate(f, root)
        m = match_problem(rec.problem_match["file_id"], rec.problem_match["file_name"], rec.problem_match["params"], refs, "checkout")
        rules[m.rule] += 1
        params = rec.problem_match["params"]
        if params is None:
            assert m.matched, f.name
            continue
        sharing = {r.id for r in refs.values() if r.params == tuple(params)}
        if m.id not in sharing:
            wrong.append((f.name, m.rule, m.stem, sorted(sharing)))
        assert rec.problem_id == m.id, f"catalog and checkout disagree on {f.name}"
    print(f"{len(files)} files; rules: {dict(rules)}")
    assert not wrong, wrong
    assert rules["unmatched"] == 0
