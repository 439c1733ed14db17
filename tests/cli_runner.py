"""Running the command line inside a test: its exit code and what it printed."""

import os

from pkb.cli import main


def run_cli(args, tmp_path, capsys):
    """(exit code, captured output) of `pkb-analyze ARGS`, with a fact cache of the test's own."""
    os.environ["PKB_CACHE_DIR"] = str(tmp_path / "cache")
    code = 0
    try:
        main(args)
    except SystemExit as exc:  # typer exits with the command's code
        code = exc.code or 0
    return code, capsys.readouterr()
