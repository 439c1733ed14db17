"""Virtual ranks: a world of N ranks inside one process, for multi-rank correctness on one GPU (or none).

    emulated_evaluate(candidate_path, problem, world_size, trials=3, device=None, ...) -> dict
    emulated_sweep(candidate_path, problem, world_sizes=(2, 4, 8), ...) -> dict
    evaluate_record(record, world_size, ...) -> dict      # one record, in this process
    records.emulate_records(records, world_size, options)  # `pkb-analyze eval --emulate N`: a
        process per candidate (isolate, child), PKB's references with --pkb-root, builds before
        the clock, results stored marked emulated, "needs multicast" where that is all it lacks

Each rank is a thread with its own CUDA stream (CPU: a thread and CPU tensors), its own copy of
the candidate module (module-level caches stay per rank) and the fakes of `torch.distributed`
and `torch.distributed._symmetric_memory` installed for the run (pkb.emulate.patch). Results
are correctness only: every record carries "emulated": True and no timing. docs/emulation.md
says what emulation can and cannot show.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from pkb.emulate.evaluate import CAVEATS, emulated_evaluate, emulated_sweep

__all__ = ["emulated_evaluate", "emulated_sweep", "evaluate_record", "run_in_world", "CAVEATS"]


def evaluate_record(
    record: Any,
    world_size: int,
    *,
    trials: int = 3,
    device: Any = None,
    dtype: str | None = None,
    scale: str = "small",
    call_timeout_s: float | None = None,
) -> dict[str, Any]:
    """Emulated evaluation of one CandidateRecord (its problem_id, its source text or path).

    Returns the evaluation dict (assign it to record.evaluation, or keep it beside a real one);
    status 'not_run' with a reason when the record has no problem or no source."""
    base = {"emulated": True, "status": "not_run", "outcome": "", "subtype": "", "speedup": None, "timing": None,
            "correct": False, "world_size": int(world_size), "details": {}}
    if getattr(record, "problem_id", None) is None:
        return {**base, "reason": "no problem id (the file name does not start with '<id>_')"}
    source = getattr(record, "source", "") or ""
    path = Path(getattr(record, "path", "") or "")
    kwargs = dict(trials=trials, device=device, dtype=dtype, scale=scale, call_timeout_s=call_timeout_s)
    if source and not (path.is_file() and path.read_text(encoding="utf-8", errors="replace") == source):
        with tempfile.TemporaryDirectory(prefix="pkb_emulate_") as tmp:
            name = path.name if path.name.endswith(".py") else "candidate.py"
            f = Path(tmp) / name
            f.write_text(source, encoding="utf-8")
            out = emulated_evaluate(f, record.problem_id, world_size, **kwargs)
            out["candidate_path"] = str(path)
            return out
    if not path.is_file():
        return {**base, "reason": f"no source to run ({getattr(record, 'parse_status', '')})"}
    return emulated_evaluate(path, record.problem_id, world_size, **kwargs)


def run_in_world(world_size: int, fn: Any, args_per_rank: list[tuple] | None = None, *, device: Any = "cpu", timeout_s: float = 30.0) -> list[Any]:
    """Run fn(*args) on every virtual rank with the fakes installed; each rank's return value.

    For tests and experiments (the fakes answer per rank inside fn). Raises the first rank's
    exception, or TimeoutError with where the ranks were stuck."""
    import torch

    from pkb.emulate import patch
    from pkb.emulate.world import World, WorldAborted

    threads = torch.get_num_threads()
    world = World(world_size, device, name=f"run{world_size}")
    world.start()
    if world.device.type == "cpu":
        torch.set_num_threads(1)
    try:
        with patch.installed(world):
            out = world.step(lambda ctx, *a: fn(*a), args_per_rank, phase="run", timeout_s=timeout_s)
    finally:
        world.close()
        torch.set_num_threads(threads)
    if out.timed_out:
        raise TimeoutError(f"no progress in {timeout_s} s: {out.stuck}")
    errors = [r for r in out.results if r is not None and not r.ok]
    real = [r for r in errors if not isinstance(r.error, WorldAborted)] or errors
    if real:
        raise real[0].error  # type: ignore[misc]
    return [r.value for r in out.results]  # type: ignore[union-attr]
