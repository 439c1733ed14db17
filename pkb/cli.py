"""The command line: a thin layer over the stages.

    pkb-analyze PATH            static passes always; evaluation where GPUs are present
    pkb-analyze rules [ID]      the rule catalogue, or one rule's documentation
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pkb import __version__

# markdown: a docstring's paragraphs are filled to the terminal's width, not broken at its source lines
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode="markdown",
                  help="Explain multi-GPU kernel candidates of ParallelKernelBench.\n\n`pkb-analyze PATH...` runs `pkb-analyze analyze PATH...` (labels and findings; no GPU needed).",
                  context_settings={"help_option_names": ["-h", "--help"]})
err = Console(stderr=True, soft_wrap=True)
COMMANDS = ("analyze", "rules", "eval", "report", "explain", "export")


def _split(values: Optional[list[str]]) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def gpu_count() -> int:
    """CUDA devices visible here; 0 when torch is absent (the static slice needs no torch)."""
    from pkb.eval.host import visible_gpus

    return visible_gpus()


def run_static(path, out: Path, options, quiet: bool, max_bytes: int | None = None, store_path: str | None = None):
    """Static passes over one path or several; writes static.jsonl (and, given a store, each
    record's static part there) as records finish, then the tables and SARIF, unless the same
    records were already written there (tables.key says so). Record paths are relative to the
    corpus root (pkb.roots)."""
    import dataclasses
    import hashlib

    from analyzer.pipeline import StaticAnalyzer
    from pkb.corpus import discover
    from pkb.record import LATER_PARTS
    from pkb.roots import corpus_root

    paths = list(path) if isinstance(path, (list, tuple)) else [path]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        err.print(f"[red]error:[/] {', '.join(missing)}: no such file or folder")
        raise typer.Exit(2)
    try:
        # what is written and printed is labels and findings: the records need not carry facts
        analyzer = StaticAnalyzer(dataclasses.replace(options, keep_facts=False))
    except ValueError as exc:  # an unknown rule id
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2)
    base = corpus_root(paths)
    seen: set[Path] = set()
    files = [f for p in paths for f in discover(p) if not (f.resolve() in seen or seen.add(f.resolve()))]
    out.mkdir(parents=True, exist_ok=True)
    records = []
    jsonl_path = out / "static.jsonl"
    written = hashlib.sha256()
    store = _open_store(store_path)
    try:
        with jsonl_path.open("w", encoding="utf-8") as jsonl, _progress(len(files), quiet) as (progress, task):
            for rec in analyzer.analyze_files(files, base, max_bytes):
                # Written as it comes: a killed run keeps what it had finished.
                data = rec.to_json_line()
                line = json.dumps(data) + "\n"
                jsonl.write(line)
                jsonl.flush()
                written.update(line.encode())
                if store is not None and rec.sha256:
                    # rec.static_line(), from the line already made
                    store.write_part(rec.sha256, "", "static", {k: v for k, v in data.items() if k not in LATER_PARTS})
                records.append(rec)
                progress.advance(task)
    finally:
        analyzer.close()
        if store is not None:
            store.close()
    key = _tables_key(written.hexdigest(), [r.id for r in analyzer.rules], base)
    if not _tables_current(out, key):
        write_tables(records, out)
        write_sarif(records, out, analyzer.rules, base)
        (out / TABLES_KEY).write_text(key + "\n", encoding="utf-8")
    return records


# Beside the tables: what they were written from. The same key on a re-run means the same records,
# rules and code, so the tables and the SARIF file are left as they are.
TABLES_KEY = "tables.key"
_TABLE_FILES = ("candidates.csv", "candidates.parquet", "kernels.csv", "kernels.parquet", "findings.csv",
                "findings.parquet", "tables.dtypes.json", "findings.sarif")


def _tables_key(records_digest: str, rule_ids: list[str], root: Path) -> str:
    import hashlib

    from reports import formats, sarif, tables

    h = hashlib.sha256("\x00".join([__version__, records_digest, ",".join(rule_ids), str(root)]).encode())
    for module in (tables, sarif, formats):  # the code that writes them
        h.update(Path(module.__file__).read_bytes())
    return h.hexdigest()


def _tables_current(out: Path, key: str) -> bool:
    try:
        return (out / TABLES_KEY).read_text(encoding="utf-8").strip() == key and all((out / f).is_file() for f in _TABLE_FILES)
    except OSError:
        return False


def _open_store(store_path: str | None):
    """The run's store for writing (its lock is this run's, taken by open_run), or None."""
    if not store_path:
        return None
    from pkb.store import Store

    return Store(store_path, lock=True)


def store_later_parts(store, rec) -> None:
    """When a candidate's evaluation lands: its diagnosis is made (pkb.diagnose) and stored with
    its profile, under the evaluation's key, so reports read them instead of recomputing. A
    result the store already had (not run again) gets the profile stored with it back."""
    from pkb.diagnose.explain import diagnose

    key = (rec.evaluation or {}).get("config_key") or ""
    if rec.sha256 and key:
        if rec.profile:
            store.write_part(rec.sha256, key, "profile", rec.profile)
        else:
            rec.profile = store.part(rec.sha256, key, "profile") or {}
    try:
        diagnose(rec)
    except Exception as exc:  # noqa: BLE001 - a diagnosis that fails never stops the run; nothing is stored, the report retries
        err.print(f"[yellow]warning:[/] {escape(rec.path)}: diagnosis failed ({escape(type(exc).__name__)}: {escape(str(exc)[:200])}); not stored")
        return
    if rec.sha256:
        store.write_part(rec.sha256, key, "diagnosis", rec.diagnosis)


def write_sarif(records, out: Path, rules, root: Path, exit_code: int = 0) -> None:
    from reports import sarif

    (out / TABLES_KEY).unlink(missing_ok=True)  # written from something else than the key says
    doc = sarif.to_sarif(records, rules, __version__, root=root, exit_code=exit_code)
    (out / "findings.sarif").write_text(json.dumps(doc, indent=1), encoding="utf-8")


def write_tables(records, out: Path) -> None:
    from reports import tables

    (out / TABLES_KEY).unlink(missing_ok=True)
    tables.write_tables(records, out)


def _progress(total: int, quiet: bool):
    """A progress bar on stderr for long runs at a terminal; a no-op elsewhere."""

    @contextmanager
    def bar():
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=err, disable=not (err.is_terminal and total > 3 and not quiet), transient=True)
        with progress:
            yield progress, progress.add_task("candidates", total=total)

    return bar()


def open_run(ctx: typer.Context, out: Path, store_path: str | None) -> None:
    """Before anything in OUT is written: this run's lock on OUT and (when it evaluates) on the
    store, the store's version checked or migrated and a corrupt store set aside. A second run
    on either is refused (exit 2, saying which run holds it). Released when the command ends."""
    from pkb.store import Store, StoreError, run_lock

    try:
        ctx.call_on_close(run_lock(out).release)
        if store_path:
            store = Store(store_path, lock=True)
            ctx.call_on_close(store.close)
            previous = out / "eval.jsonl"
            if store.set_aside and previous.is_file():
                # this run rewrites eval.jsonl: the previous one is the last readable copy of what
                # the corrupt store held, so it goes with the store set aside
                kept = Path(f"{store.set_aside}.eval.jsonl")
                shutil.copyfile(previous, kept)
                err.print(f"the previous {escape(str(previous))} is kept as {escape(str(kept))}")
    except StoreError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2)


@contextmanager
def _landing(records, path: Path, options, quiet: bool, emit):
    """What the real and the emulated runs share: eval.jsonl (or eval_emulated.jsonl) written as
    each result lands, the later parts stored, each outcome said as it lands (above a progress bar
    at a terminal, a plain line otherwise: piped output shows progress too), and Ctrl-C saying what
    was saved and how to resume (exit 130). Yields `landed(rec)`."""
    from reports import console

    done = 0
    lines_out = not sys.stdout.isatty()
    try:
        with path.open("w", encoding="utf-8") as jsonl, _progress(len(records), quiet) as (progress, task), \
                _open_store(options.store_path) as store:

            def landed(rec) -> None:
                nonlocal done
                store_later_parts(store, rec)
                record_line = json.dumps(rec.to_json_line(), default=str)
                jsonl.write(record_line + "\n")
                jsonl.flush()
                if emit is not None:
                    emit(record_line)
                done += 1
                line = console.eval_line(rec, done, len(records))
                if lines_out:
                    print(line, flush=True)
                elif not quiet:
                    progress.console.print(escape(line), highlight=False)
                progress.advance(task)

            yield landed
    except KeyboardInterrupt:
        err.print(f"interrupted: {done} of {len(records)} candidates were evaluated and saved (the store {escape(str(options.store_path))}, "
                  f"{escape(str(path))}); the same command resumes: stored results are not run again (--force runs them again)")
        raise typer.Exit(130)


def run_eval(records, out: Path, options, quiet: bool, emit=None) -> None:
    """Evaluate records (builds in a CPU pool, launches in slots as their builds land), writing
    eval.jsonl as results land (`_landing`). `emit(line)`, when given, receives each eval.jsonl
    line as it is written (`--output-format jsonl`). A harness error leaves the candidates it did
    not reach `not_run` ("evaluation failed: ..."), so the run ends with exit 1 and the reason, as
    README's contract says, rather than a traceback."""
    from pkb.eval import evaluate
    from reports import console

    path = out / "eval.jsonl"
    with _landing(records, path, options, quiet, emit) as landed:
        try:
            evaluate(records, options, on_result=lambda rec, evaluation, rank_results: landed(rec))
        except Exception as exc:  # noqa: BLE001 - the harness failed: what landed stays, the rest is not_run
            reason = f"evaluation failed: {type(exc).__name__}: {exc}"
            for rec in records:
                if not rec.evaluation:
                    rec.evaluation = {"status": "not_run", "outcome": "", "subtype": "", "reason": reason}
                    landed(rec)
    typer.echo(console.eval_table(records))
    typer.echo(console.eval_totals(records))
    typer.echo(f"wrote {path} and the store {options.store_path}")
    if options.profile:
        from profiling.hooks import profile_locations

        typer.echo("\n".join(profile_locations(records)) or "--profile: no candidate left a trace (none ran its timed calls)")


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


