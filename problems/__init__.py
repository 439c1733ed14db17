"""The problem set: one self-contained module per problem, found by id or name.

Each module `problems/p<id>_<name>.py` defines at module level:

    PROBLEM = ProblemSpec(...)                       # metadata below
    def solution(*inputs) -> torch.Tensor | tuple    # the PyTorch + torch.distributed reference
    def make_inputs(rank, world_size, trial, device, dtype) -> tuple   # seeded inputs for one rank

and optionally

    def hypotheses(inputs_per_rank, expected, got, rank, world_size) -> list[dict]
        # problem-specific wrong-result hypotheses for the diagnosis (e.g. a missing peer's share)

The ids and names follow ParallelKernelBench's numbering where the problem is the same kind, so a
PKB candidate file `<id>_<name>_<backend>.py` finds its problem here.

As implemented by every module of the set (helpers in problems/_common.py):

    SIZES = {"small": {...}, "large": {...}}          # CPU-test sizes / GPU-timing sizes
    make_inputs(rank, world_size, trial, device, dtype, scale="small") -> tuple
        # CPU generator seeded 42 + id*1000 + rank + trial*1000003 (rank 0's seed for replicated
        # parts); dtype is a torch.dtype or its name
    traffic_bytes(inputs, world_size) -> {"send": int, "recv": int}   # speed-of-light bytes per rank
    global_reference(inputs_per_rank, world_size) -> list             # each rank's output (None: unchecked),
        # computed in one process from all ranks' inputs without torch.distributed
    hypotheses(...) dicts: {"name", "tensor" (the predicted output, same structure as the output),
        optional "peers", "factor", "block", "shape_changes", "detail"}
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from functools import lru_cache
from types import ModuleType

CATEGORIES = (
    "collective",  # bare collectives: all-reduce, all-gather, reduce-scatter, broadcast, all-to-all
    "tp_gemm",  # tensor-parallel GEMMs fused with a collective
    "sequence_parallel",  # Ulysses all-to-all and friends
    "moe",  # token dispatch and combine
    "attention",  # ring attention
    "loss",  # vocab-parallel losses
    "norm",  # collectives fused with normalisation
)


@dataclass(frozen=True)
class ProblemSpec:
    id: int
    name: str  # PKB-style stem without the id: 'allreduce', 'allgather_gemm'
    category: str  # one of CATEGORIES
    description: str
    source: str  # the real codebase the pattern comes from (e.g. 'Megatron-LM tensor parallel')
    has_compute: bool  # False for bare collectives: overlap is then 'n/a'
    dtypes: tuple[str, ...] = ("bfloat16", "float32")
    # (atol, rtol) per dtype name
    tolerances: dict[str, tuple[float, float]] = field(default_factory=dict)
    # Speed-of-light traffic: bytes each rank must send and receive over the links, as a function
    # of world size and the inputs; the module provides it as `traffic_bytes(inputs, world_size)`.
    notes: str = ""

    @property
    def stem(self) -> str:
        return f"{self.id}_{self.name}"


@dataclass
class Problem:
    spec: ProblemSpec
    module: ModuleType

    @property
    def id(self) -> int:
        return self.spec.id

    @property
    def name(self) -> str:
        return self.spec.name


@lru_cache(maxsize=1)
def _index() -> dict[int, str]:
    """Problem id -> module name, from the file names alone (no import of torch needed)."""
    out: dict[int, str] = {}
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("p") or "_" not in info.name:
            continue
        head = info.name[1:].split("_", 1)[0]
        if head.isdigit():
            out[int(head)] = info.name
    return out


def ids() -> list[int]:
    return sorted(_index())


def names() -> dict[int, str]:
    """Problem id -> PKB-style name (from file names, without importing the modules)."""
    return {pid: mod[1:].split("_", 1)[1] for pid, mod in _index().items()}


def get(problem: int | str) -> Problem:
    """Load a problem by id (1), PKB stem ('1_allreduce') or name ('allreduce')."""
    index = _index()
    pid: int | None = None
    if isinstance(problem, int) or (isinstance(problem, str) and problem.isdigit()):
        pid = int(problem)
    else:
        head = problem.split("_", 1)[0]
        if head.isdigit():
            pid = int(head)
        else:
            pid = next((i for i, n in names().items() if n == problem), None)
    if pid is None or pid not in index:
        known = ", ".join(f"{i}_{n}" for i, n in sorted(names().items()))
        raise KeyError(f"no problem {problem!r} in problems/; known: {known}")
    module = importlib.import_module(f"problems.{index[pid]}")
    return Problem(spec=module.PROBLEM, module=module)


@lru_cache(maxsize=None)
def spec(problem_id: int) -> ProblemSpec | None:
    """The ProblemSpec of a problem read from its source with `ast`, without importing it.

    The static slice runs where torch is not installed; it needs only the metadata (category,
    has_compute), which every module writes as literal keyword arguments of ProblemSpec(...).
    """
    import ast
    from pathlib import Path

    mod = _index().get(problem_id)
    if mod is None:
        return None
    tree = ast.parse(Path(__path__[0], f"{mod}.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "PROBLEM" for t in node.targets)
            and isinstance(node.value, ast.Call)
        ):
            kwargs = {}
            for kw in node.value.keywords:
                try:
                    kwargs[kw.arg] = ast.literal_eval(kw.value)
                except ValueError:
                    continue  # a computed field: left at its default
            return ProblemSpec(**kwargs)
    return None
