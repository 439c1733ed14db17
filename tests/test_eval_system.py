"""The evaluation as a system: world size 4, CUDA candidates without a GPU, a SIGKILLed run that
resumes, and PKB compatibility through a fake PKB checkout."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_eval_support import REFERENCE, REPO, allreduce_then, quick_options, run_eval, write_candidate

from pkb.eval import job as jobfiles


def test_world_size_4_reference_and_rank_subset(tmp_path):
    good = write_candidate(tmp_path / "c", "1_good.py", REFERENCE)
    options = quick_options(tmp_path, world_size=4, trials=2, jobs=1, timeout_s=180.0)
    (rec,) = run_eval([good], options)
    ev = rec.evaluation
    assert ev["status"] == "ran" and ev["world_size"] == 4, ev["reason"]
    assert ev["outcome"] in ("faster", "slower") and ev["correct"]
    assert [r["rank"] for r in ev["ranks"]] == [0, 1, 2, 3] and all(r["finished"] for r in ev["ranks"])
    assert set(ev["details"]["rank_times_ms"]["candidate"]) == {0, 1, 2, 3}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")
def test_cuda_candidate_on_cpu_is_not_run_with_the_reason(tmp_path, monkeypatch):
    import pkb.eval.launcher as launcher

    monkeypatch.setattr(launcher, "launch", lambda *a, **k: pytest.fail("a CUDA candidate was launched on CPU"))
    src = (
        "from torch.utils.cpp_extension import load_inline\n"
        "_ext = load_inline(name='ar', cpp_sources='torch::Tensor ar(torch::Tensor x);', cuda_sources=CUDA_SRC, functions=['ar'])\n"
        "def solution(x):\n"
        "    return _ext.ar(x)\n"
    )
    path = write_candidate(tmp_path / "c", "1_allreduce_cuda.py", src, header=False)
    (rec,) = run_eval([path], quick_options(tmp_path))
    ev = rec.evaluation
    assert ev["status"] == "not_run" and ev["outcome"] == ""
    assert ev["reason"] == "no CUDA device: this candidate builds CUDA code (load_inline)"


def _eval_cli(paths: list[Path], tmp: Path) -> list[str]:
    return [
        sys.executable, "-m", "pkb", "eval", *map(str, paths), "--out", str(tmp / "out"), "--jobs", "1",
        "--store", str(tmp / "kill.sqlite"), "--work-dir", str(tmp / "work"),
        "--world-size", "2", "--backend", "gloo", "--dtype", "float32",
        "--trials", "2", "--warmup", "1", "--iters", "3", "--groups", "2", "--timeout", "120",
    ]


def _outcome_rows(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return conn.execute("SELECT sha256, config_key, outcome, created FROM outcomes").fetchall()
    except sqlite3.OperationalError:  # the schema is not there yet
        return []


def test_sigkill_mid_run_then_resume_loses_and_duplicates_nothing(tmp_path):
    folder = tmp_path / "c"
    paths = [
        write_candidate(folder, "1_a_reference.py", REFERENCE),
        write_candidate(folder, "1_b_local.py", "def solution(x):\n    return x.clone()\n"),
        write_candidate(folder, "1_c_shape.py", allreduce_then("return out[:-1]")),
    ]
    db = tmp_path / "kill.sqlite"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(_eval_cli(paths, tmp_path), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while not _outcome_rows(db):
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline, "no result row landed"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)  # the evaluating process only
    proc.wait()
    before = _outcome_rows(db)
    assert 1 <= len(before) < 3

    # Its ranks must not outlive it (they die with their parents, not through our kill).
    time.sleep(1.0)
    from pkb.eval.sandbox import processes_of_job

    for job in (tmp_path / "work" / "jobs").glob("*/"):  # rank pids are the sandbox's: look by job file
        for _ in range(100):
            if not processes_of_job(job):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"rank processes of {job.name} survived the killed evaluator: {processes_of_job(job)}")

    out = subprocess.run(_eval_cli(paths, tmp_path), cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    after = _outcome_rows(db)
    assert len(after) == 3 and len({(r[0], r[1]) for r in after}) == 3
    outcomes = sorted(r[2] for r in after)
    assert outcomes.count("wrong_result") == 2 and outcomes[0] in ("faster", "slower")
    # what had finished before the kill was not redone
    created_after = {(r[0], r[1]): r[3] for r in after}
    assert all(created_after[(r[0], r[1])] == r[3] for r in before)
    assert out.stdout.count("(stored result)") == len(before)  # its line as it landed


# ---- PKB compatibility ---------------------------------------------------------------------------

FAKE_PKB_FACTORY = '''
import torch


def create_input_tensor(rank, world_size, problem_id, base_shape, dtype, trial=0, device=None):
    """Mimics PKB's problem 1: every element of rank r's tensor is r + 1."""
    assert problem_id == 1
    return (torch.full(base_shape, float(rank + 1), dtype=dtype, device=device),)
'''

FAKE_PKB_REFERENCE = '''
import torch
import torch.distributed as dist


@torch.no_grad()
def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
'''

# Right only for PKB's constant inputs: the sum of (r + 1) over ranks, written without any traffic.
CONSTANT_ANSWER = '''
import torch
import torch.distributed as dist


def solution(tensor):
    n = dist.get_world_size()
    return torch.full_like(tensor, n * (n + 1) / 2)
'''


def test_pkb_root_takes_reference_inputs_and_tolerance_from_the_checkout(tmp_path):
    root = tmp_path / "pkb"
    (root / "reference").mkdir(parents=True)
    (root / "utils").mkdir()
    (root / "utils" / "__init__.py").write_text("")
    (root / "utils" / "input_output_tensors.py").write_text(FAKE_PKB_FACTORY)
    (root / "reference" / "1_allreduce.py").write_text(FAKE_PKB_REFERENCE)
    cand = write_candidate(tmp_path / "solutions_cuda", "1_allreduce_cuda.py", CONSTANT_ANSWER, header=False)

    options = quick_options(tmp_path, dtype=None, pkb_root=str(root), pkb_shape=(16, 8), trials=2, jobs=1)
    (rec,) = run_eval([cand], options)
    ev = rec.evaluation
    assert ev["status"] == "ran", ev["reason"]
    # right on every trial (it would be wrong on our own random inputs); with no traffic of its
    # own, right only because it can predict its peers' inputs: suspect where the timed calls say so
    assert ev["outcome"] in ("faster", "slower", "suspect"), ev["reason"]
    assert all(t["matched"] for t in ev["trials"]), ev["trials"]
    assert ev["dtype"] == "bfloat16"  # PKB's default
    assert ev["problem_stem"] == "1_allreduce"
    rank0 = ev["trials"][0]["ranks"][0]
    assert rank0["numel"] == 16 * 8
    job = json.loads((Path(ev["job_dir"]) / "job.json").read_text())
    assert job["problem"]["kind"] == "pkb" and job["problem"]["shape"] == [16, 8]
    result = jobfiles.read_json(jobfiles.result_path(ev["job_dir"], 0))
    assert (result["trials"][0]["atol"], result["trials"][0]["rtol"]) == (1e-2, 1e-2)  # run_local.py's defaults
