"""`pkb-analyze eval --emulate N`: candidate records through emulated ranks, one process each, stored.

For every record, as the real path does it: the problem from pkb.eval.problem_source.resolve
(a PKB checkout's reference and input factory with --pkb-root), the candidate's extensions built
before any clock runs (pkb.eval.build.prebuild, into our build directory per content hash), then
the run in a process of its own (pkb.emulate.isolate) with the builds routed to that directory.
A failure that only the missing multicast explains becomes `not_run` "needs multicast"
(pkb.eval.multicast). Runs are packed several at a time on one device; a hang or an undecided
run of a packed batch is run again alone before its verdict lands. Every result goes to the
SQLite store, marked emulated, under a key of its own (the virtual world size in it), so an
emulated result never replaces a real one and a rerun skips what is done.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

EMULATION_PROTOCOL = 1  # bump when what an emulated result means changes
DONE_STATUSES = ("ran", "inconclusive")  # verdicts a rerun would only repeat (with needs_multicast)


def emulated_config_key(*, problem_id: int, world_size: int, device: str, dtype: str, options: Any) -> str:
    """The store key of an emulated result: never equal to a real one ('emu-' + hash)."""
    from pkb.eval.options import PROTOCOL_VERSION

    payload = {
        "emulated": True,
        "emulation_protocol": EMULATION_PROTOCOL,
        "protocol": PROTOCOL_VERSION,
        "problem_id": problem_id,
        "virtual_world_size": world_size,
        "device": device,
        "dtype": dtype,
        "trials": options.trials,
        "scale": options.scale,
        "pkb": bool(options.pkb_root),
        "pkb_shape": list(options.pkb_shape) if options.pkb_root else None,
        "problem_file": options.problem_files.get(problem_id),
    }
    return "emu-" + hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class Prepared:
    """A candidate ready to run: its file, its problem, its key and the evaluation so far."""

    rec: Any
    source: str
    sha: str
    ref: Any
    key: str
    cand_file: Path
    evaluation: dict[str, Any]
    started: float


def emulate_records(records: Iterable[Any], world_size: int, options: Any, *, device: str | None = None,
                    call_timeout_s: float | None = None, on_result: Callable[[Any], None] | None = None) -> None:
    """Fill each record's `evaluation` with its emulated result and store it as it lands.

    Three steps, as the real path's: every record prepared (decided at once where it can be:
    cached, no problem, not runnable here); every candidate's builds in a pool
    (pkb.eval.build.prebuild_many) before any run's clock starts; then one process per candidate."""
    from pkb.store import Store

    from pkb.eval.interrupt import stopping_on_sigint

    dev = device or _default_device()
    with stopping_on_sigint(), Store(options.store_path, lock=True) as store:  # a second run on this store is refused
        ready: list[Prepared] = []
        for rec in records:
            prepared = prepare(rec, world_size, options, store, dev)
            if isinstance(prepared, Prepared):
                ready.append(prepared)
                continue
            rec.evaluation = prepared
            if on_result is not None:
                on_result(rec)
        builds = prebuild_before_the_clock([p.cand_file for p in ready], options, dev)
        for p in ready:
            p.evaluation["details"]["prebuild"] = builds.get(p.cand_file, {})
        # Packed: several runs at once (each its own process); their store writes are applied
        # here, by this thread, as each lands (SQLite: one writer).
        from concurrent.futures import ThreadPoolExecutor, as_completed

        slots = options.jobs if getattr(options, "jobs", 0) and options.jobs > 0 else (4 if dev == "cuda" else max(1, (os.cpu_count() or 2) // 2))
        workers = max(1, min(slots, len(ready) or 1))
        pool = ThreadPoolExecutor(max_workers=workers)

        def land(p: Prepared, result: dict[str, Any], writes: _DeferredWrites) -> None:
            p.rec.evaluation = result
            for args in writes.calls:
                store.write_evaluation(*args)
            if on_result is not None:
                on_result(p.rec)

        crowded: list[tuple[Prepared, dict[str, Any]]] = []
        try:
            futures = {}
            for p in ready:
                writes = _DeferredWrites()
                futures[pool.submit(run_prepared, p, world_size, options, writes, dev, call_timeout_s)] = (p, writes)
            for fut in as_completed(futures):
                p, writes = futures[fut]
                result = fut.result()
                if workers > 1 and _may_be_crowded(result):
                    crowded.append((p, result))  # decided once it has run alone, below
                    continue
                land(p, result, writes)
        finally:
            # after Ctrl-C: queued runs never start, running ones kill their children (isolate._wait)
            pool.shutdown(wait=True, cancel_futures=True)
        # A kernel that spins on flags its peers' kernels set needs every rank's blocks resident
        # at once; beside other candidates' runs on one GPU it can stall past the limit. A hang or
        # an undecided run of the packed batch is run again alone, and that verdict stands.
        for p, first in crowded:
            writes = _DeferredWrites()
            result = run_prepared(p, world_size, options, writes, dev, call_timeout_s)
            result.setdefault("details", {})["packed_run"] = {k: first.get(k, "") for k in ("status", "outcome", "subtype", "reason")}
            land(p, result, writes)


def emulate_one(rec: Any, world_size: int, options: Any, store: Any, *, device: str, call_timeout_s: float | None = None) -> dict[str, Any]:
    """One record through the three steps."""
    prepared = prepare(rec, world_size, options, store, device)
    if not isinstance(prepared, Prepared):
        return prepared
    prepared.evaluation["details"]["prebuild"] = prebuild_before_the_clock([prepared.cand_file], options, device).get(prepared.cand_file, {})
    return run_prepared(prepared, world_size, options, store, device, call_timeout_s)


def prepare(rec: Any, world_size: int, options: Any, store: Any, device: str) -> Prepared | dict[str, Any]:
    """A Prepared run, or the evaluation when none is needed (cached, no problem, needs a GPU)."""
    from pkb.emulate.evaluate import cpu_blockers
    from pkb.eval import input_dtype, source_text, problem_source

    t0 = time.monotonic()
    ev: dict[str, Any] = {
        "emulated": True, "status": "not_run", "outcome": "", "subtype": "", "speedup": None, "timing": None,
        "correct": False, "world_size": int(world_size), "backend": "emulated", "device": device, "dtype": "",
        "trials": [], "ranks": [], "reason": "", "wall_s": 0.0, "config_key": "", "details": {},
    }
    if getattr(rec, "parse_status", "ok") != "ok":
        ev["reason"] = f"file not read: {rec.parse_status}"
        return ev
    source = source_text(rec, getattr(options, "corpus_root", None))
    if not source:
        ev["reason"] = "no source to run"
        return ev
    sha = getattr(rec, "sha256", "") or hashlib.sha256(source.encode("utf-8")).hexdigest()
    # the record's problem match (which rule matched, its facts) where the file reader made one
    match = [rec.problem_match] if getattr(rec, "problem_match", None) else []
    try:
        ref = problem_source.resolve(rec.problem_id, getattr(rec, "problem_name", ""), options, *match)
    except LookupError as exc:
        ev["reason"] = str(exc)
        return ev
    dtype = input_dtype(rec, ref, options)
    key = emulated_config_key(problem_id=ref.id, world_size=world_size, device=device, dtype=dtype, options=options)
    ev.update(dtype=dtype, config_key=key, problem_id=ref.id, problem_stem=ref.stem)
    if getattr(ref, "match", None):
        ev["problem_match"] = ref.match
    store.add_candidate(sha, rec.path, ref.id, getattr(rec, "problem_name", ""), getattr(rec, "model", ""),
                        getattr(rec, "provider", ""), getattr(rec, "backend", ""))
    cached = store.evaluation(sha, key)
    if cached and (cached.get("status") in DONE_STATUSES or cached.get("subtype") == "needs_multicast"):
        return {**cached, "status_stored": cached.get("status"), "status": "skipped_cached"}
    blockers = cpu_blockers(source) if device == "cpu" else []
    if blockers:
        ev["reason"] = f"needs the GPU under emulation: the candidate uses {'/'.join(blockers)}"
        store.write_evaluation(sha, key, ref.id, ev)
        return ev
    cand_dir = options.resolved_work_dir() / "emulated" / "candidates" / sha[:16]
    cand_dir.mkdir(parents=True, exist_ok=True)
    name = Path(rec.path).name or "candidate.py"
    cand_file = cand_dir / (name if name.endswith(".py") else f"{name}.py")
    cand_file.write_text(source, encoding="utf-8")  # exactly the bytes that were hashed
    return Prepared(rec, source, sha, ref, key, cand_file, ev, t0)


def run_prepared(p: Prepared, world_size: int, options: Any, store: Any, device: str, call_timeout_s: float | None) -> dict[str, Any]:
    """The run in a process of its own, the needs-multicast verdict, the store."""
    from pkb.emulate.evaluate import CAVEATS
    from pkb.emulate.isolate import run_child
    from pkb.eval.multicast import multicast_need, needs_multicast_verdict

    ev, ref, key = p.evaluation, p.ref, p.key
    job_dir = options.resolved_work_dir() / "emulated" / "jobs" / f"{ref.stem}-{p.sha[:16]}-{key}"
    job = {
        "candidate_path": str(p.cand_file),
        "problem": ref.job_problem,
        "world_size": int(world_size),
        "trials": int(options.trials),
        "device": device,
        "dtype": ev["dtype"],
        "scale": options.scale,
        "call_timeout_s": call_timeout_s,
        "load_timeout_s": options.import_timeout_s,  # a build inside the import has its own limit
        "compile_timeout_s": options.compile_timeout_s,
        "extra_sys_path": candidate_sys_path(options),
        "build_root": ev["details"].get("prebuild", {}).get("build_root"),
        "scratch": str(job_dir / "scratch"),
    }
    result = run_child(job, job_dir, python=options.python)
    rank_results = result.pop("rank_results", None)
    need = multicast_need(p.source, p.rec)
    if need["multimem"]:
        result.setdefault("details", {})["multicast_evidence"] = need
    result = needs_multicast_verdict(result, need) or result
    details = {**ev["details"], **(result.get("details") or {})}
    result = {**ev, **result, "details": details}
    result.update(emulated=True, world_size=int(world_size), backend="emulated", config_key=key, problem_id=ref.id,
                  problem_stem=ref.stem, dtype=ev["dtype"], speedup=None, timing=None, wall_s=round(time.monotonic() - p.started, 3))
    if "problem_match" in ev:
        result["problem_match"] = ev["problem_match"]
    result.setdefault("emulation", {"virtual_ranks": int(world_size), "caveats": list(CAVEATS)})
    if result.get("status") in ("ran", "inconclusive") or result.get("subtype") == "needs_multicast":
        store.write_evaluation(p.sha, key, ref.id, result, rank_results)
    return result


def _may_be_crowded(result: dict[str, Any]) -> bool:
    """A verdict that other runs on the same GPU can cause: a hang, or no verdict for lack of room."""
    return result.get("outcome") == "hang" or result.get("status") == "inconclusive"


class _DeferredWrites:
    """A run's store writes, kept for the thread that owns the store."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def write_evaluation(self, *args: Any) -> None:
        self.calls.append(args)


def prebuild_before_the_clock(files: list[Path], options: Any, device: str) -> dict[Path, dict[str, Any]]:
    """Every candidate's extensions built before any run starts (pkb.eval.build.prebuild_many,
    in a pool sized to cores and memory, into the build directory the real path uses), so no
    limit of a run pays for a build. The runs route their builds to the same directory: a build
    done here is found there, and one that failed here fails again at once (the directory
    remembers it) as the run's compile_error, classified as the real path classifies it."""
    from pkb.eval.device_needs import cuda_uses

    if device != "cuda":
        return {}
    todo = [f for f in files if {"load_inline", "compile_cuda_extension", "CUDAExtension"} & set(cuda_uses(_read(f)))]
    if not todo:
        return {}
    try:
        from pkb.eval import build_root_for, build, environment
    except ImportError:
        return {f: {"skipped": "pkb.eval.build is not there: builds happen inside the run, under its build limit"} for f in todo}
    root = build_root_for(options)
    # each candidate's own build folder, as on the real path
    out: dict[Path, dict[str, Any]] = {f: {"build_root": str(build.candidate_build_root(root, hashlib.sha256(Path(f).read_bytes()).hexdigest()))}
                                       for f in todo}
    try:
        opts = build.BuildOptions(root=root, extra_sys_path=candidate_sys_path(options), arch_list=environment(options).arch_list,
                                  python=options.python, hidden=build.hidden_from_builds(options))
        results = build.prebuild_many(todo, opts, jobs=getattr(options, "build_jobs", None) or None, timeout_s=options.compile_timeout_s)
    except Exception as exc:  # noqa: BLE001 - a prebuild problem never decides the outcome
        for f in todo:
            out[f]["error"] = f"prebuild failed: {type(exc).__name__}: {exc}"[:2000]
        return out
    for f, res in results.items():
        out[Path(f)].update(ok=bool(res.ok), seconds=round(float(res.seconds or 0.0), 3), cached=bool(getattr(res, "cached", False)),
                            log_path=str(getattr(res, "log_path", "") or ""), error=str(res.error or "")[:2000])
    return out


def candidate_sys_path(options: Any) -> list[str]:
    """What goes ahead on the candidate's sys.path: PKB's root (its utils.cuda_helpers) with
    --pkb-root; else what the evaluation core puts there for the real path, where it says so."""
    from pkb.eval import problem_source

    shared = getattr(problem_source, "candidate_sys_path", None)
    if callable(shared):
        return list(shared(options))
    return [str(Path(options.pkb_root).resolve())] if options.pkb_root else []


def _read(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


