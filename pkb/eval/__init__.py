"""The evaluation stage: run candidates against the reference on real ranks, one launch each.

    evaluate(records, options)   fills record.evaluation and writes the store (pkb.store)

Modules, one job each: options (what to run, config key), problem_source (reference, inputs,
tolerance; which reference a file answers is pkb.problem_match), static_checks (exploit hints
read before a run), device_needs (does a source need CUDA), build (our build directories and
their lock), job (one launch's instructions and file names), sandbox and launcher (the ranks in a
box, limits, kill), worker (inside a rank: the rank's phases) with rank_report (its status and result
files), rank_timing (timing and the checks that ride on it; its figures computed in the harness by
timing_judge), rank_process (its process plumbing)
and tensors (nested inputs and outputs, shared with the emulation); compare / poison / timing /
guard (used inside a rank), classify (errors -> subtypes), outcome (per-rank results -> one
outcome), reference_probe (a reference failing at a world size), ncu (Nsight Compute on
request), cluster (shards through submitit), not_run (what could not run, and why), interrupt (Ctrl-C stops
the running launches and builds). The store and pass@k/fast_p live in the ground (pkb.store, pkb.metrics).
"""

from __future__ import annotations

import ast
import hashlib
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from pkb.eval.interrupt import stopping_on_sigint
from pkb.eval.options import EvalOptions, config_key

__all__ = ["EvalOptions", "evaluate", "evaluate_one", "Environment", "environment", "config_key", "plan_slots"]


@dataclass(frozen=True)
class Environment:
    device: str  # cuda | cpu
    backend: str  # nccl | gloo
    device_count: int
    world_size: int
    build_tag: str  # torch/CUDA versions and arch: part of the extension cache key
    arch_list: str = ""  # TORCH_CUDA_ARCH_LIST of the visible GPUs, for builds in GPU-less processes


def environment(options: EvalOptions) -> Environment:
    from pkb.eval.host import torch_versions, visible_gpus

    count = visible_gpus()  # torch is imported only where a GPU driver is present
    backend = options.backend if options.backend != "auto" else ("nccl" if count else "gloo")
    device = "cuda" if count and backend == "nccl" else "cpu"
    ws = options.world_size or (count if device == "cuda" else 2)
    arch = arch_list = ""
    if device == "cuda":
        import torch

        major, minor = torch.cuda.get_device_capability(0)
        arch = f"-sm{major}{minor}"
        # what torch picks in a rank that sees the GPU and no TORCH_CUDA_ARCH_LIST (the last arch
        # +PTX), so a build made without the GPU has the same flags, hence the same directory
        arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST") or f"{major}.{minor}+PTX"
    version, cuda_version = torch_versions()
    tag = f"torch{version}-cu{cuda_version or 'none'}{arch}".replace("+", "_")
    return Environment(device, backend, count, max(1, ws), tag, arch_list)


def evaluate(records: Iterable[Any], options: EvalOptions | None = None, on_result: Callable[[Any, dict[str, Any], list[Any]], None] | None = None) -> None:
    """Fill each record's `evaluation` (plain JSON data) and write the store as results come.

    Three steps. Every record is prepared (decided without a launch where it can be: cached,
    not runnable). Then every candidate's JIT builds run in a CPU pool (pkb.eval.build), so no
    launch's clock includes nvcc. Then the launches, `plan_slots` at a time: each slot its own
    CUDA_VISIBLE_DEVICES. Untimed (or shared-timing) launches, the screening ones included, start
    as their own build lands, beside the builds still running; a launch timed alone on the GPUs
    waits for the last build; with `timing_mode` beside-builds it runs beside them on cores of
    its own (pkb.eval.schedule: sooner, but on the H200 4 of 4 speedups came out 4-12% lower than
    a quiet re-run). This thread is the
    only writer of the store; each launch's rows are committed as soon as it returns, so a killed
    run resumes where it stopped. `on_result(rec, evaluation, rank_results)` is called as each
    lands. Ctrl-C kills the running launches and builds and raises KeyboardInterrupt here
    (pkb.eval.interrupt).
    """
    from pkb.store import Store

    options = options or EvalOptions()
    env = environment(options)
    slots = plan_slots(options, env)
    store = Store(options.store_path, lock=True)  # a second run on this store is refused here
    with stopping_on_sigint():
        _evaluate(records, options, env, slots, store, on_result)


