"""The harness's own judgement (pkb.eval.judge, pkb.eval.verdict_channel): the reference's outputs
streamed through the FIFO before the candidate loads, the candidate's saved outputs, the recheck
in the harness's process, and the outcome it leads to. The last tests run the hostile candidates
that tamper with the rank's comparison through the real launcher at world size 1 (the hostile
batch runs them at 2)."""

from __future__ import annotations

import hashlib
import io
import tempfile
import time
from pathlib import Path

import pytest
import torch

from pkb.eval import judge
from pkb.eval.launcher import LaunchResult, RankReport
from pkb.eval.outcome import decide
from pkb.eval.verdict_channel import RankChannel, channel_path, output_path, save_output

ATOL, RTOL = 1e-5, 1e-5


def _stream(tmp: Path, references: dict[int, object], cap: int = 1 << 20, trials: int | None = None) -> judge.ChannelReader:
    reader = judge.open_channels(tmp, 1)[0]
    channel = RankChannel(str(tmp), 0)
    assert channel.open, channel.why_not
    channel.send({"kind": "meta", "rank": 0, "trials": len(references) if trials is None else trials, "atol": ATOL, "rtol": RTOL})
    for t, out in references.items():
        channel.send_reference(t, out, cap)
    channel.close()
    judge.finish_channels([reader])
    return reader


def _trial(t: int, matched: bool) -> dict:
    return {"trial": t, "kind": "trial", "matched": matched, "output_saved": "saved"}


def test_the_reference_arrives_whole_hashed_and_its_fifo_name_is_gone(tmp_path):
    ref = torch.arange(300_000, dtype=torch.float32)  # past one pipe buffer: the reader drains while the rank writes
    reader = _stream(tmp_path, {0: ref}, cap=8 << 20)
    assert not channel_path(tmp_path, 0).exists()  # nothing left for a candidate to open
    assert reader.done and not reader.error
    got = reader.references[0]
    buf = io.BytesIO()
    torch.save(ref, buf)
    assert got["sha256"] == hashlib.sha256(buf.getvalue()).hexdigest()
    got["file"].seek(0)
    assert torch.equal(torch.load(got["file"], weights_only=True), ref)
    reader.close()


def test_without_a_harness_reading_the_rank_has_no_channel_and_says_why(tmp_path):
    channel = RankChannel(str(tmp_path), 0)
    assert not channel.open and "no channel" in channel.why_not
    channel.send({"kind": "meta"})  # harmless
    channel.close()


def test_recheck_catches_a_wrong_answer_the_rank_called_correct(tmp_path):
    refs = {0: torch.ones(8), 1: torch.full((8,), 2.0)}
    reader = _stream(tmp_path, refs)
    save_output(str(tmp_path), 0, 0, torch.ones(8), 1 << 20)  # right
    save_output(str(tmp_path), 0, 1, torch.zeros(8), 1 << 20)  # wrong, reported matched
    check = judge.recheck([reader], tmp_path, [{"finished": True, "trials": [_trial(0, True), _trial(1, True)]}])
    reader.close()
    assert check["rechecked"] == 2 and check["judge"] == "harness"
    assert [(e["rank"], e["trial"]) for e in check["tampered"]] == [(0, 1)]
    assert check["tampered"][0]["harness"]["mismatches"] == 8


def test_an_output_is_saved_straight_to_its_file_in_the_channel_format(tmp_path, monkeypatch):
    from pkb.eval import verdict_channel

    out = (torch.arange(6.0).reshape(2, 3), {"n": 3, "t": torch.ones(2, dtype=torch.bfloat16)})
    expected = verdict_channel.serialize(out)

    def in_memory(*_a, **_k):
        raise AssertionError("the output was built in memory")

    monkeypatch.setattr(verdict_channel, "serialize", in_memory)  # the whole torch.save as bytes
    assert save_output(str(tmp_path), 0, 0, out, 1 << 20) == "saved"
    path = output_path(tmp_path, 0, 0)
    assert path.read_bytes() == expected
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial file left beside it
    assert save_output(str(tmp_path), 0, 1, object(), 1 << 20) == "output type object"
    assert not output_path(tmp_path, 0, 1).exists()


