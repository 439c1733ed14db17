"""Modules a candidate may import that belong to PKB's harness, not to the candidate.

380 of the 383 solutions of PKB's initial commit do `from utils.cuda_helpers import
compile_cuda_extension`. With a PKB checkout (--pkb-root) its own `utils` package is on the
ranks' path; without one, `candidate_path/` here is put first on the path of the rank process
just before the candidate is imported, so those files load. It holds our own `utils` package with
the same API (see candidate_path/utils/cuda_helpers.py). Nothing of the harness imports it.
"""

from __future__ import annotations

import sys
from pathlib import Path

CANDIDATE_PATH = str(Path(__file__).resolve().with_name("candidate_path"))


def put_on_path(path: list[str] | None = None) -> None:
    """CANDIDATE_PATH first on `path` (sys.path by default), once."""
    path = sys.path if path is None else path
    if CANDIDATE_PATH not in path:
        path.insert(0, CANDIDATE_PATH)


def provide_for_candidate() -> str:
    """Make `utils.cuda_helpers` importable for the candidate about to be imported; say whose.

    A `utils` package already imported (PKB's, from --pkb-root) keeps its own modules; one it
    lacks (an older or newer checkout without cuda_helpers.py) comes from ours. Otherwise our
    package goes first on sys.path.
    """
    import importlib.util

    pkg = sys.modules.get("utils")
    if pkg is not None and hasattr(pkg, "__path__"):
        if importlib.util.find_spec("utils.cuda_helpers") is not None:
            return "pkb"
        ours = str(Path(CANDIDATE_PATH) / "utils")
        if ours not in list(pkg.__path__):
            pkg.__path__.append(ours)
        return "pkb-analyze"
    put_on_path()
    return "pkb-analyze"