def _evaluate(records: Iterable[Any], options: EvalOptions, env: Environment, slots: list[str], store: Any,
              on_result: Callable[[Any, dict[str, Any], list[Any]], None] | None) -> None:

    def landed(rec: Any, evaluation: dict[str, Any], rank_results: list[Any]) -> None:
        rec.evaluation = evaluation
        if on_result is not None:
            on_result(rec, evaluation, rank_results)

    try:
        queue: list[tuple[Any, Pending]] = []
        seen: dict[tuple[str, str], Pending] = {}
        later: list[tuple[Any, Pending]] = []  # the same content twice: launched after the first lands
        for rec in records:
            pending = prepare(rec, options, env, store)
            if isinstance(pending, dict):
                landed(rec, pending, [])
            elif (pending.sha256, pending.config_key) in seen:
                later.append((rec, pending))
            else:
                seen[(pending.sha256, pending.config_key)] = pending
                queue.append((rec, pending))

        from pkb.eval.schedule import BuildFeed, cpu_split, prebuild_all, run_screened

        if _screens(options, env):
            # Screens as builds land; timed launches alone on the GPUs, beside the builds on cores
            # of their own where the node has them (pkb.eval.schedule).
            build_cpus, timed_cpus = cpu_split(env.device, env.world_size) if options.timing_mode == "beside-builds" else ((), ())
            run_screened(BuildFeed(queue, options, env, cpus=build_cpus), plan_slots(replace(options, iters=0), env), slots[0],
                         timed_cpus, lambda p, gate: _launch(p, options, gate), lambda p, result, rec: finish(p, result, store, rec), landed)
        else:
            items: Iterable[tuple[Any, Pending] | None]
            if options.iters <= 0 or options.timing_mode == "shared":
                # Untimed (or shared) launches: each starts as soon as its own build lands, while
                # the others still build.
                items = BuildFeed(queue, options, env)
            else:
                # Timed launches alone on the node without screens: after the last build.
                prebuild_all([p for _, p in queue], options, env)
                # Candidates whose build failed are over within seconds of their launch
                # (compile_error): launch them first, so a run cut short still holds every verdict
                # its builds decided.
                queue.sort(key=lambda item: _prebuild_failed(item[1]), reverse=True)
                items = queue
            _run_in_slots(items, slots, options, store, landed)
        for rec, _ in later:  # the first copy's result is in the store now
            again = prepare(rec, options, env, store)
            landed(rec, again if isinstance(again, dict) else evaluate_one(rec, options, env, store), [])
    finally:
        store.close()


def _run_in_slots(items: Iterable[tuple[Any, Pending] | None], slots: list[str], options: EvalOptions, store: Any,
                  landed: Callable[[Any, dict[str, Any], list[Any]], None]) -> None:
    """Each launch in the first free slot (its CUDA_VISIBLE_DEVICES); None from `items` while builds
    still run: collect what has finished meanwhile."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    with ThreadPoolExecutor(max_workers=len(slots)) as pool:
        free = list(slots)
        running: dict[Any, tuple[Any, Pending, str]] = {}

        def drain(block: bool) -> None:
            if not running:
                return
            done, _ = wait(list(running), return_when=FIRST_COMPLETED, timeout=None if block else 0)
            for fut in done:
                rec, pending, slot = running.pop(fut)
                free.append(slot)
                result = fut.result()
                landed(rec, finish(pending, result, store, rec), [r.result for r in result.ranks])

        for item in items:
            if item is None:
                drain(block=False)
                continue
            rec, pending = item
            while not free:
                drain(block=True)
            slot = free.pop(0)
            pending.job.visible_devices = slot
            running[pool.submit(_launch, pending, options)] = (rec, pending, slot)
            drain(block=False)
        while running:
            drain(block=True)


def _screens(options: EvalOptions, env: Environment) -> bool:
    """Timed launches alone on the node, and untimed ones could share it: screen first."""
    if not options.screen or options.iters <= 0 or options.timing_mode == "shared" or options.profile or options.ncu_kernels is not None:
        return False
    return len(plan_slots(replace(options, iters=0), env)) > len(plan_slots(options, env))


def build_root_for(options: EvalOptions) -> Path:
    """Where this run's extensions are built: --build-dir, else our shared build folder."""
    from pkb.eval.build import build_root

    return Path(options.build_dir).resolve() if options.build_dir else build_root()