def run_emulated(records, out: Path, world_size: int, options, quiet: bool, emit=None) -> None:
    """Emulated ranks: protocol bugs on one device, each candidate in a process of its own.
    Results are marked emulated (no timing, nothing about NVLink) and stored under keys of their
    own, beside real evaluations, never over them; written and said as they land, Ctrl-C as in
    run_eval (`_landing`)."""
    from pkb.emulate.records import emulate_records
    from reports import console

    path = out / "eval_emulated.jsonl"
    with _landing(records, path, options, quiet, emit) as landed:
        emulate_records(records, world_size, options, on_result=landed)
    typer.echo(console.eval_table(records))
    typer.echo(console.eval_totals(records) + f" (EMULATED: {world_size} virtual ranks, correctness only, no timing)")
    typer.echo(f"wrote {path} and the store {options.store_path}")


def _static_options(ptx, cache, cache_dir, select, ignore, processes: int = 0):
    from analyzer.pipeline import StaticOptions

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    n = processes or cores
    # --jobs N means N things at once: N pass processes, and N nvcc at a time where one process runs them
    return StaticOptions(ptx=ptx, use_cache=cache, cache_dir=cache_dir, select=_split(select), ignore=_split(ignore),
                         processes=n, jobs=n)


class Backend(str, Enum):
    auto = "auto"
    nccl = "nccl"
    gloo = "gloo"


