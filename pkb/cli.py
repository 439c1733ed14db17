"""The command line: a thin layer over the stages.

    pkb-analyze PATH            static passes always; evaluation where GPUs are present
    pkb-analyze rules [ID]      the rule catalogue, or one rule's documentation
"""

from __future__ import annotations

import json
import os
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


def run_static(path: Path, out: Path, options, quiet: bool):
    """Static passes over PATH; writes static.jsonl as records finish, then the tables and SARIF."""
    from analyzer.pipeline import StaticAnalyzer
    from pkb.corpus import discover, read_candidate
    from reports import sarif, tables

    if not path.exists():
        err.print(f"[red]error:[/] {path}: no such file or folder")
        raise typer.Exit(2)
    try:
        analyzer = StaticAnalyzer(options)
    except ValueError as exc:  # an unknown rule id
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2)
    files = discover(path)
    base = path if path.is_dir() else path.parent
    out.mkdir(parents=True, exist_ok=True)
    records = []
    jsonl_path = out / "static.jsonl"
    with jsonl_path.open("w", encoding="utf-8") as jsonl, _progress(len(files), quiet) as (progress, task):
        for rec in analyzer.analyze_all(read_candidate(f, base) for f in files):
            # Written as it comes: a killed run keeps what it had finished.
            jsonl.write(json.dumps(rec.to_json_line()) + "\n")
            jsonl.flush()
            records.append(rec)
            progress.advance(task)
    analyzer.close()
    write_tables(records, out)
    (out / "findings.sarif").write_text(json.dumps(sarif.to_sarif(records, analyzer.rules, __version__), indent=1), encoding="utf-8")
    return records


def write_tables(records, out: Path) -> None:
    from reports import tables

    tables.write_tables(records, out)


def _progress(total: int, quiet: bool):
    """A progress bar on stderr for long runs at a terminal; a no-op elsewhere."""
    from contextlib import contextmanager

    @contextmanager
    def bar():
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=err, disable=not (err.is_terminal and total > 3 and not quiet), transient=True)
        with progress:
            yield progress, progress.add_task("candidates", total=total)

    return bar()


def run_eval(records, out: Path, options, quiet: bool) -> None:
    """Evaluate records (builds first, then launches in slots), writing eval.jsonl as results land."""
    from pkb.eval import evaluate
    from reports import console

    path = out / "eval.jsonl"
    with path.open("w", encoding="utf-8") as jsonl, _progress(len(records), quiet) as (progress, task):

        def landed(rec, evaluation, rank_results) -> None:
            jsonl.write(json.dumps(rec.to_json_line(), default=str) + "\n")
            jsonl.flush()
            progress.advance(task)

        evaluate(records, options, on_result=landed)
    typer.echo(console.eval_table(records))
    typer.echo(console.eval_totals(records))
    typer.echo(f"wrote {path} and the store {options.store_path}")


def parse_jobs(value: str) -> int:
    """`auto` (or 0): as many as the machine allows; else a positive count."""
    if value in ("auto", "0", ""):
        return 0
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 1:
        err.print(f"[red]error:[/] --jobs {value!r}: a positive number or auto")
        raise typer.Exit(2)
    return n


def run_emulated(records, out: Path, world_size: int, *, trials: int, dtype, scale: str, quiet: bool) -> None:
    """Emulated ranks: protocol bugs on one device. Results are labeled emulated and not stored
    beside real evaluations (they carry no timing and say nothing about NVLink)."""
    from pkb.emulate import evaluate_record
    from reports import console

    path = out / "eval_emulated.jsonl"
    with path.open("w", encoding="utf-8") as jsonl, _progress(len(records), quiet) as (progress, task):
        for rec in records:
            if rec.parse_status == "ok":
                rec.evaluation = evaluate_record(rec, world_size, trials=trials, dtype=dtype, scale=scale)
            else:
                rec.evaluation = {"emulated": True, "status": "not_run", "reason": f"file not read: {rec.parse_status}"}
            jsonl.write(json.dumps(rec.to_json_line(), default=str) + "\n")
            jsonl.flush()
            progress.advance(task)
    typer.echo(console.eval_table(records))
    typer.echo(console.eval_totals(records) + f" (EMULATED: {world_size} virtual ranks, correctness only, no timing)")
    typer.echo(f"wrote {path}")


