"""`[tool.pkb-analyze]` in pyproject.toml, found from the analyzed path upward, like ruff's.

    [tool.pkb-analyze]
    select = ["PKB0"]            # rule ids, prefixes or names; "ALL" for every rule
    ignore = ["PKB012"]
    max-file-size = 2097152      # bytes read of one candidate; larger files are recorded as too_large

Command-line options win over the file: `--select` replaces `select`, `--ignore` adds to `ignore`
(as in ruff, where `--extend-ignore` is the common need). An unknown key or a wrong type is a usage
error naming the file, not a silent default.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SECTION = "pkb-analyze"
KEYS = {"select": list, "ignore": list, "max-file-size": int}


class ConfigError(ValueError):
    """A configuration the run cannot use; the message names the file and the key."""


@dataclass
class Config:
    select: list[str] = field(default_factory=list)  # empty: every rule
    ignore: list[str] = field(default_factory=list)
    max_file_size: int | None = None
    source: Path | None = None  # the pyproject.toml it came from


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.pkb-analyze] table, from `start` upward."""
    start = Path(start).resolve()
    folder = start if start.is_dir() else start.parent
    for candidate in (folder, *folder.parents):
        path = candidate / "pyproject.toml"
        if path.is_file():
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                continue  # a broken pyproject without our table is not ours to judge
            if SECTION in data.get("tool", {}):
                return path
    return None


def read_config(path: Path) -> Config:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    table: dict[str, Any] = data.get("tool", {}).get(SECTION, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.{SECTION}] must be a table")
    config = Config(source=path)
    for key, value in table.items():
        if key not in KEYS:
            raise ConfigError(f"{path}: unknown key {key!r} in [tool.{SECTION}]; known: {', '.join(KEYS)}")
        kind = KEYS[key]
        if kind is list and isinstance(value, str):
            value = [value]
        if not isinstance(value, kind) or (kind is list and not all(isinstance(v, str) for v in value)) or isinstance(value, bool):
            expected = "a list of rule codes" if kind is list else "an integer"
            raise ConfigError(f"{path}: {key} must be {expected}, not {value!r}")
        if key == "max-file-size" and value <= 0:
            raise ConfigError(f"{path}: max-file-size must be positive, not {value}")
        setattr(config, key.replace("-", "_"), value)
    return config


def load_config(start: Path, explicit: Path | None = None) -> Config:
    """The configuration for a run on `start`: `explicit` when given, else the nearest one, else defaults."""
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigError(f"{explicit}: no such configuration file")
        return read_config(explicit)
    found = find_pyproject(start)
    return read_config(found) if found else Config()


def rule_choice(config: Config, select: list[str], ignore: list[str]) -> tuple[list[str], list[str]]:
    """(select, ignore) for analyzer.rules.select_rules: the command line over the file; `ALL`
    (any case) selects every rule."""
    chosen = select or config.select
    if any(code.upper() == "ALL" for code in chosen):
        chosen = []
    return chosen, [*config.ignore, *ignore]
