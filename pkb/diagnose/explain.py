"""One explanation per candidate: outcome, subtype, the evidence with its figures, the likely fix.

Every evidence line is built from an object that is there: a label's Evidence or a Finding
(cited by file, line and snippet), or a value of record.evaluation, record.profile or the
diagnosis (cited by its path in that data, with the value). `check_citations` verifies exactly
that, so an explanation can never cite a line or a figure the earlier stages did not produce.

    diagnose(record)          fills record.diagnosis = {outcome, subtype, wrong, slow, explanation};
                              the command line makes it when an evaluation lands (or a static-only
                              run ends) and stores it (pkb.cli.store_later_parts); reports read it
    explanation_text(expl)    the same in plain words, for terminals and Markdown
"""

from __future__ import annotations

from typing import Any

from pkb.diagnose.slow import diagnose_slow
from pkb.metrics import speed_text
from pkb.diagnose.wrong import diagnose_wrong

# Rules whose findings, where present, are the likely cause of an outcome's subtype.
SUBTYPE_RULES = {
    "local_only": ("PKB014", "PKB001", "PKB007", "PKB004"),
    "missing_peer": ("PKB005", "PKB014", "PKB001", "PKB007", "PKB020", "PKB021"),
    "tail_only": ("PKB006",),
    "stale": ("PKB002", "PKB004", "PKB021"),
    "nondeterministic": ("PKB001", "PKB003", "PKB004", "PKB014", "PKB020", "PKB021"),
    "unwritten": ("PKB006", "PKB005", "PKB014"),
    "scaled": ("PKB005",),
    "rank_subset": ("PKB005", "PKB007"),
    "nan_inf": ("PKB014", "PKB006"),
    "shape_mismatch": ("PKB005", "PKB013"),
    "dtype_mismatch": ("PKB013",),
    "illegal_address": ("PKB005", "PKB006", "PKB013"),
    "misaligned_address": ("PKB017", "PKB013"),
    "python_exception": ("PKB022", "PKB018", "PKB013"),
    "timeout": ("PKB003", "PKB007", "PKB002"),
}
# Plain-words advice where no finding of the record supports a rule's fix.
SUBTYPE_ADVICE = {
    "local_only": "no peer data reached the output: check that the kernel reads the peers' buffers (not its own) and waits for them to be written",
    "missing_peer": "some peers' data is missing: loop over every rank of the world size, and wait for each peer before reading it",
    "tail_only": "only the last partial tile is wrong: handle the element count that is not a multiple of the tile (bounds check or tail loop)",
    "stale": "the output equals an earlier call's answer: reset or epoch-advance flags between calls and do not reuse a buffer before peers finished reading it",
    "nondeterministic": "two identical calls differ: a race between ranks; order the flag writes and reads (release/acquire) and barrier before reusing buffers",
    "unwritten": "parts of the output were never written: check the grid covers every element and every peer's block",
    "scaled": "the result is off by a constant factor: check the reduction (sum vs mean) and that each peer is added once",
    "rank_subset": "only some ranks are wrong: look for rank-dependent code paths and hard-coded ranks or world sizes",
    "nan_inf": "NaN or Inf where the reference is finite: memory read before it was written, or an overflow in the arithmetic",
    "tolerance": "close but outside tolerance: accumulate in float32 and keep the reduction order stable",
    "shape_mismatch": "the output shape differs from the reference's: follow the problem's output contract",
    "dtype_mismatch": "the output dtype differs from the reference's: return the input's dtype",
    "timeout": "a rank never finished: look for spin loops without exit and barriers that not every rank reaches",
}
CAUSE_ADVICE = {
    "host_sync_in_hot_path": "take host synchronisation off the timed call; order work on the GPU instead",
    "setup_in_hot_path": "do allocation, rendezvous and compilation once, cached outside the timed call",
    "nccl_fallback": "move the transfer into the kernel through symmetric-memory pointers instead of a library collective",
    "serialized": "overlap communication with computation (chunked pipeline, a second stream, or a fused kernel)",
    "launch_bound": "fuse the many small launches into fewer kernels (or capture them in a CUDA graph)",
    "small_transfers": "batch small copies into larger transfers",
    "low_link_utilization": "move more bytes per transfer and keep more of them in flight (wider vectors, more blocks, fewer waits)",
    "extra_copies": "drop staging copies the reference does not make; read peer buffers directly",
    "low_occupancy": "raise occupancy: more blocks or fewer registers/shared memory per block",
}
OUTCOME_WORDS = {
    "compile_error": "does not compile",
    "load_error": "does not load",
    "runtime_error": "fails at run time",
    "hang": "hangs",
    "wrong_result": "gives a wrong result",
    "suspect": "is suspect",
    "slower": "is correct but slower than the reference",
    "faster": "is correct and faster than the reference",
}