class Scale(str, Enum):
    small = "small"
    large = "large"


class Dtype(str, Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float64 = "float64"


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    jsonl = "jsonl"
    sarif = "sarif"
    github = "github"


@app.command()
def analyze(
    ctx: typer.Context,
    paths: list[Path] = typer.Argument(..., help="candidate files, folders of .py files, or PKB trees (several allowed)"),
    out: Path = typer.Option(Path("pkb-out"), "--out", "-o", help="folder for the files it writes"),
    static_only: bool = typer.Option(False, "--static-only", help="run the static passes only, even where GPUs are present"),
    select: Optional[list[str]] = typer.Option(None, "--select", help="rule ids, prefixes or names to run (PKB001,PKB01; ALL for every rule)"),
    ignore: Optional[list[str]] = typer.Option(None, "--ignore", help="rule ids or prefixes to skip"),
    ptx: bool = typer.Option(True, "--ptx/--no-ptx", help="run the PTX pass where nvcc exists"),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="reuse pass facts of unchanged files"),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="where cached facts live (default $PKB_CACHE_DIR or ~/.cache/pkb-analyze)"),
    trials: int = typer.Option(5, "--trials", min=1, help="evaluation trials per candidate (where GPUs are present)"),
    fail_on_error: bool = typer.Option(False, "--fail-on-error", help="exit 1 when a file could not be read or a rule of severity error fired"),
    jobs: str = typer.Option("auto", "--jobs", "-j", help="processes for the static passes (auto: the cores); records identical and in the same order"),
    output_format: OutputFormat = typer.Option(OutputFormat.text, "--output-format", help="what goes to standard output"),
    statistics: bool = typer.Option(False, "--statistics", help="print the count of findings per rule instead of the records"),
    config: Optional[Path] = typer.Option(None, "--config", help="a pyproject.toml whose tool.pkb-analyze table to use (default: the nearest one above the first path)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="print only the totals"),
) -> None:
    """Label every candidate (mechanism, sync, overlap) and raise rule findings, with file:line evidence.

    Where CUDA devices are present (and not --static-only), every candidate is also evaluated
    against its problem's reference on all of them, with NCCL.
    """
    from analyzer.rules import select_rules
    from pkb.config import ConfigError, load_config, rule_choice
    from pkb.roots import corpus_root
    from reports import console, formats

    fmt = output_format.value
    # Anything but the text format owns standard output; the rest of what is said goes to stderr.
    say = typer.echo if fmt == "text" else (lambda text: typer.echo(text, err=True))
    try:
        conf = load_config(paths[0], config)
        chosen, skipped = rule_choice(conf, _split(select), _split(ignore))
        rules_run = select_rules(chosen or None, skipped or None)
    except (ConfigError, ValueError) as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2)
    options = _static_options(ptx, cache, cache_dir, None, None, parse_jobs(jobs))
    options.select, options.ignore = chosen, skipped
    n_gpu = 0 if static_only else gpu_count()
    if not _candidates_in(paths):  # as ruff: a warning, and the run goes on (its outputs say 0 candidates)
        err.print(f"warning: no candidate file (.py) under {escape(', '.join(map(str, paths)))}")
    store_path = str(out / "pkb_eval.sqlite")  # the static parts go there as they are produced, evaluated or not
    open_run(ctx, out, store_path)
    records = run_static(paths, out, options, quiet or fmt != "text", max_bytes=conf.max_file_size, store_path=store_path)
    if n_gpu == 0:  # no evaluation will land: the diagnosis of what the static stage saw is stored now
        with _open_store(store_path) as store:
            for rec in records:
                store_later_parts(store, rec)
    root = corpus_root(paths)
    failures = _failures(records) if fail_on_error else []
    exit_code = 1 if failures else 0
    if exit_code:
        write_sarif(records, out, rules_run, root, exit_code)
    if fmt != "text" or statistics:
        typer.echo(formats.render(records, fmt, root=root, rules=rules_run, version=__version__, exit_code=exit_code,
                                  statistics=statistics))
    else:
        if not quiet:
            say(console.summary_table(records))
            say("")
        say(console.totals(records))
    say(f"wrote {out / 'static.jsonl'}, candidates/kernels/findings .csv and .parquet, findings.sarif in {out}/"
        + (f" (configuration: {conf.source})" if conf.source else ""))
    if static_only:
        say("evaluation: not run (--static-only)")
    elif n_gpu == 0:
        say("evaluation: not run (no CUDA device here; static passes only; `pkb-analyze eval` runs pure-PyTorch candidates on CPU)")
    else:
        from pkb.eval import EvalOptions

        import contextlib

        say(f"evaluation: {n_gpu} CUDA device(s), world size {n_gpu}")
        # standard output belongs to the chosen format: the evaluation's lines go to stderr then
        with contextlib.redirect_stdout(sys.stderr) if fmt != "text" else contextlib.nullcontext():
            run_eval(records, out, EvalOptions(world_size=n_gpu, trials=trials, store_path=str(out / "pkb_eval.sqlite"),
                                               work_dir=str(out / "eval_work"), corpus_root=str(root)), quiet)
        write_tables(records, out)

    if failures:
        err.print(f"exit 1 (--fail-on-error): {len(failures)} problem(s):")
        for line in failures[:50]:
            err.print(f"  {escape(line)}")
        if len(failures) > 50:
            err.print(f"  ... and {len(failures) - 50} more (static.jsonl has them all)")
        raise typer.Exit(1)