def _prebuild_failed(pending: Pending) -> bool:
    pre = (pending.evaluation.get("details") or {}).get("prebuild")
    return bool(pre) and not pre.get("ok")


def evaluate_one(rec: Any, options: EvalOptions, env: Environment, store: Any) -> dict[str, Any]:
    """Evaluate one record in this thread and return its evaluation (also written to the store)."""
    pending = prepare(rec, options, env, store)
    if isinstance(pending, dict):
        return pending
    return finish(pending, _launch(pending, options), store, rec)


@dataclass
class Pending:
    """A candidate ready to launch: its job and the evaluation filled so far."""

    job: Any
    evaluation: dict[str, Any]
    sha256: str
    config_key: str
    problem_id: int
    started: float
    ncu_kernels: list[str] | None = None  # EvalOptions.ncu_kernels
    ncu_metrics: tuple[str, ...] = ()  # EvalOptions.ncu_metrics


def prepare(rec: Any, options: EvalOptions, env: Environment, store: Any) -> Pending | dict[str, Any]:
    """A Pending launch, or the finished evaluation when no launch is needed (cached, not runnable)."""
    from pkb.eval import problem_source
    from pkb.eval.device_needs import cuda_requirement
    from pkb.eval.job import JobSpec

    t0 = time.monotonic()
    source = source_text(rec, options.corpus_root)
    sha = rec.sha256 or hashlib.sha256(source.encode("utf-8")).hexdigest()
    if source and getattr(rec, "parse_status", "") == "too_large":
        sha = hashlib.sha256(source.encode("utf-8")).hexdigest()  # the record hashed a prefix only
    evaluation: dict[str, Any] = {
        "status": "not_run",
        "outcome": "",
        "subtype": "",
        "speedup": None,
        "correct": False,
        "world_size": env.world_size,
        "backend": env.backend,
        "device": env.device,
        "dtype": options.dtype or "",
        "trials": [],
        "ranks": [],
        "reason": "",
        "wall_s": 0.0,
        "config_key": "",
        "details": {},
        "timing_mode": options.timing_mode if options.iters > 0 else "",
        "problem_match": dict(getattr(rec, "problem_match", None) or {}),
    }
    if not source:
        decided = _decided_without_launch(rec)
        if decided is None:
            evaluation["reason"] = f"no source to run ({rec.parse_status}: {rec.parse_message})".strip()
            return evaluation
        # Empty or not Python at all: the outcome is certain without starting a rank.
        try:
            ref = problem_source.resolve(rec.problem_id, rec.problem_name, options, getattr(rec, "problem_match", None))
        except LookupError as exc:
            evaluation["reason"] = str(exc)
            return evaluation
        dtype = input_dtype(rec, ref, options)
        key = config_key(problem_id=ref.id, world_size=env.world_size, backend=env.backend, dtype=dtype, options=options)
        outcome, subtype = decided
        evaluation.update(
            status="ran", outcome=outcome, subtype=subtype, dtype=dtype, config_key=key, problem_id=ref.id, problem_stem=ref.stem, problem_match=ref.match,
            reason=f"{rec.parse_status}: {rec.parse_message}", details={"decided_without_launch": True}, wall_s=time.monotonic() - t0,
        )
        if sha:
            store.add_candidate(sha, rec.path, ref.id, rec.problem_name, rec.model, rec.provider, rec.backend)
            store.write_evaluation(sha, key, ref.id, evaluation)
        return evaluation
    try:
        ref = problem_source.resolve(rec.problem_id, rec.problem_name, options, getattr(rec, "problem_match", None))
    except LookupError as exc:
        evaluation["reason"] = str(exc)
        return evaluation
    dtype = input_dtype(rec, ref, options)
    key = config_key(problem_id=ref.id, world_size=env.world_size, backend=env.backend, dtype=dtype, options=options)
    evaluation.update(dtype=dtype, config_key=key, problem_id=ref.id, problem_stem=ref.stem, problem_match=ref.match)
    store.add_candidate(sha, rec.path, ref.id, rec.problem_name, rec.model, rec.provider, rec.backend)
    if store.done(sha, key) and not options.force:
        cached = store.evaluation(sha, key) or {}
        cached["status"] = "skipped_cached"
        return cached

    if env.world_size < ref.min_world_size:
        # A fact about the problem (PKB's catalog), not about the candidate: nothing to launch.
        evaluation["reason"] = f"problem {ref.id} needs world size >= {ref.min_world_size}: {ref.min_world_size_why}".rstrip(": ")
        evaluation["details"] = {"min_world_size": ref.min_world_size, "min_world_size_source": "catalog"}
        store.write_evaluation(sha, key, ref.id, evaluation)
        return evaluation
    tree = _syntax_tree(rec, source)
    if env.device == "cpu":
        reason = cuda_requirement(source, tree)
        if reason:
            evaluation["reason"] = reason
            evaluation["wall_s"] = time.monotonic() - t0
            store.write_evaluation(sha, key, ref.id, evaluation)
            return evaluation
    elif env.backend == "nccl" and env.world_size > env.device_count:
        evaluation["reason"] = f"world size {env.world_size} needs {env.world_size} GPUs; {env.device_count} visible"
        return evaluation

    from pkb.eval.build import candidate_build_root
    from pkb.eval.device_needs import cuda_uses
    from pkb.eval.static_checks import static_flags

    work = options.resolved_work_dir()
    cand_dir = work / "candidates" / sha[:16]
    cand_dir.mkdir(parents=True, exist_ok=True)
    name = Path(rec.path).name or "candidate"
    cand_file = cand_dir / (name if name.endswith(".py") else f"{name}.py")
    cand_file.write_text(source, encoding="utf-8")  # exactly the bytes that were hashed
    job = JobSpec(
        job_dir=str(work / "jobs" / f"{ref.stem}-{sha[:16]}-{key}"),
        candidate_path=str(cand_file),
        candidate_sha256=sha,
        problem=ref.job_problem,
        world_size=env.world_size,
        backend=env.backend,
        device=env.device,
        dtype=dtype,
        trials=options.trials,
        scale=options.scale,
        warmup=options.warmup,
        iters=options.iters,
        groups=options.groups,
        timeout_s=options.timeout_s,
        extensions_dir=str(work / "extensions" / f"{sha[:16]}-{env.build_tag}"),
        build_root=str(candidate_build_root(build_root_for(options), sha)),
        save_cap_bytes=options.save_cap_bytes,
        repo_root=str(Path(__file__).resolve().parents[2]),
        extra_sys_path=[str(Path(options.pkb_root).resolve())] if options.pkb_root else [],
        import_timeout_s=min(options.import_timeout_s, options.timeout_s),
        compile_timeout_s=min(options.compile_timeout_s, options.timeout_s),
        call_timeout_s=min(options.call_timeout_s, options.timeout_s),
        profile=options.profile,
        claims_custom_kernels=bool(cuda_uses(source, tree)),
        static_flags=static_flags(source, tree) + _finding_hints(rec),
        sandbox_hide=[str(Path(options.store_path).resolve()), str(work)],
    )
    return Pending(job, evaluation, sha, key, ref.id, t0, options.ncu_kernels, tuple(options.ncu_metrics))


