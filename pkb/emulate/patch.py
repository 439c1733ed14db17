"""Installing the fakes for the duration of one emulated run, and putting the originals back.

Candidates written for real symmetric memory run unchanged: `import torch.distributed as dist`
and `import torch.distributed._symmetric_memory as symm_mem` give the real module objects, whose
attributes are the fakes while the run lasts. Patched:
  torch.distributed.<collectives, p2p, rank queries, new_group, group, GroupMember, P2POp>
  torch.distributed.distributed_c10d.<the same names, _get_default_group, _resolve_process_group>
  torch.distributed._symmetric_memory.<empty, rendezvous, ..., _SymmetricMemory>
  torch._C._distributed_c10d._SymmetricMemory
  torch.distributed._functional_collectives.<all_reduce, all_gather_tensor, ...> (if importable)
  torch.ops.c10d.* / torch.ops._c10d_functional.* (a kernel that raises NotEmulated)
  torch.cuda.set_device (every index means the one device)
  torch.utils.cpp_extension.load_inline / load (one build at a time, build errors tagged,
      optionally nvcc --default-stream=per-thread so `<<<...>>>` without a stream is per rank)
Only one emulated run can be active in a process at a time (the patches are process-wide).
"""

from __future__ import annotations

import contextlib
import inspect
import re
import threading
import time
from typing import Any, Callable, Iterator

from pkb.emulate import fake_dist, fake_symm

_MISSING = object()
_ACTIVE = threading.Lock()
_BUILD_LOCK = threading.RLock()

PER_THREAD_STREAM_FLAG = "--default-stream=per-thread"


class Patcher:
    def __init__(self) -> None:
        self.saved: list[tuple[Any, str, Any]] = []
        self.cleanups: list[Callable[[], Any]] = []  # what restore() undoes besides attributes

    def set(self, obj: Any, name: str, value: Any) -> None:
        self.saved.append((obj, name, getattr(obj, name, _MISSING)))
        setattr(obj, name, value)

    def restore(self) -> None:
        while self.saved:
            obj, name, old = self.saved.pop()
            if old is _MISSING:
                try:
                    delattr(obj, name)
                except AttributeError:
                    pass
            else:
                setattr(obj, name, old)
        while self.cleanups:
            self.cleanups.pop()()


def originals() -> dict[str, Any]:
    """The current torch.distributed / symm_mem callables (for tests: same after a run)."""
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    out = {f"dist.{n}": getattr(dist, n, None) for n in fake_dist.DIST_FUNCTIONS}
    out.update({f"symm_mem.{n}": getattr(symm_mem, n, None) for n in fake_symm.SYMM_FUNCTIONS})
    out["dist.group"] = getattr(dist, "group", None)
    return out


@contextlib.contextmanager
def installed(world: Any, *, per_thread_default_stream: bool = True, build_log: list[dict[str, Any]] | None = None) -> Iterator[Patcher]:
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem
    import torch.distributed.distributed_c10d as c10d

    if not _ACTIVE.acquire(blocking=False):
        raise RuntimeError("another emulated run is active in this process (the fakes are process-wide)")
    p = Patcher()
    try:
        for name, fn in fake_dist.DIST_FUNCTIONS.items():
            p.set(dist, name, fn)
            if hasattr(c10d, name):
                p.set(c10d, name, fn)
        for name, fn in fake_dist.NOT_EMULATED_FUNCTIONS.items():
            p.set(dist, name, fn)
            if hasattr(c10d, name):
                p.set(c10d, name, fn)
        for name, fn in fake_dist.C10D_PRIVATE.items():
            p.set(c10d, name, fn)
        ns = fake_dist._GroupNamespace(fake_dist.world_group(world))
        for mod in (dist, c10d):
            p.set(mod, "group", ns)
            p.set(mod, "GroupMember", ns)
        for name, fn in fake_symm.SYMM_FUNCTIONS.items():
            p.set(symm_mem, name, fn)
        try:
            import torch._C._distributed_c10d as cc10d

            p.set(cc10d, "_SymmetricMemory", fake_symm.FakeSymmetricMemoryClass)
        except Exception:
            pass
        try:
            import torch.distributed._functional_collectives as funcol

            for name, fn in fake_dist.FUNCOL_FUNCTIONS.items():
                if hasattr(funcol, name):
                    p.set(funcol, name, fn)
        except Exception:
            pass
        _refuse_dispatcher_collectives(p)
        if world.device.type == "cuda":
            real_set_device = torch.cuda.set_device
            p.set(torch.cuda, "set_device", lambda device=None: real_set_device(world.device))
        _patch_builds(p, per_thread_default_stream and world.device.type == "cuda", build_log)
        yield p
    finally:
        p.restore()
        _ACTIVE.release()


