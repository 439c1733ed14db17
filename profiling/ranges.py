"""Phase ranges that both Nsight (NVTX) and Kineto (record_function) see.

    with phase("pkb:candidate_call[0]"):
        out = solution(*inputs)

Each range is pushed twice under one name: an NVTX push/pop range (for `nsys`, for
`ncu --nvtx --nvtx-include` and for CUPTI's MARKER records) and a `torch.profiler.record_function`
(Kineto shows it as `user_annotation` on the CPU and `gpu_user_annotation` on the stream; FACTS.md:
`torch.cuda.nvtx` ranges do not reach Kineto traces, which is why both are needed).

NVTX comes from `torch.cuda.nvtx` on CUDA builds of torch, else from the `nvtx` PyPI package, else
nothing. The order is measured, not taste: on the H200 (torch 2.11, CUDA 13, 2026-12-03) ranges
pushed through torch.cuda.nvtx (plain nvtxRangePushA) arrived as CUPTI MARKER records and the
`nvtx` package's (registered strings in a domain) did not; ncu filtered on either.

Names use the vocabulary below and never contain `@` or `/`, which ncu's `--nvtx-include` syntax
reserves (`domain@range`, trailing `/` = push/pop range). ncu also reads `[` and `]` as stack
anchors, so an include for a bracketed name is written as a regular expression: `ncu_include`
(the plain "pkb:candidate_call[1]/" matched nothing on the H200; the regex form matched).

Cheap when off: until `enable()` is called (or PKB_PROFILE_RANGES=1 is in the environment),
`phase()` returns a shared no-op context manager, with no NVTX call and no record_function.
While enabled, record_function is still only entered when a torch profiler is running.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any, Callable, Iterator

SETUP = "pkb:setup"
REFERENCE = "pkb:reference"
CALL_PREFIX = "pkb:candidate_call"
TRIAL_PREFIX = "pkb:trial"

_NAME_RE = re.compile(r"^pkb:(?P<phase>[a-z_]+)(?:\[(?P<index>\d+)\])?$")


def candidate_call(i: int) -> str:
    return f"{CALL_PREFIX}[{int(i)}]"


def trial(t: int) -> str:
    return f"{TRIAL_PREFIX}[{int(t)}]"


def parse_name(name: str) -> tuple[str, int | None] | None:
    """("candidate_call", 3) for "pkb:candidate_call[3]"; None for names outside the vocabulary."""
    m = _NAME_RE.match(name or "")
    if not m:
        return None
    idx = m.group("index")
    return m.group("phase"), (int(idx) if idx is not None else None)


class _State:
    enabled: bool = os.environ.get("PKB_PROFILE_RANGES", "") not in ("", "0")
    use_nvtx: bool = True
    use_record_function: bool = True
    nvtx: tuple[str, Callable[[str], Any], Callable[[], Any]] | None | bool = False  # False: not resolved


_state = _State()
_NOOP = contextlib.nullcontext()


def _resolve_nvtx() -> tuple[str, Callable[[str], Any], Callable[[], Any]] | None:
    """(backend name, push, pop) or None. Pushes nothing: a probe range would land in traces."""
    try:
        import torch

        if getattr(torch._C, "_nvtx", None) is not None:  # CUDA builds only
            tn = torch.cuda.nvtx
            return "torch.cuda.nvtx", tn.range_push, tn.range_pop
    except Exception:
        pass
    try:
        import nvtx  # type: ignore[import-not-found]

        push, pop = nvtx.push_range, nvtx.pop_range
        return "nvtx", (lambda name: push(message=name)), (lambda: pop())
    except Exception:
        pass
    return None


def ncu_include(name: str) -> str:
    """The `ncu --nvtx-include` expression for the push/pop range `name` of the default domain."""
    return "regex:" + re.escape(name) + "/"


def nvtx_backend() -> str:
    """'nvtx', 'torch.cuda.nvtx' or 'none' (resolves once)."""
    if _state.nvtx is False:
        _state.nvtx = _resolve_nvtx()
    return _state.nvtx[0] if _state.nvtx else "none"  # type: ignore[index]


def enable(nvtx: bool = True, record_function: bool = True) -> None:
    _state.enabled = True
    _state.use_nvtx = nvtx
    _state.use_record_function = record_function


def disable() -> None:
    _state.enabled = False


def is_enabled() -> bool:
    return _state.enabled


@contextlib.contextmanager
def enabled(nvtx: bool = True, record_function: bool = True) -> Iterator[None]:
    """Turn ranges on for a block, restoring the previous setting after."""
    before = (_state.enabled, _state.use_nvtx, _state.use_record_function)
    enable(nvtx, record_function)
    try:
        yield
    finally:
        _state.enabled, _state.use_nvtx, _state.use_record_function = before


def _profiler_running() -> bool:
    try:
        import torch

        return bool(torch.autograd._profiler_enabled())
    except Exception:
        return False


class _Phase:
    __slots__ = ("name", "_pushed", "_rf")

    def __init__(self, name: str) -> None:
        self.name = name
        self._pushed = False
        self._rf: Any = None

    def __enter__(self) -> "_Phase":
        if _state.use_nvtx:
            nvtx_backend()
            if _state.nvtx:
                try:
                    _state.nvtx[1](self.name)  # type: ignore[index]
                    self._pushed = True
                except Exception:
                    pass
        if _state.use_record_function and _profiler_running():
            try:
                import torch

                self._rf = torch.profiler.record_function(self.name)
                self._rf.__enter__()
            except Exception:
                self._rf = None
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._rf is not None:
            try:
                self._rf.__exit__(*exc)
            finally:
                self._rf = None
        if self._pushed:
            self._pushed = False
            try:
                _state.nvtx[2]()  # type: ignore[index]
            except Exception:
                pass


def phase(name: str) -> contextlib.AbstractContextManager[Any]:
    """A range named `name` in NVTX and in Kineto; a shared no-op while ranges are off."""
    if not _state.enabled:
        return _NOOP
    return _Phase(name)
