"""The harness's own judgement of a launch: the reference's outputs, received before the candidate
existed, against the candidate's outputs as they returned, compared in this process (which never
imports the candidate) with the same comparison and tolerances the ranks use.

During the launch, one reader thread per rank drains the rank's FIFO (pkb.eval.verdict_channel):
the reference outputs until the rank's mark before the candidate loads, then the timing's raw
measurements, each stamped with this process's clock (their figures and checks: pkb.eval.timing_judge),
into unnamed temporary files (O_TMPFILE: no path a candidate could open; with a PID namespace it
cannot see this process's descriptors either), hashing each output as it arrives. After the launch,
`recheck` compares trial by trial (one trial's two outputs in memory at a time) and names every
trial where the rank's reported verdict and the harness's differ. A rank that reported a trial
correct which the harness finds wrong had its comparison tampered with: the outcome is suspect.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import select
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

from pkb.eval.tensors import spans_past_storage
from pkb.eval.verdict_channel import REFERENCE_ALONE, channel_path, output_path

LATE_REFERENCE_ALONE = "timing of the reference alone after the candidate loaded"

READ_CHUNK = 1 << 20
COMPARE_CHUNK = 4 << 20  # elements per slice: the comparison holds a few float64 copies of one
HEADER_MAX = 1 << 20  # a timing round's measurements (a few numbers per call) fit many times over


class ChannelReader(threading.Thread):
    """Drains one rank's FIFO until its `done` header (or `stop()`): meta, then one reference
    output per trial, each kept in an unnamed file with its sha256."""

    def __init__(self, job_dir: str | Path, rank: int) -> None:
        super().__init__(name=f"judge-channel-rank{rank}", daemon=True)
        self.rank = rank
        self.path = channel_path(job_dir, rank)
        os.mkfifo(self.path, 0o600)
        # read-write: the open never waits for the rank, and reads never see EOF before it writes
        self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        self.meta: dict[str, Any] | None = None
        self.references: dict[int, dict[str, Any]] = {}  # trial -> {file, sha256, bytes} or {why}
        self.references_done = False  # the rank's mark before the candidate loaded
        self.timing_rounds: list[dict[str, Any]] = []  # each with arrived_ns, this process's clock
        self.timing_marks: list[dict[str, Any]] = []
        self.timing_samples: list[dict[str, Any]] = []  # each measurement as the rank took it
        self.late: list[str] = []  # what came after references_end that the harness did not take
        self.done = False
        self.error = ""
        self._stopping = threading.Event()
        self._buf = b""

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        try:
            while not self.done:
                line = self._read_line()
                if line is None:
                    return
                arrived_ns = time.monotonic_ns()
                if self.references_done:
                    self._after_references(line, arrived_ns)
                    continue
                header = json.loads(line)
                kind = header.get("kind")
                if kind == "meta":
                    self.meta = header
                elif kind == "reference":
                    self._reference(header)
                elif kind in ("timing_round", "timing_mark") and header.get("side") == REFERENCE_ALONE:
                    # the reference timed before the candidate loaded (pkb.eval.rank_timing)
                    (self.timing_rounds if kind == "timing_round" else self.timing_marks).append({**header, "arrived_ns": arrived_ns})
                elif kind == "references_end":
                    self.references_done = True
                elif kind == "done":
                    self.done = self.references_done = True
                else:
                    raise ValueError(f"unknown header {kind!r}")
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            try:
                os.close(self.fd)
            except OSError:
                pass
            try:
                self.path.unlink()
            except OSError:
                pass

    def _after_references(self, line: bytes, arrived_ns: int) -> None:
        """The timing's messages, stamped as they arrive. The candidate shares the rank's process
        from here on: what does not parse, or is not timing, is noted and skipped (a payload it
        announces is not read as headers), never a reason to stop draining the channel."""
        try:
            header = json.loads(line)
            kind = header.get("kind") if isinstance(header, dict) else None
        except ValueError:
            header, kind = {}, None
        if kind in ("timing_round", "timing_mark") and header.get("side") == REFERENCE_ALONE:
            self.late.append(LATE_REFERENCE_ALONE)  # only the rank, before the candidate loaded, sends these
        elif kind == "timing_round":
            self.timing_rounds.append({**header, "arrived_ns": arrived_ns})
        elif kind == "timing_mark":
            self.timing_marks.append({**header, "arrived_ns": arrived_ns})
        elif kind == "timing_sample":
            self.timing_samples.append(header)
        elif kind == "done":
            self.done = True
        else:
            self.late.append(str(kind or line[:80]))
            skip = header.get("nbytes") if isinstance(header, dict) else None
            if isinstance(skip, int) and skip > 0:
                while skip > 0:
                    taken = min(skip, len(self._buf))
                    self._buf, skip = self._buf[taken:], skip - taken
                    if skip and self._read_more() is None:
                        return

    def _read_more(self) -> bytes | None:
        data = self._read(READ_CHUNK)
        if data is not None:
            self._buf += data
        return data

    def _reference(self, header: dict[str, Any]) -> None:
        trial = int(header["trial"])
        if "nbytes" not in header:
            why = "too large" if header.get("too_large") else f"output type {header.get('unsupported', '?')}"
            self.references[trial] = {"why": why, "bytes": header.get("too_large")}
            return
        n = int(header["nbytes"])
        f = tempfile.TemporaryFile()
        digest = hashlib.sha256()
        left = n
        if self._buf:
            head, self._buf = self._buf[:left], self._buf[left:]
            f.write(head)
            digest.update(head)
            left -= len(head)
        while left:
            chunk = self._read(min(left, READ_CHUNK))
            if chunk is None:
                f.close()
                raise EOFError(f"trial {trial}: the channel ended inside an output")
            f.write(chunk)
            digest.update(chunk)
            left -= len(chunk)
        self.references[trial] = {"file": f, "sha256": digest.hexdigest(), "bytes": n}

    def _read(self, n: int) -> bytes | None:
        """Waits for data; once stopped, reads what is left in the FIFO and then gives up."""
        while True:
            stopping = self._stopping.is_set()
            ready, _, _ = select.select([self.fd], [], [], 0.0 if stopping else 0.2)
            if ready:
                try:
                    data = os.read(self.fd, n)
                except BlockingIOError:
                    data = b""
                if data:
                    return data
            if stopping:
                return None

    def _read_line(self) -> bytes | None:
        while b"\n" not in self._buf:
            if len(self._buf) > HEADER_MAX:
                if not self.references_done:
                    raise ValueError("a header past its size limit")
                self.late.append("a line past the header size limit")
                self._buf = b""  # dropped; the stream goes on
            data = self._read(READ_CHUNK)
            if data is None:
                return None
            self._buf += data
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def close(self) -> None:
        for ref in self.references.values():
            f = ref.pop("file", None)
            if f is not None:
                f.close()


def open_channels(job_dir: str | Path, world_size: int) -> list[ChannelReader]:
    """One started reader per rank; OSError (a filesystem without FIFOs) leaves none open."""
    readers: list[ChannelReader] = []
    try:
        for r in range(world_size):
            readers.append(ChannelReader(job_dir, r))
    except OSError:
        for reader in readers:
            os.close(reader.fd)
            reader.path.unlink(missing_ok=True)
        raise
    for reader in readers:
        reader.start()
    return readers


def without_channels(why: str) -> dict[str, Any]:
    """The record's `judge_check` when the harness could not open the ranks' channels."""
    return {"judge": "rank", "rechecked": 0, "not_rechecked": [{"why": f"no channel to the ranks: {why}"}],
            "tampered": [], "disagreements": [], "reference_digests": {}}


def finish_channels(readers: list[ChannelReader], wait_s: float = 5.0) -> None:
    """After the launch (every writer gone): each reader reads what is left in its FIFO, then ends."""
    for reader in readers:
        reader.stop()
    for reader in readers:
        reader.join(timeout=wait_s)


def _digest(f: BinaryIO) -> str:
    f.seek(0)
    h = hashlib.sha256()
    for chunk in iter(lambda: f.read(READ_CHUNK), b""):
        h.update(chunk)
    f.seek(0)
    return h.hexdigest()


def _load_candidate_output(path: Path, job_dir: Path) -> Any:
    """A rank's saved output, read only where it is a plain file inside the job folder: the
    candidate names the path's parts, and a link to /proc/self/fd/N would be read in this process
    as the harness's own reference copy."""
    import stat

    real = Path(os.path.realpath(path))
    if not real.is_relative_to(Path(os.path.realpath(job_dir))):
        raise PermissionError(f"the saved output leads outside the job folder (to {str(real)[:120]})")
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO must not block the harness
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PermissionError("the saved output is not a plain file")
        got = _load(f"/proc/self/fd/{fd}")
        if spans_past_storage(got):  # the rank saves host copies, never an expanded view
            raise PermissionError("a tensor of the saved output spans more elements than its storage (expanded): not the rank's save")
        return got
    finally:
        os.close(fd)