def test_recheck_agrees_with_an_honest_rank(tmp_path):
    reader = _stream(tmp_path, {0: (torch.ones(4), torch.zeros(2))})
    save_output(str(tmp_path), 0, 0, (torch.ones(4), torch.zeros(2)), 1 << 20)
    check = judge.recheck([reader], tmp_path, [{"finished": True, "trials": [_trial(0, True)]}])
    reader.close()
    assert check["tampered"] == [] and check["disagreements"] == [] and check["judge"] == "harness"
    assert set(check["reference_digests"]["0"]) == {"0"}


def test_an_output_linked_to_the_harnesss_own_reference_copy_is_tampering(tmp_path):
    import os

    reader = _stream(tmp_path, {0: torch.ones(8), 1: torch.ones(8)})
    fd = reader.references[0]["file"].fileno()
    # the candidate's file for trial 0 is a link to /proc/self/fd/N: read by the harness, it is
    # the harness's reference copy; trial 1's leads out of the job folder
    for t, target in ((0, f"/proc/self/fd/{fd}"), (1, str(tmp_path.parent / "elsewhere.pt"))):
        path = output_path(tmp_path, 0, t)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)
    torch.save(torch.ones(8), tmp_path.parent / "elsewhere.pt")
    check = judge.recheck([reader], tmp_path, [{"finished": True, "trials": [_trial(0, True), _trial(1, True)]}])
    reader.close()
    assert [e["trial"] for e in check["tampered"]] == [0, 1], check
    assert all("outside the job folder" in e["evidence"] for e in check["tampered"])


def test_an_output_judged_correct_and_then_removed_is_tampering(tmp_path):
    reader = _stream(tmp_path, {0: torch.ones(8)})
    check = judge.recheck([reader], tmp_path, [{"finished": True, "trials": [{**_trial(0, True), "output_saved": "too large"}]}])
    reader.close()
    assert len(check["tampered"]) == 1 and "absent" in check["tampered"][0]["evidence"]


def test_too_large_outputs_are_named_not_rechecked(tmp_path):
    reader = _stream(tmp_path, {0: torch.ones(1024)}, cap=1024)
    save_output(str(tmp_path), 0, 0, torch.ones(1024), 1 << 20)
    check = judge.recheck([reader], tmp_path, [{"finished": True, "trials": [_trial(0, True)]}])
    reader.close()
    assert check["judge"] == "rank" and check["rechecked"] == 0
    assert check["not_rechecked"] == [{"rank": 0, "trial": 0, "why": "reference too large"}]
    assert save_output(str(tmp_path), 0, 1, torch.ones(1024), 1024) == "too large"


def test_a_finished_rank_reporting_fewer_trials_than_the_reference_ran_is_tampering(tmp_path):
    reader = _stream(tmp_path, {0: torch.ones(2), 1: torch.ones(2)})
    check = judge.recheck([reader], tmp_path, [{"finished": True, "trials": []}])
    reader.close()
    assert check["tampered"] and "0 trial(s) reported of 2" in check["tampered"][0]["evidence"]


def test_a_rank_that_calls_a_right_answer_wrong_is_a_disagreement_not_tampering(tmp_path):
    reader = _stream(tmp_path, {0: torch.ones(8)})
    save_output(str(tmp_path), 0, 0, torch.ones(8), 1 << 20)
    check = judge.recheck([reader], tmp_path, [{"finished": True, "trials": [_trial(0, False)]}])
    reader.close()
    assert check["tampered"] == [] and len(check["disagreements"]) == 1


def test_a_candidate_file_that_is_not_plain_data_is_never_unpickled(tmp_path):
    import pickle

    class Boom:
        def __reduce__(self):
            return (Path.touch, (tmp_path / "pwned",))

    reader = _stream(tmp_path, {0: torch.ones(2)})
    path = output_path(tmp_path, 0, 0)
    path.parent.mkdir(parents=True)
    path.write_bytes(pickle.dumps(Boom()))
    check = judge.recheck([reader], tmp_path, [{"finished": True, "trials": [_trial(0, True)]}])
    reader.close()
    assert not (tmp_path / "pwned").exists()
    assert check["tampered"] and "cannot be read" in check["tampered"][0]["evidence"]