def _failures(records) -> list[str]:
    """What --fail-on-error fails on, one line each: files not read, findings of severity error."""
    lines = [f"{r.path}: not read ({r.parse_status}: {r.parse_message})" for r in records if r.parse_status != "ok"]
    lines += [f"{f.file or r.path}:{f.line}: {f.rule} [error] {f.message}" for r in records for f in r.findings if f.severity == "error"]
    return lines


class EvalOutputFormat(str, Enum):
    text = "text"
    jsonl = "jsonl"


@app.command("eval")
def eval_command(
    ctx: typer.Context,
    paths: list[Path] = typer.Argument(..., help="candidate files, folders, or PKB trees (several allowed)"),
    out: Path = typer.Option(Path("pkb-out"), "--out", "-o", help="folder for eval.jsonl, the tables and (by default) the store"),
    world_size: Optional[int] = typer.Option(None, "--world-size", "-n", min=1, help="ranks (default: every GPU, or 2 on CPU)"),
    trials: int = typer.Option(5, "--trials", min=1),
    backend: Backend = typer.Option(Backend.auto, "--backend", help="process group backend"),
    dtype: Optional[Dtype] = typer.Option(None, "--dtype", help="input dtype (default: the run tree's precision, else the problem's first)"),
    timeout: float = typer.Option(600.0, "--timeout", min=1.0, help="seconds for one candidate's whole launch"),
    warmup: int = typer.Option(500, "--warmup", min=0),
    iters: int = typer.Option(100, "--iters", min=0, help="timed calls per side; 0 turns timing off"),
    groups: Optional[int] = typer.Option(None, "--groups", min=1, help="input groups cycled through while timing (default: enough to exceed the L2 on CUDA, 2 on CPU)"),
    scale: Scale = typer.Option(Scale.small, "--scale", help="input sizes"),
    problem: Optional[int] = typer.Option(None, "--problem", min=1, metavar="ID", help="the problem id of candidates whose file name has none (`<id>_<name>.py`); of every file given as a file"),
    problem_file: Optional[list[str]] = typer.Option(None, "--problem-file", metavar="ID=PATH", help="problem ID's module from a file (a PROBLEM spec, as in problems/), ahead of the catalogue (repeatable)"),
    store: Optional[Path] = typer.Option(None, "--store", help="SQLite store (default OUT/pkb_eval.sqlite)"),
    work_dir: Optional[Path] = typer.Option(None, "--work-dir", help="folder for the launches' job files and traces (default OUT/eval_work)"),
    pkb_root: Optional[Path] = typer.Option(None, "--pkb-root", help="a PKB checkout: evaluate against its references and input factory"),
    import_timeout: float = typer.Option(300.0, "--import-timeout", min=1.0, help="seconds for the candidate's import"),
    compile_timeout: float = typer.Option(900.0, "--compile-timeout", min=1.0, help="seconds for one JIT build of its extension"),
    call_timeout: float = typer.Option(120.0, "--call-timeout", min=1.0, help="seconds for one call of the candidate or the reference"),
    force: bool = typer.Option(False, "--force", help="run again candidates the store already has results for"),
    ptx: bool = typer.Option(False, "--ptx/--no-ptx", help="run the PTX pass in the static stage"),
    emulate: Optional[int] = typer.Option(None, "--emulate", help="N virtual ranks in one process on one GPU (or CPU): correctness only, never timed"),
    profile: bool = typer.Option(False, "--profile", help="after timing, record a torch.profiler trace of a few candidate calls per rank (NVTX ranges too)"),
    ncu: bool = typer.Option(False, "--ncu", help="after a correct evaluation, one more launch with each rank under Nsight Compute (NVLink, peer-L2, TMA counters)"),
    ncu_kernel: Optional[list[str]] = typer.Option(None, "--ncu-kernel", help="kernel names for --ncu (default: the static pass's peer-moving kernels, else every kernel of one call)"),
    ncu_metric: Optional[list[str]] = typer.Option(None, "--ncu-metric", help="an ncu metric to read beside the defaults (repeatable)"),
    jobs: str = typer.Option("auto", "--jobs", "-j", help="launches at a time (auto: GPU slots of the world size, or the cores on CPU); builds run in a pool sized to cores and memory; an untimed launch starts as its own build lands"),
    timing: str = typer.Option("exclusive", "--timing", help="exclusive: timed launches alone on the node, after the builds; beside-builds: alone on the GPUs while builds run on other cores (sooner; speedups measured 4-12 percent lower on the H200); shared: side by side in every slot (faster, less accurate; all marked in the record)"),
    build_jobs: int = typer.Option(0, "--build-jobs", min=0, help="JIT builds at a time (0: one per core); more than the cores shares them in the last wave instead of leaving some idle; memory caps it at about 3 GB a build"),
    pack: int = typer.Option(0, "--pack", help="untimed or shared launches per GPU slot (0: 4 at world size 1, else 1)"),
    screen: bool = typer.Option(True, "--screen/--no-screen", help="with exclusive timing: correctness-only launches first, packed; only correct candidates get a timed launch"),
    executor: str = typer.Option("none", "--executor", help="none: this machine; slurm: an array of shards through submitit; local: the same path on this machine (CI)"),
    shards: int = typer.Option(0, "--shards", help="shards for --executor (0: one per node's worth, see README)"),
    partition: Optional[str] = typer.Option(None, "--partition", help="Slurm partition (--executor slurm)"),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs per Slurm node (--executor slurm)"),
    cpus_per_task: int = typer.Option(16, "--cpus-per-task", help="CPU cores per shard (builds run there)"),
    time_min: int = typer.Option(120, "--time-min", help="Slurm time limit of one shard, minutes"),
    account: Optional[str] = typer.Option(None, "--account", help="Slurm account"),
    output_format: EvalOutputFormat = typer.Option(EvalOutputFormat.text, "--output-format",
                                                   help="jsonl: each record to standard output as it lands (eval.jsonl's line), everything else to stderr"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Evaluate candidates against their references on every rank: one outcome each, stored, resumable.

    Exit status: 0 when every candidate was evaluated (whatever its outcome), 1 when some could
    not be (each reason is printed with what to do), 2 on a usage error or a store this run
    cannot use (held by another run, of a newer schema).
    """
    import contextlib

    from pkb.eval import EvalOptions
    from pkb.roots import corpus_root

    backend, scale, dtype = backend.value, scale.value, dtype.value if dtype else None
    if not _candidates_in(paths):
        _usage_error(f"nothing to evaluate: no candidate file (.py) under {', '.join(map(str, paths))}")
    if pkb_root is not None and not (pkb_root / "reference").is_dir():
        _usage_error(f"--pkb-root {pkb_root}: no reference/ folder there (not a PKB checkout)")
    if timing not in ("exclusive", "beside-builds", "shared"):
        _usage_error(f"--timing {timing!r}: exclusive, beside-builds or shared")
    if executor not in ("none", "local", "slurm"):
        _usage_error(f"--executor {executor!r}: none, local or slurm")
    if executor == "slurm" and not partition:
        _usage_error("--executor slurm needs --partition")
    problem_files = _problem_files(problem_file)
    n_jobs = parse_jobs(jobs)

    store_path = str(store or out / "pkb_eval.sqlite")
    open_run(ctx, out, store_path)
    records = run_static(paths, out, _static_options(ptx, True, None, None, None), quiet=True, store_path=store_path)
    if problem is not None:
        _give_problem(records, problem, paths)
    options = EvalOptions(
        world_size=world_size, trials=trials, backend=backend, dtype=dtype, timeout_s=timeout, warmup=warmup,
        iters=iters, groups=groups, scale=scale, store_path=store_path, work_dir=str(work_dir or out / "eval_work"),
        pkb_root=str(pkb_root) if pkb_root else None, problem=problem, problem_files=problem_files, profile=profile,
        ncu_kernels=list(ncu_kernel or []) if (ncu or ncu_kernel or ncu_metric) else None, ncu_metrics=list(ncu_metric or []),
        jobs=n_jobs, timing_mode=timing, pack=pack, screen=screen, build_jobs=build_jobs,
        import_timeout_s=import_timeout, compile_timeout_s=compile_timeout, call_timeout_s=call_timeout, force=force,
        corpus_root=str(corpus_root(paths)),
    )
    # jsonl: standard output carries the records alone, as they land; all else is said on stderr
    emit = _line_writer(sys.stdout) if output_format is EvalOutputFormat.jsonl else None
    with contextlib.redirect_stdout(sys.stderr) if emit else contextlib.nullcontext():
        if emulate:
            options.trials = min(trials, 3)
            run_emulated(records, out, emulate, options, quiet, emit)
        elif executor != "none":
            _run_on_cluster(records, out, options, executor, shards, partition, gpus_per_node, cpus_per_task, time_min, account, emit)
        else:
            run_eval(records, out, options, quiet, emit)
        write_tables(records, out)
    _exit_if_not_evaluated(records)


def _line_writer(stream):
    """A function writing one line to `stream` (bound now, before stdout is redirected) and flushing."""

    def write(line: str) -> None:
        stream.write(line + "\n")
        stream.flush()

    return write


def _candidates_in(paths: list[Path]) -> bool:
    """Whether the paths hold a candidate file; a usage error (exit 2, nothing written) when one
    of them does not exist."""
    from pkb.corpus import discover

    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        _usage_error(f"{', '.join(missing)}: no such file or folder")
    return any(discover(p) for p in paths)


def _usage_error(message: str) -> None:
    """Exit 2 with the message, before anything is written or launched."""
    err.print(f"[red]error:[/] {escape(message)}")
    raise typer.Exit(2)


def _problem_files(items: Optional[list[str]]) -> dict[int, str]:
    """--problem-file ID=PATH, each checked (an id, an existing file) before anything starts."""
    files: dict[int, str] = {}
    for item in items or []:
        pid, sep, path = item.partition("=")
        if not (sep and pid.strip().isdigit() and Path(path).is_file()):
            _usage_error(f"--problem-file {item!r}: ID=PATH with a problem id and an existing file")
        files[int(pid)] = str(Path(path).resolve())
    return files


def _run_on_cluster(records, out: Path, options, executor, shards, partition, gpus_per_node, cpus_per_task, time_min, account, emit) -> None:
    """--executor slurm|local: shards through submitit, merged into the one store; eval.jsonl after."""
    from pkb.eval.cluster import ClusterOptions, ShardsInterrupted, run_sharded
    from reports import console

    cluster = ClusterOptions(executor=executor, shards=shards, partition=partition, gpus_per_node=gpus_per_node,
                             cpus_per_task=cpus_per_task, time_min=time_min, account=account, folder=str(out / "shards"))
    try:
        summary = run_sharded(records, options, cluster)
    except ShardsInterrupted as stop:
        done = sum(1 for rec in records if rec.evaluation)
        err.print(f"interrupted: {stop.cancelled} shard jobs cancelled; {done} of {len(records)} candidates were evaluated and saved "
                  f"(the store {escape(str(options.store_path))}); the same command resumes: stored results are not submitted again")
        raise typer.Exit(130)
    with (out / "eval.jsonl").open("w", encoding="utf-8") as jsonl, _open_store(options.store_path) as parts:
        for rec in records:
            store_later_parts(parts, rec)
            record_line = json.dumps(rec.to_json_line(), default=str)
            jsonl.write(record_line + "\n")
            if emit is not None:
                emit(record_line)
    for line in summary["errors"]:
        err.print(f"[yellow]warning:[/] {escape(line)}")
    typer.echo(console.eval_table(records))
    typer.echo(console.eval_totals(records))
    typer.echo(f"{summary['submitted']} candidates in {summary['shards']} shards ({summary['skipped']} already stored); "
               f"merged {summary['merged']} results into {options.store_path}")


def _give_problem(records, problem_id: int, paths: list[Path]) -> None:
    """--problem: the problem of every file given as a file, and of candidates found in folders
    whose file name gives none."""
    from pkb.corpus import assign_problem
    from pkb.roots import corpus_root, relative_path

    root = corpus_root(paths)  # what run_static made record paths relative to
    named = {relative_path(p, root.resolve()) for p in paths if p.is_file()}
    for rec in records:
        if rec.path in named or rec.problem_id is None:
            assign_problem(rec, problem_id)


def _exit_if_not_evaluated(records) -> None:
    """Exit 1, saying how many and why, when some candidate could not be evaluated (README's contract)."""
    from pkb.eval.not_run import summary_lines

    lines = summary_lines(records)
    if lines:
        for line in lines:
            err.print(escape(line), highlight=False)
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
    head = f"{rule.id} {rule.name} ({rule.severity})\n\nMessage: {rule.message}\nFix: {rule.fix}\n"
    if not _stdout_is_terminal():
        typer.echo(head + "\n" + rule.doc())  # piped: the Markdown source, for a file or another tool
        return
    from rich.console import Console
    from rich.markdown import Markdown
    from rich.text import Text

    console = Console()
    console.print(Text(head))
    console.print(Markdown(rule.doc()))


def _stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"pkb-analyze {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", "-V", callback=_print_version, is_eager=True, help="print the version and exit"),
) -> None:
    """Explain multi-GPU kernel candidates of ParallelKernelBench.

    `pkb-analyze PATH...` is `pkb-analyze analyze PATH...`.
    """


def main(argv: Optional[list[str]] = None) -> None:
    """Entry point: `pkb-analyze PATH` is `pkb-analyze analyze PATH`."""
    args = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args if not a.startswith("-")), None)
    if first is not None and first not in COMMANDS and args and args[0] not in ("--help", "-h", "--version", "-V"):
        args.insert(0, "analyze")
    app(args=args, prog_name="pkb-analyze")


