"""Evaluation on a cluster through submitit: an array of shards, each writing its own result
file, merged into the one SQLite store by the submitting process.

    run_sharded(records, options, ClusterOptions(executor="slurm", partition="gpu", ...))

Why files and not the store: a shard runs on some node of the cluster; many writers on one SQLite
file over a network filesystem lose writes, so each shard appends JSON lines (one per candidate,
flushed as it lands) to `FOLDER/results/shard-<job>.jsonl`, and only the submitting process
writes the store. Files left by an earlier run that was not collected (the submitter was killed)
are merged first; candidates already in the store under the same configuration are not submitted
again. submitit's LocalExecutor runs the same path on this machine (CI: gloo, CPU candidates).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pkb.eval import Environment, EvalOptions, environment, prepare
from pkb.store import Store

RESULTS = "results"
MERGED = "merged"


@dataclass
class ClusterOptions:
    executor: str = "slurm"  # slurm | local
    folder: str = "pkb-out/shards"  # submitit's logs and the shards' result files (a shared filesystem on a cluster)
    shards: int = 0  # 0: one per `per_shard` candidates
    per_shard: int = 32
    partition: str | None = None
    gpus_per_node: int = 8
    cpus_per_task: int = 16
    mem_gb: int | None = None
    time_min: int = 120
    account: str | None = None
    array_parallelism: int = 64


def target_environment(options: EvalOptions, cluster: ClusterOptions) -> Environment:
    """The environment the shards will see: on Slurm, the compute nodes' (the submitting host may
    have no GPU), so the configuration key of what is stored is the one the shards will write."""
    if cluster.executor == "local":
        return environment(options)
    backend = "nccl" if options.backend == "auto" else options.backend
    device = "cuda" if backend == "nccl" else "cpu"
    ws = options.world_size or (cluster.gpus_per_node if device == "cuda" else 2)
    return Environment(device, backend, cluster.gpus_per_node if device == "cuda" else 0, ws, "", "")


def run_sharded(records: list[Any], options: EvalOptions, cluster: ClusterOptions) -> dict[str, Any]:
    """Submit what the store lacks in shards, wait, and merge every shard's results into the store."""
    folder = Path(cluster.folder).resolve()
    (folder / RESULTS).mkdir(parents=True, exist_ok=True)
    merged_before = collect(folder, options.store_path)
    env = target_environment(options, cluster)
    todo, skipped = [], 0
    with Store(options.store_path) as store:
        for rec in records:
            pending = prepare(rec, options, env, store)
            if isinstance(pending, dict):
                rec.evaluation = pending
                skipped += 1
            else:
                todo.append(rec)
    shards = split(todo, cluster.shards or math.ceil(len(todo) / max(1, cluster.per_shard)))
    errors: list[str] = []
    if shards:
        executor = make_executor(cluster, folder)
        shard_options = replace(options, store_path="", work_dir="")  # the shard picks node-local ones
        for shard in shards:
            for rec in shard:
                rec.tree = None  # re-parsed on demand; an AST is costly to pickle
        jobs = executor.map_array(run_shard, shards, [shard_options] * len(shards), [str(folder / RESULTS)] * len(shards))
        try:
            for job in jobs:
                try:
                    job.result()
                except Exception as exc:  # noqa: BLE001 - a failed shard keeps what it wrote; the rest still merges
                    errors.append(f"shard {job.job_id}: {type(exc).__name__}: {str(exc)[-1000:]}")
        except KeyboardInterrupt:
            cancel(jobs)
            merged = collect(folder, options.store_path, records)
            raise ShardsInterrupted(merged + merged_before, len(jobs)) from None
    merged = collect(folder, options.store_path, records)
    return {"submitted": len(todo), "shards": len(shards), "skipped": skipped, "merged": merged + merged_before, "errors": errors}


class ShardsInterrupted(KeyboardInterrupt):
    """Ctrl-C while waiting on the shards: they were cancelled and what they wrote was merged."""

    def __init__(self, merged: int, cancelled: int) -> None:
        super().__init__(f"{cancelled} shard jobs cancelled; {merged} results merged")
        self.merged, self.cancelled = merged, cancelled


CANCEL_GRACE_S = 15.0  # for a cancelled local shard to stop and close its result file


def cancel(jobs: list[Any]) -> None:
    """Cancel every shard job (Slurm: scancel; local: SIGINT, which the shard's evaluation turns
    into killing its launches), then give them a moment to stop: a rerun submits what the store
    lacks, and a result a shard writes after this is merged by that rerun."""
    import time

    for job in jobs:
        try:
            job.cancel(check=False)
        except Exception:  # noqa: BLE001 - cancelling is best effort; the rerun merges what is left
            continue
    deadline = time.monotonic() + CANCEL_GRACE_S
    while time.monotonic() < deadline and not all(_done(job) for job in jobs):
        time.sleep(0.2)


