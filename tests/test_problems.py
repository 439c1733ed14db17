"""Tests of the problem set (problems/p<id>_<name>.py).

The distributed checks run every problem's reference at world sizes 2 and 4 on the CPU with gloo:
one world of subprocesses per world size runs all problems (a world costs seconds to start, a
problem milliseconds). Each rank checks, for both dtypes and two trials: make_inputs is a pure
function of (rank, trial) and changes with the trial; the reference runs, leaves its inputs
unchanged and matches `global_reference` (the same math on the whole inputs, single process)
within the problem's tolerance with the exact shape and dtype; traffic_bytes is positive; every
hypothesis has the output's structure and is distinguishable from the right answer.
Each rank writes its findings to a JSON file that the tests below read.

This file is also the rank worker: `python tests/test_problems.py --worker RANK WORLD STORE OUT`.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import problems  # noqa: E402
from problems import _common  # noqa: E402

WORLD_SIZES = (2, 4)
DTYPES = ("float32", "bfloat16")
TRIALS = (0, 1)
WORLD_TIMEOUT_S = 180

# PKB's ids and names for the problems this set must cover
PKB_PROBLEMS = {
    1: "allreduce",
    2: "allgather",
    3: "broadcast",
    4: "reduce",
    7: "reducescatter",
    8: "alltoall",
    12: "allgather_gemm",
    13: "gemm_allreduce",
    16: "gemm_reducescatter",
    18: "tp_rms_norm",
    27: "moe_all2all_primitive",
    29: "moe_post_all2all",
    33: "ulysses_all_to_all_tensor_primitive",
    36: "ulysses_gather_seq_scatter_heads",
    45: "reducescatter_fused_rmsnorm",
    54: "ring_attention",
    73: "vocab_parallel_cross_entropy_loss",
    82: "vocab_parallel_log_prob_topk",
}
COLLECTIVES = (1, 2, 3, 4, 7, 8)
# base_shape (M, N) for PKB's input factory in the PKB_ROOT comparison: small enough for CPU ranks
PKB_BASE_SHAPE = (128, 256)


# ---------------------------------------------------------------- comparisons (worker and pytest)
def _leaves(value):
    """Tensors of an output or input tuple, with non-tensor leaves kept as they are."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _structure(value):
    if isinstance(value, (tuple, list)):
        return tuple(_structure(v) for v in value)
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype))
    return (type(value).__name__,)


