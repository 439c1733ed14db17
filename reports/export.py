"""Stored evaluations in the formats of two harnesses users already know: PKB's and KernelBench's.

    pkb_payload(rec)          one candidate as PKB's per-problem eval payload, with per-trial results
    kernelbench_row(rec)      one candidate as a KernelBench-style result record (one table row)
    export_pkb / export_kernelbench   the lines or rows of a run's records (not-run candidates left out)

Both are pure functions of stored records (reports.load reads them). Candidates never evaluated
(status `not_run`) are left out: neither harness has a word for "not attempted".

Mapping of our outcomes to PKB's per-trial `result`
    faster, slower, suspect   each trial `match` or `tensor_mismatch` as our comparison judged it
    wrong_result              the same per trial; a wrong trial stops the run (`early_stop: mismatch`),
                              as PKB stops at its first mismatching trial
    compile_error, load_error, runtime_error, hang
                              one trial `no_artifacts` (the solution job left no rank outputs),
                              `early_stop: execution_or_harness_failure`
    PKB's `missing_artifacts`, `path_mismatch` and `load_error` describe its own files on disk
    (rank_*.pt it could not find or torch.load); our evaluation compares in memory, so they never occur.
    Speedup is PKB's: reference time over candidate time (our medians, max over ranks), on every
    `match` trial; `all_ok` is true only when every trial matched. Our outcome, subtype and the
    device and backend timed on (a CPU/gloo figure is not a GPU one) are kept under `pkb_analyze`.

Mapping to KernelBench's record (compiled, correctness, runtime, speedup, metadata)
    compile_error, load_error   compiled false (KernelBench counts a module that does not load as
                                not compiled); metadata `compilation_error`
    runtime_error, hang         compiled true, correctness false; metadata `runtime_error`
    wrong_result                compiled true, correctness false; metadata `correctness_issue` (subtype)
    suspect                     compiled true, correctness false: its answers or timing cannot be
                                trusted (metadata `correctness_issue: suspect/<subtype>`)
    faster, slower              compiled true, correctness true, runtime = candidate ms, speedup
    runtime and speedup are -1.0 where nothing was timed, as in KernelBench. metadata also carries
    `correctness_trials` "(matched / run)", `hardware` (device and backend) and our outcome.
"""

from __future__ import annotations

from typing import Any

from pkb.record import CandidateRecord

NOT_RAN = ("compile_error", "load_error", "runtime_error", "hang")
CORRECT = ("faster", "slower")
KERNELBENCH_COLUMNS = ("problem_id", "candidate", "compiled", "correctness", "runtime", "ref_runtime", "speedup", "metadata")


def evaluated(records: list[CandidateRecord]) -> list[CandidateRecord]:
    return [r for r in records if (r.evaluation or {}).get("outcome")]


def _times(ev: dict[str, Any]) -> tuple[float | None, float | None]:
    details = ev.get("details") or {}
    return details.get("reference_ms"), details.get("candidate_ms")


def _hardware(ev: dict[str, Any]) -> str:
    return " ".join(str(ev[k]) for k in ("device", "backend") if ev.get(k))


def pkb_trials(ev: dict[str, Any]) -> list[dict[str, Any]]:
    """PKB's per-trial reports for one evaluation (see the module docstring for the mapping)."""
    outcome = ev.get("outcome", "")
    if outcome in NOT_RAN or not ev.get("trials"):
        return [{"trial": 0, "result": "no_artifacts", "early_stop": "execution_or_harness_failure", "error": ev.get("reason", "")}]
    ref_ms, cand_ms = _times(ev)
    speedup = ref_ms / cand_ms if ref_ms and cand_ms else None
    out = []
    for t in ev["trials"]:
        matched = bool(t.get("matched"))
        report: dict[str, Any] = {"trial": int(t.get("trial", len(out))), "result": "match" if matched else "tensor_mismatch"}
        if matched and speedup is not None:
            report["perf"] = {"reference_wall_time_ms_max": ref_ms, "solution_wall_time_ms_max": cand_ms}
            report["speedup"] = speedup
        if not matched:
            report["early_stop"] = "mismatch"
            out.append(report)
            break  # PKB runs no further trial after a mismatch
        out.append(report)
    return out


