"""One outcome per candidate from the per-rank results of its launch (TAXONOMY's words).

First the launch's own fate: a sandbox killed from outside it (not_run), then a SIGKILL whose
sender the harness's evidence names, the OOM killer (runtime_error/out_of_memory), else, when no
timeout of ours sent it, a kill from outside (not_run, stored so that a resume runs it again; the
second such death of a candidate is its own: runtime_error).

Then, in order of precedence: files the harness did not sign (suspect/harness_tamper) > a failure a rank
reported (a suspect the rank caught, then compile_error, load_error, runtime_error, in that order,
since a later stage's error is often the echo of an earlier one) > hang (the whole job's limit, or
one phase's: import, build, a call) > a crash with no report (runtime_error; the signal named) >
wrong_result > suspect > slower/faster.

The suspect checks after a correct run, in order (the first that holds is the subtype):
    harness_tamper      a verdict file forged between ranks, files in the job directory the
                        harness did not write, an output tensor subclass (caught in the rank)
    calls_reference     the reference's code reached from the candidate (caught in the rank), or
                        data-moving library collectives counted during the timed calls of a
                        candidate that builds or uses CUDA code (it claims custom kernels); a
                        barrier moves no data and is a host sync (details.host_syncs_timed)
    fallback_path       a try/except whose handler calls data-moving collectives or the reference
                        (static), confirmed by such collectives counted during the candidate's calls
                        (or by NCCL / MPI the candidate loaded itself through ctypes or cffi: a
                        route no counter sees, details.collective_libraries)
    (calls_reference, above, takes that evidence too, for a candidate that claims custom kernels)
    aliases_input       an output sharing storage with an input, or inputs written by the call
    cached_output       right in the trials, wrong on the timed calls' inputs (each output judged
                        as its call returned), on new values at old addresses, or on a peer-only
                        change of inputs. An output right at return that a later call overwrites
                        is no cache: details.output_reused, beside the outcome (PKB's contract
                        accepts it, a strict one does not)
    side_stream_timing  a Python thread started by a call still running after it returned, an
                        output that was completed only after the call returned, or (CUDA) host
                        time around a device-wide synchronize more than 3x the event time and
                        50 us above it, where the reference's clocks agree
    speed_of_light      faster than the problem's bytes over NVLink (450 GB/s per direction) by
                        more than 2x, at world size > 1 on GPUs
"""

from __future__ import annotations

import math
import re
import signal
from typing import Any

from pkb.eval.classify import RUNTIME_PRIORITY, runtime_subtype
from pkb.eval.compare import TOLERANCE_FACTOR
from pkb.eval.launcher import LaunchResult
from pkb.collectives import HOST_SYNCS
from pkb.taxonomy import most_telling
from pkb.eval.timing import event_time_ms, rank_time_ms, rank_time_range_ms
from pkb.eval.verdict_channel import REFERENCE_ALONE

_ERROR_PRIORITY = ("compile_error", "load_error", "runtime_error")


SIDE_STREAM_RATIO = 3.0
SIDE_STREAM_MIN_MS = 0.05
# Back-to-back calls below this share of the isolated ones (and of the reference's own share), by
# more than this many ms: work skipped where no output is read (_back_to_back_skips).
BACK_TO_BACK_SHARE = 0.3
BACK_TO_BACK_MIN_MS = 0.02
SPEED_OF_LIGHT_MARGIN = 2.0


def decide(launch: LaunchResult, job: Any = None, outside_kills_before: int = 0) -> dict[str, Any]:
    """{status, outcome, subtype, speedup, correct, reason, details}. `job` (the JobSpec) adds
    the static flags and whether the candidate claims custom kernels; `outside_kills_before` is
    how many earlier launches of this candidate ended in a SIGKILL nobody owned (the store's
    count): the next such death is charged to the candidate."""
    ranks = launch.ranks
    details_pre: dict[str, Any] = {}
    if getattr(launch, "strays", None):
        details_pre["stray_processes"] = launch.strays[:16]
        # all of them were killed; the first 16 are named (the sandbox's init counts past what it names)
        in_sandbox = sum(1 for s in launch.strays if s.get("where") == "sandbox")
        unnamed = max(0, int((getattr(launch, "sandbox", None) or {}).get("stray_count") or 0) - in_sandbox)
        details_pre["stray_count"] = len(launch.strays) + unnamed
    if getattr(launch, "logs_dropped", None):
        details_pre["logs_dropped"] = launch.logs_dropped
    static = list(getattr(job, "static_flags", None) or [])
    if static:
        details_pre["static_flags"] = static
    boxed = dict(getattr(launch, "sandbox", None) or {})
    if boxed:
        details_pre["sandbox"] = boxed
    if boxed.get("enclose_error"):
        return _result("not_run", "", "", {**details_pre, "environment_failure": "sandbox mounts failed"},
                       reason=f"environment: the sandbox's mounts could not be made ({boxed['enclose_error']}); nothing was launched; evaluated again on resume")
    if boxed.get("init_killed") and not launch.timed_out:
        # Only the harness or something outside the sandbox can kill its init, and the harness
        # did not: not the candidate's outcome; not stored as done, so a resume runs it again.
        return _result("not_run", "", "", {**details_pre, "environment_failure": "sandbox init killed from outside"},
                       reason=f"environment: the sandbox of this launch was killed from outside it (exit {boxed.get('init_returncode')}); evaluated again on resume")
    oom = _oom_evidence(launch, boxed)
    if oom:
        details_pre["oom_evidence"] = oom
        killed = ", ".join(f"rank {c['rank']}" for c in oom.get("ranks", [])) or "a process of the launch"
        return _result("ran", "runtime_error", "out_of_memory", details_pre,
                       reason=f"{killed} killed by SIGKILL from the kernel's OOM killer ({oom['source']})")
    forged = [f for r in ranks for f in getattr(r, "forged", [])] + [f for r in ranks if r.result for f in r.result.get("forged_files", [])]
    unexpected = list(getattr(launch, "unexpected_files", None) or [])
    late = (((getattr(launch, "judge_check", None) or {}).get("timing") or {}).get("late_messages")) or {}
    outside = None if forged or unexpected or late else _killed_from_outside(launch, boxed)
    if outside:
        return _outside_kill(launch, details_pre, outside, outside_kills_before + 1)
    if forged or unexpected:
        details_pre.update(forged_files=sorted(set(forged)), unexpected_files=unexpected)
        what = (f"files the harness did not sign: {', '.join(sorted(set(forged)))}" if forged else "") + (
            ("; " if forged else "") + f"files in the job directory the harness did not write: {', '.join(unexpected[:5])}" if unexpected else ""
        )
        return _result("ran", "suspect", "harness_tamper", details_pre, reason=what)
    judged = _judge_check(launch, details_pre)
    if judged:
        return judged
    if late:
        # After its references the rank sends only timing messages and `done`; anything else on
        # the channel was written by the candidate's code, whatever the launch did next (a forged
        # frame can also be junk in the ranks' sockets, which hangs the reference after it).
        rank, seen = min(late.items())
        details_pre["channel_forgery"] = late
        return _result("ran", "suspect", "harness_tamper", details_pre,
                       reason=f"tampering with judgement: rank {rank} wrote {len(seen)} message(s) into the harness's "
                              f"verdict channel that the rank never sends (first: {str(seen[0])[:80]!r})")
    unreported = _unreported_wrong(launch, details_pre)
    if unreported:
        return unreported
    out = _decide(launch, job, ranks)
    out["details"] = {**details_pre, **out["details"]}
    if details_pre.get("stray_processes"):
        count = details_pre["stray_count"]
        named = len(details_pre["stray_processes"])
        out["reason"] += f"; {count} process(es) left behind by the candidate were killed" + (f" (the first {named} named)" if count > named else "")
    return out


