"""What a rank hands the harness so that the harness, not the rank, can judge the candidate.

Before the candidate is imported, each rank runs the reference on every trial's inputs and
streams the outputs to the harness through a FIFO the launcher made (`channel_path`): the harness
keeps them where the sandbox hides them and hashes them as they arrive, so neither their content
nor their digest is in the candidate's reach. The rank opens the FIFO and removes its name at
start, before the rendezvous, so no candidate (its own or a peer's) can open it later. The
harness takes reference outputs only until the `references_end` mark the rank sends before the
candidate loads; the descriptor stays open after it for the timing's raw measurements, which the
harness checks against its own clock (pkb.eval.timing_judge).

After each candidate call, the output as it returned is copied to host memory and saved under
`outputs/rank<r>/trial<t>.pt` (`output_path`); the harness compares both sides after the launch
(pkb.eval.judge). Outputs past the byte cap are not sent or saved, and the record says so.

Wire format: one JSON header line, then `nbytes` raw bytes (a `torch.save` of the output on the
host) when the header has them. Headers: {"kind": "meta", ...}, {"kind": "reference", "trial",
"nbytes"} or {"kind": "reference", "trial", "too_large": bytes}, {"kind": "references_end"} (before
the candidate loads), then the timing's raw measurements (pkb.eval.timing_judge):
{"kind": "timing_mark", "side", "round", "pass", "at"} at each edge of a timed loop,
{"kind": "timing_sample", "side", "round", "pass", ...} with each measurement as it is taken
(pass "pipelined": "pipelined_ms", "pipelined_loop_ns"; "isolated": "call", "wall_ns",
"event_ms"), {"kind": "timing_round", "side", "round", "rounds", "iters", "warmup", "groups",
"measured"} after each round, and {"kind": "done"} at the rank's exit.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

from pkb.eval.tensors import tensors_of

# per output (all its tensors): the rank holds two host copies while sending, the harness keeps
# every trial of every rank in temporary files until the launch ends (it compares slice by slice)
DEFAULT_CAP_BYTES = 128 * 1024 * 1024
# The side of the reference's timed calls made before the candidate loaded: the harness takes its
# rounds and marks only before `references_end` (pkb.eval.rank_timing.time_reference_alone).
REFERENCE_ALONE = "reference_alone"


def channel_path(job_dir: str | Path, rank: int) -> Path:
    return Path(job_dir) / f".judge_rank{rank}"


def output_path(job_dir: str | Path, rank: int, trial: int) -> Path:
    return Path(job_dir) / "outputs" / f"rank{rank}" / f"trial{trial}.pt"


def output_bytes(out: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors_of(out))


def host_copy(out: Any) -> Any:
    """The output as plain host data (tensors, tuples, lists, dicts, numbers), or None when it holds
    something else (the harness cannot load an arbitrary object safely: it loads weights only)."""
    import torch

    if isinstance(out, torch.Tensor):
        if type(out) is not torch.Tensor:
            return None
        return out.detach().to("cpu", copy=True)
    if isinstance(out, (list, tuple)):
        items = [host_copy(v) for v in out]
        if any(i is None and v is not None for i, v in zip(items, out)):
            return None
        return tuple(items) if isinstance(out, tuple) else items
    if isinstance(out, dict):
        if not all(isinstance(k, (str, int)) for k in out):
            return None
        items = {k: host_copy(v) for k, v in out.items()}
        if any(items[k] is None and out[k] is not None for k in out):
            return None
        return items
    if out is None:
        return None
    for plain in (bool, int, float, str):  # numpy scalars subclass these: stored as the builtin
        if isinstance(out, plain):
            return plain(out)
    return None


def write_serialized(out: Any, fh: Any) -> bool:
    """torch.save of the output's host copy into the file object `fh`; False (nothing written)
    for an output type the channel does not carry."""
    import torch

    copy = host_copy(out)
    if copy is None and out is not None:
        return False
    torch.save(copy, fh)
    return True


def serialize(out: Any) -> bytes | None:
    buf = io.BytesIO()
    return buf.getvalue() if write_serialized(out, buf) else None


def scrub(out: Any) -> None:
    """Overwrite the reference's output tensors in place before they are freed: a freed block of
    the caching allocator keeps its bytes, and the candidate must not find the answer there."""
    import torch

    with torch.no_grad():
        for t in tensors_of(out):
            try:
                if t.numel() and t.layout == torch.strided:
                    t.zero_()
            except Exception:
                pass


class RankChannel:
    """The rank's end of the FIFO: opened and unlinked at start, closed before the candidate loads."""

    def __init__(self, job_dir: str, rank: int) -> None:
        self.rank = rank
        self.file: Any = None
        self.why_not = ""
        path = channel_path(job_dir, rank)
        try:
            # O_NONBLOCK: fails at once (ENXIO) when no harness reads it, instead of waiting forever
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            self.why_not = f"no channel to the harness ({type(exc).__name__}: {exc})"
            return
        os.set_blocking(fd, True)
        try:
            path.unlink()
        except OSError:
            pass
        self.file = os.fdopen(fd, "wb", buffering=0)

    @property
    def open(self) -> bool:
        return self.file is not None

    def send(self, header: dict[str, Any], payload: bytes = b"") -> None:
        if self.file is None:
            return
        if payload:
            header = {**header, "nbytes": len(payload)}
        self.file.write(json.dumps(header).encode() + b"\n")
        view = memoryview(payload)
        while view:
            n = self.file.write(view)
            view = view[n or 0:]

    def send_reference(self, trial: int, out: Any, cap_bytes: int) -> dict[str, Any]:
        size = output_bytes(out)
        if size > cap_bytes:
            self.send({"kind": "reference", "trial": trial, "too_large": size})
            return {"trial": trial, "sent": False, "why": "too large", "bytes": size}
        data = serialize(out)
        if data is None:
            self.send({"kind": "reference", "trial": trial, "unsupported": type(out).__name__})
            return {"trial": trial, "sent": False, "why": f"output type {type(out).__name__}"}
        self.send({"kind": "reference", "trial": trial}, data)
        return {"trial": trial, "sent": True, "bytes": len(data)}

    def end_references(self) -> None:
        """The last reference output is sent: the harness takes none after this mark (the candidate
        loads next, in this process, and could write to this channel)."""
        self.send({"kind": "references_end"})

    def close(self) -> None:
        if self.file is not None:
            try:
                self.send({"kind": "done"})
            finally:
                self.file.close()
                self.file = None


def save_output(job_dir: str, rank: int, trial: int, out: Any, cap_bytes: int) -> str:
    """The candidate's output as it returned, on the host, for the harness's own comparison.
    Returns 'saved', 'too large' or why it was not saved."""
    size = output_bytes(out)
    if size > cap_bytes:
        return "too large"
    from pkb.eval.job import harness_umask

    try:
        path = output_path(job_dir, rank, trial)
        partial = path.with_name(f".{path.name}.tmp")
        try:
            # Straight to the file (an output may be hundreds of MiB: no second copy in memory),
            # the same bytes as the channel's, under a name the judge does not read until whole.
            with harness_umask():
                path.parent.mkdir(parents=True, exist_ok=True)
                fh = partial.open("wb")
            with fh:
                written = write_serialized(out, fh)
            if not written:
                return f"output type {type(out).__name__}"
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
        return "saved"
    except Exception as exc:  # a convenience of the check, never a reason to fail the rank
        return f"not saved: {type(exc).__name__}: {exc}"
