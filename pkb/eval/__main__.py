"""`python -m pkb.eval` is gone: `pkb-analyze eval` (or `python -m pkb eval`) is the one evaluation
command. This module only says so, with the command to run instead, and exits 2 (a usage error).

It cannot forward the call: the command line is the roof of the layers (pyproject.toml's
import-linter contracts) and pkb.eval, a stage, does not import it. It reads only its arguments.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

# Options of the old command whose spelling changed; every other option kept its name.
RENAMED = {"--json": ["--output-format", "jsonl"]}


OLD_STORE = "pkb_eval.sqlite"  # the old command's default store, in the current folder


def equivalent(argv: list[str]) -> list[str]:
    """The `pkb-analyze eval` command line that does what `python -m pkb.eval ARGV` did; where the
    old default store is here and no --store was given, it is named so its results are reused."""
    command = ["pkb-analyze", "eval"]
    for arg in argv:
        command.extend(RENAMED.get(arg, [arg]))
    if Path(OLD_STORE).is_file() and not any(a == "--store" or a.startswith("--store=") for a in argv):
        command += ["--store", OLD_STORE]
    return command


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    print(
        "error: `python -m pkb.eval` was replaced by `pkb-analyze eval` (the same as `python -m pkb eval`),\n"
        "which takes the same options (--json is --output-format jsonl) and writes its files, and by default\n"
        "its store, in --out (default pkb-out/). Run instead:\n"
        f"  {shlex.join(equivalent(argv)) if argv else 'pkb-analyze eval PATH... [options]   (pkb-analyze eval -h lists them)'}",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