RERUN_PARTS = ("static", "diagnosis")


def _rerun(values: Optional[list[str]], allowed: tuple[str, ...]) -> set[str]:
    """--rerun PART,...: the stages to run again although their part is stored."""
    asked = set(_split(values))
    unknown = sorted(asked - set(allowed))
    if unknown:
        err.print(f"[red]error:[/] --rerun {', '.join(unknown)}: one of {', '.join(allowed)}")
        raise typer.Exit(2)
    return asked


def diagnose_missing(records, rerun: bool) -> tuple[int, int]:
    """The diagnosis of records that carry none (every record when asked to rerun): (stored, made now).
    A view only draws a diagnosis; making one is a stage's job, wired here."""
    from pkb.diagnose.explain import diagnose

    stored = made = 0
    for rec in records:
        if rec.diagnosis and not rerun:
            stored += 1
        else:
            diagnose(rec)
            made += 1
    return stored, made


def _diagnosis_note(stored: int, made: int, rerun: bool) -> str:
    if not made:
        return f"diagnosis: stored ({stored})"
    why = "asked: --rerun diagnosis" if rerun else "none stored"
    return f"diagnosis: {stored} stored, {made} made now ({why})"


@app.command("report")
def report_command(
    path: Path = typer.Argument(..., help="a run folder (with static.jsonl), a static.jsonl, or a corpus folder (static passes run first)"),
    out: Path = typer.Option(Path("pkb-report"), "--out", "-o", help="folder for index.html, report.md and kernels/"),
    store: Optional[Path] = typer.Option(None, "--store", help="the store (default: pkb_eval.sqlite beside the run, if any)"),
    ptx: bool = typer.Option(True, "--ptx/--no-ptx", help="run the PTX pass where nvcc exists (corpus input only)"),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="reuse pass facts of unchanged files (corpus input only)"),
    rerun: Optional[list[str]] = typer.Option(None, "--rerun", help="diagnosis: make every candidate's diagnosis again instead of reading the stored one"),
) -> None:
    """Write the corpus report (one self-contained HTML page, Markdown) and a page per candidate.

    Drawn from what is stored: the run's static.jsonl and its store (evaluation, profile, ncu
    results, diagnosis). A stage runs only for a part nothing stores (the static passes for a
    corpus folder, the diagnosis of records stored without one) or when --rerun asks, and the
    output says which.
    """
    from analyzer.pipeline import StaticOptions
    from reports.corpus_report import build
    from reports.load import gather

    again = _rerun(rerun, ("diagnosis",))
    if not path.exists():
        err.print(f"[red]error:[/] {path}: no such file or folder")
        raise typer.Exit(2)
    if store is not None and not store.is_file():
        err.print(f"[red]error:[/] {store}: no such store")
        raise typer.Exit(2)
    stored_run = (path.is_file() and path.suffix == ".jsonl") or (path.is_dir() and (path / "static.jsonl").is_file())
    notes = []
    if not stored_run:  # a corpus: no record of it is stored, so its static passes run now
        run_static(path, out, StaticOptions(ptx=ptx, use_cache=cache), quiet=True)
        notes.append(f"static passes run now on {path} (a corpus folder: no stored records)")
    records, info = gather(path if stored_run else out, store=store)
    if not stored_run:
        info["input"], info["static"] = str(path), f"static passes run now on {path}"
    stored, made = diagnose_missing(records, "diagnosis" in again)
    notes.append(_diagnosis_note(stored, made, "diagnosis" in again))
    info["diagnosis"] = notes[-1].removeprefix("diagnosis: ")
    result = build(records, out, info)
    evaluated = f"{result['evaluated']} evaluated" if result["evaluated"] else "static only (no evaluation found)"
    typer.echo(f"{result['candidates']} candidates, {evaluated}; wrote {result['html']}, {result['markdown']} and {len(result['pages'])} pages in {out}/{'kernels'}/")
    typer.echo("; ".join(notes))


