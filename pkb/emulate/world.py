"""A world of N virtual ranks inside one process: one thread per rank, one stream per rank.

Every rank is a persistent thread that keeps its identity (`threading.local`), its CUDA stream
(set as that thread's current stream; torch's current stream is per thread) and its own copy of
the candidate module for the whole run. The main thread hands all ranks one step at a time
(`World.step`) and waits for them with a wall-clock limit.

Blocking primitives the fakes use (rendezvous of a collective, a barrier, a mailbox of
send/recv, a signal wait) wait in short slices and give up when the world is aborted, so a
protocol deadlock (a rank that skips a barrier) ends cleanly when the step's limit passes.
A rank stuck in Python bytecode (a busy loop on a CPU tensor) gets an asynchronous exception; a
rank stuck in native code (a CUDA kernel that spins forever under `synchronize`) cannot be
stopped: the world reports it and the process is marked tainted for further CUDA emulation.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import queue
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

WAIT_SLICE_S = 0.02

_local = threading.local()
# Set when a rank thread stayed stuck in native code after a timeout: the device may still be
# running spinning kernels, so later CUDA emulation in this process would not be trustworthy.
TAINTED: list[str] = []


class EmulationError(RuntimeError):
    """A misuse the emulation detects (a collective called by a thread that is no rank...)."""


class NotEmulated(EmulationError, AttributeError):
    """A part of torch.distributed that exists on real ranks and that the emulation does not
    provide (a ProcessGroup method, a reduce op, a rarely used collective). The run cannot say
    what the candidate would do there: not the candidate's fault. An AttributeError as well, so
    `hasattr(group, name)` answers False as on a torch without it. Each one made inside a rank is
    noted in its world (shared["not_emulated"]), so a candidate that caught it and went on is
    still named in the record."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        ctx = current_or_none()
        if ctx is not None:
            ctx.world.shared.setdefault("not_emulated", set()).add(message.split(" (")[0])


class WorldAborted(RuntimeError):
    """Raised inside a rank when the world gave up on the current step."""


class EmulationTimeout(BaseException):
    """Injected into a rank thread stuck in Python code when its step ran out of time.

    A BaseException so a candidate's `except Exception` does not swallow it."""


@dataclass
class RankContext:
    world: "World"
    rank: int
    stream: Any = None  # torch.cuda.Stream on CUDA, None on CPU
    module: Any = None  # this rank's copy of the candidate module
    state: dict[str, Any] = field(default_factory=dict)  # per-rank fake state (symm handles...)
    phase: str = ""
    blocked_in: str = ""  # the fake primitive this rank is waiting in, '' when running


def current() -> RankContext:
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        raise EmulationError(
            "torch.distributed was called from a thread that is no virtual rank "
            "(emulation gives rank identity only to its own rank threads)"
        )
    return ctx


def current_or_none() -> RankContext | None:
    return getattr(_local, "ctx", None)


class BuildClock:
    """Wall time during which a JIT build ran (any rank's): a step's no-progress limit does not
    count it, as the real path's call clock stops for a build (the build has its own limit)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.active_since = 0.0
        self.total_s = 0.0

    def start(self) -> None:
        with self.lock:
            if self.active == 0:
                self.active_since = time.monotonic()
            self.active += 1

    def stop(self) -> None:
        with self.lock:
            self.active -= 1
            if self.active == 0:
                self.total_s += time.monotonic() - self.active_since

    def paused(self, now: float) -> float:
        """Build seconds so far, the running build included."""
        with self.lock:
            return self.total_s + (now - self.active_since if self.active else 0.0)

    def running_for(self, now: float) -> float:
        with self.lock:
            return now - self.active_since if self.active else 0.0


class Blocking:
    """`with Blocking('barrier'):` marks where a rank waits (for the hang report)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.ctx = current_or_none()
        self.prev = ""

    def __enter__(self) -> "Blocking":
        if self.ctx is not None:
            self.prev = self.ctx.blocked_in
            self.ctx.blocked_in = self.what
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.ctx is not None:
            self.ctx.blocked_in = self.prev


