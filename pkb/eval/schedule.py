"""When each launch of an evaluation goes: JIT builds in a CPU pool, correctness-only screens packed
in the untimed GPU slots as their builds land, and timed launches alone on the GPUs.

A timed launch needs the GPUs to itself (two timed jobs side by side measured 18% off). By default
it also waits for the last build. With `--timing beside-builds`, on a node with cores to spare
(`cpu_split`), the builds run on most cores and a timed launch on a few of its own, so timing
starts as soon as the first candidate is found correct; on the H200 4 of 4 speedups measured that
way came out 4-12% lower than on a quiet re-run, hence not the default.
"""

from __future__ import annotations

import os
import queue as queues
import threading
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

# Cores a timed launch keeps for itself, per rank (its launching thread and the NCCL/gloo helpers);
# the split is made only where the builds keep at least three quarters of the cores.
TIMED_CORES_PER_RANK = 2


def cpu_split(device: str, world_size: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the builds' cores, a timed launch's cores), or ((), ()) where the node has too few cores to
    give a timed launch its own (then a timed launch waits for the last build)."""
    if device != "cuda" or not hasattr(os, "sched_getaffinity"):
        return (), ()
    cores = sorted(os.sched_getaffinity(0))
    reserve = TIMED_CORES_PER_RANK * max(1, world_size)
    if len(cores) < 4 * reserve:
        return (), ()
    return tuple(cores[:-reserve]), tuple(cores[-reserve:])


def uses_builds(path: str) -> bool:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(s in text for s in ("load_inline", "compile_cuda_extension", "cpp_extension"))


def prebuild_all(pendings: list[Any], options: Any, env: Any, on_built: Callable[[Any], None] | None = None,
                 cpus: tuple[int, ...] = ()) -> None:
    """Every candidate's JIT builds, in a pool sized to cores and memory (`cpus`: the cores they may
    use; empty: any), before its launch: each launch then finds its build done. The result is noted
    in the evaluation's details (then `on_built(pending)` is called, as each lands); a failed build
    is the launch's compile_error (the build directory remembers the failure)."""
    prebuild_pendings([p for p in pendings if uses_builds(p.job.candidate_path)], options, env, on_built, cpus)


def prebuild_pendings(todo: list[Any], options: Any, env: Any, on_built: Callable[[Any], None] | None = None,
                      cpus: tuple[int, ...] = ()) -> None:
    """prebuild_all for candidates already known to build (each file read once by `uses_builds`)."""
    from pkb.eval import build_root_for
    from pkb.eval.build import BuildOptions, prebuild_many

    root = build_root_for(options)
    groups: dict[tuple[str, ...], list[Any]] = {}
    for p in todo:
        groups.setdefault(tuple(p.job.extra_sys_path), []).append(p)
    for extra, group in groups.items():
        opts = BuildOptions(root=root, extra_sys_path=list(extra), arch_list=env.arch_list, python=options.python, cpus=cpus)
        by_path = {Path(p.job.candidate_path): p for p in group}

        def note(path: Path, res: Any) -> None:
            by_path[path].evaluation.setdefault("details", {})["prebuild"] = {
                "ok": res.ok, "seconds": round(res.seconds, 2), "cached": res.cached, "error": res.error[:1000],
                "builds": [b.get("key") for b in res.builds], "log": res.log_path,
            }
            if on_built is not None:
                on_built(by_path[path])

        prebuild_many(list(by_path), opts, jobs=options.build_jobs or None, timeout_s=options.compile_timeout_s, on_result=note)