def _problem_has_compute(record: Any) -> bool | None:
    if record.problem_id is None:
        return None
    try:
        import problems

        spec = problems.spec(record.problem_id)
    except Exception:
        return None
    return spec.has_compute if spec is not None else None


def diagnose(record: Any, *, tile: int | None = None) -> dict[str, Any]:
    """Fill record.diagnosis from what the record holds (static results, evaluation, profile)."""
    ev = record.evaluation or {}
    wrong = None
    if ev.get("outcome") == "wrong_result":
        try:
            wrong = diagnose_wrong(ev, tile=tile or _tile_from_findings(record))
        except Exception as exc:  # a broken job dir must not take the report down
            wrong = {"subtype": ev.get("subtype") or "", "eval_subtype": ev.get("subtype") or "", "held": [], "evidence": [], "cases": [],
                     "notes": [f"diagnosis failed: {type(exc).__name__}: {str(exc)[:200]}"]}
    slow = diagnose_slow(record, _problem_has_compute(record))
    outcome = ev.get("outcome") or ""
    subtype = (wrong or {}).get("subtype") or ev.get("subtype") or ""
    record.diagnosis = {"outcome": outcome, "subtype": subtype, "wrong": wrong, "slow": slow}
    record.diagnosis["explanation"] = explain(record)
    return record.diagnosis


def _tile_from_findings(record: Any) -> int | None:
    """A tile size PKB006's message names (e.g. 'tile 256'), so tail_only uses the kernel's own."""
    import re

    for f in record.findings:
        if f.rule == "PKB006":
            m = re.search(r"(?:tile|vector width|BLOCK(?:_SIZE)?)\D{0,4}(\d+)", f.message, re.I)
            if m:
                return int(m.group(1))
    return None


# ---- evidence lines -----------------------------------------------------------------------------


def _cite_finding(f: Any) -> dict[str, Any]:
    return {"kind": "finding", "rule": f.rule, "file": f.file, "line": f.line, "snippet": f.snippet,
            "text": f"{f.rule} {f.name} ({f.severity}) at {f.file}:{f.line}: {f.message}"}


def _cite_label(axis: str, value: str, e: Any, kernel: str = "") -> dict[str, Any]:
    where = f" in kernel {kernel}" if kernel else ""
    return {"kind": "label", "axis": axis, "label": value, "kernel": kernel, "file": e.file, "line": e.line, "snippet": e.snippet,
            "text": f"{axis} = {value}{where}: {e.file}:{e.line} ({e.pass_name}) {e.snippet}".rstrip()}


def _cite_data(source: str, path: list[Any], value: Any, text: str) -> dict[str, Any]:
    return {"kind": source, "path": path, "value": value, "text": text}