def finish(pending: Pending, result: Any, store: Any, rec: Any = None) -> dict[str, Any]:
    """Decide the outcome of a finished launch and commit all its rows at once."""
    from pkb.eval.outcome import decide, profile_agreement, rank_summary, trial_summary

    evaluation = pending.evaluation
    before = dict(evaluation.get("details") or {})  # the prebuild's note
    # launches of this content and configuration that an unowned SIGKILL ended (stored not_run)
    stored = store.evaluation(pending.sha256, pending.config_key) or {}
    outside_kills = int((stored.get("details") or {}).get("outside_kills") or 0)
    evaluation.update(decide(result, pending.job, outside_kills_before=outside_kills))
    evaluation["details"] = {**before, **(evaluation.get("details") or {})}
    _probe_reference(pending, evaluation)
    _judge_multicast(pending, evaluation, result, rec)
    if rec is not None and pending.job.profile:
        rec.profile = _profile_summary(rec, pending, result)
        check = profile_agreement(evaluation.get("details") or {}, rec.profile)
        if check is not None:
            evaluation.setdefault("details", {})["profile_check"] = check
    if rec is not None and pending.ncu_kernels is not None:
        rec.profile = {**(rec.profile or {}), "ncu": _ncu_summary(rec, pending, evaluation)}
    evaluation.update(
        trials=trial_summary(result),
        ranks=rank_summary(result),
        wall_s=time.monotonic() - pending.started,
        launch_wall_s=result.wall_s,
        job_dir=pending.job.job_dir,
        launcher_tail=result.launcher_tail[-2000:],
    )
    store.write_evaluation(pending.sha256, pending.config_key, pending.problem_id, evaluation, [r.result for r in result.ranks])
    return evaluation


