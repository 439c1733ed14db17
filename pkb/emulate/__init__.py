"""Virtual ranks: a world of N ranks inside one process, for multi-rank correctness on one GPU (or none).

    emulated_evaluate(candidate_path, problem, world_size, trials=3, device=None, ...) -> dict
    emulated_sweep(candidate_path, problem, world_sizes=(2, 4, 8), ...) -> dict
    evaluate_record(record, world_size, ...) -> dict      # what `pkb-analyze eval --emulate N` calls

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

__all__ = ["emulated_evaluate", "emulated_sweep", "evaluate_record", "CAVEATS"]


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