def _structure_fact(value):
    """An output's structure as JSON: a tensor is [shape, dtype], a sequence a list of those."""
    if isinstance(value, (tuple, list)):
        return [_structure_fact(v) for v in value]
    if isinstance(value, torch.Tensor):
        return {"shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    return {"type": type(value).__name__}


def mismatch(got, expected, atol: float, rtol: float) -> str | None:
    """Why `got` is not `expected` within (atol, rtol), or None when it is."""
    if expected is None:
        return None  # an output outside the contract (e.g. reduce on non-destination ranks)
    if _structure(got) != _structure(expected):
        return f"structure {_structure(got)} != expected {_structure(expected)}"
    for index, (g, e) in enumerate(zip(_leaves(got), _leaves(expected))):
        if not isinstance(e, torch.Tensor):
            if g != e:
                return f"leaf {index}: {g!r} != {e!r}"
            continue
        if not (e.is_floating_point() or e.is_complex()):
            if not torch.equal(g, e):
                return f"leaf {index}: {int((g != e).sum())} integer elements differ"
            continue
        close = torch.isclose(g.double(), e.double(), atol=atol, rtol=rtol)
        if not bool(close.all()):
            worst = (g.double() - e.double()).abs().nan_to_num(float("inf")).max().item()
            return f"leaf {index}: {int((~close).sum())}/{close.numel()} elements off, max |diff| {worst:.3g}"
    return None


def identical(a, b) -> bool:
    return _structure(a) == _structure(b) and all(
        torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(_leaves(a), _leaves(b))
    )


# ---------------------------------------------------------------- the rank worker
def check_problem(pid: int, rank: int, world_size: int) -> dict:
    """All checks of one problem on one rank; every rank makes the same collective calls."""
    problem = problems.get(pid)
    module = problem.module
    failures: list[str] = []
    checks = hypotheses_seen = 0
    structure = None
    for dtype in DTYPES:
        atol, rtol = problem.spec.tolerances[dtype]
        for trial in TRIALS:
            where = f"{dtype} trial {trial}"
            try:
                inputs = module.make_inputs(rank, world_size, trial, "cpu", dtype)
                pristine = module.make_inputs(rank, world_size, trial, "cpu", dtype)
                if not identical(inputs, pristine):
                    failures.append(f"{where}: make_inputs gives different inputs for the same seed")
                if identical(inputs, module.make_inputs(rank, world_size, trial + 1, "cpu", dtype)):
                    failures.append(f"{where}: make_inputs ignores the trial")
                got = module.solution(*inputs)
            except Exception:  # noqa: BLE001 - reported, and the loop goes on to keep ranks in step
                failures.append(f"{where}: {traceback.format_exc(limit=4)}")
                continue
            checks += 1
            if dtype == "float32" and trial == 0:
                structure = _structure_fact(got)
            if not identical(inputs, pristine):
                failures.append(f"{where}: solution modified its inputs")
            inputs_per_rank = [module.make_inputs(r, world_size, trial, "cpu", dtype) for r in range(world_size)]
            expected = module.global_reference(inputs_per_rank, world_size)[rank]
            problem_with_output = mismatch(got, expected, atol, rtol)
            if problem_with_output:
                failures.append(f"{where}: reference != global_reference: {problem_with_output}")
            traffic = module.traffic_bytes(inputs, world_size)
            if set(traffic) != {"send", "recv"} or not all(isinstance(v, int) and v > 0 for v in traffic.values()):
                failures.append(f"{where}: traffic_bytes must give positive int send/recv, got {traffic}")
            if hasattr(module, "hypotheses"):
                for hyp in module.hypotheses(inputs_per_rank, expected, got, rank, world_size):
                    hypotheses_seen += 1
                    name = hyp.get("name")
                    if not isinstance(name, str) or not name:
                        failures.append(f"{where}: hypothesis without a name: {hyp}")
                        continue
                    if "tensor" not in hyp:
                        continue
                    predicted = hyp["tensor"]
                    if hyp.get("shape_changes"):
                        continue  # predicts a shape mismatch: distinguishable by shape alone
                    if _structure(predicted) != _structure(expected):
                        failures.append(f"{where}: hypothesis {name} has structure {_structure(predicted)}, "
                                        f"output has {_structure(expected)}")
                    elif mismatch(predicted, expected, atol, rtol) is None:
                        failures.append(f"{where}: hypothesis {name} {hyp.get('peers', '')} equals the right answer")
    return {"checks": checks, "hypotheses": hypotheses_seen, "failures": failures, "structure": structure}


def _pkb_reference(pid: int):
    """PKB's own reference module for problem `pid`, imported from the checkout at $PKB_ROOT."""
    import importlib.util

    root = Path(os.environ["PKB_ROOT"])
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))  # references and the factory import `utils.*`
    path = root / "reference" / f"{problems.get(pid).spec.stem}.py"
    spec = importlib.util.spec_from_file_location(f"pkb_reference_{pid}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pkb_factory():
    import importlib.util

    root = Path(os.environ["PKB_ROOT"])
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    spec = importlib.util.spec_from_file_location("pkb_input_factory", root / "utils" / "input_output_tensors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextmanager
def _gloo_accepts_stacked_all_gather():
    """gloo's all_gather_into_tensor refuses an output of shape [world, *input.shape] (NCCL takes
    it; PKB's 2_allgather uses it): hand gloo the same memory as [world * rows, ...]."""
    import torch.distributed as dist

    real = dist.all_gather_into_tensor

    def flat_output(output, input, *args, **kwargs):
        if output.dim() == input.dim() + 1 and input.dim() > 0 and output.is_contiguous():
            output = output.flatten(0, 1)
        return real(output, input, *args, **kwargs)

    dist.all_gather_into_tensor = flat_output
    try:
        yield
    finally:
        dist.all_gather_into_tensor = real


def compare_with_pkb(pid: int, rank: int, world_size: int) -> dict:
    """PKB's reference and ours on the same inputs: ours (make_inputs) and PKB's (its input factory).

    Returns the failures and the structure of PKB's output on our float32 trial-0 inputs (the
    committed facts are checked against it)."""
    problem = problems.get(pid)
    failures: list[str] = []
    structure = None
    theirs_module = _pkb_reference(pid)
    factory = _pkb_factory()
    for dtype in DTYPES:
        atol, rtol = problem.spec.tolerances[dtype]
        for source in ("ours", "pkb"):
            where = f"{dtype} inputs from {source}"
            def make():  # each side gets its own inputs: PKB's 73 edits its logits in place
                if source == "ours":
                    return problem.module.make_inputs(rank, world_size, 0, "cpu", dtype)
                return factory.create_input_tensor(rank, world_size, pid, PKB_BASE_SHAPE,
                                                   _common.resolve_dtype(dtype), 0, device="cpu")

            try:
                with _gloo_accepts_stacked_all_gather():
                    expected = theirs_module.solution(*make())
                got = problem.module.solution(*make())
            except Exception:  # noqa: BLE001 - reported; ranks stay in step on the next case
                failures.append(f"{where}: {traceback.format_exc(limit=3)}")
                continue
            if source == "ours" and dtype == "float32":
                structure = _structure_fact(expected)
            why = mismatch(got, expected, atol, rtol)
            if why:
                failures.append(f"{where}: ours != PKB's: {why}")
    return {"failures": failures, "structure": structure}


def worker_main(rank: int, world_size: int, store: str, out: str) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=60))
    report = {}
    for pid in problems.ids():
        started = time.perf_counter()
        report[str(pid)] = check_problem(pid, rank, world_size)
        report[str(pid)]["seconds"] = round(time.perf_counter() - started, 3)
    if os.environ.get("PKB_ROOT"):
        report["pkb"] = {}
        for pid in sorted(PKB_PROBLEMS):
            report["pkb"][str(pid)] = compare_with_pkb(pid, rank, world_size)
            dist.barrier()  # a failure on one rank must not leave the others in a collective
    dist.barrier()
    dist.destroy_process_group()
    Path(out).write_text(json.dumps(report), encoding="utf-8")


