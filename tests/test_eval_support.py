"""Shared helpers of the evaluation tests (no tests here): candidates as text, quick options."""

from __future__ import annotations

import textwrap
from pathlib import Path

from pkb.corpus import read_candidate
from pkb.eval import EvalOptions, evaluate

REPO = Path(__file__).resolve().parents[1]

HEADER = "import torch\nimport torch.distributed as dist\n\n"

# Candidates for problem 1 (all-reduce, sum), keyed by what they get wrong.
REFERENCE = """
@torch.no_grad()
def solution(x):
    out = x.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
"""


def allreduce_then(tail: str) -> str:
    """The reference all-reduce followed by `tail` (indented into the function), which returns."""
    return (
        "@torch.no_grad()\n"
        "def solution(x):\n"
        "    out = x.clone()\n"
        "    dist.all_reduce(out, op=dist.ReduceOp.SUM)\n" + textwrap.indent(textwrap.dedent(tail).strip("\n"), "    ") + "\n"
    )


def write_candidate(folder: Path, name: str, body: str, header: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text((HEADER if header else "") + textwrap.dedent(body), encoding="utf-8")
    return path


def quick_options(tmp: Path, **overrides) -> EvalOptions:
    """CPU/gloo options that keep one launch to a few seconds."""
    base = dict(
        world_size=2,
        trials=3,
        dtype="float32",
        backend="gloo",
        timeout_s=60.0,
        warmup=1,
        iters=5,
        groups=2,
        store_path=str(tmp / "eval.sqlite"),
        work_dir=str(tmp / "work"),
        jobs=2,
    )
    base.update(overrides)
    return EvalOptions(**base)


def run_eval(paths: list[Path], options: EvalOptions) -> list:
    records = [read_candidate(p) for p in paths]
    evaluate(records, options)
    return records
