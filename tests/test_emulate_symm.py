"""The fake symmetric memory on CPU tensors: real per-rank allocations, real pointers and views."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

from pkb.emulate import run_in_world
from pkb.eval.poison import SENTINEL_BYTE


def _handles():
    buf = symm_mem.empty(16, dtype=torch.float32, device="cpu")
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    again = symm_mem.rendezvous(buf, dist.group.WORLD.group_name)  # cached: no second collective
    poisoned = bool((buf.view(torch.uint8) == SENTINEL_BYTE).all())
    buf.fill_(float(hdl.rank))
    hdl.barrier(channel=0)
    peers = [hdl.get_buffer(p, [16], torch.float32).clone() for p in range(hdl.world_size)]
    offset_view = hdl.get_buffer((hdl.rank + 1) % hdl.world_size, [4], torch.float32, storage_offset=8)
    pad = hdl.get_signal_pad(hdl.rank)
    return {
        "same_handle": again is hdl,
        "poisoned_at_start": poisoned,
        "rank": hdl.rank,
        "ws": hdl.world_size,
        "ptr": buf.data_ptr(),
        "buffer_ptrs": hdl.buffer_ptrs,
        "buffer_ptrs_dev_is_int": isinstance(hdl.buffer_ptrs_dev, int) and hdl.buffer_ptrs_dev != 0,
        "dev_array": hdl.buffer_ptrs_dev_tensor.tolist(),
        "signal_pad_ptrs": hdl.signal_pad_ptrs,
        "pad_zero": bool((pad == 0).all()),
        "pad_dtype": pad.dtype,
        "multicast": hdl.multicast_ptr,
        "peers": peers,
        "offset_view_ptr": offset_view.data_ptr(),
        "is_symm": symm_mem.is_symm_mem_tensor(buf) and not symm_mem.is_symm_mem_tensor(torch.zeros(1)),
    }


@pytest.mark.parametrize("ws", (2, 4, 8))
def test_rendezvous_gives_real_pointers_and_views_of_every_rank(ws):
    res = run_in_world(ws, _handles)
    ptrs = [r["ptr"] for r in res]
    assert len(set(ptrs)) == ws  # one real allocation per rank
    for r, out in enumerate(res):
        assert out["same_handle"] and out["poisoned_at_start"] and out["is_symm"]
        assert out["rank"] == r and out["ws"] == ws and out["multicast"] == 0
        assert out["buffer_ptrs"] == ptrs and out["dev_array"] == ptrs and out["buffer_ptrs_dev_is_int"]
        assert len(set(out["signal_pad_ptrs"])) == ws and out["pad_zero"] and out["pad_dtype"] == torch.uint32
        for p, view in enumerate(out["peers"]):
            assert torch.equal(view, torch.full((16,), float(p)))  # peer p's live data
        assert out["offset_view_ptr"] == ptrs[(r + 1) % ws] + 8 * 4


def test_writes_through_a_peer_view_land_in_the_peer_buffer():
    def f():
        buf = symm_mem.empty((2, 3), dtype=torch.float64, device="cpu")
        buf.zero_()
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        hdl.barrier()
        peer = (hdl.rank + 1) % hdl.world_size
        hdl.get_buffer(peer, [2, 3], torch.float64)[0, hdl.rank % 3] = 7.0 + hdl.rank  # push to the next rank
        hdl.barrier()
        return buf.clone()

    res = run_in_world(3, f)
    for r, buf in enumerate(res):
        src = (r - 1) % 3
        want = torch.zeros(2, 3, dtype=torch.float64)
        want[0, src % 3] = 7.0 + src
        assert torch.equal(buf, want)


def test_out_of_bounds_view_and_unequal_sizes_are_refused():
    def oob():
        buf = symm_mem.empty(8, dtype=torch.float32, device="cpu")
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        return hdl.get_buffer(0, [9], torch.float32)

    with pytest.raises(RuntimeError, match="exceeds"):
        run_in_world(2, oob)

    def unequal():
        buf = symm_mem.empty(8 + dist.get_rank(), dtype=torch.float32, device="cpu")
        return symm_mem.rendezvous(buf, dist.group.WORLD)

    with pytest.raises(RuntimeError, match="differ in size"):
        run_in_world(2, unequal)

    def foreign():
        return symm_mem.rendezvous(torch.zeros(4), dist.group.WORLD)

    with pytest.raises(RuntimeError, match="not allocated by symm_mem.empty"):
        run_in_world(2, foreign)


def test_put_signal_and_wait_signal_order_a_handoff():
    def f():
        buf = symm_mem.empty(4, dtype=torch.float32, device="cpu")
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        if hdl.rank == 0:
            import time

            time.sleep(0.2)  # the producer is late; the consumer must wait for its signal
            hdl.get_buffer(1, [4], torch.float32).fill_(42.0)
            hdl.put_signal(1, channel=3)
            return None
        hdl.wait_signal(0, channel=3)
        return buf.clone()

    assert torch.equal(run_in_world(2, f)[1], torch.full((4,), 42.0))


def test_wait_signal_timeout_raises():
    def f():
        buf = symm_mem.empty(4, dtype=torch.float32, device="cpu")
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        if hdl.rank == 1:
            hdl.wait_signal(0, timeout_ms=100)
        return True

    with pytest.raises(RuntimeError, match="timed out"):
        run_in_world(2, f)
