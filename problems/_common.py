"""Helpers shared by the problem modules: seeding, dtype names, input sizes, traffic figures.

Kept free of any problem's math so each module stays readable on its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
from typing import Any, Iterator, Sequence

import torch

SCALES = ("small", "large")


# The evaluation's secret for one launch (pkb.eval.problem_source.salted_inputs): set only while
# the harness draws inputs, so a candidate that rebuilds its peers' inputs from the public seed
# formula (or calls make_inputs itself for another rank) gets other numbers.
_SALT: contextvars.ContextVar[bytes | None] = contextvars.ContextVar("pkb_input_salt", default=None)


def seed_for(problem_id: int, rank: int, trial: int) -> int:
    """PKB's input seed, 42 + problem * 1000 + rank + trial * 1000003; inside `salted(key)`, that
    seed hashed with the key (ranks that share a seed still share its salted form)."""
    seed = 42 + problem_id * 1000 + rank + trial * 1000003
    key = _SALT.get()
    return seed if key is None else salted_seed(seed, key)


def salted_seed(seed: int, key: bytes) -> int:
    """A 63-bit seed from `seed` and a secret `key` (keyed BLAKE2b): without the key, one rank's
    salted seed says nothing of another's."""
    digest = hashlib.blake2b(int(seed).to_bytes(16, "little", signed=True), key=key, digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


@contextlib.contextmanager
def salted(key: bytes | None) -> Iterator[None]:
    """seed_for salted with `key` inside the block (no salt where key is None)."""
    token = _SALT.set(key)
    try:
        yield
    finally:
        _SALT.reset(token)


def seeded_generator(problem_id: int, rank: int, trial: int) -> torch.Generator:
    """A CPU generator seeded the PKB way.

    Inputs are drawn on the CPU and moved afterwards, so the same seed gives the same tensors on
    every device (CUDA generators produce a different stream from the same seed).
    """
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed_for(problem_id, rank, trial))
    return gen


def resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    name = str(dtype).removeprefix("torch.")
    resolved = getattr(torch, name, None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    return resolved


def dtype_name(dtype: torch.dtype | str) -> str:
    return str(resolve_dtype(dtype)).removeprefix("torch.")


def check_scale(scale: str, sizes: dict[str, Any]) -> dict[str, Any]:
    if scale not in sizes:
        raise ValueError(f"scale must be one of {sorted(sizes)}, not {scale!r}")
    return sizes[scale]


def randn(
    gen: torch.Generator,
    shape: Sequence[int],
    device: torch.device | str,
    dtype: torch.dtype | str,
    std: float = 1.0,
) -> torch.Tensor:
    """Normal values drawn in float32 on the CPU, then cast and moved (same values per dtype)."""
    values = torch.randn(tuple(shape), generator=gen, dtype=torch.float32)
    if std != 1.0:
        values = values * std
    return values.to(device=device, dtype=resolve_dtype(dtype))


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


# Speed-of-light bytes per rank, following nccl-tests' bus-bandwidth factors. `size` is the size
# of the buffer the nccl-tests formula names: the full buffer for all-reduce, the full (gathered or
# scattered) buffer for all-gather, reduce-scatter and all-to-all, the payload for broadcast/reduce.
def allreduce_bytes(size: int, world_size: int) -> int:
    return 2 * (world_size - 1) * size // world_size


def allgather_bytes(full_size: int, world_size: int) -> int:
    return (world_size - 1) * full_size // world_size


reducescatter_bytes = allgather_bytes
alltoall_bytes = allgather_bytes


def symmetric(n: int) -> dict[str, int]:
    """Traffic where every rank sends as much as it receives."""
    return {"send": int(n), "recv": int(n)}


def hypothesis(name: str, tensor: Any = None, **details: Any) -> dict[str, Any]:
    """One wrong-result hypothesis: a name, the output it predicts, and what identifies it."""
    out: dict[str, Any] = {"name": name, **details}
    if tensor is not None:
        out["tensor"] = tensor
    return out


def like(expected: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`values` in the dtype and on the device of `expected` (hypotheses mirror the output)."""
    return values.to(device=expected.device, dtype=expected.dtype)


def circulant_splits(gen: torch.Generator, world_size: int, per_peer: int) -> list[list[int]]:
    """An uneven split matrix S[s][d] (rows rank s sends to rank d) whose rows and columns all sum
    to world * per_peer: S[s][d] = per_peer + shift[(d - s) % world] with shifts that sum to 0 and
    keep every block >= 0. Draw `gen` from rank 0's seed so every rank builds the same matrix."""
    if world_size == 1:
        return [[per_peer]]
    shift = torch.randint(-per_peer, per_peer + 1, (world_size - 1,), generator=gen).tolist()
    shift.append(-sum(shift))
    while abs(shift[-1]) > per_peer:  # move the excess of the last shift onto the others
        step = 1 if shift[-1] > 0 else -1
        for i in range(world_size - 1):
            if shift[-1] != 0 and abs(shift[i] + step) <= per_peer:
                shift[i] += step
                shift[-1] -= step
    return [[per_peer + shift[(d - s) % world_size] for d in range(world_size)] for s in range(world_size)]
