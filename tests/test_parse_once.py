"""The evaluation reads the tree the record already parsed: its static checks, device needs and
the emulation's multicast evidence parse a candidate's source only when no caller has."""

from __future__ import annotations

import ast
import textwrap

import pytest

from pkb.record import CandidateRecord

SOURCE = textwrap.dedent('''
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem
    from torch.utils.cpp_extension import load_inline

    CUDA = r"""
    __global__ void k(float* p) { asm volatile("multimem.ld_reduce.global.add.f32 %0, [%1];" : : ); }
    """

    def solution(x):
        hdl = symm_mem.rendezvous(x, dist.group.WORLD)
        if hdl.multicast_ptr == 0:
            return x
        try:
            ext = load_inline("k", "", CUDA, functions=["k"])
        except Exception:
            dist.all_reduce(x)
        return x
''')


@pytest.fixture
def parses(monkeypatch):
    """How many times ast.parse runs from here on."""
    count = {"n": 0}
    real = ast.parse

    def counting(*args, **kwargs):
        count["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting)
    return count


def test_static_checks_and_device_needs_take_the_tree(parses):
    from pkb.eval.device_needs import cuda_requirement, cuda_uses
    from pkb.eval.static_checks import static_flags

    tree = ast.parse(SOURCE)
    parses["n"] = 0
    assert static_flags(SOURCE, tree) == static_flags(SOURCE)
    assert cuda_uses(SOURCE, tree) == cuda_uses(SOURCE) == ["symm_mem", "load_inline"]
    assert cuda_requirement(SOURCE, tree) == cuda_requirement(SOURCE)
    assert parses["n"] == 3  # the three calls without a tree, none of those given one


def test_the_evaluation_uses_the_records_tree(parses):
    from pkb.eval import _syntax_tree

    rec = CandidateRecord(path="cand.py", source=SOURCE)
    tree = rec.syntax_tree()
    assert _syntax_tree(rec, SOURCE) is tree
    assert parses["n"] == 1
    assert _syntax_tree(rec, SOURCE + "\n# another text\n") is not tree  # a different text is parsed anew
    assert parses["n"] == 2
    assert _syntax_tree(CandidateRecord(path="bad.py", source="def ("), "def (") is None


def test_multicast_evidence_parses_at_most_once(parses):
    from pkb.eval.multicast import multicast_need

    rec = CandidateRecord(path="cand.py", source=SOURCE)
    rec.syntax_tree()
    parses["n"] = 0
    need = multicast_need(SOURCE, rec)
    assert parses["n"] == 0  # the record's tree
    assert [e["line"] for e in need["multimem"]] == [8]
    assert [g["line"] for g in need["fallback_guards"]] == [13]
    assert multicast_need(SOURCE) == need
    assert parses["n"] == 1  # text alone: parsed once, not once per question