def test_a_rank_that_sent_nothing_is_not_rechecked_and_says_so(tmp_path):
    reader = judge.open_channels(tmp_path, 1)[0]
    t0 = time.monotonic()
    judge.finish_channels([reader])
    assert time.monotonic() - t0 < 2.0  # an empty FIFO ends its reader at once
    check = judge.recheck([reader], tmp_path, [None])
    assert check["judge"] == "rank" and "sent nothing" in check["not_rechecked"][0]["why"]


def _finished(trials):
    return {"finished": True, "world_size": 1, "trials": trials, "timing": None}


def test_decide_makes_a_tampered_verdict_suspect_and_says_the_harness_judged():
    launch = LaunchResult(0, False, 1.0, [RankReport(0, "done", _finished([{**_trial(0, True), "values_close": True}]))],
                          judge_check={"judge": "harness", "rechecked": 1, "not_rechecked": [], "disagreements": [],
                                       "tampered": [{"rank": 0, "trial": 0, "rank_said": True,
                                                     "harness": {"matched": False, "mismatches": 8, "numel": 8, "max_abs_err": 1.0}}]})
    ev = decide(launch)
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "harness_tamper")
    assert ev["details"]["judge"] == "harness" and "harness's own comparison" in ev["reason"]


def test_decide_without_tampering_keeps_the_outcome_and_records_the_judge():
    trials = [{**_trial(0, True), "values_close": True}]
    check = {"judge": "rank", "rechecked": 0, "not_rechecked": [{"rank": 0, "trial": 0, "why": "reference too large"}],
             "disagreements": [], "tampered": []}
    ev = decide(LaunchResult(0, False, 1.0, [RankReport(0, "done", _finished(trials))], judge_check=check))
    assert ev["correct"] and ev["details"]["judge"] == "rank"
    assert ev["details"]["judge_check"]["not_rechecked"][0]["why"] == "reference too large"


HOSTILE = Path(__file__).resolve().parents[1] / "corpus" / "hostile"


@pytest.mark.parametrize("world_size", [1])
def test_comparison_tampering_candidates_are_suspect_through_the_launcher(world_size):
    from pkb.corpus import read_candidate
    from pkb.eval import EvalOptions, evaluate

    tmp = Path(tempfile.mkdtemp(prefix="pkb-judge-"))
    names = ["1_allreduce_swap_compare_code.py", "1_allreduce_patch_rank_compare.py"]
    records = [read_candidate(HOSTILE / n) for n in names]
    options = EvalOptions(world_size=world_size, trials=2, dtype="float32", backend="gloo", timeout_s=90.0, warmup=1, iters=3,
                          groups=2, store_path=str(tmp / "s.sqlite"), work_dir=str(tmp / "work"), jobs=1,
                          call_timeout_s=10.0, import_timeout_s=10.0, compile_timeout_s=30.0)
    evaluate(records, options)
    for rec in records:
        ev = rec.evaluation
        assert (ev["outcome"], ev["subtype"]) == ("suspect", "harness_tamper"), (rec.path, ev["reason"])
        assert ev["details"]["judge"] == "harness" and ev["details"]["judge_check"]["tampered"]


def test_a_filesystem_without_fifos_leaves_the_ranks_to_judge_and_the_record_says_why(tmp_path, monkeypatch):
    def refuse(*_a, **_k):
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(judge.os, "mkfifo", refuse)
    with pytest.raises(OSError):
        judge.open_channels(tmp_path, 2)
    check = judge.without_channels("OSError: Operation not supported")
    ev = decide(LaunchResult(0, False, 1.0, [RankReport(0, "done", _finished([{**_trial(0, True), "values_close": True}]))], judge_check=check))
    assert ev["correct"] and ev["details"]["judge"] == "rank"
    assert "no channel" in ev["details"]["judge_check"]["not_rechecked"][0]["why"]