@lru_cache(maxsize=None)
def world_report(world_size: int) -> dict:
    """Run all problems in one gloo world; {rank: {problem id: findings}} or raise with the logs."""
    tmp = Path(tempfile.mkdtemp(prefix=f"pkb_problems_ws{world_size}_"))
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    procs = []
    for rank in range(world_size):
        log = open(tmp / f"rank{rank}.log", "w", encoding="utf-8")
        cmd = [sys.executable, __file__, "--worker", str(rank), str(world_size), str(tmp / "store"),
               str(tmp / f"rank{rank}.json")]
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO), log))
    deadline = time.monotonic() + WORLD_TIMEOUT_S
    codes = []
    for proc, log in procs:
        try:
            codes.append(proc.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for other, _ in procs:
                if other.poll() is None:
                    other.kill()  # only the workers this function started
            codes.append(None)
        log.close()
    if any(code != 0 for code in codes):
        logs = "\n".join(f"--- rank {r} (exit {codes[r]})\n" + (tmp / f"rank{r}.log").read_text()[-3000:]
                         for r in range(world_size))
        raise RuntimeError(f"world of {world_size} failed:\n{logs}")
    return {rank: json.loads((tmp / f"rank{rank}.json").read_text()) for rank in range(world_size)}


# ---------------------------------------------------------------- tests: registry and metadata
def test_problem_set_covers_pkb_ids_and_names():
    assert len(problems.ids()) >= 18
    assert {pid: problems.names()[pid] for pid in PKB_PROBLEMS} == PKB_PROBLEMS


def test_get_resolves_id_stem_and_name():
    by_stem = problems.get("1_allreduce")
    assert by_stem.spec.stem == "1_allreduce"
    assert problems.get(1).module is by_stem.module
    assert problems.get("allreduce").module is by_stem.module
    assert problems.get("1").module is by_stem.module
    assert problems.get("82_vocab_parallel_log_prob_topk").id == 82
    with pytest.raises(KeyError):
        problems.get("no_such_problem")
    with pytest.raises(KeyError):
        problems.get(999)


@pytest.mark.parametrize("pid", sorted(PKB_PROBLEMS))
def test_spec_read_by_ast_equals_imported_spec(pid):
    problems.spec.cache_clear()
    imported = problems.get(pid).spec
    assert problems.spec(pid) == imported
    assert imported.id == pid and imported.name == problems.names()[pid]
    assert imported.category in problems.CATEGORIES
    assert imported.has_compute is (pid not in COLLECTIVES + (27, 33, 36))
    assert imported.source and imported.description
    for dtype in imported.dtypes:
        atol, rtol = imported.tolerances[dtype]
        assert 0 < atol < 1 and 0 < rtol < 1


@pytest.mark.parametrize("pid", sorted(PKB_PROBLEMS))
def test_module_contract(pid):
    module = problems.get(pid).module
    for fn in ("solution", "make_inputs", "traffic_bytes", "global_reference"):
        assert callable(getattr(module, fn, None)), f"{pid}: missing {fn}"
    params = inspect.signature(module.make_inputs).parameters
    assert list(params)[:5] == ["rank", "world_size", "trial", "device", "dtype"]
    assert params["scale"].default == "small"
    assert set(module.SIZES) == set(_common.SCALES)
    source = inspect.getsource(module)
    assert "@torch.no_grad()\ndef solution(" in source
    with pytest.raises(ValueError):
        module.make_inputs(0, 2, 0, "cpu", "float32", scale="huge")


def test_hypotheses_for_collectives_and_at_least_four_others():
    with_hypotheses = {pid for pid in problems.ids() if hasattr(problems.get(pid).module, "hypotheses")}
    assert set(COLLECTIVES) <= with_hypotheses
    assert len(with_hypotheses - set(COLLECTIVES)) >= 4


def test_seed_follows_pkb_convention():
    assert _common.seed_for(1, 0, 0) == 1042
    assert _common.seed_for(12, 3, 2) == 42 + 12000 + 3 + 2 * 1000003
    a = torch.randn(4, generator=_common.seeded_generator(7, 1, 0))
    b = torch.randn(4, generator=_common.seeded_generator(7, 1, 0))
    assert torch.equal(a, b)


# ---------------------------------------------------------------- tests: distributed runs
@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("pid", sorted(PKB_PROBLEMS))
def test_reference_matches_global_reference(world_size, pid):
    report = world_report(world_size)
    for rank in range(world_size):
        found = report[rank][str(pid)]
        assert not found["failures"], f"rank {rank}:\n" + "\n".join(found["failures"])
        assert found["checks"] == len(DTYPES) * len(TRIALS)



def test_inputs_drawn_under_a_launch_key_keep_shared_data_and_hide_the_rest():
    """salted_inputs: our problems' seeds and PKB's torch.manual_seed calls hashed with the key,
    only inside the harness's draw. Replicated data (rank 0's seed on every rank) stays equal
    across ranks; a rank's own input differs from what the public formula gives, differs under
    another key, repeats under the same one; outside the draw the plain formula holds."""
    from pkb.eval.problem_source import salted_inputs

    make = problems.get(12).module.make_inputs  # A per rank, B replicated from rank 0's seed
    key, other = b"k" * 16, b"q" * 16
    plain0, plain1 = make(0, 2, 3, "cpu", torch.float32), make(1, 2, 3, "cpu", torch.float32)
    salted = salted_inputs(make, key)
    s0, s1 = salted(0, 2, 3, "cpu", torch.float32), salted(1, 2, 3, "cpu", torch.float32)
    assert torch.equal(s0[1], s1[1]) and not torch.equal(s0[1], plain0[1])  # B: shared, not public
    assert not torch.equal(s0[0], plain0[0]) and not torch.equal(s1[0], plain1[0])
    assert torch.equal(salted(0, 2, 3, "cpu", torch.float32)[0], s0[0])
    assert not torch.equal(salted_inputs(make, other)(0, 2, 3, "cpu", torch.float32)[0], s0[0])
    assert _common.seed_for(1, 0, 0) == 1042 and salted_inputs(make, None) is make

    def pkb_style(rank, ws, trial, device, dtype):  # PKB's factory seeds the global generator
        torch.manual_seed(42 + rank + trial * 1_000_003)
        return (torch.randn(4),)

    plain_seed = torch.manual_seed
    drawn = salted_inputs(pkb_style, key)(1, 2, 0, "cpu", torch.float32)[0]
    assert torch.manual_seed is plain_seed
    assert not torch.equal(drawn, pkb_style(1, 2, 0, "cpu", torch.float32)[0])
    assert torch.equal(drawn, salted_inputs(pkb_style, key)(1, 2, 0, "cpu", torch.float32)[0])

@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_hypotheses_were_exercised(world_size):
    report = world_report(world_size)
    for pid in problems.ids():
        if hasattr(problems.get(pid).module, "hypotheses"):
            assert sum(report[r][str(pid)]["hypotheses"] for r in range(world_size)) > 0, pid


# ---------------------------------------------------------------- tests: PKB's references
FACTS_PATH = REPO / "tests" / "fixtures" / "pkb_problem_facts.json"
needs_pkb = pytest.mark.skipif(not os.environ.get("PKB_ROOT"), reason="set PKB_ROOT to a ParallelKernelBench checkout")


def pkb_facts_from_checkout() -> dict:
    """The facts CI checks without a checkout, computed from PKB's references at $PKB_ROOT: each
    problem's solution() parameters, and its output structure on every rank for our small float32
    trial-0 inputs at world sizes 2 and 4."""
    facts: dict[str, dict] = {}
    for world_size in WORLD_SIZES:
        report = world_report(world_size)
        for pid in sorted(PKB_PROBLEMS):
            entry = facts.setdefault(str(pid), {
                "name": PKB_PROBLEMS[pid],
                "params": list(inspect.signature(_pkb_reference(pid).solution).parameters),
                "output_by_world_size": {},
            })
            entry["output_by_world_size"][str(world_size)] = [report[r]["pkb"][str(pid)]["structure"]
                                                              for r in range(world_size)]
    return {"source": "ParallelKernelBench reference/ at dab08304, run on CPU gloo ranks on our "
                      "make_inputs(rank, world_size, 0, 'cpu', 'float32'); written by "
                      "`PKB_ROOT=... python tests/test_problems.py --write-pkb-facts`",
            "problems": facts}


def committed_facts() -> dict:
    return json.loads(FACTS_PATH.read_text(encoding="utf-8"))["problems"]


@pytest.mark.parametrize("pid", sorted(PKB_PROBLEMS))
def test_signature_is_pkbs(pid):
    from problems import catalog

    facts = committed_facts()[str(pid)]
    ours = list(inspect.signature(problems.get(pid).module.solution).parameters)
    assert ours == facts["params"] == list(catalog.entries()[pid].params)
    assert facts["name"] == catalog.entries()[pid].name == problems.get(pid).name


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_output_structure_is_pkbs(world_size):
    report = world_report(world_size)
    for pid, facts in committed_facts().items():
        ours = [report[r][pid]["structure"] for r in range(world_size)]
        assert ours == facts["output_by_world_size"][str(world_size)], pid


@needs_pkb
@pytest.mark.parametrize("world_size", (1, *WORLD_SIZES))
@pytest.mark.parametrize("pid", sorted(PKB_PROBLEMS))
def test_agrees_with_pkb_reference(world_size, pid):
    """PKB's reference and ours on the same inputs (ours and PKB's input factory, both dtypes);
    world size 1 too, where a one-GPU user evaluates."""
    report = world_report(world_size)
    for rank in range(world_size):
        found = report[rank]["pkb"][str(pid)]
        assert not found["failures"], f"rank {rank}:\n" + "\n".join(found["failures"])


@needs_pkb
def test_committed_facts_are_pkbs():
    assert pkb_facts_from_checkout()["problems"] == committed_facts()


# ---------------------------------------------------------------- tests: hypotheses name real bugs
def _inputs(pid, world_size, trial=0, dtype="float32"):
    module = problems.get(pid).module
    return module, [module.make_inputs(r, world_size, trial, "cpu", dtype) for r in range(world_size)]


def _matching(hyps, got, atol=1e-5, rtol=1e-5):
    return [(h["name"], h.get("peers")) for h in hyps if "tensor" in h and mismatch(got, h["tensor"], atol, rtol) is None]


def test_allreduce_missing_peer_is_named():
    module, ipr = _inputs(1, 4)
    expected = module.global_reference(ipr, 4)[0]
    buggy = ipr[0][0] + ipr[1][0] + ipr[3][0]  # rank 2's share never arrived
    assert _matching(module.hypotheses(ipr, expected, buggy, 0, 4), buggy) == [("missing_peer", [2])]
    assert _matching(module.hypotheses(ipr, expected, ipr[0][0], 0, 4), ipr[0][0]) == [("local_only", None)]


def test_allgather_gemm_layout_slip_is_named():
    module, ipr = _inputs(12, 4)
    expected = module.global_reference(ipr, 4)[1]
    a_stacked = torch.cat([inp[0] for inp in ipr], dim=0)  # gathered along dim 0 ...
    buggy = a_stacked.reshape(a_stacked.shape[0] // 4, -1) @ ipr[1][1]  # ... and viewed as [M, K]
    assert _matching(module.hypotheses(ipr, expected, buggy, 1, 4), buggy, 1e-4, 1e-4) == [("gather_layout", None)]


def test_tp_rms_norm_local_statistics_are_named():
    module, ipr = _inputs(18, 2)
    x, weight, eps = ipr[1]
    buggy = weight * (x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps))
    expected = module.global_reference(ipr, 2)[1]
    assert _matching(module.hypotheses(ipr, expected, buggy, 1, 2), buggy) == [("local_only", None)]


def test_cross_entropy_unreduced_target_is_named():
    module, ipr = _inputs(73, 2)
    full = torch.cat([inp[0] for inp in ipr], dim=-1)
    target = ipr[0][1]
    local_pick = torch.where(target < ipr[0][0].shape[-1], full.gather(-1, target[..., None])[..., 0], 0.0)
    buggy = full.logsumexp(-1) - local_pick  # rank 0 never received the target logits it does not own
    expected = module.global_reference(ipr, 2)[0]
    assert _matching(module.hypotheses(ipr, expected, buggy, 0, 2), buggy, 1e-4, 1e-5) == [("target_not_reduced", None)]


def test_ring_attention_missing_block_is_named():
    module, ipr = _inputs(54, 4)
    q, scale = ipr[0][0], ipr[0][3]  # trial 0 is not causal
    keys = torch.cat([ipr[b][1] for b in (0, 1, 2)], dim=1)  # the block of rank 3 was skipped
    values = torch.cat([ipr[b][2] for b in (0, 1, 2)], dim=1)
    buggy = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2), scale=scale).transpose(1, 2)
    expected = module.global_reference(ipr, 4)[0]
    assert _matching(module.hypotheses(ipr, expected, buggy, 0, 4), buggy, 1e-5, 1e-5) == [("missing_peer", [3])]