class Rendezvous:
    """An abortable all-to-all exchange among `n` members (a reusable barrier that carries values).

    `exchange(i, value)` returns the list of every member's value once all have arrived. The last
    arrival takes the snapshot and opens the next generation, so a member that comes back early
    for the next exchange cannot disturb a slow reader of the previous one."""

    def __init__(self, world: "World", n: int, name: str) -> None:
        self.world, self.n, self.name = world, n, name
        self.cond = threading.Condition()
        self.slots: list[Any] = [None] * n
        self.arrived = 0
        self.generation = 0
        self.result: list[Any] = []

    def exchange(self, index: int, value: Any, what: str = "collective") -> list[Any]:
        with Blocking(what), self.cond:
            gen = self.generation
            self.slots[index] = value
            self.arrived += 1
            if self.arrived == self.n:
                self.result = list(self.slots)
                self.slots = [None] * self.n
                self.arrived = 0
                self.generation += 1
                self.cond.notify_all()
                return self.result
            while self.generation == gen:
                self.world.check_abort()
                self.cond.wait(WAIT_SLICE_S)
            return self.result


class Mailbox:
    """Point-to-point messages: (src, dst, tag) -> queue of payloads."""

    def __init__(self, world: "World") -> None:
        self.world = world
        self.cond = threading.Condition()
        self.boxes: dict[tuple[int, int, int], list[Any]] = {}

    def put(self, src: int, dst: int, tag: int, payload: Any) -> None:
        with self.cond:
            self.boxes.setdefault((src, dst, tag), []).append(payload)
            self.cond.notify_all()

    def take(self, src: int | None, dst: int, tag: int, what: str = "recv") -> tuple[int, Any]:
        with Blocking(what), self.cond:
            while True:
                for (s, d, t), items in self.boxes.items():
                    if d == dst and t == tag and (src is None or s == src) and items:
                        return s, items.pop(0)
                self.world.check_abort()
                self.cond.wait(WAIT_SLICE_S)


class Counter:
    """Signals of put_signal/wait_signal: counts per (dst, src, channel, key)."""

    def __init__(self, world: "World") -> None:
        self.world = world
        self.cond = threading.Condition()
        self.counts: dict[tuple[Any, ...], int] = {}

    def post(self, key: tuple[Any, ...]) -> None:
        with self.cond:
            self.counts[key] = self.counts.get(key, 0) + 1
            self.cond.notify_all()

    def consume(self, key: tuple[Any, ...], timeout_s: float | None = None, what: str = "wait_signal") -> bool:
        deadline = None if not timeout_s else time.monotonic() + timeout_s
        with Blocking(what), self.cond:
            while self.counts.get(key, 0) <= 0:
                self.world.check_abort()
                if deadline is not None and time.monotonic() > deadline:
                    return False
                self.cond.wait(WAIT_SLICE_S)
            self.counts[key] -= 1
            return True


@dataclass
class StepResult:
    rank: int
    ok: bool
    value: Any = None
    error: BaseException | None = None
    traceback: str = ""
    seconds: float = 0.0


@dataclass
class StepOutcome:
    results: list[StepResult | None]
    timed_out: bool
    stuck: list[dict[str, Any]]  # ranks that had not returned when the step gave up
    native_stuck: list[int]  # of those, ranks that did not respond to the injected exception


