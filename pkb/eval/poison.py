"""Poisoning the CUDA caching allocator so memory a candidate never writes is recognisable.

The sentinel is a byte pattern, not a value: every byte is 0x7A, so a buffer poisoned once reads
as the same pattern whatever dtype later views it. 0x7A7A is finite in fp16 (53056) and bf16
(about 3.2e35), 0x7A7A7A7A is finite in fp32 and the 8-byte pattern in fp64: never NaN or Inf,
so memory left unwritten (`unwritten`) is told apart from computed NaN/Inf (`nan_inf`).
Values that large (and exactly that bit pattern) do not come out of real kernels by chance.
"""

from __future__ import annotations

import torch

SENTINEL_BYTE = 0x7A

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

# Small allocations (<= 1 MiB) come from a separate pool of 2 MiB segments; poison those too.
_SMALL_BLOCK_BYTES = 512 * 1024
_SMALL_BLOCKS = 32
_MIN_LARGE_BYTES = 64 * 1024 * 1024


def sentinel_bits(element_size: int) -> int:
    """The pattern as a signed integer of `element_size` bytes."""
    raw = int.from_bytes(bytes([SENTINEL_BYTE]) * element_size, "little")
    bits = element_size * 8
    return raw - (1 << bits) if raw >= 1 << (bits - 1) else raw


def sentinel_mask(t: torch.Tensor) -> torch.Tensor | None:
    """Elements whose bits are the sentinel pattern, or None for dtypes it cannot mark."""
    if t.dtype in (torch.bool,) or t.is_complex() or t.element_size() not in _INT_VIEW:
        return None
    t = t.contiguous()
    view = t.view(_INT_VIEW[t.element_size()])
    if view.dtype == torch.uint8:
        return view == SENTINEL_BYTE
    return view == sentinel_bits(t.element_size())


def filled_with_sentinel(shape: tuple[int, ...], dtype: torch.dtype, device: str | torch.device = "cpu") -> torch.Tensor:
    """A tensor that looks exactly like poisoned memory nobody wrote (tests, diagnosis)."""
    t = torch.empty(shape, dtype=dtype, device=device)
    t.view(torch.uint8).fill_(SENTINEL_BYTE)
    return t


def poison_allocator(device: torch.device, expected_bytes: int) -> int:
    """Fill freed cache blocks with the sentinel so the next `torch.empty` returns poison.

    Returns the bytes poisoned (0 off CUDA: the CPU allocator does not cache blocks).
    """
    if device.type != "cuda":
        return 0
    free, _total = torch.cuda.mem_get_info(device)
    large = max(_MIN_LARGE_BYTES, 4 * int(expected_bytes))
    large = min(large, int(free * 0.5))
    blocks = []
    try:
        if large > 0:
            blocks.append(torch.empty(large, dtype=torch.uint8, device=device))
        blocks.extend(
            torch.empty(_SMALL_BLOCK_BYTES, dtype=torch.uint8, device=device) for _ in range(_SMALL_BLOCKS)
        )
    except torch.OutOfMemoryError:
        pass  # poison what fitted
    for b in blocks:
        b.fill_(SENTINEL_BYTE)
    torch.cuda.synchronize(device)
    poisoned = sum(b.numel() for b in blocks)
    del blocks  # back to the cache, not to the driver: no empty_cache()
    return poisoned