def _judge_check(launch: LaunchResult, details: dict[str, Any]) -> dict[str, Any] | None:
    """The harness's own comparison (pkb.eval.judge) into the record: which judge decided, what it
    could not recheck; suspect/harness_tamper where a rank called correct what the harness finds wrong."""
    check = getattr(launch, "judge_check", None) or {}
    if not check:
        return None
    details["judge"] = check.get("judge", "rank")
    details["judge_check"] = {
        "rechecked_trials": check.get("rechecked", 0),
        "not_rechecked": check.get("not_rechecked", [])[:16],
        "disagreements": check.get("disagreements", [])[:8],
        "reference_digests": check.get("reference_digests", {}),
        "emulation": check.get("emulation", ""),
    }
    if check.get("timing"):
        details["judge_check"]["timing"] = check["timing"]
    tampered = check.get("tampered") or []
    if not tampered:
        return None
    details["judge"] = "harness"
    details["judge_check"]["tampered"] = tampered[:8]
    first = tampered[0]
    where = f"rank {first['rank']}" + (f" trial {first['trial']}" if first.get("trial") is not None else "")
    mine = first.get("harness") or {}
    evidence = first.get("evidence") or (
        f"{mine.get('mismatches')} of {mine.get('numel')} elements outside tolerance (max abs err {mine.get('max_abs_err')})"
        if mine.get("shape_ok", True) else "shapes differ")
    return _result("ran", "suspect", "harness_tamper", details,
                   reason=f"tampering with judgement: {where} reported a correct answer; the harness's own comparison "
                          f"of the saved outputs says wrong: {evidence}")


def _unreported_wrong(launch: LaunchResult, details: dict[str, Any]) -> dict[str, Any] | None:
    """An output the harness finds wrong that no rank reported (pkb.eval.judge.recheck), where the
    rank's harness code failed after the load or nothing failed: the candidate's answer decides.
    A timed call's (a shared output buffer the rank does not check itself) is a cached answer."""
    check = getattr(launch, "judge_check", None) or {}
    unreported = check.get("unreported_wrong") or []
    sources = {r.result["error"].get("source") for r in launch.ranks if r.result and r.result.get("error")}
    if unreported and sources <= {"harness"}:
        from pkb.eval.rank_timing import GROUP_TRIAL_BASE

        details["judge"] = "harness"
        details["judge_check"]["unreported_wrong"] = unreported[:8]
        first, mine = unreported[0], unreported[0]["harness"]
        timed = first["trial"] >= GROUP_TRIAL_BASE
        what = f"the last timed call on group {first['trial'] - GROUP_TRIAL_BASE}" if timed else f"trial {first['trial']}"
        return _result("ran", "suspect" if timed else "wrong_result", "cached_output" if timed else "", details,
                       reason=f"rank {first['rank']}, {what}: the harness's comparison of the saved output "
                              f"(no verdict from the rank): {mine.get('mismatches')} of {mine.get('numel')} elements "
                              f"outside tolerance, max abs error {mine.get('max_abs_err')}")
    return None


