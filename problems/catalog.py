"""ParallelKernelBench's 87 problems as committed facts: id, name, `solution()` parameters, compute,
category and minimum world size.

The static slice and the evaluation need to know every PKB problem (not only the ones problems/
implements): which reference a generated file answers, whether the problem computes (overlap is
`n/a` for a bare collective) and which arguments its `solution()` takes. The facts were read from
PKB's `reference/` folder and live in pkb_catalog.json, so no PKB checkout is needed at run time.

How the judged fields were decided (pkb_catalog.json's "source" says it too):
- has_compute: True when the reference computes something beyond moving or reducing data (GEMM,
  norm, softmax, FFT, sort, RoPE, kNN, losses, optimizer steps, quantization); a collective's own
  reduction, index bookkeeping (split sizes, counts) and row gathers/scatter-adds are not compute.
  A local reduction of a whole input tensor into a value the problem returns (an expert mask summed
  into per-expert counts or a routing map) is compute: it is GPU work a solution can overlap with
  the exchange; such entries say why in `has_compute_why`.
- category: problems/__init__.py's CATEGORIES where one fits, plus "training" (optimizer steps,
  gradient clipping, DDP/ZeRO/FSDP steps), "quantization" (FP8/int8 around a collective),
  "embedding" (sharded embedding and jagged-tensor exchanges) and "apps" (workloads of named
  application codebases: FFT, splatting, GNNs, vision, sorting).
- min_world_size: the fewest ranks PKB's input factory and reference run at; > 1 only where they
  fail below it (found by running them on CPU gloo ranks; `min_world_size_why` says how).
- group_args: the `solution()` parameters that PKB's input factory fills with a process group on
  an 8-rank run (every other `*group` parameter is left at its default, None).
- none_args: the other `solution()` parameters the input factory passes as an explicit None
  (`attention_mask`, `softmax_scale`): `if attention_mask is None:` holds on the run.
- communicates: False where the reference moves no data between ranks (a purely local step such
  as a sharded optimizer update): overlap is `n/a` there too.
- scalar_args: the bool, int, float and str arguments the input factory passes at world size 8,
  the same on every rank (`n_iterations` 3, `causal` True): `if n_iterations == 0:` is decided.
- input_dtype: where the input factory builds the floating inputs in one fixed dtype whatever the
  run's precision (problem 66's grad_output is float32 in the bf16 tree): the dtype a candidate's
  `x.dtype == torch.bfloat16` test sees on the run.
- tensor_dtypes: the `solution()` tensor parameters the input factory builds in an integer or bool
  dtype, the same whatever the run's precision (offsets, counts, labels, masks), read by
  problems/read_pkb_inputs.py: what a candidate's `data_ptr<int>()` of `labels` meets on the run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CATALOG_PATH = Path(__file__).with_name("pkb_catalog.json")
# categories beyond problems.CATEGORIES that PKB's wider set needs
EXTRA_CATEGORIES = ("training", "quantization", "embedding", "apps")


@dataclass(frozen=True)
class CatalogEntry:
    id: int
    name: str
    params: tuple[str, ...]  # solution()'s parameter names, in order
    required: int  # how many of them have no default
    has_compute: bool | None  # None: not classified
    category: str | None = None  # problems.CATEGORIES or one of EXTRA_CATEGORIES
    min_world_size: int = 1  # fewest ranks PKB's input factory and reference run at
    min_world_size_why: str = ""
    group_args: tuple[str, ...] = ()  # parameters PKB's input factory passes a process group (else None)
    none_args: tuple[str, ...] = ()  # other parameters the input factory passes as None
    communicates: bool = True  # False: the reference moves no data between ranks
    has_compute_why: str = ""  # for the entries where reading the reference needed a judgement
    input_dtype: str = ""  # the floating inputs' dtype where the factory fixes it ('' : the run's precision)
    scalar_args: tuple[tuple[str, object], ...] = ()  # (parameter, constant) the factory passes at world size 8
    tensor_dtypes: tuple[tuple[str, str], ...] = ()  # (parameter, dtype) of the factory's integer/bool tensors

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
            category=row.get("category"),
            min_world_size=row.get("min_world_size", 1),
            min_world_size_why=row.get("min_world_size_why", ""),
            group_args=tuple(row.get("group_args", ())),
            none_args=tuple(row.get("none_args", ())),
            communicates=row.get("communicates", True),
            has_compute_why=row.get("has_compute_why", ""),
            input_dtype=row.get("input_dtype", ""),
            scalar_args=tuple(row.get("scalar_args", {}).items()),
            tensor_dtypes=tuple(row.get("tensor_dtypes", {}).items()),
        )
    return out


def by_name(name: str) -> CatalogEntry | None:
    """The entry whose name is exactly `name` ('ulysses_all_to_all_tensor_primitive')."""
    return next((e for e in entries().values() if e.name == name), None)
