"""A speed verdict only where the timing spread allows one: the speedup interval, ties, CPU labels,
and every place that shows or ranks a speedup (records of our own; no launches)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from test_eval_support import REFERENCE, quick_options, run_eval, write_candidate

from pkb.eval.launcher import LaunchResult, RankReport
from pkb.metrics import fast_p, speed_text, speed_verdict, summarize
from pkb.eval.outcome import decide, speedup_interval
from pkb.eval.timing import rank_time_range_ms, summarize as timing_summary, time_interleaved
from pkb.record import CandidateRecord
from reports.console import eval_line, eval_table
from reports.corpus_report import candidate_rows, fastest_per_problem


def _side(round_medians):
    """CPU stats (wall clock only) whose rounds had these medians, 3 calls each."""
    samples = [m for m in round_medians for _ in range(3)]
    return {"event": None, "wall": timing_summary(samples), "round_medians_ms": {"wall": list(round_medians)}, "rounds": len(round_medians)}


def _rank(ref_rounds, cand_rounds):
    trial = {"matched": True, "shape_ok": True, "dtype_ok": True, "structure_ok": True, "nan_inf": 0, "sentinel": 0,
             "max_violation": 0.0, "values_close": True, "trial": 0, "mismatches": 0, "numel": 4, "max_abs_err": 0.0}
    return {"finished": True, "trials": [trial], "timing": {"reference": _side(ref_rounds), "candidate": _side(cand_rounds)},
            "timed_checks": [dict(trial, kind="timed")], "refresh_check": dict(trial, kind="refresh")}


def _decide(*ranks):
    return decide(LaunchResult(0, False, 1.0, [RankReport(r, "done", res) for r, res in enumerate(ranks)]))


def test_range_is_the_per_round_medians_else_p10_p90():
    # two clocks: per round the larger is charged (as rank_time_ms does), then min and max over rounds
    stats = {"event": timing_summary([1.0]), "wall": timing_summary([2.0]),
             "round_medians_ms": {"event": [1.0, 3.0, 1.5], "wall": [1.2, 2.0, 2.5]}}
    assert rank_time_range_ms(stats) == (1.2, 3.0)  # rounds charged 1.2, 3.0, 2.5
    one_round = {"event": None, "wall": timing_summary([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0])}
    assert rank_time_range_ms(one_round) == pytest.approx((2.0, 10.0))
    assert rank_time_range_ms(None) is None


def test_interleaved_timing_keeps_one_median_per_round_on_cpu():
    fns = {"reference": lambda x: x + 1, "candidate": lambda x: x * 2}
    out = time_interleaved(fns, [(torch.ones(4),)], warmup=1, iters=6, rounds=3, device=torch.device("cpu"))
    stats, _ = out["candidate"]
    assert len(stats["round_medians_ms"]["wall"]) == 3 and "pipelined" not in stats["round_medians_ms"]
    lo, hi = rank_time_range_ms(stats)
    assert lo <= hi and min(stats["round_medians_ms"]["wall"]) == lo


def test_overlapping_rounds_are_a_tie_whatever_the_point_estimate():
    # the medians say 1.05x; the rounds (reference 0.95-1.1 ms, candidate 0.9-1.05 ms) span 1x
    ev = _decide(_rank([1.0, 0.95, 1.1], [0.9, 1.05, 0.95]))
    assert ev["outcome"] == "faster" and ev["speedup"] == pytest.approx(1.0 / 0.95)
    assert ev["details"]["speed_verdict"] == "tie"
    lo, hi = ev["details"]["speedup_interval"]
    assert lo == pytest.approx(0.95 / 1.05) and hi == pytest.approx(1.1 / 0.9)
    assert "a tie" in ev["reason"]


def test_separated_rounds_give_a_verdict_and_the_slowest_rank_bounds_it():
    fast = _decide(_rank([2.0, 2.1, 1.9], [1.0, 1.1, 0.9]), _rank([2.0, 2.0, 2.0], [1.2, 1.2, 1.2]))
    assert fast["details"]["speed_verdict"] == "faster"
    # candidate side: slowest rank's ends are (max lo, max hi) = (1.2, 1.2); reference (2.0, 2.1)
    assert fast["details"]["speedup_interval"] == pytest.approx([2.0 / 1.2, 2.1 / 1.2])
    slow = _decide(_rank([1.0, 1.0], [3.0, 3.5]))
    assert (slow["outcome"], slow["details"]["speed_verdict"]) == ("slower", "slower")
    assert speedup_interval({0: None}) is None


def _ev(speedup, verdict=None, interval=None, device="cuda", backend="nccl", outcome=None, **details):
    d = dict(details)
    if verdict:
        d.update(speed_verdict=verdict, speedup_interval=interval)
    return {"status": "ran", "outcome": outcome or ("faster" if speedup >= 1 else "slower"), "subtype": "", "speedup": speedup,
            "correct": True, "device": device, "backend": backend, "details": d, "reason": "r", "wall_s": 1.0}


def test_speed_text_marks_ties_and_cpu_figures():
    assert speed_text(_ev(2.28, "faster", [2.1, 2.4])) == "2.28x"
    assert speed_text(_ev(1.05, "tie", [0.93, 1.1], device="cpu", backend="gloo")) == "1.05x (tie, 0.93-1.1x) CPU (gloo)"
    assert speed_verdict(_ev(1.5)) == "faster"  # a record from before the interval keeps its outcome
    assert speed_verdict({"outcome": "suspect", "speedup": 2.0}) == "" and speed_text({"speedup": None}) == ""


def test_console_shows_the_tie_and_the_device():
    rec = CandidateRecord(path="a/b.py", evaluation=_ev(1.03, "tie", [0.9, 1.2], device="cpu", backend="gloo"))
    table = eval_table([rec])
    assert "1.03x (tie, 0.9-1.2x) CPU (gloo)" in table
    assert eval_line(rec, 1, 1).endswith("faster 1.03x (tie, 0.9-1.2x) CPU (gloo), 1.0 s")


def test_fast_p_counts_a_tie_as_not_faster():
    correct, speed = [True, True, True], [1.05, 2.0, 0.5]
    assert fast_p(correct, speed, 1.0) == pytest.approx(2 / 3)  # point estimates alone
    assert fast_p(correct, speed, 1.0, [0.93, 1.8, 0.4]) == pytest.approx(1 / 3)  # 1.05x spans 1x: a tie
    assert fast_p(correct, speed, 0.0, [0.93, 1.8, 0.4]) == 1.0
    frame = pd.DataFrame({"problem_id": [1, 1], "outcome": ["faster", "faster"], "speedup": [1.05, 2.0], "speedup_lo": [0.93, None]})
    row = summarize(frame, ks=(1,), ps=(1.0,)).iloc[0]
    assert row["fast_1"] == pytest.approx(0.5) and row["fast_1@1"] == pytest.approx(0.5)


def test_fastest_table_takes_only_correct_unsuspected_non_tie_candidates():
    cases = {
        "tie.py": _ev(3.0, "tie", [0.8, 4.0]),
        "reused.py": _ev(2.5, "faster", [2.4, 2.6], output_reused={"ranks": [0]}),
        "suspect.py": _ev(9.0, "faster", [8.0, 10.0], outcome="suspect"),
        "real.py": _ev(1.6, "faster", [1.5, 1.7]),
        "slow.py": _ev(0.5, "slower", [0.4, 0.6]),
    }
    records = [CandidateRecord(path=p, problem_id=7, problem_name="x", evaluation=ev) for p, ev in cases.items()]
    rows = candidate_rows(records, [f"{i}.html" for i in range(len(records))])
    assert {p: r["path"] for p, r in fastest_per_problem(rows).items()} == {"7_x": "real.py"}
    only_ties = candidate_rows(records[:1], ["0.html"])
    assert fastest_per_problem(only_ties) == {}
    assert rows[0]["speed"] == "3x (tie, 0.8-4x)"


def test_reference_as_its_own_candidate_on_cpu_carries_an_interval_and_a_labelled_speedup(tmp_path):
    """One real launch (the rank spawner, gloo): every rank keeps its rounds, and the record's speedup comes
    with its interval, a verdict and the CPU (gloo) label."""
    path = write_candidate(tmp_path / "cands", "1_same.py", REFERENCE, True)
    ev = run_eval([path], quick_options(tmp_path, timeout_s=180.0, jobs=1))[0].evaluation
    assert ev["status"] == "ran" and ev["outcome"] in ("faster", "slower"), ev["reason"]
    for rank in ev["ranks"]:
        rounds = rank["timing"]["candidate"]["round_medians_ms"]["wall"]
        assert len(rounds) == rank["timing"]["candidate"]["rounds"] >= 2
    lo, hi = ev["details"]["speedup_interval"]
    assert lo <= hi and ev["details"]["speed_verdict"] == ("faster" if lo > 1 else "slower" if hi < 1 else "tie")
    assert speed_text(ev).endswith("CPU (gloo)")


def test_explain_headline_and_kernel_page_show_the_tie_and_device():
    from pkb.diagnose.explain import diagnose
    from reports.kernel_page import _evaluation_html

    rec = CandidateRecord(path="a/b.py", evaluation=_ev(1.03, "tie", [0.9, 1.2], device="cpu", backend="gloo"))
    diagnose(rec)
    assert "speedup 1.03x (tie, 0.9-1.2x) CPU (gloo)" in rec.diagnosis["explanation"]["headline"]
    assert "1.03x (tie, 0.9-1.2x) CPU (gloo)" in _evaluation_html(rec)