def explain(record: Any) -> dict[str, Any]:
    from analyzer.rules import all_rules

    catalogue = {r.id: r for r in all_rules()}
    ev = record.evaluation or {}
    diag = record.diagnosis or {}
    outcome = ev.get("outcome") or ""
    subtype = diag.get("subtype") or ev.get("subtype") or ""
    lines: list[dict[str, Any]] = []
    fixes: list[dict[str, Any]] = []
    rule_ids: list[str] = []

    # What the static passes say, always: one cited line per candidate label.
    for axis in ("mechanism", "sync", "ordering", "overlap"):
        for lab in record.labels.get(axis, []):
            if lab.evidence:
                lines.append(_cite_label(axis, lab.value, lab.evidence[0]))

    if not ev or ev.get("status") in (None, "", "not_run") and not outcome:
        reason = ev.get("reason") if ev else ""
        headline = "not evaluated" + (f": {reason}" if reason else " (static passes only)")
        if ev and reason:
            lines.append(_cite_data("evaluation", ["reason"], reason, f"evaluation not run: {reason}"))
        rule_ids = sorted({f.rule for f in record.findings})
    elif outcome in ("compile_error", "load_error", "runtime_error", "hang", "suspect"):
        headline = f"{OUTCOME_WORDS[outcome]} ({subtype or 'unclassified'}): {ev.get('reason', '')}".rstrip(": ")
        lines.append(_cite_data("evaluation", ["reason"], ev.get("reason"), f"evaluation: {ev.get('reason')}"))
        details = ev.get("details") or {}
        for key in ("failed_ranks", "stuck_ranks", "crashed_ranks", "timed_mismatch", "refresh_mismatch_ranks"):
            if details.get(key):
                lines.append(_cite_data("evaluation", ["details", key], details[key], f"{key.replace('_', ' ')}: {_short(details[key])}"))
        rule_ids = [r for r in SUBTYPE_RULES.get(subtype, ()) if _has_rule(record, r)] or sorted({f.rule for f in record.findings if f.severity == "error"})
    elif outcome == "wrong_result":
        wrong = diag.get("wrong") or {}
        figures = [(i, e) for i, e in enumerate(wrong.get("evidence", [])) if e.get("subtype") == subtype] or list(enumerate(wrong.get("evidence", [])))
        lead = figures[0][1]["figure"] if figures else ev.get("reason", "")
        headline = f"{OUTCOME_WORDS[outcome]} ({subtype or 'unclassified'}): {lead}"
        lines.append(_cite_data("evaluation", ["reason"], ev.get("reason"), f"evaluation: {ev.get('reason')}"))
        for i, e in figures[:4]:
            where = f"trial {e['trial']} rank {e['rank']}: " if "trial" in e else ""
            lines.append(_cite_data("diagnosis", ["wrong", "evidence", i, "figure"], e["figure"], f"{e['subtype']} held: {where}{e['figure']}"))
        others = sorted({e["subtype"] for e in wrong.get("evidence", [])} - {subtype})
        if others:
            lines.append(_cite_data("diagnosis", ["wrong", "held"], wrong.get("held"), f"also held: {', '.join(others)}"))
        rule_ids = [r for r in SUBTYPE_RULES.get(subtype, ()) if _has_rule(record, r)]
    else:  # slower / faster / correct but not timed
        speed = ev.get("speedup")
        headline = OUTCOME_WORDS.get(outcome, "correct") + (f": speedup {speed_text(ev)}" if isinstance(speed, (int, float)) else "")
        details = ev.get("details") or {}
        if isinstance(speed, (int, float)):
            lines.append(_cite_data("evaluation", ["speedup"], speed, f"speedup {speed:.3g}x (reference {_ms(details.get('reference_ms'))} / candidate {_ms(details.get('candidate_ms'))}, slowest rank)"))
        check = details.get("profile_check") or {}
        if check.get("agrees") is False:
            worst = max(check["ranks"], key=lambda r: r["profiled_gpu_busy_ms"] / max(r["charged_ms"], 1e-9))
            lines.append(_cite_data("evaluation", ["details", "profile_check", "agrees"], check["agrees"],
                                    f"the profiler saw more GPU work per call than the timing charged: rank {worst['rank']} "
                                    f"{_ms(worst['profiled_gpu_busy_ms'])} of GPU busy time vs {_ms(worst['charged_ms'])} charged"))
        rule_ids = []
    # Slowness causes, for slow outcomes in full, otherwise the static ones as hints.
    slow = diag.get("slow") or []
    if outcome in ("slower", "faster") or not outcome:
        for i, c in enumerate(slow):
            if outcome == "faster" and not c.get("measured"):
                continue
            lines.append(_cite_data("diagnosis", ["slow", i, "cause"], c["cause"], f"{'slowness cause' if outcome else 'possible slowness cause (static)'} {c['cause']} ({c['cost']}): " + "; ".join(e["text"] for e in c["evidence"][:3])))
            for e in c["evidence"]:
                if e.get("rule") and e["rule"] not in rule_ids:
                    rule_ids.append(e["rule"])
        if outcome == "slower" and slow:
            headline += f"; the costliest cause: {slow[0]['cause']} ({slow[0]['cost']})"
    # The findings that support the chosen rules, each cited; their fixes from the catalogue.
    for rid in rule_ids:
        fs = [f for f in record.findings if f.rule == rid]
        if not fs:
            continue
        for f in fs[:2]:
            lines.append(_cite_finding(f))
        rule = catalogue.get(rid)
        if rule is not None:
            fixes.append({"rule": rid, "name": rule.name, "fix": rule.fix, "why": rule.rationale(), "at": [f"{f.file}:{f.line}" for f in fs[:3]]})
    if not fixes:
        advice = SUBTYPE_ADVICE.get(subtype) or (CAUSE_ADVICE.get(slow[0]["cause"]) if slow and outcome == "slower" else "")
        if advice:
            fixes.append({"rule": "", "name": "", "fix": advice, "why": "", "at": []})
    if outcome == "slower":
        for c in slow:
            advice = CAUSE_ADVICE.get(c["cause"])
            if advice and not any(e.get("rule") for e in c["evidence"]):
                given = next((f for f in fixes if f["fix"] == advice), None)
                if given is None:
                    fixes.append({"rule": "", "name": c["cause"], "fix": advice, "why": "", "at": []})
                elif not given["name"]:
                    given["name"] = c["cause"]  # the costliest cause's advice, given above unnamed: name it once
    expl = {"outcome": outcome, "subtype": subtype, "headline": headline, "evidence": lines, "fixes": fixes,
            "notes": list(((diag.get("wrong") or {}).get("notes") or []))}
    expl["text"] = explanation_text(expl, record.path)
    return expl