def _refuse_dispatcher_collectives(p: Patcher) -> None:
    """torch.ops.c10d.* and torch.ops._c10d_functional.* take torch's own process groups (boxed,
    or by name from its registry), which the emulated world does not have: a kernel at the
    operators' BackendSelect key raises NotEmulated instead of letting torch fail as if the
    candidate had erred. Dropped when the run ends."""
    import torch

    from pkb.collectives import DISPATCHER_OPS
    from pkb.emulate.world import NotEmulated

    libraries: dict[str, Any] = {}

    def refuse(qualified: str) -> Callable[..., Any]:
        def not_emulated(*args: Any, **kwargs: Any) -> Any:
            raise NotEmulated(f"not emulated: torch.ops.{qualified.replace('::', '.')} (the emulated ranks have no torch process group)")

        return not_emulated

    for qualified in DISPATCHER_OPS:
        namespace, op_name = qualified.split("::")
        try:
            packet = getattr(getattr(torch.ops, namespace), op_name)
            lib = libraries.get(namespace) or torch.library.Library(namespace, "IMPL")
            libraries[namespace] = lib
            for overload_name in packet.overloads():
                lib.impl(op_name if overload_name == "default" else f"{op_name}.{overload_name}", refuse(qualified), "BackendSelect")
        except Exception:
            continue  # an operator this torch lacks
    p.cleanups.extend(lib._destroy for lib in libraries.values())


def _patch_builds(p: Patcher, per_thread: bool, build_log: list[dict[str, Any]] | None) -> None:
    try:
        import torch.utils.cpp_extension as cpp_extension
    except Exception:
        return
    for name in ("load_inline", "load"):
        fn = getattr(cpp_extension, name, None)
        if fn is None:
            continue
        tracker = getattr(fn, "__qualname__", "").startswith("BuildTracker.")  # the eval worker's phase tracker
        if getattr(fn, "_pkb_emulated", False) or tracker:
            fn = fn.__wrapped__  # wrap what they wrap
        # (any other wrapper, e.g. the build router of pkb.eval.build, stays in the chain)
        p.set(cpp_extension, name, _wrap_build(fn, name, per_thread, build_log))


_LAUNCH = re.compile(r"<<<([^<>]*(?:<[^<>]*>[^<>]*)*)>>>")


def launches_on_legacy_stream(cuda_text: str) -> bool:
    """A `<<<grid, block>>>` launch with no stream (or stream 0): it goes to the legacy default
    stream, which all virtual ranks share, so a kernel that waits for a peer's kernel would wait
    behind it. Only such sources get --default-stream=per-thread; every other build keeps the
    candidate's own flags and so hits the build made before the run."""
    for m in _LAUNCH.finditer(cuda_text or ""):
        args = _top_level_args(m.group(1))
        if len(args) < 4 or args[3] in ("0", "nullptr", "NULL", "cudaStreamLegacy"):
            return True
    return False


def _top_level_args(text: str) -> list[str]:
    args, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    args.append("".join(cur).strip())
    return args


def _build_sources(kind: str, arguments: dict[str, Any]) -> str:
    if kind == "load_inline":
        src = arguments.get("cuda_sources") or ""
        return src if isinstance(src, str) else "\n".join(src)
    text = []
    sources = arguments.get("sources") or []
    for path in [sources] if isinstance(sources, str) else sources:
        if str(path).endswith((".cu", ".cuh")):
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    text.append(f.read())
            except OSError:
                pass
    return "\n".join(text)


def _wrap_build(fn: Callable[..., Any], kind: str, per_thread: bool, build_log: list[dict[str, Any]] | None) -> Callable[..., Any]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None

    def build(*args: Any, **kwargs: Any) -> Any:
        from pkb.emulate.world import current_or_none

        ctx = current_or_none()
        flags_added = False
        if per_thread and sig is not None:
            try:
                bound = sig.bind(*args, **kwargs)
                if launches_on_legacy_stream(_build_sources(kind, bound.arguments)):
                    flags = list(bound.arguments.get("extra_cuda_cflags") or [])
                    if PER_THREAD_STREAM_FLAG not in flags:
                        flags.append(PER_THREAD_STREAM_FLAG)
                        bound.arguments["extra_cuda_cflags"] = flags
                        flags_added = True
                    args, kwargs = bound.args, bound.kwargs
            except TypeError:
                pass
        t0 = time.perf_counter()
        clock = ctx.world.builds if ctx is not None else None
        if clock is not None:
            clock.start()  # waiting for another rank's build is build time too
        try:
            with _BUILD_LOCK:  # one build at a time; the other ranks then hit the build cache
                waited = time.perf_counter() - t0
                t1 = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                except BaseException as exc:
                    from pkb.eval.classify import mark_during_build

                    mark_during_build(exc)
                    raise
                finally:
                    if build_log is not None:
                        build_log.append(
                            {
                                "rank": ctx.rank if ctx else None,
                                "kind": kind,
                                "name": kwargs.get("name", args[0] if args else ""),
                                "seconds": round(time.perf_counter() - t1, 3),
                                "waited_s": round(waited, 3),
                                "per_thread_default_stream": flags_added,
                            }
                        )
        finally:
            if clock is not None:
                clock.stop()

    build.__wrapped__ = fn  # type: ignore[attr-defined]
    build._pkb_emulated = True  # type: ignore[attr-defined]
    return build