@app.command("explain")
def explain_command(
    path: Path = typer.Argument(..., help="one candidate file"),
    store: Optional[Path] = typer.Option(None, "--store", help="the store to read its record from (default: ./pkb_eval.sqlite, else one beside the file)"),
    ptx: bool = typer.Option(True, "--ptx/--no-ptx", help="run the PTX pass where nvcc exists (when the static passes run)"),
    rerun: Optional[list[str]] = typer.Option(None, "--rerun", help="static, diagnosis: run that stage again instead of reading its stored part"),
) -> None:
    """Print one candidate's page in the terminal: explanation, labels with evidence, findings, evaluation.

    The record is the one stored for this file's content (static labels, latest evaluation,
    profile, diagnosis); the static passes and the diagnosis run only where nothing is stored for
    them, or when --rerun asks, and the page says so.
    """
    from pkb.record import content_hash
    from reports.load import attach_store, find_store, stored_record
    from reports.terminal import render

    again = _rerun(rerun, RERUN_PARTS)
    if not path.is_file():
        err.print(f"[red]error:[/] {path}: not a file")
        raise typer.Exit(2)
    if store is not None and not store.is_file():
        err.print(f"[red]error:[/] {store}: no such store")
        raise typer.Exit(2)
    found = store or find_store(Path.cwd()) or find_store(path.parent)
    rec = None
    if found is not None and "static" not in again:
        rec = stored_record(found, content_hash(path.read_bytes()))
    notes = []
    if rec is not None:
        parts = ["static"] + [part for part in ("evaluation", "profile", "diagnosis") if getattr(rec, part)]
        notes.append(f"read from the store {found}: {', '.join(parts)}")
    else:
        rec = _analyze_one(path, ptx)
        why = "asked: --rerun static" if "static" in again else (f"nothing stored for this file in {found}" if found else "no store found")
        notes.append(f"static passes run now ({why})")
        if found is not None:
            attach_store([rec], found)
    stored, made = diagnose_missing([rec], "diagnosis" in again)
    if made:
        notes.append(_diagnosis_note(stored, made, "diagnosis" in again))
    render(rec, Console(soft_wrap=False), str(found) if found is not None and rec.evaluation else "", notes)