def test_the_streaming_comparison_gives_the_whole_comparisons_verdict_and_figures():
    from pkb.eval.compare import compare_outputs

    torch.manual_seed(0)
    e = torch.randn(10_000)
    g = e.clone()
    g[[3, 4_567, 9_999]] += 1.0
    g[77] = float("nan")
    whole = compare_outputs((e, 2.0), (g, 2.0), ATOL, RTOL)
    sliced = judge.compare_streaming((e, 2.0), (g, 2.0), ATOL, RTOL, chunk=1_000)
    assert sliced["matched"] is False and whole["matched"] is False
    for key in ("numel", "mismatches", "max_abs_err", "max_violation"):
        assert sliced[key] == whole[key], key
    assert judge.compare_streaming(e, e.clone(), ATOL, RTOL, chunk=1_000)["matched"] is True
    assert judge.compare_streaming(e, e.double(), ATOL, RTOL, chunk=1_000)["dtype_ok"] is False
    assert judge.compare_streaming(e, e[:10], ATOL, RTOL, chunk=1_000)["shape_ok"] is False


def test_an_honest_rank_at_the_edge_of_the_tolerance_is_a_disagreement_a_forged_one_is_not(tmp_path):
    reader = _stream(tmp_path, {0: torch.ones(8)})
    save_output(str(tmp_path), 0, 0, torch.ones(8) + 3e-5, 1 << 20)  # 1.5 tolerances off
    honest = {**_trial(0, True), "numel": 8, "max_violation": 0.9}
    forged = {**_trial(0, True), "numel": 0, "max_violation": 0.0}
    check = judge.recheck([reader], tmp_path, [{"finished": True, "trials": [honest]}])
    assert check["tampered"] == [] and check["disagreements"][0]["near_tolerance"]
    check = judge.recheck([reader], tmp_path, [{"finished": True, "trials": [forged]}])
    reader.close()
    assert len(check["tampered"]) == 1


def test_the_references_own_timing_is_taken_only_before_the_candidate_loads(tmp_path):
    reader = judge.open_channels(tmp_path, 1)[0]
    channel = RankChannel(str(tmp_path), 0)
    channel.send({"kind": "meta", "rank": 0, "trials": 1, "atol": ATOL, "rtol": RTOL})
    channel.send_reference(0, torch.ones(4), 1 << 20)
    alone = {"kind": "timing_round", "side": "reference_alone", "round": 0, "measured": {"calls": 1, "wall_ns": [5]}}
    channel.send(alone)  # the rank, before the candidate loads
    channel.end_references()
    channel.send(alone)  # after the load: only the candidate's process could send it now
    channel.send({"kind": "timing_round", "side": "candidate", "round": 0, "measured": {"calls": 1, "wall_ns": [5]}})
    channel.close()
    judge.finish_channels([reader])
    assert [m["side"] for m in reader.timing_rounds] == ["reference_alone", "candidate"]
    assert reader.late == [judge.LATE_REFERENCE_ALONE]
    reader.close()


def test_a_late_reference_timing_is_a_timing_problem_and_the_gate_ignores_the_early_one():
    import types

    from pkb.eval.launcher import judge_rank_timing

    reader = types.SimpleNamespace(rank=0, late=[judge.LATE_REFERENCE_ALONE], timing_rounds=[], timing_marks=[], meta=None)
    check = judge_rank_timing([reader], [RankReport(0, "done", {"finished": True})], iters=3)
    assert check["problems"] == [f"rank 0: {judge.LATE_REFERENCE_ALONE}"]

    class Gate:
        seen = None

        def check(self, by_rank):
            Gate.seen = by_rank
            return []

    early = {"side": "reference_alone", "arrived_ns": 1}
    reader = types.SimpleNamespace(rank=0, late=[], timing_rounds=[early], timing_marks=[], meta=None)
    judge_rank_timing([reader], [RankReport(0, "done", {"finished": True})], iters=3, gate=Gate())
    assert Gate.seen == {0: []}  # sent before the candidate loaded, by design before the gate opened


