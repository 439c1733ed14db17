"""The fake `torch.distributed._symmetric_memory`: real allocations per virtual rank, real pointers.

- `empty(...)` allocates a real tensor for the calling rank on the one device (every `cuda:i` is
  that device) and fills it with the allocator poison (0x7A bytes), so data read from a peer
  buffer nobody wrote shows up as `unwritten`.
- `rendezvous(buf, group)` is a collective over the group's virtual ranks (cached per allocation,
  as torch caches it). The handle's `buffer_ptrs` are the real `data_ptr()`s of every rank's
  allocation, `buffer_ptrs_dev` (an int, as in torch) is the address of a real int64 device array
  of them, signal pads are real zeroed uint32 buffers, one per rank, `get_buffer` /
  `get_signal_pad` are real views of a rank's memory. A kernel given these pointers really reads
  and writes the peers' memory (all on one GPU, or in host memory on CPU).
- `barrier`, `put_signal`, `wait_signal` are host-side: the calling rank first waits for its
  current stream (everything it queued before is done), then meets its peers on the host. That is
  stronger ordering than the device-side originals (which do not block the host): a kernel
  launched after `hdl.barrier()` runs after every peer's work before the barrier, as on real
  hardware, but emulation can hide bugs that need the host to run ahead of the device.
- `multicast_ptr` is 0 (no multicast); the TORCH_SYMM_MEM_DISABLE_MULTICAST path.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from pkb.emulate import fake_dist
from pkb.emulate.world import Rendezvous, current, current_or_none, sync_current_stream
from pkb.eval.poison import SENTINEL_BYTE

DEFAULT_SIGNAL_PAD_BYTES = 9216  # torch 2.13's _SymmetricMemory.signal_pad_size


def _signal_pad_bytes(world: Any) -> int:
    return int(world.shared.get("signal_pad_size", DEFAULT_SIGNAL_PAD_BYTES))


def _device(device: Any) -> torch.device:
    world = current().world
    if device is None:
        default = torch.get_default_device()
        return world.device if default.type == world.device.type or world.device.type == "cuda" else default
    device = torch.device(device)
    if device.type == "cuda":
        if world.device.type != "cuda":
            raise RuntimeError("emulated symmetric memory: a CUDA buffer was asked for in a CPU-only world")
        return world.device  # every cuda:i of a virtual rank is the one real device
    return device


def _allocs(ctx: Any) -> dict[int, torch.Tensor]:
    return ctx.state.setdefault("symm_allocs", {})


def empty(*size: Any, dtype: torch.dtype | None = None, device: Any = None) -> torch.Tensor:
    if len(size) == 1 and isinstance(size[0], (Sequence, torch.Size)):
        size = tuple(size[0])
    size = tuple(int(s) for s in size)
    ctx = current()
    t = torch.empty(size, dtype=dtype or torch.get_default_dtype(), device=_device(device))
    if t.numel():
        _bytes_of(t).fill_(SENTINEL_BYTE)
    _allocs(ctx)[t.untyped_storage().data_ptr()] = t
    return t


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """The whole storage of t as a flat uint8 tensor."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def empty_strided_p2p(size: Any, stride: Any, dtype: torch.dtype, device: Any, group_name: str | None = None, alloc_id: int | None = None) -> torch.Tensor:
    return empty(tuple(size), dtype=dtype, device=device)


def is_symm_mem_tensor(tensor: torch.Tensor) -> bool:
    return tensor.untyped_storage().data_ptr() in _allocs(current())


