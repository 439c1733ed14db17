"""When each launch of an evaluation goes: JIT builds in a CPU pool, screens (correctness launches)
packed in the untimed GPU slots as their builds land, and timing alone on the GPUs.

Timing needs the GPUs to itself (two timed jobs side by side measured 18% off). By default a
correct screen times in its own launch, at its gate (pkb.eval.timing_gate), once the last build
has landed and the other screens are done or waiting. With `--timing beside-builds`, on a node
with cores to spare (`cpu_split`), the builds run on most cores and a timed launch of its own on
a few others, so timing starts as soon as the first candidate is found correct; on the H200 4 of
4 speedups measured that way came out 4-12% lower than on a quiet re-run, hence not the default.
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
# How often the scheduler looks for a gated screen that has reached its gate.
GATE_POLL_S = 0.1


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
    from pkb.eval.build import BuildOptions, hidden_from_builds, prebuild_many

    root = build_root_for(options)
    groups: dict[tuple[str, ...], list[Any]] = {}
    for p in todo:
        groups.setdefault(tuple(p.job.extra_sys_path), []).append(p)
    for extra, group in groups.items():
        opts = BuildOptions(root=root, extra_sys_path=list(extra), arch_list=env.arch_list, python=options.python, cpus=cpus,
                            hidden=hidden_from_builds(options))
        by_path = {Path(p.job.candidate_path): p for p in group}

        def note(path: Path, res: Any) -> None:
            by_path[path].evaluation.setdefault("details", {})["prebuild"] = {
                "ok": res.ok, "seconds": round(res.seconds, 2), "cached": res.cached, "error": res.error[:1000],
                "builds": [b.get("key") for b in res.builds], "log": res.log_path, "sandbox": res.sandbox,
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
        self.outstanding = len(self.needs)  # builds whose launches were not handed out yet
        self.builds_done = not self.needs  # every build has landed (handed out or not)

    def __iter__(self) -> Iterator[tuple[Any, Any] | None]:
        by_pending = {id(pending): (rec, pending) for rec, pending in self.needs}
        ready: queues.Queue = queues.Queue()
        done = object()

        def build() -> None:
            try:
                prebuild_pendings([p for _, p in self.needs], self.options, self.env,
                                  on_built=lambda p: ready.put(by_pending[id(p)]), cpus=self.cpus)
            finally:
                self.builds_done = True
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
                 launch: Callable[..., Any], finish: Callable[[Any, Any, Any], dict[str, Any]],
                 landed: Callable[[Any, dict[str, Any], list[Any]], None]) -> None:
    """Screens packed in `screen_slots` as builds land; a candidate not correct there is decided
    (stored under the timed configuration, marked `screened`).

    Without `timed_cpus` a screen is gated (pkb.eval.timing_gate): its ranks, once correct, wait
    warm in the same launch, and the gate opens when the node is theirs alone: no build left,
    every other running screen finished or waiting too, none started meanwhile. With `timed_cpus`
    (`--timing beside-builds`) a correct candidate gets a timed launch of its own on those cores,
    beside the builds still going: it checks correctness again, then times. A gated screen that
    came out correct but did not time also gets one. `launch(pending, gate)` runs one launch;
    `finish(pending, result, rec)` decides it."""
    from pkb.eval.outcome import decide
    from pkb.eval.timing_gate import TimingGate

    gated = not timed_cpus
    free = list(screen_slots)
    screens: dict[Any, tuple[Any, Any, Any, str, TimingGate | None]] = {}
    timed: dict[Any, tuple[Any, Any]] = {}
    correct: deque[tuple[Any, Any]] = deque()  # found correct, timed by a launch of their own
    parked_order: list[TimingGate] = []  # gates in the order their ranks arrived
    source = iter(feed)
    more = True

    def collect(block: bool) -> None:
        running = [*screens, *timed]
        if not running:
            return
        # a gated screen arriving at its gate is no future: wake often enough to see it
        done, _ = wait(running, return_when=FIRST_COMPLETED, timeout=(GATE_POLL_S if screens else None) if block else 0)
        for fut in done:
            if fut in timed:
                rec, pending = timed.pop(fut)
                result = fut.result()
                landed(rec, finish(pending, result, rec), [r.result for r in result.ranks])
                continue
            rec, pending, probe, slot, gate = screens.pop(fut)
            free.append(slot)
            if gate in parked_order:
                parked_order.remove(gate)
            result = fut.result()
            if gate is not None and gate.opened_ns is not None:  # it timed in this launch
                details = probe.evaluation.setdefault("details", {})
                details["timed_in_screen"] = {"waited_s": round(gate.waited_s, 3)}
                landed(rec, finish(probe, result, rec), [r.result for r in result.ranks])
                continue
            if decide(result, probe.job).get("correct"):
                correct.append((rec, pending))
                continue
            if not ((getattr(result, "judge_check", None) or {}).get("timing") or {}).get("problems"):  # else it timed without leave
                probe.evaluation.setdefault("details", {})["screened"] = "a correctness-only launch (no timing): not correct, so not timed"
            probe.evaluation["timing_mode"] = ""
            landed(rec, finish(probe, result, rec), [r.result for r in result.ranks])

    def gates() -> list[TimingGate]:
        return [g for *_, g in screens.values() if g is not None]

    def node_quiet() -> bool:
        """No launch holds the GPUs but screens parked at their gates."""
        return not timed and all(g is not None and g.parked for *_, g in screens.values())

    with ThreadPoolExecutor(max_workers=max(1, len(screen_slots))) as pool:
        while True:
            parked_order.extend(g for g in gates() if g.parked and g not in parked_order)
            timing_allowed = bool(timed_cpus) or feed.outstanding == 0 or feed.builds_done
            if parked_order and timing_allowed and node_quiet():
                parked_order.pop(0).grant()
                continue
            if not timed and not screens and correct and timing_allowed:
                rec, pending = correct.popleft()
                details = pending.evaluation.setdefault("details", {})
                if feed.outstanding:
                    details["timed_beside_builds"] = {"builds": feed.outstanding, "cores": list(timed_cpus)}
                pending.job = replace(pending.job, visible_devices=timed_slot, cpus=list(timed_cpus))
                timed[pool.submit(launch, pending, None)] = (rec, pending)
                continue
            # no new screen while a candidate waits for the node: the node would never be free
            waiting = timing_allowed and (bool(parked_order) or bool(correct))
            if more and free and not timed and not waiting and not any(g.granted.is_set() for g in gates()):
                item = next(source, StopIteration)
                if item is StopIteration:
                    more = False
                elif item is not None:
                    rec, pending = item
                    slot = free.pop(0)
                    gate = TimingGate() if gated else None
                    job = replace(pending.job, iters=pending.job.iters if gated else 0, timing_gate=gated,
                                  job_dir=pending.job.job_dir + "-screen", visible_devices=slot)
                    evaluation = {**pending.evaluation, "details": dict(pending.evaluation.get("details") or {})}
                    if not gated:
                        evaluation["timing_mode"] = ""  # it does not time
                    probe = replace(pending, job=job, evaluation=evaluation)
                    screens[pool.submit(launch, probe, gate)] = (rec, pending, probe, slot, gate)
                collect(block=False)
                continue
            if not screens and not timed:
                if not correct:
                    return  # the feed is over (else a screen would have been pulled above)
                continue  # the feed is over, so the next timed launch may start
            collect(block=True)
