"""Shared by the emulation tests: the few fields of a candidate's record that the emulated
evaluation reads, for a file written by the test."""

from __future__ import annotations

from pathlib import Path


class EmulatedCandidate:
    parse_status = "ok"
    sha256 = ""
    model = provider = backend = precision = ""

    def __init__(self, path: Path, pid: int = 1, name: str = "allreduce") -> None:
        self.path, self.source = str(path), path.read_text()
        self.problem_id, self.problem_name = pid, name
        self.evaluation: dict = {}