def _done(job: Any) -> bool:
    try:
        return bool(job.done())
    except Exception:  # noqa: BLE001 - a job whose state cannot be read is not waited for
        return True


def split(items: list[Any], n: int) -> list[list[Any]]:
    """n shards of near-equal size, in order; none empty."""
    if not items or n <= 0:
        return []
    n = min(n, len(items))
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def make_executor(cluster: ClusterOptions, folder: Path) -> Any:
    import submitit

    logs = folder / "logs"
    if cluster.executor == "local":
        executor = submitit.LocalExecutor(folder=str(logs))
        executor.update_parameters(timeout_min=cluster.time_min)
        return executor
    if cluster.executor != "slurm":
        raise ValueError(f"executor {cluster.executor!r}: slurm or local")
    executor = submitit.AutoExecutor(folder=str(logs), cluster="slurm")
    params: dict[str, Any] = dict(
        nodes=1, tasks_per_node=1, gpus_per_node=cluster.gpus_per_node, cpus_per_task=cluster.cpus_per_task,
        timeout_min=cluster.time_min, slurm_partition=cluster.partition, slurm_array_parallelism=cluster.array_parallelism,
        name="pkb-eval",
    )
    if cluster.mem_gb:
        params["mem_gb"] = cluster.mem_gb
    if cluster.account:
        params["slurm_account"] = cluster.account
    executor.update_parameters(**params)
    return executor


def shard_id() -> str:
    for var in ("SLURM_ARRAY_JOB_ID", "SLURM_JOB_ID"):
        if os.environ.get(var):
            task = os.environ.get("SLURM_ARRAY_TASK_ID")
            return f"{os.environ[var]}_{task}" if task and var == "SLURM_ARRAY_JOB_ID" else os.environ[var]
    try:
        import submitit

        env = submitit.JobEnvironment()
        return str(env.job_id).replace("/", "_")
    except Exception:  # noqa: BLE001 - outside submitit
        return f"pid{os.getpid()}"


def run_shard(records: list[Any], options: EvalOptions, results_dir: str) -> int:
    """In the shard's job: evaluate with a node-local store and work folder; append one JSON line
    per candidate to this shard's result file as it lands. Returns the number written."""
    from pkb.eval import evaluate

    local = Path(tempfile.mkdtemp(prefix="pkb-shard-"))
    out = Path(results_dir) / f"shard-{shard_id()}.jsonl"
    opts = replace(options, store_path=str(local / "shard.sqlite"), work_dir=str(local / "work"))
    written = 0
    with out.open("a", encoding="utf-8") as f:

        def landed(rec: Any, evaluation: dict[str, Any], rank_results: list[Any]) -> None:
            nonlocal written
            if evaluation.get("status") == "skipped_cached":
                return
            row = {
                "sha256": rec.sha256, "path": rec.path, "problem_id": evaluation.get("problem_id", rec.problem_id),
                "problem_name": rec.problem_name, "model": rec.model, "provider": rec.provider, "backend": rec.backend,
                "config_key": evaluation.get("config_key", ""), "evaluation": evaluation, "rank_results": rank_results,
            }
            f.write(json.dumps(row, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
            written += 1

        try:
            evaluate(records, opts, on_result=landed)
        finally:
            shutil.rmtree(local, ignore_errors=True)
    return written


def collect(folder: Path, store_path: str, records: list[Any] | None = None) -> int:
    """Merge every shard result file into the store (one writer: this process), then move it to
    `merged/`; a record of this run gets its evaluation. Returns the rows merged."""
    results = Path(folder) / RESULTS
    if not results.is_dir():
        return 0
    by_sha: dict[str, list[Any]] = {}
    for rec in records or []:
        by_sha.setdefault(rec.sha256, []).append(rec)
    done = Path(folder) / MERGED
    done.mkdir(parents=True, exist_ok=True)
    n = 0
    with Store(store_path) as store:
        for path in sorted(results.glob("shard-*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a killed shard
                ev, sha = row["evaluation"], row["sha256"]
                store.add_candidate(sha, row["path"], row["problem_id"], row.get("problem_name", ""), row.get("model", ""),
                                    row.get("provider", ""), row.get("backend", ""))
                if row.get("config_key"):
                    store.write_evaluation(sha, row["config_key"], row["problem_id"], ev, row.get("rank_results") or [])
                for rec in by_sha.get(sha, []):
                    rec.evaluation = ev
                n += 1
            target = done / path.name
            if target.exists():
                target = done / f"{path.stem}-{os.getpid()}-{n}.jsonl"
            path.rename(target)
    return n