def _analyze_one(path: Path, ptx: bool):
    """The static passes over one file (its record, with paths relative to its folder)."""
    from analyzer.pipeline import StaticAnalyzer, StaticOptions
    from pkb.corpus import read_candidate

    analyzer = StaticAnalyzer(StaticOptions(ptx=ptx))
    try:
        return analyzer.analyze(read_candidate(path, path.parent))
    finally:
        analyzer.close()


class ExportFormat(str, Enum):
    pkb = "pkb"
    kernelbench = "kernelbench"


@app.command("export")
def export_command(
    path: Path = typer.Argument(..., help="a run folder (with static.jsonl and its evaluation store) or a static.jsonl"),
    fmt: ExportFormat = typer.Option(..., "--format", help="pkb: PKB's per-trial eval JSON, a line per candidate; kernelbench: a KernelBench-style CSV table"),
    to: Optional[Path] = typer.Option(None, "--to", help="file to write (default: standard output)"),
    store: Optional[Path] = typer.Option(None, "--store", help="evaluation store (default: pkb_eval.sqlite beside the run, if any)"),
) -> None:
    """Export evaluated candidates in PKB's or KernelBench's result format (mapping: reports/export.py)."""
    from reports.export import evaluated, render
    from reports.load import gather

    if not (path.is_dir() and (path / "static.jsonl").is_file()) and not (path.is_file() and path.suffix == ".jsonl"):
        err.print(f"[red]error:[/] {escape(str(path))}: not a run folder with static.jsonl, nor a .jsonl")
        raise typer.Exit(2)
    records, _ = gather(path, store=store)
    text = render(records, fmt.value)
    if to is None:
        sys.stdout.write(text)
    else:
        to.write_text(text, encoding="utf-8")
    err.print(f"{len(evaluated(records))} of {len(records)} candidates evaluated and exported" + (f" to {escape(str(to))}" if to else ""))
