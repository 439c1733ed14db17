"""One HTML page per candidate (in the report's kernels/ folder, linking back to the corpus page).

The functions here prepare plain data; templates/kernel.html.j2 and its sections in
templates/kernel_parts.html.j2 write the markup (escaped by autoescape).

Labels per axis for the candidate and for each kernel with their evidence (file:line, pass,
snippet), findings with the rule's fix, the evaluation's figures per trial and rank, the stored profile
summary and ncu counters, the diagnosis, the timeline of one profiled call (profiling.timeline.plot_call on the record's trace,
inline PNG) and the explanation.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from pkb.metrics import speed_text
from reports import templating
from reports.explain_view import cause_rows, merged_evidence
from reports.html_parts import Plot, fmt, png_to_img
from reports.templating import macro

AXES = ("mechanism", "sync", "ordering", "overlap")
PAGES_DIR = "kernels"


def page_name(index: int, record: Any) -> str:
    """The page's file name: its index, then the path's last 90 characters (the file's own name kept whole)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", record.path.replace("/", "__")).strip("_")[-90:].lstrip("_")
    return f"{index:03d}_{stem}.html"


def evidence_data(lab: Any) -> dict[str, Any]:
    """A label's value and its evidence, one entry per place (at most six, then how many more)."""
    places = merged_evidence(lab.evidence)
    return {"value": lab.value, "more": max(0, len(places) - 6),
            "places": [{"file": f, "line": line, "pass_name": p, "snippet": snip, "notes": notes} for f, line, p, snip, notes in places[:6]]}


def labels_data(labels: dict[str, list[Any]]) -> list[dict[str, Any]]:
    return [{"axis": axis, **evidence_data(lab)} for axis in AXES for lab in labels.get(axis, [])]


def _evidence_cell(lab: Any) -> str:
    return macro("kernel_parts.html.j2", "evidence_cell")(evidence_data(lab))


def labels_table(labels: dict[str, list[Any]]) -> str:
    return macro("kernel_parts.html.j2", "labels_table")(labels_data(labels))


def timeline_data(record: Any) -> dict[str, Any]:
    """The record's profiled call as a plot, or a sentence why there is none; where the ranks'
    merged trace exists, its path (the page says how to open it)."""
    plot, note = _timeline_plot(record)
    return {"plot": plot, "note": note, "merged": str((record.profile or {}).get("merged_trace") or "")}


def timeline_img(record: Any) -> tuple[str, int]:
    """(HTML, number of images) of the timeline section."""
    data = timeline_data(record)
    return macro("kernel_parts.html.j2", "timeline")(data), int(data["plot"] is not None)


def _timeline_plot(record: Any) -> tuple[Plot | None, str]:
    prof = record.profile or {}
    ranks = prof.get("ranks") or []
    png = prof.get("timeline_png")
    for summary in ranks[:1]:
        path = summary.get("path")
        if not path or not Path(path).is_file():
            continue
        try:
            from profiling.analyze import comm_kernel_names
            from profiling.timeline import plot_call
            from profiling.trace import load_cupti_jsonl, load_trace

            rank = summary.get("rank") or 0
            trace = load_cupti_jsonl(path, rank=rank) if str(path).endswith(".jsonl") else load_trace(path, rank=rank)
            call = 1 if (summary.get("n_calls") or 0) > 1 else 0
            with tempfile.TemporaryDirectory() as tmp:
                out = plot_call(trace, call, Path(tmp) / "call.png", comm_kernel_names(record), title=f"rank {rank}: candidate call {call}")
                return png_to_img(out.read_bytes(), f"timeline of rank {rank}, call {call}"), ""
        except Exception as exc:
            return None, f"timeline not drawn: {type(exc).__name__}: {str(exc)[:200]}"
    if png and Path(png).is_file():
        return png_to_img(Path(png).read_bytes(), "timeline of one candidate call"), ""
    return None, "no profile trace for this candidate"


def findings_data(record: Any, cited: list[str] | None = None) -> dict[str, Any]:
    """Each finding once (reports.explain_view), the noqa-suppressed ones, and each fired rule's
    documentation (Markdown, rendered by templates/findings.html.j2)."""
    from analyzer.rules import all_rules
    from reports.explain_view import finding_rows

    catalogue = {r.id: r for r in all_rules()}
    fired = sorted({f.rule for f in record.findings} & set(catalogue))
    return {"rows": finding_rows(record, cited or []), "suppressed": list(record.suppressed),
            "rules": [{"id": rid, "name": catalogue[rid].name, "doc": catalogue[rid].doc()} for rid in fired]}


def evaluation_data(record: Any) -> dict[str, Any] | None:
    """The evaluation's figures, its trials per rank, and its error dumps; None when not evaluated."""
    ev = record.evaluation or {}
    if not ev:
        return None
    d = ev.get("details") or {}
    figures = [
        ["status", ev.get("status")], ["outcome", ev.get("outcome")], ["subtype", ev.get("subtype")],
        ["speedup", speed_text(ev) or fmt(ev.get("speedup"))], ["reference ms (slowest rank)", fmt(d.get("reference_ms"))],
        ["candidate ms (slowest rank)", fmt(d.get("candidate_ms"))], ["speedup by CUDA events only", fmt(d.get("speedup_event"))],
        ["world size", ev.get("world_size")], ["backend / device / dtype", f"{ev.get('backend', '')} / {ev.get('device', '')} / {ev.get('dtype', '')}"],
        ["reason", ev.get("reason")], ["wall s", fmt(ev.get("wall_s"))],
    ]
    trials = []
    for t in ev.get("trials", []):
        for e in t.get("ranks", []):
            mism = "; ".join(f"flat {m.get('flat')} {m.get('coords')}: got {fmt(m.get('got'))} want {fmt(m.get('expected'))}" for m in (e.get("first_mismatches") or [])[:3])
            rep = e.get("repeat")
            rep_s = "" if rep is None else ("same" if rep.get("equal") else f"differs ({rep.get('differing')})")
            trials.append([t["trial"], e.get("rank"), "yes" if e.get("matched") else "no", e.get("numel"), e.get("mismatches"),
                           fmt(e.get("max_abs_err")), fmt(e.get("max_violation")), e.get("nan_inf"), e.get("sentinel"), rep_s, mism])
    # cut before escaping: an entity is never cut in half
    dumps = [(key.replace("_", " "), str(d[key])[:3000]) for key in ("errors", "stuck_ranks", "crashed_ranks") if d.get(key)]
    return {"figures": [r for r in figures if r[1] not in (None, "", " /  / ")], "trials": trials, "dumps": dumps}


def _evaluation_html(record: Any) -> str:
    return macro("kernel_parts.html.j2", "evaluation")(evaluation_data(record))


def diagnosis_data(record: Any) -> dict[str, Any]:
    """Wrong-result hypotheses per trial and rank (held, then up to eight rejected), and the
    slowness causes with up to four pieces of evidence each."""
    diag = record.diagnosis or {}
    wrong = diag.get("wrong")
    out: dict[str, Any] = {"wrong": None, "slow": []}
    if wrong:
        rows = []
        for c in wrong.get("cases", [])[:12]:
            rows += [{"trial": c["trial"], "rank": c["rank"], "name": h["name"], "held": True, "figure": h.get("figure")} for h in c.get("held", [])]
            rows += [{"trial": c["trial"], "rank": c["rank"], "name": h["name"], "held": False, "figure": h.get("figure")} for h in c.get("rejected", [])[:8]]
        out["wrong"] = {"rows": rows, "notes": list(wrong.get("notes", []))}
    out["slow"] = cause_rows(diag)
    return out


_PROFILE_COLUMNS = (("cpu_us", "CPU us"), ("gpu_span_us", "GPU span us"), ("comm_us", "comm us"), ("compute_us", "compute us"),
                    ("overlap_share", "overlap"), ("launches", "launches"), ("host_syncs", "host syncs"), ("achieved_GBps", "GB/s"))


def profile_data(record: Any) -> dict[str, Any]:
    """The stored profile summary of `eval --profile`: per rank, the medians over its profiled
    calls and the trace it was read from; its notes; what went wrong reading one."""
    prof = record.profile or {}
    ranks = [r for r in prof.get("ranks") or [] if r]
    errors = [str(e.get("error") if isinstance(e, dict) else e)[:300] for e in prof.get("errors") or []]
    return {"headers": [h for _, h in _PROFILE_COLUMNS], "errors": errors,
            "ranks": [{"figures": [r.get("rank"), r.get("n_calls")] + [fmt((r.get("median") or {}).get(c)) for c, _ in _PROFILE_COLUMNS],
                       "trace": Path(str(r.get("path") or "")).name} for r in ranks],
            "notes": sorted({n for r in ranks for n in r.get("notes") or []})}


def profile_html(record: Any) -> str:
    return macro("kernel_parts.html.j2", "profile")(profile_data(record))


_NCU_COLUMNS = (("duration_ns", "ns"), ("nvlink_tx_bytes", "NVLink tx B"), ("nvlink_rx_bytes", "NVLink rx B"),
                ("peer_l2_bytes", "peer L2 B"), ("tma_load_bytes", "TMA load B"), ("tma_store_bytes", "TMA store B"),
                ("dram_bytes", "DRAM B"), ("sm_throughput_pct", "SM %"))


def ncu_data(record: Any) -> dict[str, Any] | None:
    """The Nsight Compute rows of `eval --ncu`, one per profiled kernel and rank; None without a pass."""
    ncu = (record.profile or {}).get("ncu")
    if not ncu:
        return None
    return {"unavailable": list(ncu.get("unavailable_metrics") or []), "status": ncu.get("status") or "", "error": ncu.get("error") or "",
            "headers": [h for _, h in _NCU_COLUMNS],
            "rows": [[k.get("rank"), k.get("kernel", "")[:90]] + [fmt(k.get(c)) for c, _ in _NCU_COLUMNS] for k in ncu.get("kernels", [])]}


def ncu_html(record: Any) -> str:
    return macro("kernel_parts.html.j2", "ncu")(ncu_data(record))


def page_data(record: Any, back: str = "../index.html") -> dict[str, Any]:
    """Everything kernel.html.j2 shows of one candidate, as plain data."""
    from reports.explain_view import explanation_parts

    ev = record.evaluation or {}
    diag = record.diagnosis or {}
    expl = diag.get("explanation") or {}
    where = ", ".join(x for x in (f"problem {record.problem_id}_{record.problem_name}" if record.problem_id is not None else record.problem_name,
                                  f"model {record.model}" if record.model else "", record.run_tree) if x)
    explanation = explanation_parts(expl) if expl else None
    return {
        "title": f"pkb-analyze: {record.path}", "back": back, "path": record.path, "where": where,
        "outcome": ev.get("outcome") or "", "subtype": ev.get("subtype") or diag.get("subtype") or "",
        "parse_status": record.parse_status, "parse_message": record.parse_message or "",
        "explanation": explanation, "labels": labels_data(record.labels),
        "kernels": [{"name": k.name, "language": k.language, "line": k.line, "labels": labels_data(k.labels)} for k in record.kernels],
        "passes": ", ".join(f"{p.name}: {p.status}" + (f" ({p.message})" if p.message else "") for p in record.passes),
        "findings_part": findings_data(record, explanation["cited"] if explanation else []),
        "evaluation": evaluation_data(record), "profile": profile_data(record), "ncu": ncu_data(record),
        "diagnosis": diagnosis_data(record), "timeline": timeline_data(record),
    }


def render(record: Any, back: str = "../index.html") -> tuple[str, int]:
    """(HTML, number of <img> plots) of one candidate's page."""
    data = page_data(record, back)
    return templating.render("kernel.html.j2", **data), int(data["timeline"]["plot"] is not None)


def write(record: Any, out_dir: Path, name: str, back: str = "../index.html") -> tuple[Path, int]:
    out_dir.mkdir(parents=True, exist_ok=True)
    html_text, n = render(record, back)
    path = out_dir / name
    path.write_text(html_text, encoding="utf-8")
    return path, n
