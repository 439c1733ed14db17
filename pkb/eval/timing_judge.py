"""The timing figures and their checks, computed in the harness from what each rank measured.

A rank only measures: after each timed round it sends the round's raw measurements through its
channel (pkb.eval.verdict_channel: per call the CUDA-event ms and the host ns around the same
call, the back-to-back loop's host ns, the call count), and a mark at each edge of each timed
loop. The reader (pkb.eval.judge.ChannelReader) stamps every message with this process's
monotonic clock as it arrives. Here, after the launch, the harness:
    computes the figures the record carries (pkb.eval.timing.stats_from_rounds: the same code
    the rank used to run, so an honest rank's figures are what they were),
    counts the calls: every round holds as many samples as it says, and the rounds add up to the
    job's timed calls (a sample dropped to lower a median shows here),
    compares the time the rank says its timed loops took with the time its own clock saw between
    their edges: a candidate that edits the measurements in its process (the rank's locals are
    in its reach) can make its calls look faster, not make the harness's clock run slower.
"""

from __future__ import annotations

import math
from typing import Any

from pkb.eval.timing import stats_from_rounds
from pkb.eval.verdict_channel import REFERENCE_ALONE

SIDES = ("reference", "candidate")
# Timed before the candidate loaded, where the job timed at all (pkb.eval.rank_timing.time_reference_alone).
OPTIONAL_SIDES = (REFERENCE_ALONE,)
# The rank's claimed loop time may fall short of what the harness's clock saw between the loop's
# edges by this factor plus this slack before it is called understated: the harness stamps a
# message when its reader thread wakes (scheduling, the GIL), never earlier than the rank sent it.
CLAIMED_FACTOR = 3.0
CLAIMED_SLACK_S = 0.25


