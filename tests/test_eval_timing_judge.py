"""The timing judged in the harness: the rank sends raw measurements (per call the CUDA-event ms and
the host ns around it, the loops' edges), the harness computes the figures and checks them
against its own clock and the job's call count (pkb.eval.timing_judge). CPU, gloo."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import torch

from pkb.corpus import read_candidate
from pkb.eval import EvalOptions, evaluate
from pkb.eval.timing import time_interleaved
from pkb.eval.timing_judge import judge_timing

REPO = Path(__file__).resolve().parents[1]
HOSTILE = REPO / "corpus" / "hostile"

HONEST = '''import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    return out
'''

# The record's keys for an honest timed candidate on CPU, as they were when the rank computed
# its own figures (read from an evaluation made before the figures moved to the harness).
RECORD_KEYS = {"backend", "config_key", "correct", "details", "device", "dtype", "job_dir", "launch_wall_s", "launcher_tail",
               "outcome", "problem_id", "problem_match", "problem_stem", "ranks", "reason", "speedup", "status", "subtype",
               "timing_mode", "trials", "wall_s", "world_size"}
DETAIL_KEYS = {"aliases_input", "candidate_ms", "input_key", "dist_calls_during_candidate", "dist_calls_timed", "judge", "judge_check",
               "mutates_inputs", "pkb_match", "rank_times_ms", "reference_ms", "sandbox", "speed_floor", "speed_verdict",
               "speedup_event", "speedup_interval", "timed_checks"}
SIDE_KEYS = {"event", "groups", "iters", "pipelined", "pipelined_wall", "round_medians_ms", "rounds", "wall", "warmup"}


def _timed_in_process(iters: int = 7, rounds: int = 3):
    """time_interleaved on CPU with the rank's two hooks: the messages it would send, stamped
    as the harness stamps them."""
    rounds_sent, marks = [], []
    fns = {"reference": lambda x: x + 1, "candidate": lambda x: x * 2}
    samples = []

    def sample(side, r, loop, values):
        samples.append(json.loads(json.dumps({"kind": "timing_sample", "side": side, "round": r, "pass": loop, **values})))

    def on_round(side, r, measured):
        rounds_sent.append({"kind": "timing_round", "side": side, "round": r, "iters": iters, "warmup": 1,
                            "rounds": rounds, "groups": 2, "measured": measured, "arrived_ns": time.monotonic_ns()})

    def mark(side, r, loop, at):
        marks.append({"kind": "timing_mark", "side": side, "round": r, "pass": loop, "at": at, "arrived_ns": time.monotonic_ns()})

    out = time_interleaved(fns, [(torch.ones(64),), (torch.zeros(64),)], warmup=1, iters=iters, rounds=rounds,
                           device=torch.device("cpu"), on_round=on_round, mark=mark, sample=sample)
    _timed_in_process.samples = samples  # type: ignore[attr-defined]  (the tests below that need them)
    return out, rounds_sent, marks


def test_the_harness_figures_are_the_in_process_figures_of_the_same_measurements():
    out, rounds_sent, marks = _timed_in_process()
    stats, check = judge_timing(rounds_sent, marks, 7, "channel")
    assert check["problems"] == [], check
    for side in ("reference", "candidate"):
        assert stats[side] == out[side][0]  # every clock, every round median, exactly
        assert check["sides"][side]["calls"] == 7 and check["sides"][side]["observed_ms"] >= 0


def test_a_loop_the_rank_says_was_faster_than_the_harness_clock_saw_is_named():
    _, rounds_sent, marks = _timed_in_process()
    for m in marks:  # the harness saw each candidate loop take a second
        if m["side"] == "candidate" and m["at"] == "end":
            m["arrived_ns"] += 1_000_000_000
    _, check = judge_timing(rounds_sent, marks, 7, "channel")
    assert check["sides"]["candidate"].get("understated") and not check["sides"]["reference"].get("understated")
    assert any("the harness's clock" in p for p in check["problems"]), check


def test_a_dropped_sample_or_a_missing_round_is_counted():
    _, rounds_sent, marks = _timed_in_process()
    slow = next(m for m in rounds_sent if m["side"] == "candidate")
    slow["measured"]["wall_ns"].pop()  # the slowest call gone, say
    _, check = judge_timing(rounds_sent, marks, 7, "channel")
    assert any("candidate round" in p and "samples" in p for p in check["problems"]), check
    _, rounds_sent, marks = _timed_in_process()
    fewer = [m for m in rounds_sent if not (m["side"] == "candidate" and m["round"] == 1)]
    _, check = judge_timing(fewer, marks, 7, "channel")
    assert any("the job asked for 7" in p for p in check["problems"]), check


def test_measurements_edited_after_they_were_taken_are_named_and_not_used():
    """Each measurement leaves the rank as it is taken; a round message that says otherwise (a
    candidate shrank the rank's list of host times in its process) is named, and the figures are
    the samples'."""
    out, rounds_sent, marks = _timed_in_process()
    samples = _timed_in_process.samples  # type: ignore[attr-defined]
    stats, check = judge_timing(rounds_sent, marks, 7, "channel", samples)
    assert check["problems"] == [] and all(stats[side] == out[side][0] for side in ("reference", "candidate")), check
    edited = copy.deepcopy(rounds_sent)
    for m in edited:
        if m["side"] == "candidate":
            m["measured"]["wall_ns"] = [max(1, v // 10) for v in m["measured"]["wall_ns"]]
    stats, check = judge_timing(edited, marks, 7, "channel", samples)
    assert sum("differ from those it sent as each call ended" in p for p in check["problems"]) == 3, check
    assert stats["candidate"] == out["candidate"][0]  # the samples' figures, not the edited ones
    missing = [x for x in samples if not (x["side"] == "candidate" and x["round"] == 2 and x["call"] == 0)]
    _, check = judge_timing(rounds_sent, marks, 7, "channel", missing)
    assert any("candidate round 2" in p and "reached the harness as they were taken" in p for p in check["problems"]), check


def _options(tmp: Path) -> EvalOptions:
    return EvalOptions(world_size=2, trials=2, dtype="float32", backend="gloo", timeout_s=120.0, warmup=1, iters=6, groups=2,
                       store_path=str(tmp / "eval.sqlite"), work_dir=str(tmp / "work"), jobs=1, call_timeout_s=30.0,
                       import_timeout_s=30.0, screen=False)


def test_an_honest_candidate_keeps_its_record_and_the_harness_computed_its_figures(tmp_path):
    from pkb.store import Store

    cand = tmp_path / "1_allreduce_honest.py"
    cand.write_text(HONEST)
    rec = read_candidate(cand)
    options = _options(tmp_path)
    evaluate([rec], options)
    ev = rec.evaluation
    assert ev["status"] == "ran" and ev["outcome"] in ("faster", "slower"), ev["reason"]
    # reference_alone: said where the reference timed before the candidate loaded was the faster
    assert set(ev) == RECORD_KEYS and set(ev["details"]) - {"reference_alone"} == DETAIL_KEYS
    for rank in ev["ranks"]:
        assert set(rank["timing"]) == {"reference", "candidate", "reference_alone"}
        for side in ("reference", "candidate", "reference_alone"):
            stats = rank["timing"][side]
            assert set(stats) == SIDE_KEYS and stats["wall"]["n"] == 6 and stats["rounds"] == 5 and stats["event"] is None
    timing = ev["details"]["judge_check"]["timing"]
    assert timing["problems"] == [] and {c["source"] for c in timing["ranks"].values()} == {"channel"}
    for check in timing["ranks"].values():
        cand_side = check["sides"]["candidate"]
        # the harness stamps a message when its reader wakes: its figure is near the rank's, either side
        assert cand_side["calls"] == 6 and cand_side["claimed_ms"] > 0 and cand_side["observed_ms"] > 0 and not cand_side.get("understated")
    with Store(options.store_path) as store:
        rows = store.timings(rec.sha256)
    assert len(rows) == 4 and set(rows["clock"]) == {"wall"}  # 2 ranks x 2 sides, the host clock on CPU


def test_a_candidate_that_rewinds_the_rank_timer_is_caught_by_the_harness_clock(tmp_path):
    rec = read_candidate(HOSTILE / "1_allreduce_edits_timing.py")
    evaluate([rec], _options(tmp_path))
    ev = rec.evaluation
    assert (ev["outcome"], ev["subtype"]) == ("suspect", "harness_tamper"), (ev["outcome"], ev["reason"])
    assert ev["reason"].startswith("tampering with the timing:") and "the harness's clock" in ev["reason"], ev["reason"]
    sides = [c["sides"]["candidate"] for c in ev["details"]["judge_check"]["timing"]["ranks"].values()]
    assert all(s["observed_ms"] > 1000 and s["claimed_ms"] < 100 for s in sides), sides  # 6 calls of 0.2 s, reported as ~0


class _HostEvent:
    """torch.cuda.Event on the host clock (no GPU here): record() notes the time."""

    def __init__(self, enable_timing: bool = False):
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def elapsed_time(self, other: "_HostEvent") -> float:
        return (other.t - self.t) * 1e3


def test_on_cuda_both_loops_are_measured_and_their_edges_marked(monkeypatch):
    """The CUDA protocol (events, a back-to-back loop and an isolated one) with host-clock events:
    both loops' edges reach the harness in order, and its figures are the in-process ones."""
    monkeypatch.setattr(torch.cuda, "Event", _HostEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    rounds_sent, marks = [], []

    def fn(x):
        time.sleep(0.002)
        return x

    out = time_interleaved({"reference": fn, "candidate": fn}, [(torch.ones(4),)], warmup=1, iters=4, rounds=2, device=torch.device("cuda"),
                           on_round=lambda side, r, m: rounds_sent.append({"side": side, "round": r, "iters": 4, "warmup": 1, "rounds": 2, "groups": 1,
                                                                           "measured": m, "arrived_ns": time.monotonic_ns()}),
                           mark=lambda side, r, loop, at: marks.append({"side": side, "round": r, "pass": loop, "at": at, "arrived_ns": time.monotonic_ns()}))
    first = [(m["pass"], m["at"]) for m in marks if m["side"] == "candidate" and m["round"] == 0]
    assert first == [("pipelined", "start"), ("pipelined", "end"), ("isolated", "start"), ("isolated", "end")]
    stats, check = judge_timing(rounds_sent, marks, 4, "channel")
    assert check["problems"] == [], check
    assert stats["candidate"] == out["candidate"][0] and stats["candidate"]["pipelined_wall"]["n"] == 2
    assert check["sides"]["candidate"]["claimed_ms"] >= 2 * 4 * 2  # both loops, 4 calls of 2 ms each
