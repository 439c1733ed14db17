"""The virtual world and the fake torch.distributed: per-rank identity, collectives against
single-process math at N = 2, 4, 8, point to point, subgroups, timeouts, and clean restoration."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

from pkb.emulate import patch, run_in_world
from pkb.emulate.world import EmulationError

WORLD_SIZES = (2, 4, 8)


def _x(rank: int, shape=(4, 6)) -> torch.Tensor:
    """Distinct, exactly representable values per rank."""
    n = torch.tensor(shape).prod().item()
    return (torch.arange(n, dtype=torch.float64).reshape(shape) * (rank + 1) + 10 * rank - 3).contiguous()


def _all_collectives(ws: int) -> dict:
    r = dist.get_rank()
    x = _x(r)
    out: dict = {"rank": r, "ws": dist.get_world_size(), "init": dist.is_initialized(), "group_ws": dist.get_world_size(dist.group.WORLD)}
    for op in ("SUM", "MAX", "MIN", "PRODUCT", "AVG"):
        t = x.clone()
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        out[f"all_reduce_{op}"] = t
    t = x.clone()
    work = dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=True)
    work.wait()
    out["all_reduce_async"] = t
    t = x.clone()
    dist.reduce(t, dst=ws - 1, op=dist.ReduceOp.SUM)
    out["reduce"] = t
    t = x.clone()
    dist.broadcast(t, src=1)
    out["broadcast"] = t
    lst = [torch.empty_like(x) for _ in range(ws)]
    dist.all_gather(lst, x)
    out["all_gather"] = torch.stack(lst)
    g = torch.empty((ws * x.shape[0], x.shape[1]), dtype=x.dtype)
    dist.all_gather_into_tensor(g, x)
    out["all_gather_into_tensor"] = g
    big = _x(r, (ws * 2, 3))
    rs = torch.empty((2, 3), dtype=big.dtype)
    dist.reduce_scatter_tensor(rs, big, op=dist.ReduceOp.SUM)
    out["reduce_scatter_tensor"] = rs
    rs2 = torch.empty((2, 3), dtype=big.dtype)
    dist.reduce_scatter(rs2, list(big.chunk(ws)), op=dist.ReduceOp.SUM)
    out["reduce_scatter"] = rs2
    a2a = torch.empty_like(big)
    dist.all_to_all_single(a2a, big)
    out["all_to_all_single"] = a2a
    # uneven: rank r sends (p + 1) rows to rank p
    send = torch.arange(sum(p + 1 for p in range(ws)), dtype=torch.float64) + 100 * r
    recv = torch.empty(ws * (r + 1), dtype=torch.float64)
    dist.all_to_all_single(recv, send, output_split_sizes=[r + 1] * ws, input_split_sizes=[p + 1 for p in range(ws)])
    out["all_to_all_uneven"] = recv
    outs = [torch.empty(3, dtype=torch.float64) for _ in range(ws)]
    dist.all_to_all(outs, [torch.full((3,), float(10 * r + p), dtype=torch.float64) for p in range(ws)])
    out["all_to_all"] = torch.stack(outs)
    # ring by send/recv (even ranks send first), by isend/irecv and by batch_isend_irecv
    nxt, prv = (r + 1) % ws, (r - 1) % ws
    got = torch.empty_like(x)
    if r % 2 == 0:
        dist.send(x, nxt)
        dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(x, nxt)
    out["ring_send_recv"] = got
    got2 = torch.empty_like(x)
    reqs = [dist.isend(x, nxt), dist.irecv(got2, prv)]
    for q in reqs:
        q.wait()
    out["ring_isend_irecv"] = got2
    got3 = torch.empty_like(x)
    for q in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, nxt), dist.P2POp(dist.irecv, got3, prv)]):
        q.wait()
    out["ring_batch"] = got3
    dist.barrier()
    # a subgroup of the even ranks
    evens = dist.new_group(list(range(0, ws, 2)))
    if r % 2 == 0:
        t = x.clone()
        dist.all_reduce(t, group=evens)
        out["evens_sum"] = t
        out["evens_rank"] = dist.get_rank(evens)
    objs = [None] * ws
    dist.all_gather_object(objs, {"rank": r})
    out["objects"] = objs
    return out


@pytest.mark.parametrize("ws", WORLD_SIZES)
def test_collectives_match_single_process_math(ws):
    results = run_in_world(ws, _all_collectives, [(ws,)] * ws)
    xs = [_x(r) for r in range(ws)]
    bigs = [_x(r, (ws * 2, 3)) for r in range(ws)]
    stack = torch.stack(xs)
    for r, res in enumerate(results):
        assert res["rank"] == r and res["ws"] == ws and res["init"] and res["group_ws"] == ws
        torch.testing.assert_close(res["all_reduce_SUM"], stack.sum(0), rtol=0, atol=0)
        torch.testing.assert_close(res["all_reduce_async"], stack.sum(0), rtol=0, atol=0)
        torch.testing.assert_close(res["all_reduce_MAX"], stack.amax(0), rtol=0, atol=0)
        torch.testing.assert_close(res["all_reduce_MIN"], stack.amin(0), rtol=0, atol=0)
        torch.testing.assert_close(res["all_reduce_PRODUCT"], stack.prod(0))
        torch.testing.assert_close(res["all_reduce_AVG"], stack.mean(0))
        if r == ws - 1:
            torch.testing.assert_close(res["reduce"], stack.sum(0), rtol=0, atol=0)
        else:
            torch.testing.assert_close(res["reduce"], xs[r], rtol=0, atol=0)  # non-root untouched
        torch.testing.assert_close(res["broadcast"], xs[1], rtol=0, atol=0)
        torch.testing.assert_close(res["all_gather"], stack, rtol=0, atol=0)
        torch.testing.assert_close(res["all_gather_into_tensor"], torch.cat(xs), rtol=0, atol=0)
        total = torch.stack(bigs).sum(0)
        torch.testing.assert_close(res["reduce_scatter_tensor"], total[2 * r:2 * r + 2], rtol=0, atol=0)
        torch.testing.assert_close(res["reduce_scatter"], total[2 * r:2 * r + 2], rtol=0, atol=0)
        torch.testing.assert_close(res["all_to_all_single"], torch.cat([b[2 * r:2 * r + 2] for b in bigs]), rtol=0, atol=0)
        offsets = [sum(p + 1 for p in range(q)) for q in range(ws)]
        want = torch.cat([torch.arange(offsets[r], offsets[r] + r + 1, dtype=torch.float64) + 100 * s for s in range(ws)])
        torch.testing.assert_close(res["all_to_all_uneven"], want, rtol=0, atol=0)
        torch.testing.assert_close(res["all_to_all"], torch.stack([torch.full((3,), float(10 * s + r), dtype=torch.float64) for s in range(ws)]))
        for key in ("ring_send_recv", "ring_isend_irecv", "ring_batch"):
            torch.testing.assert_close(res[key], xs[(r - 1) % ws], rtol=0, atol=0)
        if r % 2 == 0:
            torch.testing.assert_close(res["evens_sum"], torch.stack(xs[0::2]).sum(0), rtol=0, atol=0)
            assert res["evens_rank"] == r // 2
        assert res["objects"] == [{"rank": s} for s in range(ws)]


def test_bfloat16_sum_accumulates_in_float32():
    def f():
        t = torch.full((8,), 1.0 / 3.0, dtype=torch.bfloat16)
        dist.all_reduce(t)
        return t

    out = run_in_world(8, f)[0]
    want = (torch.full((8,), 1.0 / 3.0, dtype=torch.bfloat16).float() * 8).to(torch.bfloat16)
    assert torch.equal(out, want)


def test_rank_identity_is_per_thread_and_refused_elsewhere():
    ranks = run_in_world(4, lambda: (dist.get_rank(), threading.current_thread().name))
    assert [r for r, _ in ranks] == [0, 1, 2, 3]
    assert len({name for _, name in ranks}) == 4

    def outside():
        box = {}

        def helper():
            try:
                dist.get_rank()
            except EmulationError as exc:
                box["err"] = str(exc)

        th = threading.Thread(target=helper)
        th.start()
        th.join()
        return box.get("err", "")

    assert "no virtual rank" in run_in_world(2, outside)[0]


def test_collective_mismatch_is_an_error_not_a_hang():
    def f():
        t = torch.ones(2)
        if dist.get_rank() == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, src=0)
        return t

    with pytest.raises(EmulationError, match="collective mismatch"):
        run_in_world(2, f, timeout_s=10)


def test_a_rank_that_skips_a_barrier_times_out_and_the_world_lets_go():
    def f():
        if dist.get_rank() != 1:
            dist.barrier()
        return dist.get_rank()

    with pytest.raises(TimeoutError, match="barrier"):
        run_in_world(3, f, timeout_s=1.0)


def test_fakes_are_installed_only_during_the_run_and_restored_after():
    before = patch.originals()
    real_c10d_all_reduce = torch.distributed.distributed_c10d.all_reduce
    inside = run_in_world(2, lambda: (dist.all_reduce is before["dist.all_reduce"], symm_mem.empty is before["symm_mem.empty"], type(dist.group).__name__))
    assert inside[0][0] is False and inside[0][1] is False and inside[0][2] == "_GroupNamespace"
    assert patch.originals() == before
    assert torch.distributed.distributed_c10d.all_reduce is real_c10d_all_reduce
    assert dist.group.WORLD is None  # the real, uninitialised default group again

    with pytest.raises(ValueError):
        run_in_world(2, lambda: (_ for _ in ()).throw(ValueError("boom")))
    assert patch.originals() == before