class BuildFeed:
    """The queue's launches as each becomes ready: those without a JIT build at once, the others as
    their builds land (prebuild_all in a background thread); None every half second while waiting,
    so the caller can collect finished launches meanwhile. `outstanding`: builds not landed yet."""

    def __init__(self, queue: list[tuple[Any, Any]], options: Any, env: Any, cpus: tuple[int, ...] = ()) -> None:
        self.queue, self.options, self.env, self.cpus = queue, options, env, cpus
        self.needs = [item for item in queue if uses_builds(item[1].job.candidate_path)]
        self.outstanding = len(self.needs)

    def __iter__(self) -> Iterator[tuple[Any, Any] | None]:
        by_pending = {id(pending): (rec, pending) for rec, pending in self.needs}
        ready: queues.Queue = queues.Queue()
        done = object()

        def build() -> None:
            try:
                prebuild_pendings([p for _, p in self.needs], self.options, self.env,
                                  on_built=lambda p: ready.put(by_pending[id(p)]), cpus=self.cpus)
            finally:
                ready.put(done)

        if self.needs:
            threading.Thread(target=build, name="pkb-prebuild", daemon=True).start()
        needed = set(by_pending)
        yield from (item for item in self.queue if id(item[1]) not in needed)
        announced: set[int] = set()
        while self.needs:
            try:
                item = ready.get(timeout=0.5)
            except queues.Empty:
                yield None
                continue
            if item is done:
                break
            announced.add(id(item[1]))
            self.outstanding -= 1
            yield item
        self.outstanding = 0
        # a build thread that failed before announcing some: they launch anyway (the rank builds)
        yield from (item for item in self.needs if id(item[1]) not in announced)


def run_screened(feed: BuildFeed, screen_slots: list[str], timed_slot: str, timed_cpus: tuple[int, ...],
                 launch: Callable[[Any], Any], finish: Callable[[Any, Any, Any], dict[str, Any]],
                 landed: Callable[[Any, dict[str, Any], list[Any]], None]) -> None:
    """Screens (correctness only, no timing) packed in `screen_slots` as builds land; a candidate
    not correct there is decided (stored under the timed configuration, marked `screened`); each
    one found correct gets its timed launch (which checks correctness again, then times) alone on
    the GPUs: no new screen starts while one waits, and it starts when the running screens are
    done. With `timed_cpus` it runs beside the builds still going, on those cores; without, it
    waits for the last build. Most candidates of a real corpus are not correct, so most never wait
    for the node. `launch(pending)` runs one launch; `finish(pending, result, rec)` decides it."""
    from pkb.eval.outcome import decide

    free = list(screen_slots)
    screens: dict[Any, tuple[Any, Any, Any, str]] = {}
    timed: dict[Any, tuple[Any, Any]] = {}
    correct: deque[tuple[Any, Any]] = deque()
    source = iter(feed)
    more = True

    def collect(block: bool) -> None:
        running = [*screens, *timed]
        if not running:
            return
        done, _ = wait(running, return_when=FIRST_COMPLETED, timeout=None if block else 0)
        for fut in done:
            if fut in timed:
                rec, pending = timed.pop(fut)
                result = fut.result()
                landed(rec, finish(pending, result, rec), [r.result for r in result.ranks])
                continue
            rec, pending, probe, slot = screens.pop(fut)
            free.append(slot)
            result = fut.result()
            if decide(result, probe.job).get("correct"):
                correct.append((rec, pending))
                continue
            probe.evaluation.setdefault("details", {})["screened"] = "a correctness-only launch (no timing): not correct, so not timed"
            landed(rec, finish(probe, result, rec), [r.result for r in result.ranks])

    with ThreadPoolExecutor(max_workers=max(1, len(screen_slots))) as pool:
        while True:
            timing_allowed = bool(correct) and (bool(timed_cpus) or feed.outstanding == 0)
            if not timed and not screens and timing_allowed:
                rec, pending = correct.popleft()
                details = pending.evaluation.setdefault("details", {})
                if feed.outstanding:
                    details["timed_beside_builds"] = {"builds": feed.outstanding, "cores": list(timed_cpus)}
                pending.job = replace(pending.job, visible_devices=timed_slot, cpus=list(timed_cpus))
                timed[pool.submit(launch, pending)] = (rec, pending)
                continue
            if more and free and not timed and not timing_allowed:
                item = next(source, StopIteration)
                if item is StopIteration:
                    more = False
                elif item is not None:
                    rec, pending = item
                    slot = free.pop(0)
                    job = replace(pending.job, iters=0, job_dir=pending.job.job_dir + "-screen", visible_devices=slot)
                    probe = replace(pending, job=job, evaluation={**pending.evaluation, "details": dict(pending.evaluation.get("details") or {}), "timing_mode": ""})
                    screens[pool.submit(launch, probe)] = (rec, pending, probe, slot)
                collect(block=False)
                continue
            if not screens and not timed:
                if not correct:
                    return  # the feed is over (else a screen would have been pulled above)
                continue  # the feed is over, so the next timed launch may start
            collect(block=True)
