"""Inside a rank: what keeps an untrusted candidate from fooling the measurement.

    HarnessSnapshot   identities of the functions and classes the harness relies on (timers,
                      events, comparison, collectives, its own modules), checked after the import
                      and after calls; a replaced one is `suspect/harness_tamper`
    DistCounter       counts torch.distributed collectives (and functional collectives) while the
                      candidate's calls run, so a library collective on the timed path is seen;
                      barriers are counted apart (a host sync moves no data); also at the
                      dispatcher (torch.ops.c10d.*, torch.ops._c10d_functional.*), which every
                      route to NCCL or gloo but a Backend's own methods goes through, and the
                      ready-made collectives of symmetric memory (torch.ops.symm_mem.*); and the
                      collectives a CUDA graph captured again at each of its replays
                      (pkb.eval.graph_replays)
    ReferenceWatch    a profile hook during the correctness calls that notices the candidate
                      running code from the reference's file (`suspect/calls_reference`)
    Watchdog          a thread that holds the per-phase and per-call deadlines and marks the
                      rank's status file `expired`; the launcher kills the job on that mark (and on
                      a deadline passed without one, should the thread never get the GIL)

None of this is a sandbox: candidate code runs in the harness's interpreter and can reach any
object with enough effort (gc, frames). The checks make the known tricks fail loudly; the
launcher's process-level limits and signed result files are what cannot be talked around.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any, Callable, Iterator

from pkb.collectives import COUNTED, HOST_SYNCS, LIBRARY_OPS, PROCESS_GROUP_METHODS
from pkb.eval.graph_replays import GRAPH_METHODS, GraphLedger, graph_classes

_TORCH_FUNCS = (
    "allclose", "isclose", "equal", "eq", "ne", "isnan", "isfinite", "isinf", "where", "abs", "all", "any",
    "zeros", "zeros_like", "empty", "empty_like", "full", "stack", "cat", "randn", "manual_seed",
    "no_grad", "is_tensor", "save", "from_numpy", "as_tensor", "tensor", "clone", "sub", "maximum",
)
_CUDA_FUNCS = ("Event", "Stream", "synchronize", "current_stream", "default_stream", "mem_get_info", "set_device", "device_count", "is_available", "stream")
_EVENT_METHODS = ("record", "elapsed_time", "synchronize", "wait", "query")
_TIME_FUNCS = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "sleep")
_HARNESS_MODULES = (
    "pkb.eval.compare", "pkb.eval.poison", "pkb.eval.timing", "pkb.eval.worker", "pkb.eval.rank_report",
    "pkb.eval.rank_timing", "pkb.eval.rank_process", "pkb.eval.tensors", "pkb.eval.job", "pkb.eval.guard",
    "pkb.eval.classify", "pkb.eval.verdict_channel",
)
_OTHER = (("json", "dumps"), ("json", "loads"), ("os", "replace"), ("os", "_exit"), ("threading", "enumerate"), ("sys", "setprofile"),
          # pkb.eval.library_loads' hooks on the loaders and symbol lookups of ctypes
          ("ctypes", "_dlopen"), ("_ctypes", "dlopen"), ("_ctypes", "dlsym"),
          # an import hook could hand the rank's later imports of harness code a forged copy
          ("builtins", "__import__"), ("importlib", "import_module"))


# Entries Python itself adds to a class's dict (copyreg caches __slotnames__ on first pickling).
_PYTHON_MACHINERY = frozenset({"__slotnames__", "__abstractmethods__", "_abc_impl"})


class HarnessSnapshot:
    """The identity of every object the harness's timing and comparison go through."""

    def __init__(self) -> None:
        import torch
        import torch.distributed as dist

        self.entries: dict[str, tuple[Any, str, Any]] = {}
        self.descriptors: dict[str, tuple[int, tuple[int, int]]] = {}
        for name in _TORCH_FUNCS:
            self._add(torch, "torch", name)
        if hasattr(torch, "cuda"):
            for name in _CUDA_FUNCS:
                self._add(torch.cuda, "torch.cuda", name)
            event = getattr(torch.cuda, "Event", None)
            if event is not None:
                for name in _EVENT_METHODS:
                    self._add(event, "torch.cuda.Event", name)
        for name in _TIME_FUNCS:
            self._add(time, "time", name)
        for name in sorted(COUNTED) + ["get_rank", "get_world_size", "init_process_group", "new_group"]:
            self._add(dist, "torch.distributed", name)
        for cls in process_group_classes():  # the counter's wrappers one level down
            for method in PROCESS_GROUP_METHODS:
                self._add(cls, f"c10d.{cls.__name__}", method)
        for cls in graph_classes():  # the wrappers that count a graph's collectives at each replay
            for method in GRAPH_METHODS:
                self._add(cls, f"cuda.{cls.__name__}", method)
        # The harness's own modules: the module objects sys.modules hands to a later import, and
        # every name they bind at module level (their functions and classes, and what they
        # imported: `pkb.eval.timing.time` rebound to a slower clock moves every figure)
        self.modules = {name: sys.modules.get(name) for name in _HARNESS_MODULES}
        for modname in _HARNESS_MODULES:
            mod = sys.modules.get(modname)
            if mod is None:
                continue
            for name, value in list(vars(mod).items()):
                if not name.startswith("__") and (callable(value) or isinstance(value, types.ModuleType)):
                    self._add(mod, modname, name)
        for modname, name in _OTHER:
            self._add(importlib.import_module(modname), modname, name)  # imported here where no one had yet
        self._add(importlib.import_module("ctypes").CDLL, "ctypes.CDLL", "__getitem__")
        # Methods set on torch.Tensor itself (Tensor.__eq__ = ... lands in this dict).
        self.tensor_dict = dict(vars(torch.Tensor))
        # Torch function and dispatch modes: one the candidate leaves pushed runs its code inside
        # every torch call of the harness's comparison (it can make any answer compare equal).
        self.modes = _mode_depths()
        # The counter's kernels at the dispatcher: a candidate that drops or overrides one
        # (torch.library, the Library object's _destroy) would hide its collectives.
        self.dispatcher_hooks = dispatcher_hook_lines()

    def watch(self, label: str, owner: Any, name: str) -> None:
        """One more object the harness goes through, held by an instance rather than a module
        (the rank's channel file: replaced, the timing's figures could be rewritten on the way)."""
        self.entries[label] = (owner, name, getattr(owner, name))

    def watch_descriptor(self, label: str, fd: int) -> None:
        """A descriptor that must keep pointing at the same file (dup2 over it is a relay)."""
        st = os.fstat(fd)
        self.descriptors[label] = (fd, (st.st_dev, st.st_ino))

    def _add(self, owner: Any, owner_name: str, name: str) -> None:
        if hasattr(owner, name):
            self.entries[f"{owner_name}.{name}"] = (owner, name, getattr(owner, name) if not isinstance(owner, type) else owner.__dict__.get(name, getattr(owner, name)))

    def changed(self) -> list[str]:
        import torch

        out = []
        for label, (owner, name, obj) in self.entries.items():
            now = owner.__dict__.get(name, getattr(owner, name, None)) if isinstance(owner, type) else getattr(owner, name, None)
            if now is not obj:
                out.append(label)
        out += [f"sys.modules[{name!r}]" for name, mod in self.modules.items() if sys.modules.get(name) is not mod]
        out += [f"a torch {kind} mode left pushed" for kind, depth in _mode_depths().items() if depth > self.modes.get(kind, 0)]
        current = vars(torch.Tensor)
        for name in set(current) | set(self.tensor_dict):
            if name in _PYTHON_MACHINERY:
                continue
            if current.get(name) is not self.tensor_dict.get(name):
                out.append(f"torch.Tensor.{name}")
        for label, (fd, ident) in self.descriptors.items():
            try:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != ident:
                    out.append(label)
            except OSError:
                out.append(label)
        if self.dispatcher_hooks:
            now_hooks = dispatcher_hook_lines()
            out += [f"dispatcher {op} ({DISPATCH_KEY})" for op, line in self.dispatcher_hooks.items() if now_hooks.get(op) != line]
        return sorted(out)

    def restore(self) -> None:
        """Put the originals back (so the harness can still write its report)."""
        import torch

        for owner, name, obj in self.entries.values():
            try:
                setattr(owner, name, obj)
            except Exception:
                pass
        for modname, mod in self.modules.items():
            if mod is not None:
                sys.modules[modname] = mod
        for kind, pop in (("function", "_pop_torch_function_stack"), ("dispatch", "_pop_torch_dispatch_stack")):
            while _mode_depths().get(kind, 0) > self.modes.get(kind, 0):
                try:
                    getattr(torch._C, pop)()
                except Exception:
                    break
        for name in list(vars(torch.Tensor)):
            if name not in self.tensor_dict:
                try:
                    delattr(torch.Tensor, name)
                except Exception:
                    pass
        for name, obj in self.tensor_dict.items():
            if vars(torch.Tensor).get(name) is not obj:
                try:
                    setattr(torch.Tensor, name, obj)
                except Exception:
                    pass