class FakeSymmetricMemory:
    """One rank's handle on a rendezvoused allocation (the `_SymmetricMemory` surface)."""

    def __init__(self, group: Any, index: int, bases: list[torch.Tensor], pads: list[torch.Tensor]) -> None:
        self._group = group
        self._rank = index
        self._bases = bases  # every rank's allocation (the whole storage, as uint8)
        self._pads = pads
        self.buffer_size = bases[index].numel()
        self.signal_pad_size = pads[index].numel()
        dev = bases[index].device
        self.device = dev
        self._buffer_ptrs = [b.data_ptr() for b in bases]
        self._signal_pad_ptrs = [p.data_ptr() for p in pads]
        # Device arrays of the pointers; kept alive by the handle, as torch keeps its own.
        self.buffer_ptrs_dev_tensor = torch.tensor(self._buffer_ptrs, dtype=torch.int64, device=dev)
        self.signal_pad_ptrs_dev_tensor = torch.tensor(self._signal_pad_ptrs, dtype=torch.int64, device=dev)
        self.group_name = group.group_name

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return len(self._bases)

    @property
    def buffer_ptrs(self) -> list[int]:
        return list(self._buffer_ptrs)

    @property
    def buffer_ptrs_dev(self) -> int:
        return self.buffer_ptrs_dev_tensor.data_ptr()

    @property
    def signal_pad_ptrs(self) -> list[int]:
        return list(self._signal_pad_ptrs)

    @property
    def signal_pad_ptrs_dev(self) -> int:
        return self.signal_pad_ptrs_dev_tensor.data_ptr()

    @property
    def multicast_ptr(self) -> int:
        ctx = current_or_none()
        if ctx is not None:
            with ctx.world.lock:  # counted: a failure after a read may be the missing multicast's
                ctx.world.shared["multicast_reads"] = int(ctx.world.shared.get("multicast_reads", 0)) + 1
        return 0

    def has_multicast_support(self) -> bool:
        return False

    def _view(self, source: torch.Tensor, what: str, rank: int, sizes: Any, dtype: torch.dtype, storage_offset: int) -> torch.Tensor:
        if not 0 <= rank < self.world_size:
            raise RuntimeError(f"{what}: rank {rank} out of range for world size {self.world_size}")
        sizes = [int(s) for s in sizes]
        es = torch.empty((), dtype=dtype).element_size()
        numel = math.prod(sizes)
        start = int(storage_offset or 0) * es
        if start + numel * es > source.numel():
            raise RuntimeError(
                f"{what}: the requested size ({(numel * es)} bytes at offset {start}) exceeds the "
                f"allocated size ({source.numel()} bytes)"
            )
        return source[start:start + numel * es].view(dtype).view(sizes)

    def get_buffer(self, rank: int, sizes: Any, dtype: torch.dtype, storage_offset: int | None = 0) -> torch.Tensor:
        return self._view(self._bases[rank], "get_buffer", rank, sizes, dtype, storage_offset or 0)

    def get_remote_tensor(self, peer: int, sizes: Any, dtype: torch.dtype) -> torch.Tensor:
        return self.get_buffer(peer, sizes, dtype)

    def get_signal_pad(self, rank: int, sizes: Any = (), dtype: torch.dtype | None = None, storage_offset: int | None = 0) -> torch.Tensor:
        dtype = dtype or torch.uint32
        sizes = list(sizes or [])
        if not sizes:
            es = torch.empty((), dtype=dtype).element_size()
            sizes = [self.signal_pad_size // es - int(storage_offset or 0)]
        return self._view(self._pads[rank], "get_signal_pad", rank, sizes, dtype, storage_offset or 0)

    # -- synchronisation (host side, after the rank's stream is drained) --

    def _barrier_rv(self, channel: int) -> Rendezvous:
        world = self._group.world
        key = ("symm_barrier", self.group_name, int(channel))
        with world.lock:
            rv = world.shared.get(key)
            if rv is None:
                rv = world.shared[key] = Rendezvous(world, self.world_size, f"symm barrier {self.group_name}/{channel}")
        return rv

    def barrier(self, channel: int = 0, timeout_ms: int = 0) -> None:
        sync_current_stream()
        self._barrier_rv(channel).exchange(self._rank, None, what=f"symm_mem barrier(channel={channel})")

    def put_signal(self, dst_rank: int, channel: int = 0, timeout_ms: int = 0) -> None:
        sync_current_stream()
        self._group.world.signals.post((self.group_name, int(dst_rank), self._rank, int(channel)))

    def wait_signal(self, src_rank: int, channel: int = 0, timeout_ms: int = 0) -> None:
        ok = self._group.world.signals.consume(
            (self.group_name, self._rank, int(src_rank), int(channel)),
            timeout_s=(timeout_ms / 1000.0) if timeout_ms else None,
            what=f"symm_mem wait_signal(src={src_rank}, channel={channel})",
        )
        if not ok:
            raise RuntimeError(f"wait_signal: timed out after {timeout_ms} ms waiting for rank {src_rank}")

    # -- static helpers of _SymmetricMemory --

    @staticmethod
    def stream_write_value32(tensor: torch.Tensor, offset: int, val: int) -> torch.Tensor:
        tensor.view(-1).view(torch.int32)[offset] = int(val)
        return tensor

    @staticmethod
    def memset32(tensor: torch.Tensor, offset: int, val: int, count: int = 1) -> torch.Tensor:
        tensor.view(-1).view(torch.int32)[offset:offset + count] = int(val)
        return tensor

    def __repr__(self) -> str:
        return f"FakeSymmetricMemory(rank={self._rank}, world_size={self.world_size}, group={self.group_name!r})"


def _group_of(group: Any) -> Any:
    if group is None:
        return fake_dist.world_group(current().world)
    return fake_dist.resolve_group(group)


def rendezvous(tensor: torch.Tensor, group: Any = None) -> FakeSymmetricMemory:
    ctx = current()
    g = _group_of(group)
    key = tensor.untyped_storage().data_ptr()
    alloc = _allocs(ctx).get(key)
    if alloc is None:
        raise RuntimeError(
            "rendezvous: the tensor was not allocated by symm_mem.empty() (emulated symmetric memory "
            "tracks its own allocations)"
        )
    handles = ctx.state.setdefault("symm_handles", {})
    cached = handles.get((key, g.group_name))
    if cached is not None:
        return cached
    idx = g.rank()
    if idx < 0:
        raise RuntimeError(f"rendezvous: rank {ctx.rank} is not in group {g.group_name}")
    base = _bytes_of(alloc)
    pad = torch.zeros(_signal_pad_bytes(ctx.world), dtype=torch.uint8, device=alloc.device)
    sync_current_stream()
    vals = g.rv.exchange(idx, ("symm_mem.rendezvous", (base, pad)), what="symm_mem.rendezvous")
    names = {v[0] for v in vals}
    if names != {"symm_mem.rendezvous"}:
        raise RuntimeError(f"rendezvous: ranks called {sorted(names)} at the same time (collective mismatch)")
    bases = [v[1][0] for v in vals]
    sizes = sorted({b.numel() for b in bases})
    if len(sizes) > 1:
        raise RuntimeError(f"rendezvous: ranks' allocations differ in size ({sizes} bytes); symmetric memory needs the same size")
    hdl = FakeSymmetricMemory(g, idx, bases, [v[1][1] for v in vals])
    handles[(key, g.group_name)] = hdl
    return hdl


def _workspace(group_name: str, min_size: int) -> FakeSymmetricMemory:
    ctx = current()
    spaces = ctx.state.setdefault("symm_workspaces", {})
    t = spaces.get(group_name)
    if t is None or t.numel() < min_size:
        t = empty(int(min_size), dtype=torch.uint8, device=ctx.world.device)
        spaces[group_name] = t
    return rendezvous(t, group_name)


def get_symm_mem_workspace(group_name: str, min_size: int) -> FakeSymmetricMemory:
    return _workspace(str(group_name), int(min_size))


def enable_symm_mem_for_group(group_name: Any) -> None:
    return None


def is_symm_mem_enabled_for_group(group_name: Any) -> bool:
    return True


def is_nvshmem_available() -> bool:
    return False


def set_backend(name: str) -> None:
    return None


def get_backend(device: Any) -> str:
    return "CUDA"


def set_signal_pad_size(size: int) -> None:
    current().world.shared["signal_pad_size"] = int(size)


def get_signal_pad_size() -> int:
    return _signal_pad_bytes(current().world)


def get_mem_pool(device: Any) -> Any:
    raise RuntimeError("emulated symmetric memory has no memory pool: allocate with symm_mem.empty()")


def put_signal(src: torch.Tensor, hdl: FakeSymmetricMemory, peer: int) -> None:
    """Copy src into the peer's buffer (from offset 0), then signal it."""
    hdl.get_buffer(peer, list(src.shape), src.dtype).copy_(src)
    hdl.put_signal(peer)


def wait_signal(hdl: FakeSymmetricMemory, peer: int) -> None:
    hdl.wait_signal(peer)


class FakeSymmetricMemoryClass:
    """Stands in for `torch._C._distributed_c10d._SymmetricMemory` (its static entry points)."""

    signal_pad_size = DEFAULT_SIGNAL_PAD_BYTES
    empty_strided_p2p = staticmethod(empty_strided_p2p)
    stream_write_value32 = staticmethod(FakeSymmetricMemory.stream_write_value32)
    memset32 = staticmethod(FakeSymmetricMemory.memset32)

    @staticmethod
    def rendezvous(tensor: torch.Tensor, group_name: str | None = None) -> FakeSymmetricMemory:
        return rendezvous(tensor, group_name)

    @staticmethod
    def has_multicast_support(*args: Any) -> bool:
        return False

    @staticmethod
    def is_symm_mem_tensor(tensor: torch.Tensor) -> bool:
        return is_symm_mem_tensor(tensor)

    @staticmethod
    def set_backend(name: str) -> None:
        return None

    @staticmethod
    def get_backend(device: Any) -> str:
        return "CUDA"

    @staticmethod
    def set_group_info(*args: Any) -> None:
        return None


SYMM_FUNCTIONS = {
    "empty": empty,
    "rendezvous": rendezvous,
    "is_symm_mem_tensor": is_symm_mem_tensor,
    "get_symm_mem_workspace": get_symm_mem_workspace,
    "enable_symm_mem_for_group": enable_symm_mem_for_group,
    "is_symm_mem_enabled_for_group": is_symm_mem_enabled_for_group,
    "is_nvshmem_available": is_nvshmem_available,
    "set_backend": set_backend,
    "get_backend": get_backend,
    "set_signal_pad_size": set_signal_pad_size,
    "get_signal_pad_size": get_signal_pad_size,
    "get_mem_pool": get_mem_pool,
    "put_signal": put_signal,
    "wait_signal": wait_signal,
    "_SymmetricMemory": FakeSymmetricMemoryClass,
}
