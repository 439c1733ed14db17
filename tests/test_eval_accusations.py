"""No false accusations: an output right at return that the next call overwrites is its own finding
(output_reused, beside the outcome), not cached_output; a barrier on the timed path is a host sync,
not a library fallback; a pybind binding mismatch is named; every python_exception says its type."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from test_eval_support import quick_options, run_eval, write_candidate
from test_eval_units import _launch, _ok_rank

from pkb.eval.outcome import decide
from pkb.eval.static_checks import static_flags

# One output buffer per shape, returned by every call and rewritten by the next: right when each
# call returns (PKB's contract), stale once a later call ran (what a strict caller would see).
PERSISTENT_BUFFER = """
_buffers = {}


@torch.no_grad()
def solution(x):
    out = _buffers.get(tuple(x.shape))
    if out is None:
        out = _buffers[tuple(x.shape)] = torch.empty_like(x)
    out.copy_(x)
    dist.all_reduce(out)
    return out
"""

# A barrier before its own work: a host sync on the timed path, moving no data.
BARRIER_FIRST = """
@torch.no_grad()
def solution(x):
    dist.barrier()
    out = x.clone()
    dist.all_reduce(out)
    return out
"""


def test_a_persistent_output_buffer_is_right_at_return_and_reported_as_reused(tmp_path):
    reuse = write_candidate(tmp_path / "c", "1_allreduce_persistent.py", PERSISTENT_BUFFER)
    barrier = write_candidate(tmp_path / "c", "1_allreduce_barrier_first.py", BARRIER_FIRST)
    rec_reuse, rec_barrier = run_eval([reuse, barrier], quick_options(tmp_path, trials=2, groups=3))

    ev = rec_reuse.evaluation
    assert ev["status"] == "ran" and ev["outcome"] in ("faster", "slower"), (ev["outcome"], ev["subtype"], ev["reason"])
    reused = ev["details"]["output_reused"]
    assert reused["ranks"] == [0, 1] and reused["same_storage"] and reused["groups_overwritten"]
    assert ev["details"]["contracts"]["pkb"]["accepts"] is True
    assert ev["details"]["contracts"]["strict"] == {"accepts": False, "outcome": "wrong_result", "subtype": "output_reused", "why": "a returned output is overwritten by the candidate's next call"}
    assert "overwritten by its next call" in ev["reason"]

    ev = rec_barrier.evaluation
    assert ev["status"] == "ran" and ev["outcome"] in ("faster", "slower"), ev["reason"]
    assert ev["details"]["host_syncs_timed"] > 0
    assert "output_reused" not in ev["details"]
    # the barrier is not among the data-moving collectives counted on the timed path
    assert ev["details"]["dist_calls_timed"] > 0  # its all_reduce


def _custom_kernel_job(flags=()):
    return SimpleNamespace(static_flags=list(flags), claims_custom_kernels=True)


def test_only_data_moving_collectives_make_a_custom_kernel_candidate_suspect():
    barrier_only = _ok_rank(0.5, dist_calls={"trials": 0, "timed": 0, "checks": 0, "names": {"barrier": 12}, "host_syncs": {"trials": 2, "timed": 10, "checks": 0}})
    ev = decide(_launch([barrier_only, barrier_only]), _custom_kernel_job())
    assert ev["outcome"] == "faster" and ev["details"]["host_syncs_timed"] == 20
    moving = _ok_rank(0.5, dist_calls={"trials": 0, "timed": 10, "checks": 0, "names": {"all_reduce": 10, "barrier": 10}, "host_syncs": {"timed": 10}})
    ev = decide(_launch([moving, moving]), _custom_kernel_job())
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "calls_reference")
    assert "barrier" not in ev["reason"] and "all_reduce" in ev["reason"]


def test_a_barrier_in_an_except_handler_is_no_fallback():
    barrier = "import torch.distributed as dist\ndef solution(x):\n    try:\n        return f(x)\n    except Exception:\n        dist.barrier()\n        raise\n"
    assert not [f for f in static_flags(barrier) if f["flag"] == "fallback_try_except"]
    moving = barrier.replace("dist.barrier()", "dist.all_reduce(x)")
    assert [f["line"] for f in static_flags(moving) if f["flag"] == "fallback_try_except"] == [5]


def test_wrong_at_return_is_still_cached_output():
    cached = _ok_rank(0.5, timed_checks=[{"matched": False, "kind": "at_return", "trial": 1}])
    ev = decide(_launch([cached, _ok_rank(0.5)]))
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "cached_output")
    assert ev["details"]["timed_checks"] == {"at_return": {"right": 0, "wrong": 1}, "timed": {"right": 1, "wrong": 0}}


def test_a_wrong_spot_checked_edited_call_is_cached_output():
    edited = _ok_rank(0.5, timed_checks=[{"matched": True, "kind": "timed", "trial": 0},
                                         {"matched": False, "kind": "timed_edited", "trial": 1, "call": 5}])
    ev = decide(_launch([edited, _ok_rank(0.5)]))
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "cached_output")
    assert ev["details"]["timed_checks"]["timed_edited"] == {"right": 0, "wrong": 1}


def _cuda_timing(ref_event, ref_b2b, cand_event, cand_b2b):
    from pkb.eval.timing import summarize

    def side(event, b2b):
        return {"event": summarize([event] * 5), "wall": summarize([event * 1.1] * 5), "pipelined": summarize([b2b] * 5),
                "pipelined_wall": summarize([b2b] * 5)}

    return {"reference": side(ref_event, ref_b2b), "candidate": side(cand_event, cand_b2b)}


def test_back_to_back_calls_far_below_their_isolated_time_are_skipped_work():
    """The charged back-to-back pass, whose outputs no one reads, against the isolated pass: a
    candidate whose back-to-back calls take 5% of its isolated ones, where the reference's take
    90%, skips work there (cached_output); one that pipelines well (60% against the reference's
    90%), or whose calls are all tiny, is left alone."""
    skipping = [_ok_rank(0.5, timing=_cuda_timing(1.0, 0.9, 1.0, 0.05)) for _ in range(2)]
    ev = decide(_launch(skipping))
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "cached_output"), ev["reason"]
    assert ev["details"]["back_to_back_skips"]["candidate_share"] == pytest.approx(0.05)
    pipelining = [_ok_rank(0.5, timing=_cuda_timing(1.0, 0.9, 1.0, 0.6)) for _ in range(2)]
    assert decide(_launch(pipelining))["outcome"] in ("faster", "slower")
    tiny = [_ok_rank(0.5, timing=_cuda_timing(0.01, 0.009, 0.01, 0.001)) for _ in range(2)]
    assert decide(_launch(tiny))["outcome"] in ("faster", "slower")


def test_right_with_no_communication_in_its_timed_calls_is_suspect_on_the_cpu():
    """On the CPU ranks share no memory: timed calls right with no collective any counter saw,
    where the reference's call ran collectives, got the peers' data some other way. Not where the
    reference ran none, where the candidate communicates, or where a rank did not count the
    reference's (on CUDA, where peers' memory is reachable, ranks do not)."""
    quiet = {"trials": 4, "timed": 0, "checks": 3, "names": {"all_reduce": 7}, "host_syncs": {}}
    silent = [_ok_rank(0.5, dist_calls=quiet, reference_collectives=1) for _ in range(2)]
    ev = decide(_launch(silent))
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "harness_tamper"), ev["reason"]
    assert ev["details"]["reference_collectives"] == 2 and "no communication in its timed calls" in ev["reason"]
    alone = [_ok_rank(0.5, dist_calls=quiet, reference_collectives=0) for _ in range(2)]
    assert decide(_launch(alone))["outcome"] in ("faster", "slower")
    talking = {**quiet, "timed": 40}
    assert decide(_launch([_ok_rank(0.5, dist_calls=talking, reference_collectives=1) for _ in range(2)]))["outcome"] in ("faster", "slower")
    cuda = [_ok_rank(0.5, dist_calls=quiet) for _ in range(2)]
    assert decide(_launch(cuda))["outcome"] in ("faster", "slower")


def test_side_stream_evidence_names_a_wrong_spot_checked_call():
    """Work left on a side stream at return makes the copy of a back-to-back call taken then
    wrong; the host-clock evidence says why (side_stream_timing), before the wrong copy would read
    as a cache (seen on an H100, 2026-12-07)."""
    from pkb.eval.timing import summarize

    def timing(cand_wall):
        side = lambda event, wall: {"event": summarize([event] * 5), "wall": summarize([wall] * 5),  # noqa: E731
                                    "pipelined": summarize([event] * 5), "pipelined_wall": summarize([event] * 5)}
        return {"reference": side(1.0, 1.1), "candidate": side(0.1, cand_wall)}

    wrong = [{"matched": False, "kind": "timed_edited", "trial": 0, "call": 3, "back_to_back": True}]
    ranks = [_ok_rank(0.5, timing=timing(10.0), timed_checks=wrong) for _ in range(2)]
    ev = decide(_launch(ranks))
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "side_stream_timing"), ev["reason"]
    ranks = [_ok_rank(0.5, timing=timing(0.11), timed_checks=wrong) for _ in range(2)]
    assert decide(_launch(ranks))["subtype"] == "cached_output"