def test_timings_only_in_the_result_file_beside_an_open_channel_are_a_problem_whatever_came_before_the_load():
    import types

    from pkb.eval.launcher import judge_rank_timing

    # the reference's own timing arrived through the channel before the load; the interleaved
    # rounds then came only in the result file (the candidate had set the rank's channel aside)
    alone = {"side": "reference_alone", "round": 0, "arrived_ns": 1}
    reader = types.SimpleNamespace(rank=0, late=[], timing_rounds=[alone], timing_marks=[], meta={"trials": 1})
    raw = {"rounds": [{"side": "candidate", "round": 0, "measured": {"calls": 3, "wall_ns": [1, 1, 1]}}]}
    check = judge_rank_timing([reader], [RankReport(0, "done", {"finished": True, "timing_raw": raw})], iters=3)
    assert check["problems"] == ["rank 0: its channel was open before the candidate loaded, but its timings came only in its result file"]


def test_an_expanded_output_or_a_fifo_in_the_job_folder_neither_blows_up_nor_blocks_the_harness(tmp_path):
    import os

    reader = _stream(tmp_path, {0: torch.ones(8), 1: torch.ones(8)})
    path = output_path(tmp_path, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(torch.ones(1).expand(1 << 30), path)  # a few bytes on disk, 4 GiB made dense
    os.mkfifo(output_path(tmp_path, 0, 1))  # opened plainly, it waits for a writer forever
    t0 = time.monotonic()
    check = judge.recheck([reader], tmp_path, [{"finished": True, "trials": [_trial(0, True), _trial(1, True)]}])
    reader.close()
    assert time.monotonic() - t0 < 30
    assert [e["trial"] for e in check["tampered"]] == [0, 1], check
    assert "expanded" in check["tampered"][0]["evidence"]


def test_a_wrong_output_the_rank_never_reported_is_the_candidates_wrong_answer(tmp_path):
    from pkb.eval.outcome import decide

    reader = _stream(tmp_path, {0: torch.ones(8), 1: torch.ones(8)})
    save_output(str(tmp_path), 0, 0, torch.full((8,), 3.0), 1 << 20)  # wrong, never reported
    save_output(str(tmp_path), 0, 1, torch.ones(8), 1 << 20)  # right, never reported
    # the rank's harness code failed after the load (the candidate broke its trial list)
    failed = {"error": {"outcome": "", "subtype": "", "source": "harness", "phase": "trial 0 candidate", "type": "KeyError", "message": "'leaves'"}}
    check = judge.recheck([reader], tmp_path, [failed])
    reader.close()
    assert [e["trial"] for e in check["unreported_wrong"]] == [0]
    ev = decide(LaunchResult(1, False, 1.0, [RankReport(0, "trial 0 candidate", failed)], judge_check=check))
    assert (ev["status"], ev["outcome"]) == ("ran", "wrong_result"), ev["reason"]
    assert "no verdict from the rank" in ev["reason"]


def test_the_harness_rechecks_each_groups_last_timed_output_against_a_reference_sent_before_the_load(tmp_path):
    from pkb.eval.outcome import decide
    from pkb.eval.rank_timing import GROUP_TRIAL_BASE

    base = GROUP_TRIAL_BASE
    reader = _stream(tmp_path, {0: torch.ones(8), base: torch.full((8,), 2.0), base + 1: torch.full((8,), 4.0)}, trials=1)
    save_output(str(tmp_path), 0, 0, torch.ones(8), 1 << 20)
    save_output(str(tmp_path), 0, base, torch.zeros(8), 1 << 20)  # the rank said its timed check matched
    result = {"finished": True, "trials": [_trial(0, True)], "timed_checks": [{"kind": "timed", "trial": 0, "matched": True}]}
    check = judge.recheck([reader], tmp_path, [result])
    assert [(e["rank"], e["trial"]) for e in check["tampered"]] == [(0, base)]
    # a shared buffer the rank does not check itself: saved for the last group, wrong, unreported
    save_output(str(tmp_path), 0, base, torch.full((8,), 2.0), 1 << 20)
    save_output(str(tmp_path), 0, base + 1, torch.zeros(8), 1 << 20)
    result = {"finished": True, "trials": [_trial(0, True)], "timed_checks": [{"kind": "timed", "trial": 0, "matched": True}]}
    check = judge.recheck([reader], tmp_path, [result])
    reader.close()
    assert check["tampered"] == [] and [e["trial"] for e in check["unreported_wrong"]] == [base + 1]
    ev = decide(LaunchResult(0, False, 1.0, [RankReport(0, "done", result)], judge_check=check))
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "cached_output"), ev["reason"]