def _static_options(ptx, cache, cache_dir, select, ignore, processes: int = 0):
    from analyzer.pipeline import StaticOptions

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = processes or cores
    # --jobs N means N things at once: N pass processes, and N nvcc at a time where one process runs them
    return StaticOptions(ptx=ptx, use_cache=cache, cache_dir=cache_dir, select=_split(select), ignore=_split(ignore),
                         processes=n, jobs=n)


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
    trials: int = typer.Option(5, "--trials", help="evaluation trials per candidate (where GPUs are present)"),
    fail_on_error: bool = typer.Option(False, "--fail-on-error", help="exit 1 when a file could not be read or a rule of severity error fired"),
    jobs: str = typer.Option("auto", "--jobs", "-j", help="processes for the static passes (auto: the cores); records identical and in the same order"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="print only the totals"),
) -> None:
    """Label every candidate (mechanism, sync, overlap) and raise rule findings, with file:line evidence.

    Where CUDA devices are present (and not --static-only), every candidate is also evaluated
    against its problem's reference on all of them, through torchrun with NCCL.
    """
    from reports import console

    records = run_static(path, out, _static_options(ptx, cache, cache_dir, select, ignore, parse_jobs(jobs)), quiet)
    if not quiet:
        typer.echo(console.summary_table(records))
        typer.echo("")
    typer.echo(console.totals(records))
    typer.echo(f"wrote {out / 'static.jsonl'}, candidates/kernels/findings .csv and .parquet, findings.sarif in {out}/")
    n_gpu = 0 if static_only else gpu_count()
    if static_only:
        typer.echo("evaluation: not run (--static-only)")
    elif n_gpu == 0:
        typer.echo("evaluation: not run (no CUDA device here; static passes only; `pkb-analyze eval` runs pure-PyTorch candidates on CPU)")
    else:
        from pkb.eval import EvalOptions

        typer.echo(f"evaluation: {n_gpu} CUDA device(s), world size {n_gpu}")
        run_eval(records, out, EvalOptions(world_size=n_gpu, trials=trials, store_path=str(out / "pkb_eval.sqlite"),
                                           work_dir=str(out / "eval_work")), quiet)
        write_tables(records, out)

    if fail_on_error:
        bad_read = any(r.parse_status != "ok" for r in records)
        errors = any(f.severity == "error" for r in records for f in r.findings)
        if bad_read or errors:
            raise typer.Exit(1)


