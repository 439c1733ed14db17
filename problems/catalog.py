"""ParallelKernelBench's 87 problems as committed facts: id, name, `solution()` parameters, compute.

The static slice and the evaluation need to know every PKB problem (not only the ones problems/
implements): which reference a generated file answers, whether the problem computes (overlap is
`n/a` for a bare collective) and which arguments its `solution()` takes. The facts were read from
PKB's `reference/` folder and live in pkb_catalog.json, so no PKB checkout is needed at run time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CATALOG_PATH = Path(__file__).with_name("pkb_catalog.json")


@dataclass(frozen=True)
class CatalogEntry:
    id: int
    name: str
    params: tuple[str, ...]  # solution()'s parameter names, in order
    required: int  # how many of them have no default
    has_compute: bool | None  # None: not classified

    @property
    def stem(self) -> str:
        return f"{self.id}_{self.name}"


@lru_cache(maxsize=1)
def entries() -> dict[int, CatalogEntry]:
    """Problem id -> entry, for every problem of PKB's reference folder."""
    data = json.loads(CATALOG_PATH.read_text(encoding="utf-8"))
    out: dict[int, CatalogEntry] = {}
    for row in data["problems"]:
        out[row["id"]] = CatalogEntry(
            id=row["id"],
            name=row["name"],
            params=tuple(row["params"]),
            required=row["required"],
            has_compute=row.get("has_compute"),
        )
    return out


def by_name(name: str) -> CatalogEntry | None:
    """The entry whose name is exactly `name` ('ulysses_all_to_all_tensor_primitive')."""
    return next((e for e in entries().values() if e.name == name), None)
