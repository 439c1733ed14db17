"""The layers stated in pyproject.toml ([tool.importlinter]) hold: import-linter checks every import,
including those inside functions, so a stage that reaches up (or a view that re-runs a stage) fails here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    proc = subprocess.run(
        [lint, str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


# A room a reader can walk through: past this, a module has several jobs and should be split.
MAX_MODULE_LINES = 900
CODE_FOLDERS = ("pkb", "analyzer", "profiling", "reports", "problems", "bench")


def test_no_module_of_the_tool_is_over_the_size_a_reader_can_hold():
    too_long = {}
    for folder in CODE_FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            lines = path.read_text(encoding="utf-8").count("\n")
            if lines > MAX_MODULE_LINES:
                too_long[str(path.relative_to(ROOT))] = lines
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines: {too_long}"
