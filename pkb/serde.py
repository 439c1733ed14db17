"""Dataclass <-> plain JSON values, for the record store and the static cache.

`to_data` turns a dataclass tree into dicts and lists; `from_data` rebuilds it from the type
hints, so a cached record comes back as the same typed objects the passes produced.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import lru_cache
from typing import Any, TypeVar, Union, get_args, get_origin

T = TypeVar("T")


def to_data(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.repr}
    if isinstance(obj, (list, tuple)):
        return [to_data(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_data(v) for k, v in obj.items()}
    return obj


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def from_data(cls: type[T], data: Any) -> T:
    return _build(cls, data)


def _build(tp: Any, data: Any) -> Any:
    if data is None:
        return None
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        for a in args:
            if dataclasses.is_dataclass(a) and isinstance(data, dict):
                return _build(a, data)
        return _build(args[0], data) if len(args) == 1 else data
    if origin in (list, tuple):
        (inner, *_) = get_args(tp) or (Any,)
        return [_build(inner, v) for v in data]
    if origin is dict:
        _, vt = get_args(tp) or (Any, Any)
        return {k: _build(vt, v) for k, v in data.items()}
    if dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in data:
                kwargs[f.name] = _build(hints[f.name], data[f.name])
        return tp(**kwargs)
    return data