class World:
    """N virtual ranks on one device ('cpu' or 'cuda[:i]')."""

    def __init__(self, world_size: int, device: Any = "cpu", name: str = "world") -> None:
        import torch

        if world_size < 1:
            raise ValueError("world_size must be >= 1")
        self.world_size = world_size
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.name = name
        self._abort = threading.Event()
        self.mailbox = Mailbox(self)
        self.signals = Counter(self)
        self.lock = threading.RLock()
        self.groups: dict[Any, Any] = {}  # fake process groups by key, shared by the ranks
        self.shared: dict[Any, Any] = {}  # other cross-rank state of the fakes
        self.contexts = [RankContext(self, r) for r in range(world_size)]
        self._queues: list[queue.Queue] = [queue.Queue() for _ in range(world_size)]
        self._results: queue.Queue = queue.Queue()  # (step id, StepResult) from every rank
        self._threads: list[threading.Thread] = []
        self._step_id = 0
        self.dead: set[int] = set()  # ranks whose thread could not be recovered
        self.started = False
        self.builds = BuildClock()
        self.build_limit_s = 900.0  # one JIT build inside a step (its own limit, not the step's)

    # -- lifecycle --

    def start(self) -> "World":
        import torch

        if self.started:
            return self
        ready = threading.Barrier(self.world_size + 1)
        for r in range(self.world_size):
            t = threading.Thread(target=self._rank_main, args=(r, ready), name=f"{self.name}-rank{r}", daemon=True)
            self._threads.append(t)
            t.start()
        ready.wait(timeout=120)
        self.started = True
        del torch
        return self

    def _rank_main(self, rank: int, ready: threading.Barrier) -> None:
        import torch

        ctx = self.contexts[rank]
        _local.ctx = ctx
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
            ctx.stream = torch.cuda.Stream(device=self.device)
            torch.cuda.set_stream(ctx.stream)
            _use_cupy_stream(ctx.stream)
        ready.wait()
        while True:
            try:
                item = self._queues[rank].get()
            except EmulationTimeout:
                continue  # injected just after this rank had finished its step
            if item is None:
                break
            step_id, fn, args = item
            t0 = time.perf_counter()
            try:
                value = fn(ctx, *args)
                if ctx.stream is not None:
                    ctx.blocked_in = "the rank's stream (its kernels, after the call returned)"
                    ctx.stream.synchronize()
                res = StepResult(rank, True, value, seconds=time.perf_counter() - t0)
            except BaseException as exc:  # noqa: BLE001 - everything a candidate raises is data
                res = StepResult(rank, False, None, exc, traceback.format_exc(), time.perf_counter() - t0)
            try:
                ctx.blocked_in = ""
                self._results.put((step_id, res))
            except EmulationTimeout:
                self._results.put((step_id, res))

    def close(self) -> None:
        for r, t in enumerate(self._threads):
            if t.is_alive() and r not in self.dead:
                self._queues[r].put(None)
        for r, t in enumerate(self._threads):
            if r not in self.dead:
                t.join(timeout=5)

    def __enter__(self) -> "World":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- abort --

    def check_abort(self) -> None:
        if self._abort.is_set():
            raise WorldAborted(f"{self.name}: the step was abandoned (time limit or a failed peer)")

    @property
    def aborted(self) -> bool:
        return self._abort.is_set()

    # -- steps --

    def step(
        self,
        fn: Callable[..., Any],
        args_per_rank: list[tuple] | None = None,
        *,
        phase: str = "",
        timeout_s: float = 60.0,
        abort_on_error: bool = True,
    ) -> StepOutcome:
        """Run fn(ctx, *args) on every rank at once; wait at most timeout_s for all of them.

        A rank that raises makes the others' blocking primitives give up too (when
        abort_on_error), as a real job would fail when one rank dies."""
        if self.dead:
            raise EmulationError(f"ranks {sorted(self.dead)} are stuck from an earlier step; the world is unusable")
        self._abort.clear()
        args_per_rank = args_per_rank or [()] * self.world_size
        self._step_id += 1
        step_id = self._step_id
        for r in range(self.world_size):
            self.contexts[r].phase = phase
            self.contexts[r].blocked_in = ""
            self._queues[r].put((step_id, fn, args_per_rank[r]))
        results: list[StepResult | None] = [None] * self.world_size
        start = time.monotonic()
        built_before = self.builds.paused(start)
        timed_out = False

        def collect(wait_s: float) -> None:
            try:
                sid, res = self._results.get(timeout=max(0.0, wait_s))
            except queue.Empty:
                return
            if sid != step_id:
                return  # a late answer of an abandoned step
            results[res.rank] = res
            if not res.ok and abort_on_error:
                self._abort.set()

        while any(res is None for res in results):
            now = time.monotonic()
            # the clock of no progress stops while a build runs; the build has its own limit
            left = start + timeout_s + (self.builds.paused(now) - built_before) - now
            building = self.builds.running_for(now)
            if building > self.build_limit_s or (left <= 0 and not building):
                timed_out = True
                break
            collect(min(max(left, 0.05), 0.5))
        stuck: list[dict[str, Any]] = []
        native: list[int] = []
        if timed_out:
            stacks = self.rank_stacks([r for r in range(self.world_size) if results[r] is None])
            for r in range(self.world_size):
                if results[r] is None:
                    c = self.contexts[r]
                    frames = stacks.get(r, [])
                    stuck.append({"rank": r, "phase": c.phase, "blocked_in": c.blocked_in or where_in(frames),
                                  "where": where_in(frames), "stack": frames})
            self._abort.set()
            # Ranks waiting in a fake primitive notice the abort; ranks in Python loops get an
            # injected exception; give both a moment.
            grace = time.monotonic() + 2.0
            injected = False
            while time.monotonic() < grace and any(res is None for res in results):
                if not injected and time.monotonic() > grace - 1.5:
                    for r in range(self.world_size):
                        if results[r] is None:
                            _inject(self._threads[r], EmulationTimeout)
                    injected = True
                collect(0.05)
            for r in range(self.world_size):
                if results[r] is None:
                    native.append(r)
                    self.dead.add(r)
            if native and self.device.type == "cuda":
                TAINTED.append(f"{self.name}: ranks {native} stuck in native code (a kernel still spinning?)")
        self._abort.clear()
        return StepOutcome(results, timed_out, stuck, native)


    def rank_stacks(self, ranks: list[int]) -> dict[int, list[dict[str, Any]]]:
        """Each rank thread's Python stack now (outermost first), from the rank's step function on."""
        frames = sys._current_frames()
        out: dict[int, list[dict[str, Any]]] = {}
        for r in ranks:
            t = self._threads[r] if r < len(self._threads) else None
            frame = frames.get(t.ident) if t is not None and t.ident is not None else None
            if frame is None:
                continue
            entries = [{"file": fs.filename, "line": fs.lineno, "function": fs.name, "code": (fs.line or "").strip()}
                       for fs in traceback.extract_stack(frame)]
            # drop threading's bootstrap above the rank loop (the loop stays: a rank stuck in
            # its stream's synchronize after the call returned waits there)
            while entries and entries[0]["file"].endswith("threading.py"):
                entries.pop(0)
            out[r] = entries[-40:]
        return out