class DistCounter:
    """Wraps torch.distributed's library calls (pkb.collectives.COUNTED, on dist, c10d and funcol)
    and the methods of c10d's ProcessGroup and Backend classes under them
    (pkb.collectives.PROCESS_GROUP_METHODS), to count calls while `active`. A call is counted once,
    at the outermost wrapper it enters: dist.all_reduce calling ProcessGroup.allreduce is one call,
    and a candidate calling ProcessGroup.allreduce itself is counted all the same. Behind all of
    them, `mark`/`uncounted_since` compare the backends' own sequence numbers with the calls seen.
    Calls made while a CUDA graph is captured are noted in `graphs` (seen or not, active or not:
    a capture at import counts too) and counted again at every replay of that graph while
    `active`; a replay moves data with no call of the library, and no sequence number moves."""

    def __init__(self) -> None:
        import threading

        self.active = False
        self.counts: dict[str, int] = {}
        self.seen = 0  # every outermost call, active or not (the reference's and the harness's too)
        self.installed = False
        self._depth = threading.local()  # wrappers entered on this thread
        self._graph_depth = threading.local()  # graph methods entered (CUDAGraph's call its base's)
        self.graphs = GraphLedger()
        self._replaced: list[tuple[Any, str, Any]] = []  # (owner, attribute, original)
        self._libraries: dict[str, Any] = {}  # torch.library.Library per namespace, holding our kernels
        self.dispatcher_ops: list[str] = []
        # Work handles of the asynchronous calls counted while `active`, for `finish_pending`.
        self.pending: list[Any] = []

    def finish_pending(self) -> int:
        """Wait on the work handles the candidate's calls returned since the last time (collected
        only while `active`); returns how many had not completed. A timed call that returns while
        a collective of its own is still running (async_op=True, never waited) would stop the
        timer before the data moved: gloo finishes it on the backend's threads, NCCL on its own
        stream, after the end event. Waiting here charges that work to the call that started it
        (on NCCL `wait` only orders the caller's stream behind it, as the candidate should have).
        On CUDA the count says nothing (a waited NCCL work is not complete on the device yet)."""
        works, self.pending = self.pending, []
        unfinished = 0
        for work in works:
            try:
                if not work.is_completed():
                    unfinished += 1
                    work.wait()
            except Exception:
                continue  # a failed collective is the call's own error, seen where it is read
        return unfinished

    def _keep_work(self, result: Any) -> None:
        """The work handle(s) a counted call returned: a Work, or a (tensors, Work) pair from the
        c10d operators."""
        for item in result if isinstance(result, tuple) else (result,):
            if callable(getattr(item, "wait", None)) and callable(getattr(item, "is_completed", None)):
                self.pending.append(item)

    def mark(self) -> tuple[dict[Any, int], int]:
        """The process groups' sequence numbers and the calls seen so far, for `uncounted_since`."""
        return backend_sequence_numbers(), self.seen

    def uncounted_since(self, mark: tuple[dict[Any, int], int]) -> int:
        """Collectives the process groups' backends issued since `mark` beyond the calls this
        counter saw: gloo and NCCL number every collective they run, whatever route led there (a
        dispatch key excluded around torch.ops.c10d.*, a wrapper put back), so a difference is a
        collective that passed every wrapper. Counted under BACKEND_SEQUENCE (see add_uncounted).
        Only around the candidate's own calls: one library call may run several collectives
        (all_gather_object runs two), so around the reference's calls too the difference would
        charge the candidate with the reference's; and never inside a timed loop (it costs a few
        microseconds per call)."""
        before, seen = mark
        after = backend_sequence_numbers()
        issued = sum(n - before.get(g, 0) for g, n in after.items())
        return max(0, issued - (self.seen - seen))

    def add_uncounted(self, n: int) -> None:
        if n > 0:
            self.counts[BACKEND_SEQUENCE] = self.counts.get(BACKEND_SEQUENCE, 0) + n

    @property
    def total(self) -> int:
        """Data-moving collectives counted (barriers are host syncs, counted in `host_syncs`)."""
        return sum(n for name, n in self.counts.items() if name not in HOST_SYNCS)

    @property
    def host_syncs(self) -> int:
        return sum(n for name, n in self.counts.items() if name in HOST_SYNCS)

    def install(self) -> None:
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d

        owners: list[Any] = [dist, c10d]
        try:
            import torch.distributed._functional_collectives as funcol

            owners.append(funcol)
        except Exception:
            pass
        wrapped: dict[int, Callable[..., Any]] = {}
        for owner in owners:
            for name in COUNTED:
                self._replace(owner, name, name, wrapped)
        for cls in process_group_classes():
            for method, name in PROCESS_GROUP_METHODS.items():
                self._replace(cls, method, name, wrapped)
        for cls in graph_classes():
            for method in GRAPH_METHODS:
                self._replace(cls, method, method, wrapped, self._wrap_graph_method)
        self.dispatcher_ops = self._hook_dispatcher()
        self.installed = True

    def _hook_dispatcher(self, namespaces: frozenset[str] | None = None) -> list[str]:
        """A kernel of ours at the BackendSelect key of every operator in LIBRARY_OPS (of
        `namespaces` only, where given): it counts
        the call and hands it on, with the same arguments, to the kernels below (CPU, CUDA, Meta).
        BackendSelect is in every call's key set (inference_mode and no_grad leave it), so the
        c10d operators are seen whether torch.distributed, a ProcessGroup method or torch.ops
        called them. Operators this torch lacks are left out; the names hooked are returned.
        Symmetric memory's Python-defined operators (fused_all_gather_matmul...) exist only once
        their module is imported: imported here, before the candidate can call them."""
        import torch

        try:
            import torch.distributed._symmetric_memory  # noqa: F401
        except Exception:
            pass  # no symmetric memory in this torch: its C++ operators, if any, are still hooked
        try:
            below = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)
        except Exception:
            return []
        hooked = []
        for qualified, name in sorted(LIBRARY_OPS.items()):
            namespace, op_name = qualified.split("::")
            if namespaces is not None and namespace not in namespaces:
                continue
            if not _has_operator(qualified) or torch._C._dispatch_has_kernel_for_dispatch_key(qualified, DISPATCH_KEY):
                continue  # absent from this torch, or someone's kernel already there: not ours to replace
            try:
                packet = getattr(getattr(torch.ops, namespace), op_name)
                lib = self._libraries.get(namespace) or torch.library.Library(namespace, "IMPL")
                self._libraries[namespace] = lib
                for overload_name in packet.overloads():
                    overload = getattr(packet, overload_name)
                    schema_name = op_name if overload_name == "default" else f"{op_name}.{overload_name}"
                    lib.impl(schema_name, self._dispatcher_kernel(overload, name, below), DISPATCH_KEY, with_keyset=True)
            except Exception:
                continue
            hooked.append(qualified)
        return hooked

    def _dispatcher_kernel(self, overload: Any, name: str, below: Any) -> Callable[..., Any]:
        counter, depth = self, self._depth

        def counted_op(keyset: Any, *args: Any, **kwargs: Any) -> Any:
            level = getattr(depth, "n", 0)
            if level == 0:
                counter.seen += 1
                if counter.active:
                    counter.counts[name] = counter.counts.get(name, 0) + 1
                if counter.graphs.capturing:
                    counter.graphs.note(name)
            depth.n = level + 1
            try:
                result = overload.redispatch(keyset & below, *args, **kwargs)
            finally:
                depth.n = level
            if level == 0 and counter.active:
                counter._keep_work(result)
            return result

        return counted_op

    def _drop_dispatcher_kernels(self, namespaces: frozenset[str] | None = None) -> None:
        """Our kernels away (of `namespaces` only, where given)."""
        for namespace in [n for n in self._libraries if namespaces is None or n in namespaces]:
            self._libraries.pop(namespace)._destroy()
        self.dispatcher_ops = [op for op in self.dispatcher_ops if namespaces is not None and op.split("::")[0] not in namespaces]

    @contextlib.contextmanager
    def dispatcher_suspended(self) -> Iterator[None]:
        """Without the dispatcher kernels of the backends' collectives for a while (the timed
        loops): a Python kernel at BackendSelect costs a call about 20 us on NCCL
        (bench/counting_cost.py), which a launch-bound reference would pay in its timed calls.
        The torch.distributed wrappers stay; a collective that bypasses them meanwhile still shows
        in the backends' sequence numbers (`mark`/`uncounted_since` around the candidate's timed
        rounds). Symmetric memory's operators number nothing, so their kernels stay (SEQUENCED_
        NAMESPACES): a candidate that calls one only in timed calls is still seen."""
        if not any(op.split("::")[0] in SEQUENCED_NAMESPACES for op in self.dispatcher_ops):
            yield
            return
        self._drop_dispatcher_kernels(SEQUENCED_NAMESPACES)
        try:
            yield
        finally:
            self.dispatcher_ops = sorted(set(self.dispatcher_ops) | set(self._hook_dispatcher(SEQUENCED_NAMESPACES)))

    def _replace(self, owner: Any, attr: str, name: str, wrapped: dict[int, Callable[..., Any]],
                 wrap: Callable[[Callable[..., Any], str], Callable[..., Any]] | None = None) -> None:
        fn = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
        if fn is None or not callable(fn) or getattr(fn, "_pkb_counted", False):
            return
        w = wrapped.get(id(fn))
        if w is None:
            w = wrapped[id(fn)] = (wrap or self._wrap)(fn, name)
        try:
            setattr(owner, attr, w)
        except Exception:
            return
        self._replaced.append((owner, attr, fn))

    def uninstall(self) -> None:
        """Put every original back and drop the dispatcher kernels (for a process that goes on
        after counting, such as a test's)."""
        for owner, attr, fn in reversed(self._replaced):
            try:
                setattr(owner, attr, fn)
            except Exception:
                pass
        self._replaced.clear()
        self._drop_dispatcher_kernels()
        self.installed = False

    def _wrap(self, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        counter, depth = self, self._depth

        def counted(*args: Any, **kwargs: Any) -> Any:
            level = getattr(depth, "n", 0)
            if level == 0:
                counter.seen += 1
                if counter.active:
                    counter.counts[name] = counter.counts.get(name, 0) + 1
                if counter.graphs.capturing:
                    counter.graphs.note(name)
            depth.n = level + 1
            try:
                result = fn(*args, **kwargs)
            finally:
                depth.n = level
            if level == 0 and counter.active:
                counter._keep_work(result)
            return result

        counted._pkb_counted = True  # type: ignore[attr-defined]
        counted.__wrapped__ = fn  # type: ignore[attr-defined]
        counted.__name__ = getattr(fn, "__name__", name)
        counted.__doc__ = getattr(fn, "__doc__", None)
        return counted

    def _wrap_graph_method(self, fn: Callable[..., Any], method: str) -> Callable[..., Any]:
        """capture_begin / capture_end keep the ledger's open captures; replay counts what the
        graph captured (while `active`). Only the outermost graph method entered acts:
        CUDAGraph.replay calling its base's replay is one replay."""
        counter, ledger, depth = self, self.graphs, self._graph_depth

        def graph_method(graph: Any, *args: Any, **kwargs: Any) -> Any:
            level = getattr(depth, "n", 0)
            if level == 0:
                if method == "capture_begin":
                    ledger.begin(graph)
                elif method == "replay" and counter.active:
                    for name, n in ledger.replayed(graph).items():
                        counter.counts[name] = counter.counts.get(name, 0) + n
            depth.n = level + 1
            try:
                return fn(graph, *args, **kwargs)
            finally:
                depth.n = level
                if level == 0 and method == "capture_end":
                    ledger.end(graph)

        graph_method._pkb_counted = True  # type: ignore[attr-defined]
        graph_method.__wrapped__ = fn  # type: ignore[attr-defined]
        graph_method.__name__ = getattr(fn, "__name__", method)
        graph_method.__doc__ = getattr(fn, "__doc__", None)
        return graph_method


# The dispatch key the counter's kernels sit at (DistCounter._hook_dispatcher says why this one).
DISPATCH_KEY = "BackendSelect"
# Namespaces of the operators whose collectives the process groups' backends number (c10d's, the
# functional collectives, DTensor's all-to-all over them): `uncounted_since` sees them without our
# kernels. Symmetric memory's (symm_mem) move data with no sequence number.
SEQUENCED_NAMESPACES = frozenset({"c10d", "_c10d_functional", "_dtensor"})
# The name collectives seen only by the backends' sequence numbers are counted under.
BACKEND_SEQUENCE = "backend_sequence"


def backend_sequence_numbers() -> dict[Any, int]:
    """Each live process group's sequence number (gloo and NCCL add one per collective they run,
    barriers included; point-to-point may not count); empty without an initialised group."""
    try:
        import torch.distributed.distributed_c10d as c10d

        if not c10d.is_initialized():
            return {}
        groups = list(getattr(c10d._world, "pg_map", None) or {}) or [c10d._get_default_group()]
    except Exception:
        return {}
    out = {}
    for group in groups:
        try:
            out[group] = int(group._get_sequence_number_for_group())
        except Exception:
            continue
    return out


def _has_operator(qualified: str) -> bool:
    import torch

    try:
        return bool(torch._C._dispatch_dump(qualified))
    except Exception:
        return False


def dispatcher_hook_lines() -> dict[str, str]:
    """For every operator of LIBRARY_OPS with a kernel at DISPATCH_KEY: the dispatcher's line
    for that kernel (where it was registered). Equal lines before and after a call: the same
    kernel is there."""
    import torch

    out = {}
    for qualified in LIBRARY_OPS:
        try:
            if not torch._C._dispatch_has_kernel_for_dispatch_key(qualified, DISPATCH_KEY):
                continue
            dump = torch._C._dispatch_dump(qualified)
        except Exception:
            continue
        out[qualified] = next((line for line in dump.splitlines() if line.startswith(f"{DISPATCH_KEY}:")), "")
    return out


def process_group_classes() -> list[type]:
    """c10d's ProcessGroup and Backend classes (their methods are what torch.distributed calls);
    none where torch was built without distributed support."""
    try:
        from torch._C import _distributed_c10d as c10d_ext
    except Exception:
        return []
    return [cls for cls in (getattr(c10d_ext, "ProcessGroup", None), getattr(c10d_ext, "Backend", None)) if isinstance(cls, type)]


class ReferenceWatch:
    """Notices code of the reference's file running inside a candidate call (profile hook)."""

    def __init__(self, reference_module: Any) -> None:
        files = set()
        path = getattr(reference_module, "__file__", None)
        if path:
            files.add(str(Path(path).resolve()))
            files.add(str(path))
        self.files = files
        self.hits: list[str] = []
        self.previous: Any = None

    def __enter__(self) -> ReferenceWatch:
        if not self.files:
            return self
        self.previous = sys.getprofile()
        files, hits = self.files, self.hits

        def hook(frame: Any, event: str, arg: Any) -> None:
            if event == "call" and frame.f_code.co_filename in files and len(hits) < 8:
                hits.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_code.co_firstlineno})")

        sys.setprofile(hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.files:
            sys.setprofile(self.previous)

    def reaches_module(self, module: Any, reference_module: Any) -> list[str]:
        """Names in the candidate's namespace bound to the reference module or its functions."""
        out = []
        for name, value in list(vars(module).items()):
            if value is reference_module:
                out.append(name)
                continue
            code = getattr(value, "__code__", None)
            if code is not None and code.co_filename in self.files:
                out.append(name)
        return out


class Watchdog(threading.Thread):
    """Holds this rank's deadlines; on expiry it marks the status file and the launcher kills."""

    POLL_S = 0.1

    def __init__(self, on_expire: Callable[[str, float], None]) -> None:
        super().__init__(name="pkb-watchdog", daemon=True)
        self.on_expire = on_expire
        self.phase_deadline: float | None = None
        self.phase_limit = 0.0
        self.phase_name = ""
        self.call_deadline: float | None = None
        self.call_limit = 0.0
        self.call_what = ""
        self.expired = False

    def set_phase(self, name: str, deadline: float | None, limit: float) -> None:
        self.phase_name, self.phase_deadline, self.phase_limit = name, deadline, limit

    def call_start(self, what: str, limit: float) -> None:
        self.call_what, self.call_limit = what, limit
        self.call_deadline = time.monotonic() + limit if limit > 0 else None

    def call_end(self) -> None:
        self.call_deadline = None

    def pause_call(self) -> float | None:
        """Stop the current call's clock (a JIT build inside the call has its own limit)."""
        left = None if self.call_deadline is None else self.call_deadline - time.monotonic()
        self.call_deadline = None
        return left

    def resume_call(self, left: float | None) -> None:
        """Restart the call's clock with the time it had left when paused."""
        if left is not None:
            self.call_deadline = time.monotonic() + left

    def run(self) -> None:
        while not self.expired:
            now = time.monotonic()
            call, phase = self.call_deadline, self.phase_deadline
            if call is not None and now > call:
                self.expired = True
                self.on_expire(f"{self.phase_name}: one {self.call_what} call", self.call_limit)
            elif phase is not None and now > phase:
                self.expired = True
                self.on_expire(self.phase_name, self.phase_limit)
            time.sleep(self.POLL_S)


def live_threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.ident is not None and t.is_alive()}


