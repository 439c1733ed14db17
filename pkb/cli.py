"""The command line: a thin layer over the stages.

    pkb-analyze PATH            static passes always; evaluation where GPUs are present
    pkb-analyze rules [ID]      the rule catalogue, or one rule's documentation
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pkb import __version__

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Explain multi-GPU kernel candidates of ParallelKernelBench.")
err = Console(stderr=True, soft_wrap=True)
COMMANDS = ("analyze", "rules", "eval", "report", "explain")


def _split(values: Optional[list[str]]) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def gpu_count() -> int:
    """CUDA devices visible here; 0 when torch is absent (the static slice needs no torch).

    Importing torch costs seconds, so it is imported only where an NVIDIA driver is present.
    """
    if not (Path("/proc/driver/nvidia/gpus").exists() or Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi")):
        return 0
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@app.command()
def analyze(
    path: Path = typer.Argument(..., help="a candidate file, a folder of .py files, or a PKB tree"),
    out: Path = typer.Option(Path("pkb-out"), "--out", "-o", help="folder for the files it writes"),
    static_only: bool = typer.Option(False, "--static-only", help="run the static passes only, even where GPUs are present"),
    select: Optional[list[str]] = typer.Option(None, "--select", help="rule ids or prefixes to run (PKB001,PKB01)"),
    ignore: Optional[list[str]] = typer.Option(None, "--ignore", help="rule ids or prefixes to skip"),
    ptx: bool = typer.Option(True, "--ptx/--no-ptx", help="run the PTX pass where nvcc exists"),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="reuse pass facts of unchanged files"),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="where cached facts live (default $PKB_CACHE_DIR or ~/.cache/pkb-analyze)"),
    fail_on_error: bool = typer.Option(False, "--fail-on-error", help="exit 1 when a file could not be read or a rule of severity error fired"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="print only the totals"),
) -> None:
    """Label every candidate (mechanism, sync, overlap) and raise rule findings, with file:line evidence."""
    from analyzer.pipeline import StaticAnalyzer, StaticOptions
    from pkb.corpus import discover, read_candidate
    from reports import console, sarif, tables

    if not path.exists():
        err.print(f"[red]error:[/] {path}: no such file or folder")
        raise typer.Exit(2)
    try:
        options = StaticOptions(ptx=ptx, use_cache=cache, cache_dir=cache_dir, select=_split(select), ignore=_split(ignore))
        analyzer = StaticAnalyzer(options)
    except ValueError as exc:  # an unknown rule id
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2)

    files = discover(path)
    base = path if path.is_dir() else path.parent
    out.mkdir(parents=True, exist_ok=True)
    records = []
    jsonl_path = out / "static.jsonl"
    show_progress = err.is_terminal and len(files) > 3 and not quiet
    with jsonl_path.open("w", encoding="utf-8") as jsonl, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, disable=not show_progress, transient=True,
    ) as progress:
        task = progress.add_task("static passes", total=len(files))
        for rec in analyzer.analyze_all(read_candidate(f, base) for f in files):
            # Written as it comes: a killed run keeps what it had finished.
            jsonl.write(json.dumps(rec.to_json_line()) + "\n")
            jsonl.flush()
            records.append(rec)
            progress.advance(task)
    analyzer.close()

    cand = tables.candidates_frame(records)
    kern = tables.kernels_frame(records)
    find = tables.findings_frame(records)
    cand.to_csv(out / "candidates.csv", index=False)
    kern.to_csv(out / "kernels.csv", index=False)
    find.to_csv(out / "findings.csv", index=False)
    for name, frame in (("candidates", cand), ("kernels", kern), ("findings", find)):
        frame.to_parquet(out / f"{name}.parquet", index=False)
    (out / "findings.sarif").write_text(json.dumps(sarif.to_sarif(records, analyzer.rules, __version__), indent=1), encoding="utf-8")

    if not quiet:
        typer.echo(console.summary_table(records))
        typer.echo("")
    typer.echo(console.totals(records))
    n_gpu = 0 if static_only else gpu_count()
    if static_only:
        typer.echo("evaluation: not run (--static-only)")
    elif n_gpu == 0:
        typer.echo("evaluation: not run (no CUDA device here; static passes only)")
    typer.echo(f"wrote {jsonl_path}, candidates/kernels/findings .csv and .parquet, findings.sarif in {out}/")

    if fail_on_error:
        bad_read = any(r.parse_status != "ok" for r in records)
        errors = any(f.severity == "error" for r in records for f in r.findings)
        if bad_read or errors:
            raise typer.Exit(1)


@app.command()
def rules(rule_id: Optional[str] = typer.Argument(None, help="a rule id (PKB001) or name to explain")) -> None:
    """List the rule catalogue, or print one rule's documentation."""
    from tabulate import tabulate

    from analyzer.rules import all_rules

    catalogue = all_rules()
    if rule_id is None:
        rows = [[r.id, r.name, r.severity, r.message] for r in catalogue]
        typer.echo(tabulate(rows, headers=["id", "name", "severity", "message"], tablefmt="simple"))
        return
    rule = next((r for r in catalogue if r.id == rule_id.upper() or r.name == rule_id), None)
    if rule is None:
        err.print(f"[red]error:[/] no rule {rule_id!r}; `pkb-analyze rules` lists them")
        raise typer.Exit(2)
    typer.echo(f"{rule.id} {rule.name} ({rule.severity})\n")
    typer.echo(f"Message: {rule.message}")
    typer.echo(f"Fix: {rule.fix}\n")
    typer.echo(rule.doc())


def main(argv: Optional[list[str]] = None) -> None:
    """Entry point: `pkb-analyze PATH` is `pkb-analyze analyze PATH`."""
    args = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args if not a.startswith("-")), None)
    if first is not None and first not in COMMANDS and args and args[0] not in ("--help", "-h", "--version"):
        args.insert(0, "analyze")
    if args[:1] == ["--version"]:
        typer.echo(f"pkb-analyze {__version__}")
        return
    app(args=args, prog_name="pkb-analyze")