def _decide(launch: LaunchResult, job: Any, ranks: list[Any]) -> dict[str, Any]:
    errors = [(r.rank, r.result["error"]) for r in ranks if r.result and r.result.get("error")]
    details: dict[str, Any] = {}
    key = next((r.result.get("input_key") for r in ranks if r.result and isinstance(r.result.get("input_key"), str)), None)
    if key:  # the launch's input secret, told once every draw was done: the diagnosis draws again
        details["input_key"] = key[:64]
    if errors:
        details["errors"] = [
            {"rank": rank, **{k: e.get(k) for k in ("outcome", "subtype", "source", "phase", "type", "message")}}
            for rank, e in errors
        ]
    not_ours = [e for _, e in errors if e.get("source") in ("reference", "harness")]
    ours = [(rank, e) for rank, e in errors if e.get("source") == "candidate"]
    expired = getattr(launch, "phase_timeout", None) or {}
    if launch.timed_out and ours and isinstance(expired.get("since"), (int, float)) and all(
            isinstance(e.get("at"), (int, float)) and e["at"] >= expired["since"] for _, e in ours):
        # Every error came after a peer was already past its limit: a collective broken by that
        # rank's kill (gloo's "remote worker crashing"). The hang is the cause, the errors its echo.
        details["errors_after_the_hang"] = sorted(rank for rank, _ in ours)
        ours = []
    probe = _probe_mismatch(ranks)
    if probe and not any(e.get("outcome") == "suspect" for _, e in ours):
        # A cache probe caught a stale answer; whatever followed (a peer stuck in a collective the
        # cached rank skipped, its connection errors) is the echo of that desync.
        details.update(probe)
        if launch.timed_out:
            details["stuck_ranks"] = launch.stuck
        return _result("ran", "suspect", "cached_output", details, reason=probe["probe_reason"])
    if ours:
        rank, err = min(ours, key=lambda re: (re[1].get("outcome") != "suspect", _error_rank(re[1])))
        details["failed_ranks"] = sorted(r for r, _ in ours)
        # The exception's class (AttributeError, NameError, TypeError, ...): the paper's failure
        # columns tell an API typo from a runtime failure by it.
        details["exception_type"] = err.get("type")
        if err.get("binding"):
            details["binding"] = err["binding"]
        message = _first_compiler_error(err.get("message")) if err["outcome"] == "compile_error" else None
        if err.get("binding"):
            message = _binding_sentence(err["binding"]) or message
        return _result("ran", err["outcome"], err.get("subtype", ""), details, reason=f"rank {rank} in {err.get('phase')}: {err.get('type')}: {message or _short(err.get('message'))}")
    if not_ours:
        err = not_ours[0]
        if err.get("source") == "reference" and err.get("phase") == "reference check":
            # The reference alone, before any candidate code existed: a fact about the problem at
            # this world size (pkb.eval.reference_probe tries larger ones), not about the candidate.
            ws = next((r.result.get("world_size") for r in ranks if r.result and r.result.get("world_size")), None)
            details["reference_check"] = {
                "world_size": ws, "type": err.get("type"), "message": _short(err.get("message"), 500),
                "where": next((e.get("where") for _, e in errors if e.get("where")), None),
            }
        return _result(
            "not_run", "", "", details,
            reason=f"{err['source']} failed in {err.get('phase')}: {err.get('type')}: {_short(err.get('message'))}",
        )
    if launch.timed_out:
        details["stuck_ranks"] = launch.stuck
        where = ", ".join(f"rank {s['rank']} in {s['phase']}" for s in launch.stuck) or "no rank reported"
        pt = getattr(launch, "phase_timeout", None)
        if pt:
            details["phase_timeout"] = pt
            limit = pt.get("limit_s")
            lim = f"{limit:g} s " if isinstance(limit, (int, float)) else ""
            return _result("ran", "hang", "timeout", details, reason=f"rank {pt['rank']} past the {lim}limit of {pt['phase']}; killed; {where}")
        return _result("ran", "hang", "timeout", details, reason=f"killed after the {launch.wall_s:.0f} s limit; {where}")
    unfinished = [r for r in ranks if not r.finished]
    if unfinished or launch.returncode not in (0, None):
        # A rank died without writing an error: a signal (segfault, abort on a CUDA error), or
        # os._exit. Which rank died first is in the spawner's failure table.
        text = "\n".join(r.stderr_tail for r in unfinished) + "\n" + launch.launcher_tail
        subtype = runtime_subtype(text) or "crash"
        crashed = []
        for r in unfinished:
            entry: dict[str, Any] = {"rank": r.rank, "phase": r.phase}
            ex = getattr(r, "exit", None) or {}
            entry.update({k: ex[k] for k in ("exit_code", "signal") if k in ex})
            if "signal" not in entry:
                m = re.search(r"Fatal Python error: (Segmentation fault|Aborted|Bus error|Floating point exception)", r.stderr_tail)
                if m:
                    entry["signal"] = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS", "Floating point exception": "SIGFPE"}[m.group(1)]
            crashed.append(entry)
        details["crashed_ranks"] = crashed
        details["returncode"] = launch.returncode
        signals = sorted({c["signal"] for c in crashed if c.get("signal")})
        if signals:
            details["signal"] = signals[0]
        def how(c: dict[str, Any]) -> str:
            if c.get("signal"):
                return f"rank {c['rank']} killed by {c['signal']} in {c['phase'] or 'start-up'}"
            if c.get("exit_code") is not None:
                return f"rank {c['rank']} exited with code {c['exit_code']} in {c['phase'] or 'start-up'}"
            return f"rank {c['rank']} in {c['phase'] or 'start-up'}"
        where = ", ".join(how(c) for c in crashed)
        if (getattr(launch, "sandbox", None) or {}).get("init_exit") == -9:
            # a SIGKILL the harness did not send, most likely from a rank (the spawner is in its reach);
            # the sandbox's init then killed the ranks left without their launcher
            details.setdefault("signal", "SIGKILL")
            details["launcher_killed"] = True
            where += "; the rank spawner itself was killed by SIGKILL inside the sandbox"
        return _result("ran", "runtime_error", subtype, details, reason=f"died without a report: {where}")

    trials = {r.rank: r.result.get("trials", []) for r in ranks}  # type: ignore[union-attr]
    wrong = {rank: [c for c in cs if not c.get("matched")] for rank, cs in trials.items()}
    details["pkb_match"] = all(c.get("values_close") for cs in trials.values() for c in cs)
    bad = [c for cs in wrong.values() for c in cs]
    if bad and all(c.get("completed_after_return") for c in bad):
        details["deferred_work_trials"] = sorted({c["trial"] for c in bad})
        return _result("ran", "suspect", "side_stream_timing", details, reason="the output was unfinished when the call returned and complete a moment later: the work ran outside the call")
    if any(wrong.values()):
        subtype = wrong_result_subtype(trials)
        details["wrong_ranks"] = sorted(r for r, w in wrong.items() if w)
        details["right_ranks"] = sorted(r for r, w in wrong.items() if not w)
        details["wrong_trials"] = sorted({c["trial"] for w in wrong.values() for c in w})
        first = next(c for r in sorted(wrong) for c in wrong[r])
        return _result("ran", "wrong_result", subtype, details, reason=_mismatch_sentence(first, wrong))

    details["mutates_inputs"] = any(c.get("mutates_inputs") for cs in trials.values() for c in cs)
    details["aliases_input"] = any(c.get("aliases_input") for cs in trials.values() for c in cs)
    checked = _timed_check_counts(ranks)
    if checked:
        details["timed_checks"] = checked
    timings = {r.rank: r.result.get("timing") for r in ranks}  # type: ignore[union-attr]
    timing_problems = ((getattr(launch, "judge_check", None) or {}).get("timing") or {}).get("problems") or []
    if timing_problems:  # the rank's measurements disagree with the harness's clock or the job's call count
        return _result("ran", "suspect", "harness_tamper", details, reason=f"tampering with the timing: {timing_problems[0]}"
                       + (f" (and {len(timing_problems) - 1} more)" if len(timing_problems) > 1 else ""))
    if not all(timings.values()):
        return _result("ran", "", "", details, correct=True, reason="correct on every trial; not timed")

    speedup, speed = speedups(timings)
    details.update(speed)
    suspect = _suspect(ranks, details, job)
    if suspect:
        _output_reuse(ranks, details, "suspect")
        return _result("ran", "suspect", suspect[0], details, speedup=speedup, correct=False, reason=suspect[1])
    if speedup is None:  # a side's charged time is not a positive figure: nothing to compare
        return _result("ran", "", "", details, correct=True, reason="correct on every trial; no speedup: a side's timing is not a positive figure")
    outcome = "faster" if speedup >= 1.0 else "slower"
    reason = f"correct on every trial; speedup {speedup:.3g}x"
    if details.get("speed_verdict") == "tie":
        lo_hi = details.get("speedup_interval")
        reason += (f", a tie: its timings give {lo_hi[0]:.3g}x to {lo_hi[1]:.3g}x, which spans 1x" if lo_hi
                   else ", a tie: no spread was measured to tell it from 1x")
    if _output_reuse(ranks, details, outcome):
        reason += "; its returned output is overwritten by its next call (details.output_reused)"
    return _result("ran", outcome, "", details, speedup=speedup, correct=True, reason=reason)