def _has_rule(record: Any, rid: str) -> bool:
    return any(f.rule == rid for f in record.findings)


def _ms(v: Any) -> str:
    return f"{v:.3g} ms" if isinstance(v, (int, float)) else "?"


def _short(v: Any, n: int = 160) -> str:
    s = str(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def explanation_text(expl: dict[str, Any], path: str = "") -> str:
    head = f"{path}: " if path else ""
    tag = expl.get("outcome") or "not evaluated"
    if expl.get("subtype"):
        tag += f" ({expl['subtype']})"
    out = [f"{head}{tag}", f"  {expl['headline']}"]
    if expl["evidence"]:
        out.append("Evidence:")
        out += [f"  - {e['text']}" for e in expl["evidence"]]
    if expl["fixes"]:
        out.append("Likely fix:")
        for f in expl["fixes"]:
            tagr = f"{f['rule']} {f['name']}: " if f.get("rule") else ""
            at = f" (at {', '.join(f['at'])})" if f.get("at") else ""
            out.append(f"  - {tagr}{f['fix']}{at}")
            if f.get("why"):
                out.append(f"    why: {f['why']}")
    if expl.get("notes"):
        out.append("Notes:")
        out += [f"  - {n}" for n in expl["notes"]]
    return "\n".join(out)


# ---- the guarantee --------------------------------------------------------------------------------


def _resolve(data: Any, path: list[Any]) -> Any:
    for key in path:
        if isinstance(data, dict):
            data = data.get(key)
        elif isinstance(data, list) and isinstance(key, int) and 0 <= key < len(data):
            data = data[key]
        else:
            return KeyError
    return data


def check_citations(record: Any, expl: dict[str, Any] | None = None) -> list[str]:
    """Every way `expl` cites something the record does not hold (empty: all citations hold)."""
    expl = expl or (record.diagnosis or {}).get("explanation") or {}
    known_lines = {(e.file, e.line, e.snippet) for labs in record.labels.values() for lab in labs for e in lab.evidence}
    known_lines |= {(e.file, e.line, e.snippet) for k in record.kernels for labs in k.labels.values() for lab in labs for e in lab.evidence}
    known_findings = {(f.rule, f.file, f.line, f.snippet) for f in record.findings}
    sources = {"evaluation": record.evaluation, "profile": record.profile, "diagnosis": record.diagnosis}
    problems = []
    for e in expl.get("evidence", []):
        if e["kind"] == "finding":
            if (e["rule"], e["file"], e["line"], e["snippet"]) not in known_findings:
                problems.append(f"cites finding {e['rule']} at {e['file']}:{e['line']} that the record does not hold")
        elif e["kind"] == "label":
            if (e["file"], e["line"], e["snippet"]) not in known_lines:
                problems.append(f"cites {e['file']}:{e['line']} that no label evidence holds")
        else:
            value = _resolve(sources.get(e["kind"]), e["path"])
            if value is KeyError or value != e["value"]:
                problems.append(f"cites {e['kind']}.{e['path']} = {e['value']!r}, which the record holds as {value!r}")
    for f in expl.get("fixes", []):
        for at in f.get("at", []):
            file, _, line = at.rpartition(":")
            if not any(x.file == file and str(x.line) == line and x.rule == f["rule"] for x in record.findings):
                problems.append(f"fix cites {at} without a {f['rule']} finding there")
    return problems