def pkb_payload(rec: CandidateRecord) -> dict[str, Any]:
    ev = rec.evaluation or {}
    trials = pkb_trials(ev)
    return {
        "version": 1,
        "mode": "eval",
        "problem": ev.get("problem_stem") or (str(rec.problem_id) if rec.problem_id is not None else ""),
        "solution": rec.path,
        "all_ok": all(t["result"] == "match" for t in trials),
        "interrupted": False,
        "harness_environment_failed": False,
        "trials": trials,
        "nproc_per_node": ev.get("world_size"),
        "pkb_analyze": {"outcome": ev.get("outcome", ""), "subtype": ev.get("subtype", ""), "hardware": _hardware(ev), "sha256": rec.sha256},
    }


def kernelbench_row(rec: CandidateRecord) -> dict[str, Any]:
    """One KernelBench-style result (see the module docstring for the mapping)."""
    ev = rec.evaluation or {}
    outcome, subtype = ev.get("outcome", ""), ev.get("subtype", "")
    ref_ms, cand_ms = _times(ev)
    trials = ev.get("trials") or []
    meta: dict[str, Any] = {"hardware": _hardware(ev), "pkb_analyze_outcome": outcome, "correctness_trials": f"({sum(bool(t.get('matched')) for t in trials)} / {len(trials)})"}
    if outcome in ("compile_error", "load_error"):
        meta["compilation_error"] = f"{outcome}/{subtype}: {ev.get('reason', '')}".strip(": ")
    elif outcome in ("runtime_error", "hang"):
        meta["runtime_error"] = f"{outcome}/{subtype}: {ev.get('reason', '')}".strip(": ")
    elif outcome == "wrong_result":
        meta["correctness_issue"] = subtype or "wrong_result"
    elif outcome == "suspect":
        meta["correctness_issue"] = f"suspect/{subtype}"
    correct = outcome in CORRECT
    timed = correct and bool(cand_ms)
    return {
        "problem_id": rec.problem_id if rec.problem_id is not None else ev.get("problem_id"),
        "candidate": rec.path,
        "compiled": outcome not in ("compile_error", "load_error"),
        "correctness": correct,
        "runtime": float(cand_ms) if timed else -1.0,
        "ref_runtime": float(ref_ms) if timed and ref_ms else -1.0,
        "speedup": float(ev["speedup"]) if timed and ev.get("speedup") else -1.0,
        "metadata": meta,
    }


def export_pkb(records: list[CandidateRecord]) -> list[dict[str, Any]]:
    return [pkb_payload(r) for r in evaluated(records)]


def export_kernelbench(records: list[CandidateRecord]) -> list[dict[str, Any]]:
    return [kernelbench_row(r) for r in evaluated(records)]


def fast_p(rows: list[dict[str, Any]], p: float) -> float:
    """KernelBench's fast_p: the share of rows both correct and more than p times faster."""
    return sum(1 for r in rows if r["correctness"] and r["speedup"] > p) / len(rows) if rows else 0.0


def render(records: list[CandidateRecord], fmt: str) -> str:
    """`pkb`: one JSON payload a line (PKB's PKB_EVAL_JSON, without the prefix); `kernelbench`: CSV."""
    import csv
    import io
    import json

    if fmt == "pkb":
        return "".join(json.dumps(p, default=str, ensure_ascii=True) + "\n" for p in export_pkb(records))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=KERNELBENCH_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in export_kernelbench(records):
        writer.writerow({**row, "metadata": json.dumps(row["metadata"], sort_keys=True)})
    return buf.getvalue()