def _output_reuse(ranks: list[Any], details: dict[str, Any], outcome: str) -> bool:
    """An output right at return and overwritten by a later call: reported beside the outcome.

    PKB's contract checks an output when its call returns, and accepts it; a strict contract
    (an output stays valid until the caller drops it) does not: a caller that keeps two results
    reads the second twice."""
    seen = {r.rank: r.result.get("output_reuse") for r in ranks if r.result and r.result.get("output_reuse")}
    if not seen:
        return False
    first = next(iter(seen.values()))
    details["output_reused"] = {
        "ranks": sorted(seen),
        "groups_overwritten": first.get("groups_overwritten"),
        "same_storage": all(v.get("same_storage") for v in seen.values()),
        "evidence": "each output matched the reference when its call returned; read again after later calls, it held a later call's answer",
    }
    details["contracts"] = {
        "pkb": {"accepts": True, "outcome": outcome},
        "strict": {"accepts": False, "outcome": "wrong_result", "subtype": "output_reused",
                   "why": "a returned output is overwritten by the candidate's next call"},
    }
    return True


# Without an OOM-kill counter: the launch's largest process reached at least this share of its
# rank's part of the memory the launch had at start (the ranks grow together; the OOM killer
# picks the largest process), so the OOM killer is the likely sender of its SIGKILL.
OOM_PEAK_SHARE = 0.8
OUTSIDE_KILLS_CHARGED = 2  # the death by an unowned SIGKILL that is charged to the candidate
_ECHO_SUBTYPES = ("nccl_error", "rendezvous_error")  # a peer's death, seen from a live rank