@app.command("eval")
def eval_command(
    path: Path = typer.Argument(..., help="a candidate file, a folder, or a PKB tree"),
    out: Path = typer.Option(Path("pkb-out"), "--out", "-o", help="folder for eval.jsonl, the tables and (by default) the store"),
    world_size: Optional[int] = typer.Option(None, "--world-size", "-n", help="ranks (default: every GPU, or 2 on CPU)"),
    trials: int = typer.Option(5, "--trials"),
    backend: str = typer.Option("auto", "--backend", help="auto | nccl | gloo"),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="input dtype (default: the problem's first)"),
    timeout: float = typer.Option(600.0, "--timeout", help="seconds for one candidate's whole launch"),
    warmup: int = typer.Option(500, "--warmup"),
    iters: int = typer.Option(100, "--iters", help="timed calls per side; 0 turns timing off"),
    scale: str = typer.Option("small", "--scale", help="input sizes: small | large"),
    store: Optional[Path] = typer.Option(None, "--store", help="SQLite store (default OUT/pkb_eval.sqlite)"),
    pkb_root: Optional[Path] = typer.Option(None, "--pkb-root", help="a PKB checkout: evaluate against its references and input factory"),
    ptx: bool = typer.Option(False, "--ptx/--no-ptx", help="run the PTX pass in the static stage"),
    emulate: Optional[int] = typer.Option(None, "--emulate", help="N virtual ranks in one process on one GPU (or CPU): correctness only, never timed"),
    profile: bool = typer.Option(False, "--profile", help="after timing, record a torch.profiler trace of a few candidate calls per rank (NVTX ranges too)"),
    ncu: bool = typer.Option(False, "--ncu", help="after a correct evaluation, one more launch with each rank under Nsight Compute (NVLink, peer-L2, TMA counters)"),
    ncu_kernel: Optional[list[str]] = typer.Option(None, "--ncu-kernel", help="kernel names for --ncu (default: the static pass's peer-moving kernels, else every kernel of one call)"),
    ncu_metric: Optional[list[str]] = typer.Option(None, "--ncu-metric", help="an ncu metric to read beside the defaults (repeatable)"),
    jobs: str = typer.Option("auto", "--jobs", "-j", help="launches at a time (auto: GPU slots of the world size, or the cores on CPU); builds run first in a pool sized to cores and memory"),
    timing: str = typer.Option("exclusive", "--timing", help="exclusive: timed launches alone on the node; shared: side by side in every slot (faster, less accurate; marked in the record)"),
    pack: int = typer.Option(0, "--pack", help="untimed or shared launches per GPU slot (0: 4 at world size 1, else 1)"),
    screen: bool = typer.Option(True, "--screen/--no-screen", help="with exclusive timing: correctness-only launches first, packed; only correct candidates get a timed launch"),
    executor: str = typer.Option("none", "--executor", help="none: this machine; slurm: an array of shards through submitit; local: the same path on this machine (CI)"),
    shards: int = typer.Option(0, "--shards", help="shards for --executor (0: one per node's worth, see README)"),
    partition: Optional[str] = typer.Option(None, "--partition", help="Slurm partition (--executor slurm)"),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs per Slurm node (--executor slurm)"),
    cpus_per_task: int = typer.Option(16, "--cpus-per-task", help="CPU cores per shard (builds run there)"),
    time_min: int = typer.Option(120, "--time-min", help="Slurm time limit of one shard, minutes"),
    account: Optional[str] = typer.Option(None, "--account", help="Slurm account"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Evaluate candidates against their references on every rank: one outcome each, stored, resumable."""
    from pkb.eval import EvalOptions

    if timing not in ("exclusive", "shared"):
        err.print(f"[red]error:[/] --timing {timing!r}: exclusive or shared")
        raise typer.Exit(2)
    if executor not in ("none", "local", "slurm"):
        err.print(f"[red]error:[/] --executor {executor!r}: none, local or slurm")
        raise typer.Exit(2)
    if executor == "slurm" and not partition:
        err.print("[red]error:[/] --executor slurm needs --partition")
        raise typer.Exit(2)
    n_jobs = parse_jobs(jobs)

    records = run_static(path, out, _static_options(ptx, True, None, None, None), quiet=True)
    if emulate:
        run_emulated(records, out, emulate, trials=min(trials, 3), dtype=dtype, scale=scale, quiet=quiet)
        write_tables(records, out)
        return
    options = EvalOptions(
        world_size=world_size, trials=trials, backend=backend, dtype=dtype, timeout_s=timeout, warmup=warmup,
        iters=iters, scale=scale, store_path=str(store or out / "pkb_eval.sqlite"), work_dir=str(out / "eval_work"),
        pkb_root=str(pkb_root) if pkb_root else None, profile=profile,
        ncu_kernels=list(ncu_kernel or []) if (ncu or ncu_kernel or ncu_metric) else None, ncu_metrics=list(ncu_metric or []),
        jobs=n_jobs, timing_mode=timing, pack=pack, screen=screen,
    )
    if executor != "none":
        from pkb.eval.cluster import ClusterOptions, run_sharded
        from reports import console

        cluster = ClusterOptions(executor=executor, shards=shards, partition=partition, gpus_per_node=gpus_per_node,
                                 cpus_per_task=cpus_per_task, time_min=time_min, account=account, folder=str(out / "shards"))
        summary = run_sharded(records, options, cluster)
        with (out / "eval.jsonl").open("w", encoding="utf-8") as jsonl:
            for rec in records:
                jsonl.write(json.dumps(rec.to_json_line(), default=str) + "\n")
        for line in summary["errors"]:
            err.print(f"[yellow]warning:[/] {line}")
        typer.echo(console.eval_table(records))
        typer.echo(console.eval_totals(records))
        typer.echo(f"{summary['submitted']} candidates in {summary['shards']} shards ({summary['skipped']} already stored); "
                   f"merged {summary['merged']} results into {options.store_path}")
        write_tables(records, out)
        return
    run_eval(records, out, options, quiet)
    write_tables(records, out)


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


@app.command("report")
def report_command(
    path: Path = typer.Argument(..., help="a run folder (with static.jsonl), a static.jsonl, or a corpus folder (static passes run first)"),
    out: Path = typer.Option(Path("pkb-report"), "--out", "-o", help="folder for index.html, report.md and kernels/"),
    store: Optional[Path] = typer.Option(None, "--store", help="evaluation store (default: pkb_eval.sqlite beside the run, if any)"),
    ptx: bool = typer.Option(True, "--ptx/--no-ptx", help="run the PTX pass where nvcc exists (corpus input only)"),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="reuse pass facts of unchanged files (corpus input only)"),
) -> None:
    """Write the corpus report (one self-contained HTML page, Markdown) and a page per candidate."""
    from reports.corpus_report import build
    from reports.load import gather

    if not path.exists():
        err.print(f"[red]error:[/] {path}: no such file or folder")
        raise typer.Exit(2)
    if store is not None and not store.is_file():
        err.print(f"[red]error:[/] {store}: no such store")
        raise typer.Exit(2)
    records, info = gather(path, out, store=store, ptx=ptx, cache=cache)
    result = build(records, out, info)
    evaluated = f"{result['evaluated']} evaluated" if result["evaluated"] else "static only (no evaluation found)"
    typer.echo(f"{result['candidates']} candidates, {evaluated}; wrote {result['html']}, {result['markdown']} and {len(result['pages'])} pages in {out}/{'kernels'}/")


@app.command("explain")
def explain_command(
    path: Path = typer.Argument(..., help="one candidate file"),
    store: Optional[Path] = typer.Option(None, "--store", help="evaluation store to read a previous evaluation from (default: ./pkb_eval.sqlite, if any)"),
    ptx: bool = typer.Option(True, "--ptx/--no-ptx", help="run the PTX pass where nvcc exists"),
) -> None:
    """Print one candidate's page in the terminal: explanation, labels with evidence, findings, evaluation."""
    from reports.terminal import analyze_file, render

    if not path.is_file():
        err.print(f"[red]error:[/] {path}: not a file")
        raise typer.Exit(2)
    rec, used = analyze_file(path, store=store, ptx=ptx)
    render(rec, Console(soft_wrap=False), used)
