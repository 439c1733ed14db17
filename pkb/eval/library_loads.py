"""Inside a rank: NCCL, RCCL or MPI loaded by the candidate itself, through ctypes or cffi.

A candidate that calls ncclAllReduce through ctypes moves its data with the library while no
torch.distributed function, ProcessGroup method, dispatcher operator or backend sequence number
sees a call. A hook at this level can be gone around too (a pointer handed in from C), so this
counts nothing: it records the evidence, for the outcome to weigh where the candidate claims to
move its data itself.

    CollectiveLibraryWatch  wraps the loaders (ctypes' dlopen, _ctypes.dlopen, cffi's
                            load_library) and the symbol lookups (CDLL.__getitem__, which
                            `lib.ncclAllReduce` and `lib["ncclAllReduce"]` go through, and
                            _ctypes.dlsym): a load whose name is a collective library's, and a
                            lookup of an nccl*/rccl*/MPI_* symbol in any library, are recorded

Each record: {via, library, loaded} for a load, {via, symbol, moves_data} for a lookup
(moves_data: the symbol is a transfer's entry point, pkb.collectives.COLLECTIVE_ENTRY).
"""

from __future__ import annotations

import re
import sys
from typing import Any, Callable

from pkb.collectives import COLLECTIVE_ENTRY, COLLECTIVE_LIBRARY

_COLLECTIVE_SYMBOL = re.compile(r"(?:nccl|rccl|pnccl)[A-Z]\w*|MPI_\w+")
# Records kept per rank (a loop of lookups must not grow the result file without bound).
MAX_RECORDS = 32


class CollectiveLibraryWatch:
    def __init__(self, records: list[dict[str, Any]] | None = None) -> None:
        self.records: list[dict[str, Any]] = records if records is not None else []
        self._replaced: list[tuple[Any, str, Any]] = []

    def install(self) -> None:
        import _ctypes
        import ctypes

        self._replace(ctypes, "_dlopen", self._wrap_load(ctypes._dlopen, "ctypes"))  # what CDLL(name) calls
        self._replace(_ctypes, "dlopen", self._wrap_load(_ctypes.dlopen, "_ctypes.dlopen"))
        if hasattr(_ctypes, "dlsym"):
            self._replace(_ctypes, "dlsym", self._wrap_lookup(_ctypes.dlsym, "_ctypes.dlsym", symbol_at=1))
        self._replace(ctypes.CDLL, "__getitem__", self._wrap_lookup(ctypes.CDLL.__getitem__, "ctypes", symbol_at=1))
        backend = sys.modules.get("_cffi_backend")
        if backend is None:
            try:
                import _cffi_backend as backend  # type: ignore[import-not-found,no-redef]
            except Exception:
                backend = None
        if backend is not None and hasattr(backend, "load_library"):
            self._replace(backend, "load_library", self._wrap_load(backend.load_library, "cffi"))

    def uninstall(self) -> None:
        for owner, attr, fn in reversed(self._replaced):
            try:
                setattr(owner, attr, fn)
            except Exception:
                pass
        self._replaced.clear()

    def wrapped(self) -> list[tuple[Any, str]]:
        """(owner, attribute) of every hook in place: the harness's snapshot watches them."""
        return [(owner, attr) for owner, attr, _ in self._replaced]

    def loaded(self) -> bool:
        """A collective library was loaded, or a transfer's entry point looked up."""
        return any(r.get("loaded") or r.get("moves_data") for r in self.records)

    def _replace(self, owner: Any, attr: str, wrapper: Callable[..., Any]) -> None:
        original = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
        if original is None or getattr(original, "_pkb_watched", False):
            return
        try:
            setattr(owner, attr, wrapper)
        except Exception:
            return
        self._replaced.append((owner, attr, original))

    def _add(self, record: dict[str, Any]) -> None:
        if len(self.records) < MAX_RECORDS and record not in self.records:
            self.records.append(record)

    def _wrap_load(self, fn: Callable[..., Any], via: str) -> Callable[..., Any]:
        watch = self

        def load(name: Any, *args: Any, **kwargs: Any) -> Any:
            text = name.decode(errors="replace") if isinstance(name, bytes) else name if isinstance(name, str) else ""
            if not text or not COLLECTIVE_LIBRARY.search(text.rsplit("/", 1)[-1]):
                return fn(name, *args, **kwargs)
            try:
                handle = fn(name, *args, **kwargs)
            except BaseException:
                watch._add({"via": via, "library": text[:200], "loaded": False})
                raise
            watch._add({"via": via, "library": text[:200], "loaded": True})
            return handle

        return _marked(load, fn)

    def _wrap_lookup(self, fn: Callable[..., Any], via: str, symbol_at: int) -> Callable[..., Any]:
        watch = self

        def lookup(*args: Any, **kwargs: Any) -> Any:
            symbol = args[symbol_at] if len(args) > symbol_at else None
            text = symbol.decode(errors="replace") if isinstance(symbol, bytes) else symbol
            if isinstance(text, str) and _COLLECTIVE_SYMBOL.fullmatch(text):
                watch._add({"via": via, "symbol": text[:120], "moves_data": bool(COLLECTIVE_ENTRY.fullmatch(text))})
            return fn(*args, **kwargs)

        return _marked(lookup, fn)


def _marked(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> Callable[..., Any]:
    wrapper._pkb_watched = True  # type: ignore[attr-defined]
    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    wrapper.__name__ = getattr(fn, "__name__", wrapper.__name__)
    wrapper.__doc__ = getattr(fn, "__doc__", None)
    return wrapper
