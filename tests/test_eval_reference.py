"""References run as PKB runs them (autograd on), and a reference that cannot run at the world size
asked is the problem's minimum world size, found by probing the reference alone (gloo, CPU)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from test_eval_support import quick_options, run_eval, write_candidate

from pkb.eval.outcome import decide
from pkb.eval.launcher import LaunchResult, RankReport

PROBLEM_HEAD = '''
import torch
import torch.distributed as dist

from problems import ProblemSpec

PROBLEM = ProblemSpec(id={id}, name="{name}", category="collective", description="test", source="test",
                      has_compute=False, dtypes=("float32",), tolerances={{"float32": (1e-5, 1e-5)}})


def make_inputs(rank, world_size, trial, device, dtype):
    g = torch.Generator().manual_seed(1000 * trial + rank)
    return (torch.randn(8, 4, generator=g).to(device=device, dtype=dtype),)
'''

# Pairs each rank with a partner: at world size 1 there is no partner (IndexError), at 2 there is.
PAIRS = '''
def solution(x):
    rank, ws = dist.get_rank(), dist.get_world_size()
    peers = [r for r in range(ws) if r != rank]
    partner = peers[0]
    out = x.clone() * (1 + 0 * partner)
    dist.all_reduce(out)
    return out
'''

# A step that takes a gradient, like a ZeRO/FSDP optimizer reference: fails under torch.no_grad().
GRAD_STEP = '''
def solution(w):
    p = w.detach().clone().requires_grad_(True)
    loss = (p * p).sum()
    loss.backward()
    out = p.grad.clone()
    dist.all_reduce(out)
    return out
'''


def _problem_file(folder: Path, pid: int, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"p{pid}_{name}.py"
    path.write_text(textwrap.dedent(PROBLEM_HEAD.format(id=pid, name=name)) + textwrap.dedent(body), encoding="utf-8")
    return path


def test_grad_taking_reference_runs_and_a_one_rank_failure_is_a_minimum_world_size(tmp_path):
    problems = tmp_path / "problems"
    files = {
        901: _problem_file(problems, 901, "pairs", PAIRS),
        902: _problem_file(problems, 902, "grad_step", GRAD_STEP),
    }
    cands = tmp_path / "c"
    pairs = write_candidate(cands, "901_pairs.py", PAIRS)
    grad = write_candidate(cands, "902_grad_step.py", GRAD_STEP)
    options = quick_options(tmp_path, world_size=1, trials=2, problem_files={k: str(v) for k, v in files.items()}, timeout_s=90.0)
    rec_pairs, rec_grad = run_eval([pairs, grad], options)

    ev = rec_grad.evaluation
    assert ev["status"] == "ran" and ev["outcome"] in ("faster", "slower") and ev["correct"], ev["reason"]

    ev = rec_pairs.evaluation
    assert ev["status"] == "not_run" and ev["outcome"] == "", ev["reason"]
    assert ev["reason"].startswith("problem 901 needs world size >= 2"), ev["reason"]
    assert "IndexError" in ev["reason"] and "peers[0]" in ev["reason"]
    assert ev["details"]["min_world_size"] == 2
    check = ev["details"]["reference_check"]
    assert check["world_size"] == 1 and check["where"]["code"] == "partner = peers[0]"
    assert ev["details"]["reference_probes"] == [{"world_size": 2, "device": "cpu", "backend": "gloo", "ran": True}]


def test_a_reference_failing_after_load_is_not_called_a_world_size_limit():
    err = {"outcome": "", "subtype": "", "source": "reference", "phase": "trial 0 reference", "type": "RuntimeError", "message": "x"}
    ev = decide(LaunchResult(1, False, 1.0, [RankReport(0, "trial 0 reference", {"error": err, "world_size": 1})]))
    assert ev["status"] == "not_run" and "reference_check" not in ev["details"]
    err = dict(err, phase="reference check", type="IndexError", message="list index out of range")
    ev = decide(LaunchResult(1, False, 1.0, [RankReport(0, "reference check", {"error": err, "world_size": 1})]))
    assert ev["details"]["reference_check"]["world_size"] == 1


def test_the_probe_climbs_world_sizes_and_skips_device_failures():
    from types import SimpleNamespace

    from pkb.eval.job import JobSpec
    from pkb.eval.reference_probe import needs_probe, probe_min_world_size

    def evaluation(type_, message):
        return {"status": "not_run", "reason": "", "details": {"reference_check": {"world_size": 1, "type": type_, "message": message, "where": None}}}

    assert not needs_probe(evaluation("OutOfMemoryError", "CUDA out of memory. Tried to allocate 2 GiB"))
    assert not needs_probe(evaluation("RuntimeError", "NCCL error in: ProcessGroupNCCL.cpp"))
    ev = evaluation("IndexError", "list index out of range")
    assert needs_probe(ev)

    launched = []

    def fake_launch(job):  # the reference runs from 4 ranks up
        launched.append((job.world_size, job.device, job.backend, job.reference_only))
        ok = job.world_size >= 4
        res = {"finished": ok, "reference_ran": ok, "error": None if ok else {"type": "IndexError", "message": "list index out of range"}}
        return SimpleNamespace(ranks=[SimpleNamespace(finished=ok, result=res)] * job.world_size, timed_out=False)

    spec = JobSpec(job_dir="/tmp/j", candidate_path="c.py", candidate_sha256="x", problem={"kind": "pkb", "id": 48, "stem": "48_fsdp_and_tp"}, world_size=1, backend="nccl", device="cuda", dtype="bfloat16", trials=5)
    out = probe_min_world_size(spec, ev, fake_launch, gpus=1)
    assert launched == [(2, "cpu", "gloo", True), (4, "cpu", "gloo", True)]  # one GPU: CPU ranks
    assert out["min_world_size"] == 4 and ev["details"]["min_world_size"] == 4
    assert ev["reason"].startswith("problem 48 needs world size >= 4: its reference fails at world size 1 (IndexError")


def test_a_catalogued_minimum_world_size_is_not_launched_below_it(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import pkb.eval.launcher as launcher
    from problems import catalog

    real = catalog.entries()
    fake = {
        i: SimpleNamespace(id=e.id, name=e.name, params=e.params, required=e.required, has_compute=e.has_compute, stem=e.stem,
                           min_world_size=1, min_world_size_why="")
        for i, e in real.items()
    }
    fake[49].min_world_size, fake[49].min_world_size_why = 2, "top_k = 2 of num_experts = world_size experts"
    monkeypatch.setattr(catalog, "entries", lambda: fake)
    monkeypatch.setattr(launcher, "launch", lambda *a, **k: (_ for _ in ()).throw(AssertionError("launched below the minimum world size")))
    root = tmp_path / "pkb"
    (root / "reference").mkdir(parents=True)
    (root / "reference" / "49_moe_ep_balanced.py").write_text("def solution(hidden_states, gate_weight):\n    return hidden_states\n")
    cand = write_candidate(tmp_path / "solutions_cuda_bf16_h100_8_openai_m", "50_moe_ep_balanced_cuda.py", "def solution(hidden_states, gate_weight):\n    return hidden_states\n")
    (rec,) = run_eval([cand], quick_options(tmp_path, world_size=1, pkb_root=str(root)))
    ev = rec.evaluation
    assert ev["status"] == "not_run" and ev["problem_match"]["rule"] == "shifted_name"
    assert ev["reason"] == "problem 49 needs world size >= 2: top_k = 2 of num_experts = world_size experts"
    assert ev["details"] == {"min_world_size": 2, "min_world_size_source": "catalog"}