def _sigkilled(launch: LaunchResult, boxed: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """The ranks that died of SIGKILL without a report, and whether the rank spawner itself did."""
    killed = [{"rank": r.rank, "phase": r.phase} for r in launch.ranks
              if not r.finished and not (r.result and r.result.get("error")) and (getattr(r, "exit", None) or {}).get("signal") == "SIGKILL"]
    launcher = boxed.get("init_exit") == -9 if boxed.get("kind", "none") != "none" else launch.returncode == -9
    return killed, launcher


def _oom_evidence(launch: LaunchResult, boxed: dict[str, Any]) -> dict[str, Any] | None:
    """SIGKILLed ranks plus the evidence that the OOM killer ran in this launch, the first that
    exists of: the launch's cgroup OOM-kill counter; the kernel's (its machine-wide counter in
    /proc/vmstat, its log naming a pid of the launch); the launch's largest peak RSS against the
    memory it had at start. A counter that exists and did not move says no."""
    killed, launcher = _sigkilled(launch, boxed)
    if not killed and not launcher:
        return None
    if boxed.get("oom_kills") is not None:
        return ({"source": f"{boxed['oom_kills']} OOM kill(s) counted in the launch's memory cgroup", "ranks": killed,
                 "cgroup": boxed.get("cgroup")} if boxed["oom_kills"] else None)
    if boxed.get("kernel_oom"):
        return {"source": "the kernel log", "ranks": killed, "kernel_log": boxed["kernel_oom"][:4]}
    if boxed.get("kernel_oom_kills") is not None:
        return ({"source": f"the kernel's OOM-kill counter (/proc/vmstat) rose by {boxed['kernel_oom_kills']} during the launch",
                 "ranks": killed} if boxed["kernel_oom_kills"] else None)
    peak, room = getattr(launch, "peak_rss_bytes", None), (getattr(launch, "memory_headroom", None) or {}).get("bytes")
    if peak and room:
        share = room / max(1, len(launch.ranks))
        if peak >= OOM_PEAK_SHARE * share:
            return {"source": f"peak RSS {peak / 2**20:.0f} MiB of the launch's largest process, {peak / share:.0%} of a rank's "
                              f"share of the {room / 2**20:.0f} MiB it had at start ({launch.memory_headroom.get('source')}); no OOM counter here",
                    "ranks": killed, "peak_rss_bytes": peak, "headroom_bytes": room}
    return None


def _memory_checked(launch: LaunchResult, boxed: dict[str, Any]) -> str:
    """What said the OOM killer did not send a SIGKILL (for the record of an outside kill)."""
    if boxed.get("oom_kills") is not None:
        return "no OOM kill counted in the launch's memory cgroup"
    if boxed.get("kernel_oom_kills") is not None:
        return "the kernel's OOM-kill counter (/proc/vmstat) did not move"
    peak, room = getattr(launch, "peak_rss_bytes", None), (getattr(launch, "memory_headroom", None) or {}).get("bytes")
    if peak and room:
        return f"no OOM counter here; peak RSS {peak / 2**20:.0f} MiB, far below the {room / 2**20:.0f} MiB the launch had"
    return "no OOM evidence could be read here (no counter, no kernel log, no memory figure)"


def _killed_from_outside(launch: LaunchResult, boxed: dict[str, Any]) -> dict[str, Any] | None:
    """A SIGKILL the harness did not send (no timeout) and the OOM killer did not (checked
    before this), the root cause of the launch's end: every error a live rank reported is the
    echo of a peer's death (a broken connection), and no probe caught a stale answer first."""
    if launch.timed_out:
        return None
    killed, launcher = _sigkilled(launch, boxed)
    if not killed and not launcher:
        return None
    errors = [r.result["error"] for r in launch.ranks if r.result and r.result.get("error")]
    if any(e.get("subtype") not in _ECHO_SUBTYPES or e.get("outcome") == "suspect" for e in errors) or _probe_mismatch(launch.ranks):
        return None
    return {"ranks": killed, "launcher": launcher, "signal": int(signal.SIGKILL)}


def _outside_kill(launch: LaunchResult, details: dict[str, Any], outside: dict[str, Any], count: int) -> dict[str, Any]:
    """Killed from outside: an environment failure (not_run, not stored as done, so a resume runs
    it again), until the `OUTSIDE_KILLS_CHARGED`th time, which is the candidate's: a candidate can
    SIGKILL its own rank, and the kernel does not say who sent a SIGKILL."""
    who = [f"rank {k['rank']} in {k['phase'] or 'start-up'}" for k in outside["ranks"]]
    if outside["launcher"]:
        who.append("the rank spawner itself was killed by SIGKILL" + (" inside the sandbox" if details.get("sandbox", {}).get("kind", "none") != "none" else ""))
    where = ", ".join(who)
    details.update(outside_kills=count, killed_ranks=outside["ranks"], signal="SIGKILL",
                   not_oom=_memory_checked(launch, details.get("sandbox") or {}))
    if outside["launcher"]:
        details["launcher_killed"] = True
    details["peak_rss_bytes"] = getattr(launch, "peak_rss_bytes", None)  # the launch's largest process, from wait4
    details["memory_headroom"] = getattr(launch, "memory_headroom", None) or {}
    if count >= OUTSIDE_KILLS_CHARGED:
        return _result("ran", "runtime_error", "crash", details,
                       reason=f"rank killed by SIGKILL twice; not by the harness or the OOM killer ({where}; {details['not_oom']})")
    details["environment_failure"] = f"killed from outside (signal {outside['signal']})"
    return _result("not_run", "", "", details,
                   reason=f"environment: {where}: killed from outside (signal {outside['signal']}), not by the harness "
                          f"(no timeout) nor the OOM killer ({details['not_oom']}); evaluated again on resume "
                          f"(a second such death is charged to the candidate)")


def wrong_result_subtype(trials: dict[int, list[dict[str, Any]]]) -> str:
    """The subtype the evidence supports, or '' for the diagnosis stage to find (ranked by
    pkb.taxonomy.WRONG_RESULT_PRIORITY, as the emulation and the diagnosis rank)."""
    bad = [c for cs in trials.values() for c in cs if not c.get("matched")]
    held = []
    if any(not c.get("shape_ok", True) or not c.get("structure_ok", True) for c in bad):
        held.append("shape_mismatch")
    if any(not c.get("dtype_ok", True) for c in bad):
        held.append("dtype_mismatch")
    if any(c.get("nan_inf", 0) > 0 for c in bad):
        held.append("nan_inf")
    if any(c.get("sentinel", 0) > 0 for c in bad):
        held.append("unwritten")
    right_ranks = [r for r, cs in trials.items() if cs and all(c.get("matched") for c in cs)]
    if right_ranks and len(right_ranks) < len(trials):
        held.append("rank_subset")
    if bad and all(1.0 < c.get("max_violation", math.inf) <= TOLERANCE_FACTOR for c in bad):
        held.append("tolerance")
    return most_telling(held)


def speedups(timings: dict[int, dict[str, Any] | None]) -> tuple[float | None, dict[str, Any]]:
    """Reference slowest-rank median / candidate slowest-rank median (each rank charged as
    timing.rank_time_ms says); the events-only figure (PKB's clock) is kept beside it."""
    out: dict[str, Any] = {"rank_times_ms": {}}
    side_time: dict[str, float | None] = {}
    side_event: dict[str, float | None] = {}
    timings = _reference_at_its_fastest(timings, out)
    for side in ("reference", "candidate"):
        per_rank = {r: rank_time_ms(t[side]) for r, t in timings.items() if t}
        out["rank_times_ms"][side] = per_rank
        vals = [v for v in per_rank.values() if v is not None]
        side_time[side] = max(vals) if vals else None
        ev = [v for v in (event_time_ms(t[side]) for t in timings.values() if t) if v is not None]
        side_event[side] = max(ev) if ev else None
    out["reference_ms"], out["candidate_ms"] = side_time["reference"], side_time["candidate"]
    speedup = _ratio(side_time["reference"], side_time["candidate"])
    out["speedup_event"] = _ratio(side_event["reference"], side_event["candidate"])
    out["speedup_interval"] = speedup_interval(timings)
    out["speed_verdict"] = speed_verdict(out["speedup_interval"])
    return speedup, out


# The reference's interleaved time may exceed its time before the candidate loaded by this factor
# before the latter is charged instead: run-to-run noise stays within it (the interleaved figure,
# PKB's way, is kept), a reference a loaded candidate slowed on purpose does not.
REFERENCE_SLOWED_FACTOR = 1.25


def _reference_at_its_fastest(timings: dict[int, dict[str, Any] | None], out: dict[str, Any]) -> dict[int, dict[str, Any] | None]:
    """Each rank's reference figures: its calls timed before the candidate loaded where its calls
    interleaved with the candidate's were more than REFERENCE_SLOWED_FACTOR slower (a loaded
    candidate can slow the reference, with a thread or a signal timer, not speed it up). Notes in
    `out` where the alone figures were taken and by how much the interleaved ones were slower."""
    chosen: dict[int, dict[str, Any] | None] = {}
    slowed: dict[str, float] = {}
    for r, t in timings.items():
        alone = (t or {}).get(REFERENCE_ALONE)
        a, i = rank_time_ms(alone), rank_time_ms((t or {}).get("reference"))
        if t and a is not None and i is not None and i > a * REFERENCE_SLOWED_FACTOR:
            chosen[r] = {**t, "reference": alone}
            slowed[str(r)] = round(i / a, 3)
        else:
            chosen[r] = t
    if slowed:
        out["reference_alone"] = {"ranks_taken": slowed,
                                  "why": f"the reference beside the loaded candidate was more than {REFERENCE_SLOWED_FACTOR}x "
                                         "slower than before the load; the time before the load is charged (value: interleaved / alone)"}
    return chosen


def speedup_interval(timings: dict[int, dict[str, Any] | None]) -> list[float] | None:
    """[lo, hi] of the speedup: each side charged its slowest rank's low and high ends
    (timing.rank_time_range_ms); lo = reference low / candidate high, hi = reference high /
    candidate low. None without a range on both sides."""
    ends: dict[str, tuple[float, float]] = {}
    for side in ("reference", "candidate"):
        ranges = [rg for rg in (rank_time_range_ms(t[side]) for t in timings.values() if t) if rg]
        if not ranges:
            return None
        ends[side] = (max(lo for lo, _ in ranges), max(hi for _, hi in ranges))
    lo = _ratio(ends["reference"][0], ends["candidate"][1])
    hi = _ratio(ends["reference"][1], ends["candidate"][0])
    return [lo, hi] if lo is not None and hi is not None else None


def speed_verdict(interval: list[float] | None) -> str:
    """faster / slower only when the whole interval is on one side of 1x; else tie."""
    if not interval:
        return "tie"
    lo, hi = interval
    return "faster" if lo > 1.0 else "slower" if hi < 1.0 else "tie"


def _suspect(ranks: list[Any], details: dict[str, Any], job: Any = None) -> tuple[str, str] | None:
    results = [r.result for r in ranks]
    trials = [c for res in results for c in res.get("trials") or []]
    static = {f["flag"] for f in (getattr(job, "static_flags", None) or [])}
    claims = bool(getattr(job, "claims_custom_kernels", False)) or any(res.get("built_extension") for res in results)
    dist = [res.get("dist_calls") or {} for res in results]
    during_calls = sum(int(d.get("trials", 0)) + int(d.get("timed", 0)) + int(d.get("checks", 0)) for d in dist)
    timed_calls = sum(int(d.get("timed", 0)) for d in dist)
    details["dist_calls_during_candidate"] = during_calls
    details["dist_calls_timed"] = timed_calls
    host_syncs = sum(int((d.get("host_syncs") or {}).get("timed", 0)) for d in dist)
    if host_syncs:  # barriers move no data: a slowness cause, never a fallback
        details["host_syncs_timed"] = host_syncs
    names = sorted({n for d in dist for n in (d.get("names") or {}) if n not in HOST_SYNCS})
    libraries = _collective_libraries(results)
    if libraries:
        details["collective_libraries"] = libraries
    # loaded, or a transfer's entry point looked up: the library is in use, unseen by any counter
    loaded = [r.get("library") or r.get("symbol") for r in libraries if r.get("loaded") or r.get("moves_data")]
    by_itself = f"the candidate loaded {', '.join(sorted(set(loaded))[:3])} itself (ctypes/cffi)" if loaded else ""
    if "fallback_try_except" in static and during_calls > 0:
        return "fallback_path", f"a try/except falls back to library collectives ({', '.join(names)}), and {during_calls} ran during the candidate's calls"
    if "fallback_try_except" in static and loaded:
        return "fallback_path", f"a try/except falls back to library collectives, and {by_itself}: a route no counter sees"
    if claims and timed_calls > 0:
        return "calls_reference", f"builds custom kernels but {timed_calls} library collective calls ({', '.join(names)}) ran during its timed calls"
    if claims and loaded:
        return "calls_reference", f"builds custom kernels but {by_itself}: its transfers can go through the library, where no counter sees them"
    if any(c.get("aliases_input") for c in trials) or any(c.get("aliases_input") for res in results for c in res.get("timed_checks") or []):
        return "aliases_input", "the output shares storage with an input"
    # before the timed checks: an output a collective was still filling when its call returned is
    # wrong there too, and this says why
    unwaited = sum(int(res.get("timed_unwaited_calls") or 0) for res in results)
    if unwaited:
        details["timed_unwaited_calls"] = unwaited
        return "side_stream_timing", (
            f"work outside the timed call: {unwaited} timed calls returned while a collective they started was still running "
            "(left unwaited), which the untimed calls did not; the harness waited for those it had a handle for")
    # before the timed checks too: work left on a side stream at return makes a copy taken then
    # wrong, and this says why
    side = _side_stream(results)
    if side:
        details["side_stream"] = side
        return "side_stream_timing", (
            f"host time around a device-wide synchronize is {side['candidate_ratio']:.1f}x the event time "
            f"({side['candidate_wall_ms']:.3g} ms vs {side['candidate_event_ms']:.3g} ms): work the timing events miss"
        )
    timed_bad = [(r.rank, c) for r in ranks for c in (r.result.get("timed_checks") or []) if not c.get("matched")]
    if details.get("mutates_inputs") or any(res.get("timed_inputs_mutated") for res in results):
        if timed_bad:
            details["timed_mismatch"] = [{"rank": r, "group": c["trial"]} for r, c in timed_bad][:16]
            return "aliases_input", "right on fresh inputs, wrong on repeated calls: the candidate writes into its inputs"
        return "aliases_input", "the candidate writes into its inputs (the problem is out of place)"
    refresh_bad = [r.rank for r in ranks if (r.result.get("refresh_check") or {}).get("matched") is False]
    peer_bad = [r.rank for r in ranks if (r.result.get("peer_change_check") or {}).get("matched") is False]
    if timed_bad:
        details["timed_mismatch"] = [{"rank": r, "group": c["trial"]} for r, c in timed_bad][:16]
        return "cached_output", "right in the correctness trials, wrong on the timed calls' inputs"
    if refresh_bad:
        details["refresh_mismatch_ranks"] = refresh_bad
        return "cached_output", "new values at the same addresses gave the old answer (output cached on the pointer)"
    if peer_bad:
        details["peer_change_mismatch_ranks"] = peer_bad
        return "cached_output", "an input it had seen before, at a new address, while the peers' inputs changed, gave the old answer (output cached on the local input's content)"
    silent = _silent_peers(results, timed_calls)
    if silent:
        details["reference_collectives"] = silent
        return "harness_tamper", (
            f"at world size {len(results)}, no communication in its timed calls: the reference's first call ran "
            f"{silent} collectives, the candidate's timed calls none that any counter or the backends' sequence numbers saw "
            f"({during_calls} in its other calls), and on the CPU ranks share no memory: its peers' data came by another route "
            "(a process group of its own that no counter sees, the harness's own state, a file, another process) or was known "
            "without them (inputs it could predict)")
    late = [c["trial"] for c in trials if c.get("completed_after_return")]
    threads = [c["trial"] for c in trials if c.get("threads_started") and c.get("trial", 0) > 0]
    if late or threads:
        details["deferred_work_trials"] = sorted(set(late + threads))
        why = "the output was completed after the call returned" if late else "a call left a thread of its own running after it returned"
        return "side_stream_timing", f"work outside the timed call: {why}"
    skips = _back_to_back_skips(results)
    if skips:
        details["back_to_back_skips"] = skips
        return "cached_output", (
            f"its back-to-back timed calls took {skips['candidate_back_to_back_ms']:.3g} ms each, {skips['candidate_share']:.0%} of its "
            f"isolated calls' {skips['candidate_event_ms']:.3g} ms (the reference's: {skips['reference_share']:.0%}): calls that skip "
            "their work where no output is read")
    floor = _speed_floor(results, details)
    if floor:
        return "speed_of_light", floor
    return None


def _timed_check_counts(ranks: list[Any]) -> dict[str, dict[str, int]]:
    """The timed calls' output checks over all ranks, by kind (timed: a plain call's; timed_edited:
    an edited call's chosen as it returned; at_return: the calls made again after the timing),
    each as {"right", "wrong"}."""
    out: dict[str, dict[str, int]] = {}
    for r in ranks:
        for c in (r.result or {}).get("timed_checks") or []:
            if isinstance(c, dict):
                tally = out.setdefault(str(c.get("kind") or "timed"), {"right": 0, "wrong": 0})
                tally["right" if c.get("matched") else "wrong"] += 1
    return out


def _silent_peers(results: list[dict[str, Any]], timed_calls: int) -> int:
    """The reference's collectives in trial 0 (summed over ranks) where the candidate's timed calls
    moved no data between ranks that any counter saw, on the CPU (only there do ranks record the
    reference's count: there is no peer memory, data between ranks goes through the backend);
    0 where that is not the case. Each timed call sees inputs no call saw before, so a right
    answer there needs the peers' data of that call."""
    counts = [int(res["reference_collectives"]) for res in results if "reference_collectives" in res]
    if timed_calls or len(results) < 2 or len(counts) < len(results):
        return 0
    return sum(counts)


def _collective_libraries(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every rank's record of NCCL / MPI loaded or looked up through ctypes or cffi
    (pkb.eval.library_loads), each once."""
    out: list[dict[str, Any]] = []
    for res in results:
        for r in res.get("collective_libraries") or []:
            if isinstance(r, dict) and r not in out and len(out) < 16:
                out.append(r)
    return out


def _probe_mismatch(ranks: list[Any]) -> dict[str, Any] | None:
    """A refresh or peer-change probe that failed after every trial and timed check matched."""
    bad: dict[str, list[int]] = {}
    for r in ranks:
        res = r.result or {}
        trials = res.get("trials") or []
        if not trials or not all(c.get("matched") for c in trials) or not all(c.get("matched") for c in res.get("timed_checks") or []):
            return None
        for kind in ("refresh_check", "peer_change_check"):
            if (res.get(kind) or {}).get("matched") is False:
                bad.setdefault(kind, []).append(r.rank)
    if not bad:
        return None
    if "refresh_check" in bad:
        reason = "new values at the same addresses gave the old answer (output cached on the pointer or id)"
    else:
        reason = "an input it had seen before, at a new address, while the peers' inputs changed, gave the old answer (output cached on the local input's content)"
    return {"probe_mismatch": bad, "probe_reason": reason}


def _side_stream(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    for res in results:
        timing = res.get("timing") or {}
        cand, ref = timing.get("candidate") or {}, timing.get("reference") or {}
        ce, cw = (cand.get("event") or {}).get("median_ms"), (cand.get("wall") or {}).get("median_ms")
        re_, rw = (ref.get("event") or {}).get("median_ms"), (ref.get("wall") or {}).get("median_ms")
        if ce is None or cw is None or ce <= 0:
            continue
        ratio = cw / ce
        ref_ratio = (rw / re_) if (re_ and rw) else 1.0
        if ratio > SIDE_STREAM_RATIO and cw - ce > SIDE_STREAM_MIN_MS and ratio > 2 * ref_ratio:
            return {"rank": res.get("rank"), "candidate_event_ms": ce, "candidate_wall_ms": cw, "candidate_ratio": ratio, "reference_ratio": ref_ratio}
    return None


def _back_to_back_skips(results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A rank whose back-to-back calls (the charged pass, whose outputs no one reads) took a small
    share of its isolated calls' event time, where the reference's took far more of its own: calls
    that skip their work when timed back to back. Back to back, an honest call loses at most its
    launch latency to the isolated one (the host runs ahead only where the GPU is the slower)."""
    for res in results:
        timing = res.get("timing") or {}
        cand, ref = timing.get("candidate") or {}, timing.get("reference") or {}
        ce, cp = (cand.get("event") or {}).get("median_ms"), (cand.get("pipelined") or {}).get("median_ms")
        re_, rp = (ref.get("event") or {}).get("median_ms"), (ref.get("pipelined") or {}).get("median_ms")
        if not (ce and cp and re_ and rp) or ce - cp < BACK_TO_BACK_MIN_MS:
            continue
        share, ref_share = cp / ce, rp / re_
        if share < BACK_TO_BACK_SHARE and share < BACK_TO_BACK_SHARE * ref_share:
            return {"rank": res.get("rank"), "candidate_event_ms": ce, "candidate_back_to_back_ms": cp, "candidate_share": share,
                    "reference_share": ref_share}
    return None


def _speed_floor(results: list[dict[str, Any]], details: dict[str, Any]) -> str | None:
    floors = [res.get("speed_floor") for res in results if res.get("speed_floor")]
    if not floors:
        return None
    f = floors[0]
    details["speed_floor"] = f
    cand = details.get("candidate_ms")
    if not f.get("applies") or cand is None or not f.get("floor_ms"):
        return None
    if cand * SPEED_OF_LIGHT_MARGIN < f["floor_ms"]:
        return f"{cand:.3g} ms per call, under the {f['floor_ms']:.3g} ms the problem's {f['bytes']} bytes need at 450 GB/s per direction"
    return None


def _result(status: str, outcome: str, subtype: str, details: dict[str, Any], *, speedup: float | None = None, correct: bool = False, reason: str = "") -> dict[str, Any]:
    return {
        "status": status,
        "outcome": outcome,
        "subtype": subtype or "",
        "speedup": speedup,
        "correct": correct,
        "reason": reason,
        "details": details,
    }


def _error_rank(err: dict[str, Any]) -> tuple[int, int]:
    outcome = err.get("outcome", "")
    o = _ERROR_PRIORITY.index(outcome) if outcome in _ERROR_PRIORITY else len(_ERROR_PRIORITY)
    sub = err.get("subtype", "")
    s = RUNTIME_PRIORITY.index(sub) if sub in RUNTIME_PRIORITY else 0
    return o, s


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def _short(msg: Any, n: int = 300) -> str:
    s = str(msg or "").strip().splitlines()
    s = s[-1] if s else ""
    return s if len(s) <= n else s[: n - 3] + "..."


def _binding_sentence(binding: dict[str, Any]) -> str:
    bad = binding.get("mismatches") or []
    what = "; ".join(f"argument {m['arg']} ({m['name']}) declared {m['declared']}, passed {m['passed']}" for m in bad[:3])
    if not what and binding.get("arity_differs"):
        what = f"{len(binding.get('passed') or [])} arguments passed; declared {binding.get('declared', ['?'])[0]}"
    return f"{binding.get('function')}() binding mismatch: {what}" if what else ""


def _first_compiler_error(msg: Any, n: int = 300) -> str | None:
    """nvcc's first `error` line says more than ninja's closing 'build stopped'."""
    for line in str(msg or "").splitlines():
        if re.search(r"\berror\b", line, re.I) and "ninja: build stopped" not in line and "Error building extension" not in line:
            line = line.strip()
            return line if len(line) <= n else line[: n - 3] + "..."
    return None


def _mismatch_sentence(first: dict[str, Any], wrong: dict[int, list[dict[str, Any]]]) -> str:
    ranks = sorted(r for r, w in wrong.items() if w)
    if not first.get("structure_ok", True):
        what = "output structure differs"
    elif not first.get("shape_ok", True):
        leaf = next((l for l in first.get("leaves", []) if not l.get("shape_ok", True)), {})
        what = f"shape {leaf.get('got_shape')} instead of {leaf.get('expected_shape')}"
    elif not first.get("dtype_ok", True):
        leaf = next((l for l in first.get("leaves", []) if not l.get("dtype_ok", True)), {})
        what = f"dtype {leaf.get('got_dtype')} instead of {leaf.get('expected_dtype')}"
    else:
        what = (
            f"{first.get('mismatches')} of {first.get('numel')} elements outside tolerance, "
            f"max abs error {first.get('max_abs_err'):.3g}"
        )
    return f"trial {first.get('trial')}: {what} (ranks {ranks})"


# The profiler's GPU busy time of one call may exceed the charged time by this much before the
# timing is said to have missed work (clock granularity, a profiled call's own overheads).
PROFILE_BUSY_TOLERANCE = 1.25
PROFILE_BUSY_SLACK_MS = 0.02


def profile_agreement(details: dict[str, Any], profile: dict[str, Any] | None) -> dict[str, Any] | None:
    """Per rank: the candidate's charged time against the profiler's median GPU busy time per call
    (the union of its kernels and copies, on every stream). The GPU cannot be busy longer than a
    call takes, so busy time well above the charged time is work the timing clocks did not see.
    (The span from first to last GPU event is no bound: in a profiled call it holds host gaps.)"""
    charged = (details.get("rank_times_ms") or {}).get("candidate") or {}
    rows = []
    for summary in (profile or {}).get("ranks") or []:
        rank = summary.get("rank")
        busy_us = (summary.get("median") or {}).get("gpu_busy_us")
        timed = charged.get(rank, charged.get(str(rank)))
        if busy_us is None or timed is None:
            continue
        busy_ms = busy_us / 1e3
        rows.append({"rank": rank, "charged_ms": timed, "profiled_gpu_busy_ms": busy_ms,
                     "agrees": busy_ms <= timed * PROFILE_BUSY_TOLERANCE + PROFILE_BUSY_SLACK_MS})
    if not rows:
        return None
    return {"ranks": rows, "agrees": all(r["agrees"] for r in rows)}


_TRIAL_FIELDS = ("matched", "shape_ok", "dtype_ok", "numel", "mismatches", "max_abs_err", "max_rel_err", "max_violation", "nan_inf", "sentinel", "mutates_inputs", "aliases_input", "saved", "repeat")


def trial_summary(result: Any) -> list[dict[str, Any]]:
    """Every correctness trial with each rank's comparison (the first mismatches kept), from a launch's rank results."""
    by_trial: dict[int, list[dict[str, Any]]] = {}
    for r in result.ranks:
        for c in (r.result or {}).get("trials", []) or []:
            entry = {"rank": r.rank, **{k: c.get(k) for k in _TRIAL_FIELDS if k in c}}
            mism = [m for leaf in c.get("leaves", []) for m in leaf.get("first_mismatches", [])]
            if mism:
                entry["first_mismatches"] = mism[:8]
            by_trial.setdefault(int(c["trial"]), []).append(entry)
    return [
        {"trial": t, "matched": all(e.get("matched") for e in es), "ranks": sorted(es, key=lambda e: e["rank"])}
        for t, es in sorted(by_trial.items())
    ]


def rank_summary(result: Any) -> list[dict[str, Any]]:
    """Each rank's phase, error, build time, timing and log tails, from a launch's rank results."""
    out = []
    for r in result.ranks:
        res = r.result or {}
        timing = res.get("timing") or {}
        out.append(
            {
                "rank": r.rank,
                "phase": r.phase,
                "finished": r.finished,
                "error": res.get("error"),
                "compile_s": res.get("compile_s"),
                "timing": timing,
                "timed_checks_matched": all(c.get("matched") for c in res.get("timed_checks") or []),
                "refresh_matched": (res.get("refresh_check") or {}).get("matched"),
                "symm_mem": res.get("symm_mem"),  # handles given, and those with no multicast address
                "stdout_tail": r.stdout_tail[-2000:],
                "stderr_tail": r.stderr_tail[-4000:],
            }
        )
    return out