def _judge_multicast(pending: Pending, evaluation: dict[str, Any], result: Any, rec: Any) -> None:
    """A failure that multicast switched off explains is not the candidate's: "needs multicast"."""
    from pkb.eval.multicast import real_rank_multicast_verdict

    def read_source() -> str | None:
        try:
            return Path(pending.job.candidate_path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    verdict = real_rank_multicast_verdict(evaluation, [r.result for r in result.ranks], read_source, rec)
    if verdict is not None:
        evaluation.update(verdict)


def _probe_reference(pending: Pending, evaluation: dict[str, Any]) -> None:
    """A reference that failed alone at this world size: find the problem's minimum world size."""
    from pkb.eval.reference_probe import needs_probe, probe_min_world_size

    if not needs_probe(evaluation):
        return
    from pkb.eval.launcher import launch

    from pkb.eval.host import visible_gpus

    probe_min_world_size(pending.job, evaluation, launch, visible_gpus())


def _profile_summary(rec: Any, pending: Pending, result: Any) -> dict[str, Any]:
    """The ranks' traces read once, with the static pass's peer-moving kernels as communication."""
    try:
        from profiling.analyze import comm_kernel_names
        from profiling.hooks import summarize_job

        floors = [((r.result or {}).get("speed_floor") or {}).get("bytes") for r in result.ranks]
        sol = max((b for b in floors if b), default=None)
        return summarize_job(pending.job.job_dir, comm_kernel_names(rec), sol, timeline_png=True)
    except Exception as exc:  # noqa: BLE001 - a profile problem never changes the evaluation
        return {"errors": [f"profile summary failed: {type(exc).__name__}: {exc}"]}


def _ncu_summary(rec: Any, pending: Pending, evaluation: dict[str, Any]) -> dict[str, Any]:
    """Nsight Compute over the candidate's kernels, on correct CUDA candidates only."""
    if pending.job.device != "cuda":
        return {"status": "skipped", "error": "no GPU: ncu profiles CUDA kernels"}
    if not evaluation.get("correct"):
        return {"status": "skipped", "error": f"the candidate is not correct ({evaluation.get('outcome') or evaluation.get('status')})"}
    try:
        from pkb.eval.ncu import ncu_pass
        from profiling.analyze import comm_kernel_names
        from profiling.capture import NCU_METRICS

        kernels = pending.ncu_kernels or comm_kernel_names(rec)
        metrics = list(dict.fromkeys([*NCU_METRICS, *pending.ncu_metrics]))
        return ncu_pass(pending.job, kernels, metrics=metrics)
    except Exception as exc:  # noqa: BLE001 - an ncu problem never changes the evaluation
        return {"status": "failed", "error": f"ncu pass failed: {type(exc).__name__}: {exc}"[:2000]}


def _launch(pending: Pending, options: EvalOptions, gate: Any = None) -> Any:
    from pkb.eval.launcher import launch

    return launch(pending.job, python=options.python, gate=gate)


def plan_slots(options: EvalOptions, env: Environment) -> list[str]:
    """CUDA_VISIBLE_DEVICES of each concurrent launch ('' : leave it alone).

    On CUDA the GPUs split into groups of the world size (4 groups of 2 on 8 GPUs); with timing
    on and `timing_mode` exclusive, one launch at a time on the node (two timed jobs side by side
    disturb each other). Untimed launches and `--timing shared` use every group, and at world
    size 1 several launches share one GPU (`pack`, default 4). On CPU, `jobs` launches at once.
    `jobs` (0: as many as the plan allows) caps the count everywhere.
    """
    jobs = options.jobs if options.jobs and options.jobs > 0 else 0
    if env.device != "cuda":
        return [""] * (jobs or max(1, _cores() // max(1, env.world_size)))
    ws = env.world_size
    # Indices are into what this process sees, which CUDA_VISIBLE_DEVICES may already narrow.
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    ids = visible or [str(d) for d in range(env.device_count)]
    groups = [",".join(ids[j * ws : (j + 1) * ws]) for j in range(max(1, len(ids) // ws))]
    if options.iters > 0 and options.timing_mode != "shared":
        slots = groups[:1]
    else:
        pack = options.pack if options.pack > 0 else (4 if ws == 1 else 1)
        slots = [g for _ in range(pack) for g in groups]
    return slots[: jobs or len(slots)]


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _decided_without_launch(rec: Any) -> tuple[str, str] | None:
    status = getattr(rec, "parse_status", "")
    if status == "empty":
        return "load_error", "no_solution"
    if status in ("not_python", "not_utf8"):
        return "compile_error", "python_syntax"
    return None


def _finding_hints(rec: Any) -> list[dict[str, Any]]:
    """The static analyzer's PKB012 (a library collective on the timed path of a custom-kernel
    candidate), when the record carries findings: a hint beside the eval's own flags."""
    out = []
    for f in getattr(rec, "findings", None) or []:
        rule = getattr(f, "rule", None) or (f.get("rule") if isinstance(f, dict) else None)
        if rule == "PKB012":
            line = getattr(f, "line", None) or (f.get("line") if isinstance(f, dict) else 0) or 0
            out.append({"flag": "pkb012_library_collective", "line": int(line), "snippet": ""})
    return out


def _syntax_tree(rec: Any, source: str) -> ast.Module | None:
    """The candidate's parsed source: the record's own tree (parsed once, shared with the static
    passes) when the record holds this text; else parsed here, once. None when it does not parse."""
    if getattr(rec, "source", "") == source and hasattr(rec, "syntax_tree"):
        return rec.syntax_tree()
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def source_text(rec: Any, root: str | None = None) -> str:
    """The candidate's text: the record's own, else its file's (empty when unreadable). A record's
    path is relative to the corpus root (`root`), not to the working directory."""
    if getattr(rec, "source", ""):
        return rec.source
    path = Path(getattr(rec, "path", ""))
    if root and not path.is_absolute():
        path = Path(root) / path
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return ""
    return ""


# PKB's run-tree precision names the dtype its generator asked the candidate to handle.
_PRECISION_DTYPE = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def input_dtype(rec: Any, ref: Any, options: EvalOptions) -> str:
    """--dtype, else the run tree's precision (PKB layout), else the problem's first dtype."""
    return options.dtype or _PRECISION_DTYPE.get(getattr(rec, "precision", "") or "", "") or ref.dtypes[0]