def new_live_threads(before: set[int]) -> list[str]:
    return [t.name for t in threading.enumerate() if t.is_alive() and t.ident not in before and t.name != "pkb-watchdog"]


def started_threads(before: set[int]) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.is_alive() and t.ident not in before and t.name != "pkb-watchdog"]


def _mode_depths() -> dict[str, int]:
    """How many torch function and dispatch modes are pushed (each a hook on every torch call)."""
    import torch

    out = {}
    for kind, name in (("function", "_len_torch_function_stack"), ("dispatch", "_len_torch_dispatch_stack")):
        depth = getattr(torch._C, name, None)
        if depth is not None:
            out[kind] = int(depth())
    return out


def foreign_tensor_types(x: Any) -> list[str]:
    """Types of output leaves that are tensors but not exactly torch.Tensor (lazy or lying
    subclasses), or a torch.Tensor whose own attributes shadow the class's (a `clone` set on the
    instance runs the candidate's code wherever the harness copies the output)."""
    import torch

    out: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            if type(v) is not torch.Tensor and type(v) is not torch.nn.Parameter:
                out.append(type(v).__qualname__)
            else:
                shadowed = sorted(n for n in getattr(v, "__dict__", {}) if hasattr(type(v), n))
                if shadowed:
                    out.append(f"torch.Tensor with its own {', '.join(shadowed[:4])}")
        elif isinstance(v, (list, tuple)):
            for e in v:
                walk(e)
        elif isinstance(v, dict):
            for e in v.values():
                walk(e)

    walk(x)
    return out


def storage_spans(x: Any) -> list[tuple[int, int]]:
    """[start, end) byte ranges of the storages of every tensor leaf."""
    import torch

    spans = []

    def walk(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            try:
                st = v.untyped_storage()
                if st.nbytes():
                    spans.append((st.data_ptr(), st.data_ptr() + st.nbytes()))
            except Exception:
                pass
        elif isinstance(v, (list, tuple)):
            for e in v:
                walk(e)
        elif isinstance(v, dict):
            for e in v.values():
                walk(e)

    walk(x)
    return spans


def overlaps(a: Any, b: Any) -> bool:
    sa, sb = storage_spans(a), storage_spans(b)
    return any(x0 < y1 and y0 < x1 for x0, x1 in sa for y0, y1 in sb)
