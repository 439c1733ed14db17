"""Shared by the static-pass tests: a small candidate written and analysed the way the command
line does (whole pipeline, no PTX, no cache), and the Python pass alone under PKB's run."""

from __future__ import annotations

import textwrap
from pathlib import Path

from analyzer.pipeline import StaticAnalyzer, StaticOptions
from analyzer.python_pass import RunContext, analyze_python
from pkb.corpus import read_candidate

RUN = RunContext(dtype="bfloat16", world_size=8, multicast=True)  # solutions_cuda_bf16_h100_8_...


def analyze(tmp_path: Path, name: str, body: str):
    """The record of `body` saved as `tmp_path/name`, through every static pass."""
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    rec = read_candidate(path, tmp_path)
    StaticAnalyzer(StaticOptions(ptx=False, use_cache=False)).analyze(rec)
    return rec


def facts(src: str, run: RunContext | None = RUN):
    """The Python pass's facts of `src` under `run`."""
    return analyze_python(textwrap.dedent(src), "cand.py", run=run)


def paths(f, qualname: str) -> list[str]:
    """Where each call ending in `qualname` runs (timed, setup, fallback...)."""
    return [c.path for c in f.calls if c.qualname.endswith(qualname)]


def edit(src: str, old: str, new: str) -> str:
    """`src` with `old` replaced: an edit that no longer applies fails loudly, not tests the base file."""
    assert old in src, old
    return src.replace(old, new)