_HARNESS_DIR = os.path.dirname(os.path.abspath(__file__))
# the standard library and the installed packages (torch's folder's parent): not the candidate's code
_LIBRARY_DIRS = tuple(sorted({os.path.dirname(os.__file__),
                              os.path.dirname(os.path.dirname(importlib.util.find_spec("torch").origin or "/nonexistent/x"))}))


def where_in(frames: list[dict[str, Any]]) -> str:
    """'file:line in function' of the innermost frame of the candidate's code (not the
    emulation's, not the standard library's or an installed package's: the fake primitive's or
    library call's caller), with the innermost frame itself when that differs."""
    if not frames:
        return "unknown (no Python frame: blocked in native code before any Python ran)"
    inner = frames[-1]

    def own(f: dict[str, Any]) -> bool:
        return not f["file"].startswith(_HARNESS_DIR) and not f["file"].startswith(_LIBRARY_DIRS) and not f["file"].startswith("<frozen")

    outside = next((f for f in reversed(frames) if own(f)),
                   next((f for f in reversed(frames) if not f["file"].startswith(_HARNESS_DIR)), inner))
    text = f"{outside['file']}:{outside['line']} in {outside['function']}"
    if outside is not inner:
        text += f" (waiting in {os.path.basename(inner['file'])}:{inner['line']} {inner['function']})"
    return text


def _inject(thread: threading.Thread, exc_type: type[BaseException]) -> None:
    if thread.ident is None or not thread.is_alive():
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type))


def _use_cupy_stream(stream: Any) -> None:
    """Make cupy (if present) launch on this rank's stream too; cupy's current stream is per thread."""
    try:
        import cupy
    except Exception:
        return
    try:
        cupy.cuda.ExternalStream(stream.cuda_stream).use()
    except Exception:
        pass


def sync_current_stream() -> None:
    """Wait for the calling rank's stream (no-op on CPU): work before a host-side rendezvous is done."""
    ctx = current_or_none()
    if ctx is not None and ctx.stream is not None:
        import torch

        torch.cuda.current_stream(ctx.world.device).synchronize()