def judge_timing(rounds: list[dict[str, Any]], marks: list[dict[str, Any]], iters: int, source: str,
                 samples: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the rank's timing figures, or None when a side has no measurements; the check). `rounds`:
    the round messages ({side, round, rounds, iters, warmup, groups, measured, arrived_ns});
    `marks`: the loop edges ({side, round, pass, at, arrived_ns}); `iters`: the job's timed calls
    per side; `samples`: each measurement of the interleaved rounds as the rank took it ({side,
    round, pass, ...}, None: not sent, as without a channel). Where samples came, the figures are
    theirs, and a round whose measurements differ from them was edited after they were taken.
    Without arrival stamps (the measurements came in the rank's result file: no channel) the
    clock is not checked, and the check says so."""
    check: dict[str, Any] = {"source": source, "sides": {}, "problems": []}
    by_side: dict[str, list[dict[str, Any]]] = {s: [] for s in (*SIDES, *OPTIONAL_SIDES)}
    for msg in rounds:
        if msg.get("side") in by_side:
            by_side[msg["side"]].append(msg)
    stats: dict[str, Any] = {}
    for side, msgs in by_side.items():
        msgs.sort(key=lambda m: int(m.get("round", 0)))
        if not msgs:
            if side in SIDES:
                check["problems"].append(f"no measurements of the {side}")
            continue
        measured = [m.get("measured") or {} for m in msgs]
        if samples is not None and side in SIDES:
            measured = [_as_taken(side, m, one, samples, check["problems"]) for m, one in zip(msgs, measured)]
        head = msgs[0]
        stats[side] = stats_from_rounds(measured, iters=int(head.get("iters", iters)), warmup=int(head.get("warmup", 0)),
                                        rounds=int(head.get("rounds", len(msgs))), groups=int(head.get("groups", 1)))
        check["sides"][side] = _side_check(side, msgs, measured, marks, iters, check["problems"])
    return (stats if set(SIDES) <= set(stats) else None), check


def _side_check(side: str, msgs: list[dict[str, Any]], measured: list[dict[str, Any]], marks: list[dict[str, Any]],
                iters: int, problems: list[str]) -> dict[str, Any]:
    calls = 0
    for m, one in zip(msgs, measured):
        n = int(one.get("calls", 0))
        calls += n
        counts = {k: len(one.get(k) or []) for k in ("wall_ns", "event_ms", "pipelined_ms")}
        if counts["wall_ns"] != n or any(c not in (0, n) for c in (counts["event_ms"], counts["pipelined_ms"])):
            problems.append(f"{side} round {m.get('round')}: {n} calls, samples {counts}")
        values = [*(one.get("wall_ns") or []), *(one.get("event_ms") or []), *(one.get("pipelined_ms") or []), one.get("pipelined_loop_ns") or 1]
        if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values):
            problems.append(f"{side} round {m.get('round')}: a duration that is not a positive number")
    if calls != iters or len({int(m.get("round", -1)) for m in msgs}) != len(msgs):
        problems.append(f"{side}: {calls} timed calls measured in {len(msgs)} round(s), the job asked for {iters}")
    claimed_ns = sum(sum(int(v) for v in one.get("wall_ns") or []) + int(one.get("pipelined_loop_ns") or 0) for one in measured)
    out: dict[str, Any] = {"calls": calls, "claimed_ms": claimed_ns / 1e6}
    if not any("arrived_ns" in m for m in msgs):
        out["clock"] = "not checked: the measurements came without the harness's arrival stamps"
        return out
    edges: dict[tuple[int, str], dict[str, int]] = {}
    for mk in marks:
        if mk.get("side") == side:
            edges.setdefault((int(mk.get("round", -1)), str(mk.get("pass"))), {})[str(mk.get("at"))] = int(mk["arrived_ns"])
    loops = {k: v for k, v in edges.items() if "start" in v and "end" in v}
    expected = {(int(m.get("round", -1)), p) for m, one in zip(msgs, measured) for p in _passes(one)}
    if not expected <= set(loops):
        problems.append(f"{side}: the edges of {len(expected - set(loops))} timed loop(s) never reached the harness")
    observed_ns = sum(max(0, v["end"] - v["start"]) for k, v in loops.items() if k in expected)
    out["observed_ms"] = observed_ns / 1e6
    if claimed_ns * CLAIMED_FACTOR + CLAIMED_SLACK_S * 1e9 < observed_ns:
        out["understated"] = True
        problems.append(f"{side}: its timed loops took {observed_ns / 1e6:.3g} ms on the harness's clock; "
                        f"the rank reported {claimed_ns / 1e6:.3g} ms")
    return out


def _as_taken(side: str, msg: dict[str, Any], sent: dict[str, Any], samples: list[dict[str, Any]], problems: list[str]) -> dict[str, Any]:
    """One round's measurements from the samples the rank sent as it took them (a problem where
    the round's own message says otherwise, or where samples are missing)."""
    r = msg.get("round")
    mine = [x for x in samples if x.get("side") == side and x.get("round") == r]
    isolated = sorted((x for x in mine if x.get("pass") == "isolated"), key=lambda x: int(x.get("call", 0)))
    pipelined = next((x for x in mine if x.get("pass") == "pipelined"), None)
    taken: dict[str, Any] = {
        "calls": sent.get("calls"),
        "wall_ns": [x.get("wall_ns") for x in isolated],
        "event_ms": [x["event_ms"] for x in isolated if x.get("event_ms") is not None],
        "pipelined_ms": list((pipelined or {}).get("pipelined_ms") or []),
        "pipelined_loop_ns": (pipelined or {}).get("pipelined_loop_ns"),
    }
    keys = ("wall_ns", "event_ms", "pipelined_ms", "pipelined_loop_ns")
    if len(isolated) != len(sent.get("wall_ns") or []) or (pipelined is None) != (sent.get("pipelined_loop_ns") is None):
        problems.append(f"{side} round {r}: {len(isolated)} of its calls' measurements reached the harness as they were taken, "
                        f"the round reports {len(sent.get('wall_ns') or [])}")
    elif any(taken[k] != (sent.get(k) if k == "pipelined_loop_ns" else list(sent.get(k) or [])) for k in keys):
        problems.append(f"{side} round {r}: the measurements it reported at the round's end differ from those it sent as each "
                        "call ended (edited in the rank's process meanwhile)")
    return taken


def _passes(measured: dict[str, Any]) -> list[str]:
    """The timed loops a round ran: the back-to-back one where it was measured (CUDA), and the
    isolated one."""
    return (["pipelined"] if measured.get("pipelined_loop_ns") is not None else []) + ["isolated"]
