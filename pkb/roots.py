"""Which folder the paths of a run are relative to, whatever form the arguments take.

A record's `path` is relative to the corpus root, so the same file has the same path in every
output (static.jsonl, eval.jsonl, the tables, SARIF) whether one file, its run tree or the whole
tree was given. The root is:
- for a file or folder inside a PKB run tree (`solutions_*`), the folder holding that run tree
  (PKB's own root, beside `reference/`);
- otherwise the folder given, or a file's own folder;
- with several paths, the deepest folder holding all of their roots.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable


def _own_root(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    folder = path if path.is_dir() else path.parent
    for candidate in (folder, *folder.parents):
        if candidate.name.startswith("solutions_"):
            return candidate.parent
    return folder


def corpus_root(paths: Iterable[Path]) -> Path:
    """The folder every record path of this run is relative to (absolute)."""
    roots = [_own_root(p) for p in paths]
    if not roots:
        return Path.cwd()
    if len(roots) == 1:
        return roots[0]
    return Path(os.path.commonpath([str(r) for r in roots]))


def relative_path(file: Path, root: Path) -> str:
    """`file` relative to `root` in POSIX form; the absolute path where it is not under it."""
    absolute = Path(os.path.abspath(file))
    try:
        return absolute.relative_to(root).as_posix()
    except ValueError:
        return absolute.as_posix()


def display_path(rel: str, root: Path, cwd: Path | None = None) -> str:
    """A record path as a user at `cwd` would type it (for editor links and CI annotations)."""
    absolute = Path(rel) if Path(rel).is_absolute() else root / rel
    try:
        return absolute.relative_to(cwd or Path.cwd()).as_posix()
    except ValueError:
        return absolute.as_posix()