def _compare_saved(ref: dict[str, Any], got_path: Path, job_dir: Path, atol: float, rtol: float) -> dict[str, Any]:
    """The harness's comparison of a rank's saved output with its copy of the reference (raises
    where either cannot be read); the reference's file is left at its start for the next reader."""
    try:
        # the unnamed file through this process's own descriptor table, so it can be mapped
        expected = _load(f"/proc/self/fd/{ref['file'].fileno()}")
        return compare_streaming(expected, _load_candidate_output(got_path, job_dir), atol, rtol)
    finally:
        ref["file"].seek(0)


def _load(path: str | Path) -> Any:
    import torch

    # weights only: a candidate's file must not run code in the harness when it is read;
    # mmap: the tensors stay in the page cache, read chunk by chunk by `compare_streaming`
    return torch.load(path, map_location="cpu", weights_only=True, mmap=True)


def compare_streaming(expected: Any, got: Any, atol: float, rtol: float, chunk: int = COMPARE_CHUNK) -> dict[str, Any]:
    """pkb.eval.compare's verdict and figures, leaf by leaf and, for two tensors of one shape,
    over flat slices of `chunk` elements: the comparison is elementwise, so the slices' counts add
    up and their maxima give the whole's, while memory stays a few slices' worth."""
    import torch

    from pkb.eval.compare import compare_outputs, flatten_output

    exp_leaves, got_leaves = flatten_output(expected), flatten_output(got)
    if [n for n, _ in exp_leaves] != [n for n, _ in got_leaves]:
        return compare_outputs(expected, got, atol, rtol)
    total: dict[str, Any] = {"matched": True, "shape_ok": True, "dtype_ok": True, "structure_ok": True,
                             "numel": 0, "mismatches": 0, "max_abs_err": 0.0, "max_violation": 0.0}
    for (_, e), (_, g) in zip(exp_leaves, got_leaves):
        sliceable = (isinstance(e, torch.Tensor) and isinstance(g, torch.Tensor) and e.shape == g.shape
                     and e.layout == torch.strided and g.layout == torch.strided and e.numel() > chunk)
        if sliceable:
            ef, gf = e.reshape(-1), g.reshape(-1)
            parts = [compare_outputs(ef[i:i + chunk], gf[i:i + chunk], atol, rtol) for i in range(0, ef.numel(), chunk)]
        else:
            parts = [compare_outputs(e, g, atol, rtol)]
        for part in parts:
            for key in ("matched", "shape_ok", "dtype_ok", "structure_ok"):
                total[key] = total[key] and bool(part.get(key, True))
            for key in ("numel", "mismatches"):
                total[key] += int(part.get(key, 0))
            for key in ("max_abs_err", "max_violation"):
                total[key] = max(total[key], float(part.get(key, 0.0)))
    return total


