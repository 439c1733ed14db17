"""Reading PKB trees and broken files into records."""

import os

from pkb.corpus import discover, load_corpus, parse_candidate_name, parse_run_tree


def test_run_tree_names_with_underscores_in_hardware_and_model():
    t = parse_run_tree("solutions_cuda_bf16_h100_8_together_zai-org_GLM-5.1")
    assert (t.backend, t.precision, t.hardware, t.provider, t.model) == ("cuda", "bf16", "h100_8", "together", "zai-org_GLM-5.1")
    t = parse_run_tree("solutions_triton_fp32_none_google_gemini-3-flash-preview")
    assert (t.backend, t.hardware, t.provider, t.model) == ("triton", "none", "google", "gemini-3-flash-preview")
    assert parse_run_tree("solutions_cuda").backend == "cuda"
    assert parse_run_tree("loose") is None


def test_candidate_names():
    assert parse_candidate_name("12_allgather_gemm_cuda") == (12, "allgather_gemm", "cuda")
    assert parse_candidate_name("1_allreduce") == (1, "allreduce", "")
    assert parse_candidate_name("notes") == (None, "notes", "")


def _tree(tmp_path):
    run = tmp_path / "solutions_cuda_bf16_h100_8_together_some-model"
    run.mkdir()
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "1_allreduce.py").write_text("def solution(t):\n    return t\n")
    (run / "1_allreduce_cuda.py").write_text("def solution(t):\n    return t\n")
    (run / "2_allgather_cuda.py").write_bytes(b"def solution(t):\n    return '\xff\xfe'\n")
    (run / "3_broadcast_cuda.py").write_bytes(b"")
    (run / "7_reducescatter_cuda.py").write_bytes(os.urandom(5 * 1024 * 1024))
    (run / "8_alltoall_cuda.py").write_text("def solution(t:\n    return t\n")
    (run / "13_gemm_allreduce_cuda.py").write_bytes(b"\x00\x01\x02binary")
    return run


def test_reference_folder_is_not_a_candidate(tmp_path):
    _tree(tmp_path)
    names = [p.name for p in discover(tmp_path)]
    assert "1_allreduce.py" not in names and "1_allreduce_cuda.py" in names


def test_a_pkb_checkouts_harness_is_not_a_candidate(tmp_path):
    # PKB's own code beside its run trees: read as candidates, it filled a report of PKB's corpus
    # with 24 records of harness files (run_local.py, utils/*, kernelgen/*)
    _tree(tmp_path)
    (tmp_path / "run_local.py").write_text("def main():\n    pass\n")
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "cuda_helpers.py").write_text("def compile_cuda_extension():\n    pass\n")
    (tmp_path / "kernelgen").mkdir()
    (tmp_path / "kernelgen" / "solution_ex_add.py").write_text("def solution(a, b):\n    return a + b\n")
    rel = [p.relative_to(tmp_path).parts[0] for p in discover(tmp_path)]
    assert rel and all(part.startswith("solutions_") for part in rel)
    # a folder of run trees and loose candidates without PKB's harness keeps its loose files
    (tmp_path / "run_local.py").unlink()
    (tmp_path / "utils" / "cuda_helpers.py").unlink()
    assert any(p.name == "solution_ex_add.py" for p in discover(tmp_path))


def test_bad_files_become_records_with_a_status(tmp_path):
    _tree(tmp_path)
    recs = {r.path.split("/")[-1]: r for r in load_corpus(tmp_path)}
    assert recs["1_allreduce_cuda.py"].parse_status == "ok"
    assert recs["1_allreduce_cuda.py"].model == "some-model"
    assert recs["1_allreduce_cuda.py"].problem_id == 1
    assert recs["2_allgather_cuda.py"].parse_status == "not_utf8"
    assert "line 2" in recs["2_allgather_cuda.py"].parse_message
    assert recs["3_broadcast_cuda.py"].parse_status == "empty"
    assert recs["7_reducescatter_cuda.py"].parse_status == "too_large"
    assert recs["7_reducescatter_cuda.py"].size == 5 * 1024 * 1024
    assert recs["8_alltoall_cuda.py"].parse_status == "syntax_error"
    assert recs["8_alltoall_cuda.py"].parse_line == 1
    assert recs["13_gemm_allreduce_cuda.py"].parse_status == "not_python"
    assert all(r.sha256 for r in recs.values())


def test_deep_nesting_is_a_syntax_error_not_a_crash(tmp_path):
    (tmp_path / "deep.py").write_text("x = " + "-" * 100000 + "1\n")
    (rec,) = load_corpus(tmp_path)
    assert rec.parse_status == "syntax_error" and "nested" in rec.parse_message


def test_variant_file_names_map_to_the_problem_name(tmp_path):
    (tmp_path / "1_allreduce_alias_input.py").write_text("def solution(t):\n    return t\n")
    (tmp_path / "12_allgather_gemm_cuda.py").write_text("def solution(a, b):\n    return a\n")
    names = {r.problem_id: r.problem_name for r in load_corpus(tmp_path)}
    assert names == {1: "allreduce", 12: "allgather_gemm"}