def test_moe_all2all_splits_are_uneven_and_consistent():
    module, ipr = _inputs(27, 4)
    sent = [list(inp[1]) for inp in ipr]
    for rank, inp in enumerate(ipr):
        assert list(inp[2]) == [sent[s][rank] for s in range(4)]  # receives what the others send it
        assert inp[0].shape[0] == sum(inp[1])
    assert len({n for row in sent for n in row}) > 1  # blocks differ in size
    out = module.global_reference(ipr, 4)[2]
    block_of_1_for_2 = ipr[1][0][sent[1][0] + sent[1][1]: sent[1][0] + sent[1][1] + sent[1][2]]
    start = sent[0][2]
    assert torch.equal(out[start:start + sent[1][2]], block_of_1_for_2)


def test_moe_combine_is_the_weighted_sum_per_token():
    module, ipr = _inputs(29, 2)
    out = module.global_reference(ipr, 2)[0]
    weights, selected = ipr[0][1], ipr[0][2]
    rows = module._received(ipr, 0, 2)  # rows in (expert, token) order
    order = ipr[0][7].nonzero().tolist()
    token = 5
    expect = sum(weights[token, k] * rows[order.index([int(selected[token, k]), token])] for k in range(2))
    assert torch.allclose(out[token], expect, atol=1e-6)


@pytest.mark.skipif(not os.environ.get("PKB_TEST_LARGE"), reason="set PKB_TEST_LARGE=1: allocates the GPU-sized inputs")
@pytest.mark.parametrize("pid", sorted(PKB_PROBLEMS))
def test_large_inputs_are_8_to_64_mib_per_rank(pid):
    module = problems.get(pid).module
    inputs = module.make_inputs(0, 8, 0, "cpu", "bfloat16", scale="large")
    total = sum(t.numel() * t.element_size() for t in _leaves(inputs) if isinstance(t, torch.Tensor))
    assert 8 << 20 <= total <= 64 << 20, total


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "--worker":
    worker_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
elif __name__ == "__main__" and sys.argv[1:] == ["--write-pkb-facts"]:
    facts = pkb_facts_from_checkout()
    lines = [f"  {json.dumps(pid)}: {json.dumps(entry)}" for pid, entry in facts["problems"].items()]
    FACTS_PATH.write_text('{"source": ' + json.dumps(facts["source"]) + ',\n "problems": {\n' + ",\n".join(lines)
                          + "\n }}\n", encoding="utf-8")
    print(f"wrote {FACTS_PATH}")