def _summary(cmp: dict[str, Any]) -> dict[str, Any]:
    keys = ("matched", "mismatches", "numel", "max_abs_err", "max_violation", "shape_ok", "dtype_ok", "structure_ok")
    return {k: cmp.get(k) for k in keys if k in cmp}


def near_tolerance(mine: dict[str, Any], reported: dict[str, Any]) -> bool:
    """An honest rank and the harness can differ at the edge of the tolerance: the rank compares
    with the reference run after the candidate, the harness with its run before, and a reference
    with atomics or another reduction order differs a little between runs. So: the harness's worst
    element within TOLERANCE_FACTOR tolerances, and the rank's own figures near the edge for the
    same elements. A comparison made to say yes reports nothing like that."""
    from pkb.eval.compare import TOLERANCE_FACTOR

    try:
        return (bool(mine.get("shape_ok", True) and mine.get("dtype_ok", True) and mine.get("structure_ok", True))
                and float(mine.get("max_violation", math.inf)) <= TOLERANCE_FACTOR
                and float(reported.get("max_violation", 0.0)) >= 0.5
                and int(reported.get("numel", -1)) == int(mine.get("numel", -2)))
    except (TypeError, ValueError):
        return False


def recheck(readers: list[ChannelReader], job_dir: str | Path, rank_results: list[dict[str, Any] | None]) -> dict[str, Any]:
    """The harness's comparison of every trial the ranks reported (pkb.eval.compare: the parent's
    copy, loaded before any launch, with the tolerances the rank sent before the candidate loaded;
    one trial's two outputs mapped at a time). Returns the record's
    `judge_check`: who decided (`judge`), every trial the harness could not recheck and why,
    `tampered` (the rank said correct, the harness says wrong) and `disagreements` (the other way)."""
    out: dict[str, Any] = {"rechecked": 0, "not_rechecked": [], "tampered": [], "disagreements": [], "reference_digests": {},
                           "emulation": "emulated ranks are compared inside the emulation's process (not rechecked here)"}
    for reader in readers:
        r = reader.rank
        result = rank_results[r] if r < len(rank_results) else None
        if reader.meta is None:
            out["not_rechecked"].append({"rank": r, "why": reader.error or "the rank sent nothing before the candidate loaded"})
            continue
        if not reader.references_done:
            out["not_rechecked"].append({"rank": r, "why": reader.error or "the rank's reference outputs did not all arrive"})
            continue
        out["reference_digests"][str(r)] = {str(t): ref.get("sha256") or ref.get("why") for t, ref in sorted(reader.references.items())}
        if result is None:
            continue
        atol, rtol = reader.meta["atol"], reader.meta["rtol"]
        trials = [c for c in result.get("trials", []) if c.get("kind", "trial") == "trial"]
        # each timing group's last timed output, where the rank sent that group's reference before
        # the load (pkb.eval.rank_timing.send_group_references): its trial is GROUP_TRIAL_BASE + g
        from pkb.eval.rank_timing import GROUP_TRIAL_BASE

        timed = [{**c, "trial": GROUP_TRIAL_BASE + c["trial"]} for c in result.get("timed_checks", [])
                 if c.get("kind") == "timed" and isinstance(c.get("trial"), int) and GROUP_TRIAL_BASE + c["trial"] in reader.references]
        expected_count = int(reader.meta.get("trials", 0))
        if result.get("finished") and not result.get("error") and len({c.get("trial") for c in trials}) < expected_count:
            out["tampered"].append({"rank": r, "trial": None, "evidence": f"finished with {len(trials)} trial(s) reported of {expected_count}"})
        for cmp in (*trials, *timed):
            t = cmp.get("trial")
            said = bool(cmp.get("matched"))
            ref = reader.references.get(t) if isinstance(t, int) else None
            if ref is None or "file" not in ref:
                out["not_rechecked"].append({"rank": r, "trial": t, "why": f"reference {ref['why']}" if ref else "no reference output for this trial"})
                continue
            got_path = output_path(job_dir, r, t)
            if not got_path.is_file():
                why = str(cmp.get("output_saved") or "missing")
                if said:
                    # an output judged correct has the reference's structure, shapes and dtypes: the
                    # cap or its type cannot explain its absence (the rank's reason is the candidate's to forge)
                    out["tampered"].append({"rank": r, "trial": t, "rank_said": said, "evidence": f"the output the rank judged correct is absent ({why}), the reference's was {ref['bytes']} bytes"})
                else:
                    out["not_rechecked"].append({"rank": r, "trial": t, "why": f"candidate output {why}"})
                continue
            if _digest(ref["file"]) != ref["sha256"]:
                out["not_rechecked"].append({"rank": r, "trial": t, "why": "the reference's copy changed after it arrived"})
                continue
            try:
                mine = _compare_saved(ref, got_path, Path(job_dir), atol, rtol)
            except Exception as exc:
                if said:
                    out["tampered"].append({"rank": r, "trial": t, "rank_said": said, "evidence": f"the saved output cannot be read or compared: {type(exc).__name__}: {str(exc)[:200]}"})
                else:
                    out["not_rechecked"].append({"rank": r, "trial": t, "why": f"unreadable: {type(exc).__name__}"})
                continue
            out["rechecked"] += 1
            if bool(mine["matched"]) != said:
                entry = {"rank": r, "trial": t, "rank_said": said, "harness": _summary(mine), "rank_reported": _summary(cmp)}
                if said and near_tolerance(mine, cmp):
                    entry["near_tolerance"] = True
                (out["tampered"] if said and not entry.get("near_tolerance") else out["disagreements"]).append(entry)
            del mine
        # Trials whose output the rank saved but never reported (its harness code failed after
        # the load, or the candidate kept the report from being made): the harness compares them
        # too, and a wrong one is the candidate's wrong answer whatever the rank then said.
        from pkb.eval.compare import TOLERANCE_FACTOR

        reported = {c.get("trial") for c in (*trials, *timed)}
        for t, ref in sorted(reader.references.items()):
            got_path = output_path(job_dir, r, t)
            if t in reported or "file" not in ref or not os.path.lexists(got_path):
                continue
            if _digest(ref["file"]) != ref["sha256"]:  # (it also flushes the copy before it is mapped)
                continue
            try:
                mine = _compare_saved(ref, got_path, Path(job_dir), atol, rtol)
            except Exception:
                continue  # unreadable: nothing the harness can say about the answer
            edge = mine.get("shape_ok", True) and float(mine.get("max_violation", math.inf)) <= TOLERANCE_FACTOR
            if not mine["matched"] and not edge:  # at the tolerance's edge a rerun of the reference may differ
                out.setdefault("unreported_wrong", []).append({"rank": r, "trial": t, "harness": _summary(mine)})
    # the harness decided when it rechecked every trial and agreed; else the rank's verdict stands
    # where the harness could not recheck or deferred (tampering is the harness's call: outcome.py)
    out["judge"] = "harness" if out["rechecked"] and not out["not_rechecked"] and not out["disagreements"] else "rank"
    return out
