"""Outputs in layouts and on devices a candidate may return, and what the record makes of launch
evidence, without a launch: a strided view at an offset is an answer like any other, a meta tensor
is a wrong one, a message on the verdict channel that no rank sends is tampering, and every
process left behind is counted even past the ones named."""

from __future__ import annotations

import torch

from pkb.eval.compare import compare_outputs
from pkb.eval.tensors import bitwise_equal, repeat_summary


def _strided_copy(x: torch.Tensor) -> torch.Tensor:
    buf = torch.full((7 + 2 * x.numel(),), float("nan"))
    out = buf.as_strided(x.shape, (2 * x.shape[1], 2), 7)
    out.copy_(x)
    return out


def test_a_strided_output_at_an_offset_compares_and_repeats_like_a_dense_one():
    x = torch.randn(4, 6)
    view = _strided_copy(x)
    assert bitwise_equal(view, x.clone())
    assert repeat_summary(view, _strided_copy(x))["equal"]
    other = _strided_copy(x)
    other[1, 2] += 1.0
    assert not bitwise_equal(view, other)
    assert repeat_summary(view, other)["differing"] == 1


def test_a_meta_output_is_wrong_never_an_error():
    x = torch.randn(4, 6)
    meta = torch.empty_like(x, device="meta")
    assert bitwise_equal(meta, torch.empty_like(x, device="meta"))  # a repeat of it: nothing differs
    assert not bitwise_equal(meta, x)
    cmp = compare_outputs(x, meta, 1e-5, 1e-5)
    assert cmp["matched"] is False and cmp["values_close"] is False and cmp["shape_ok"] is True
    assert cmp["leaves"][0]["device"] == "meta" and cmp["mismatches"] == x.numel()


def _launch(results, **over):
    from pkb.eval.launcher import LaunchResult, RankReport

    ranks = [RankReport(rank=i, phase=r.pop("_phase", "done"), result=r) for i, r in enumerate(results)]
    return LaunchResult(**{"returncode": 0, "timed_out": False, "wall_s": 1.0, "ranks": ranks, **over})


def _rank(rank):
    return {"rank": rank, "finished": True, "error": None, "trials": [{"trial": 0, "matched": False, "values_close": False,
                                                                     "mismatches": 3, "numel": 8, "max_abs_err": 1.0}]}


def test_a_message_on_the_verdict_channel_no_rank_sends_is_tampering_even_when_the_launch_hung():
    from pkb.eval.outcome import decide

    forged = {"timing": {"late_messages": {"0": ["b'{\"rank\": 0, \"finished\": true'"]}}}
    hung = _launch([_rank(0), _rank(1)], timed_out=True, judge_check=forged,
                   phase_timeout={"rank": 0, "phase": "trial 0 reference: one reference call", "limit_s": 10.0})
    ev = decide(hung)
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "harness_tamper"), ev["reason"]
    assert "verdict channel" in ev["reason"] and ev["details"]["channel_forgery"] == forged["timing"]["late_messages"]
    # without the forged message the same launch is the hang it looks like
    assert decide(_launch([_rank(0), _rank(1)], timed_out=True,
                          phase_timeout={"rank": 0, "phase": "trial 0 candidate", "limit_s": 10.0}))["outcome"] == "hang"


def test_every_stray_process_is_counted_past_the_ones_named():
    from pkb.eval.outcome import decide

    strays = [{"pid": p, "cmdline": "sleep 3600", "where": "sandbox"} for p in range(10, 74)]
    ev = decide(_launch([_rank(0), _rank(1)], strays=strays, sandbox={"kind": "unshare", "stray_count": 90}))
    assert len(ev["details"]["stray_processes"]) == 16 and ev["details"]["stray_count"] == 90
    assert "90 process(es) left behind" in ev["reason"] and "the first 16 named" in ev["reason"]


def test_a_log_past_its_cap_keeps_its_tail_and_links_are_never_cut(tmp_path):
    import os

    from pkb.eval.job import cap_log

    log = tmp_path / "rank0.stdout"
    log.write_bytes(b"a" * 3000 + b"END\n")
    assert cap_log(log, cap=1000) == 3004 - 250
    text = log.read_bytes()
    assert text.startswith(b"[2754 bytes of this log dropped") and text.endswith(b"a" * 246 + b"END\n")
    assert cap_log(log, cap=1000) == 0  # under the cap now
    # a link the candidate put in a log's place: what it points at is left whole
    precious = tmp_path / "store.sqlite"
    precious.write_bytes(b"s" * 5000)
    (tmp_path / "rank1.stdout").symlink_to(precious)
    os.link(precious, tmp_path / "rank1.stderr")
    assert cap_log(tmp_path / "rank1.stdout", cap=1000) == 0
    assert cap_log(tmp_path / "rank1.stderr", cap=1000) == 0
    assert precious.read_bytes() == b"s" * 5000


def test_the_snapshot_sees_a_wrapped_channel_file_and_a_descriptor_replaced_by_dup2(tmp_path):
    import os

    from pkb.eval.guard import HarnessSnapshot

    class Channel:
        pass

    channel = Channel()
    channel.file = open(tmp_path / "fifo_stand_in", "wb", buffering=0)
    other = open(tmp_path / "relay", "wb", buffering=0)
    try:
        snap = HarnessSnapshot()
        snap.watch("verdict channel file", channel, "file")
        snap.watch_descriptor("verdict channel descriptor", channel.file.fileno())
        assert snap.changed() == []
        original = channel.file
        channel.file = other  # a wrapper in its place
        assert snap.changed() == ["verdict channel file"]
        snap.restore()
        assert channel.file is original and snap.changed() == []
        os.dup2(other.fileno(), channel.file.fileno())  # the same object, another file under it
        assert snap.changed() == ["verdict channel descriptor"]
    finally:
        channel.file.close()
        other.close()
