"""One HTML page per candidate (in the report's kernels/ folder, linking back to the corpus page).

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
from reports.explain_view import merged_evidence
from reports.html_parts import badge, esc, fmt, page, png_to_img, table

AXES = ("mechanism", "sync", "ordering", "overlap")
PAGES_DIR = "kernels"


def page_name(index: int, record: Any) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", record.path.replace("/", "__")).strip("_")[:90]
    return f"{index:03d}_{stem}.html"


def _evidence_cell(lab: Any) -> str:
    if not lab.evidence:
        return '<span class="muted">no evidence recorded</span>'
    parts = []
    places = merged_evidence(lab.evidence)
    for file, line, pass_name, snippet, notes in places[:6]:
        note = f' <span class="muted">({esc(notes)})</span>' if notes else ""
        parts.append(f"<div><code>{esc(file)}:{line}</code> [{esc(pass_name)}] <code>{esc(snippet)}</code>{note}</div>")
    if len(places) > 6:
        parts.append(f'<div class="muted">and {len(places) - 6} more</div>')
    return "".join(parts)


def labels_table(labels: dict[str, list[Any]]) -> str:
    rows = [[axis, f"<code>{esc(lab.value)}</code>", _evidence_cell(lab)] for axis in AXES for lab in labels.get(axis, [])]
    if not rows:
        return '<p class="muted">no labels</p>'
    return table(["axis", "label", "evidence (file:line [pass] snippet)"], rows, raw={1, 2})


def timeline_img(record: Any) -> tuple[str, int]:
    """(HTML, number of images) for the record's profiled call, or a sentence why there is none;
    where the ranks' merged trace exists, a line saying how to open it."""
    html, images = _timeline_img(record)
    merged = (record.profile or {}).get("merged_trace")
    if merged:
        html += f'<p class="muted">every rank in one trace: <code>{esc(str(merged))}</code>; open it at ui.perfetto.dev ("Open trace file")</p>'
    return html, images


def _timeline_img(record: Any) -> tuple[str, int]:
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
                return png_to_img(out.read_bytes(), f"timeline of rank {rank}, call {call}"), 1
        except Exception as exc:
            return f'<p class="muted">timeline not drawn: {esc(type(exc).__name__)}: {esc(str(exc)[:200])}</p>', 0
    if png and Path(png).is_file():
        return png_to_img(Path(png).read_bytes(), "timeline of one candidate call"), 1
    return '<p class="muted">no profile trace for this candidate</p>', 0


def _findings_html(record: Any, cited: list[str] | None = None) -> str:
    """Each finding once (reports.explain_view), the noqa-suppressed ones named, and each fired
    rule's documentation rendered from its Markdown (templates/findings.html.j2)."""
    from analyzer.rules import all_rules
    from reports.explain_view import finding_rows
    from reports.templating import render

    catalogue = {r.id: r for r in all_rules()}
    fired = sorted({f.rule for f in record.findings} & set(catalogue))
    return render("findings.html.j2", findings=finding_rows(record, cited or []), suppressed=list(record.suppressed),
                  rules=[{"id": rid, "name": catalogue[rid].name, "doc": catalogue[rid].doc()} for rid in fired])


def _evaluation_html(record: Any) -> str:
    ev = record.evaluation or {}
    if not ev:
        return '<p class="notice">Not evaluated: no evaluation data for this candidate (static passes only).</p>'
    d = ev.get("details") or {}
    rows = [
        ["status", ev.get("status")], ["outcome", ev.get("outcome")], ["subtype", ev.get("subtype")],
        ["speedup", speed_text(ev) or fmt(ev.get("speedup"))], ["reference ms (slowest rank)", fmt(d.get("reference_ms"))],
        ["candidate ms (slowest rank)", fmt(d.get("candidate_ms"))], ["speedup by CUDA events only", fmt(d.get("speedup_event"))],
        ["world size", ev.get("world_size")], ["backend / device / dtype", f"{ev.get('backend', '')} / {ev.get('device', '')} / {ev.get('dtype', '')}"],
        ["reason", ev.get("reason")], ["wall s", fmt(ev.get("wall_s"))],
    ]
    out = table(["figure", "value"], [r for r in rows if r[1] not in (None, "", " /  / ")])
    trial_rows = []
    for t in ev.get("trials", []):
        for e in t.get("ranks", []):
            mism = "; ".join(f"flat {m.get('flat')} {m.get('coords')}: got {fmt(m.get('got'))} want {fmt(m.get('expected'))}" for m in (e.get("first_mismatches") or [])[:3])
            rep = e.get("repeat")
            rep_s = "" if rep is None else ("same" if rep.get("equal") else f"differs ({rep.get('differing')})")
            trial_rows.append([t["trial"], e.get("rank"), "yes" if e.get("matched") else "no", e.get("numel"), e.get("mismatches"),
                               fmt(e.get("max_abs_err")), fmt(e.get("max_violation")), e.get("nan_inf"), e.get("sentinel"), rep_s, mism])
    if trial_rows:
        out += "<h3>Trials per rank</h3>" + table(
            ["trial", "rank", "matched", "elements", "mismatches", "max |err|", "max violation", "nan/inf", "poison", "repeat call", "first mismatches"],
            trial_rows, num={0, 1, 3, 4, 5, 6, 7, 8})
    for key in ("errors", "stuck_ranks", "crashed_ranks"):
        if d.get(key):
            out += f"<h3>{esc(key.replace('_', ' '))}</h3><pre>{esc(d[key])[:3000]}</pre>"
    return out


def _diagnosis_html(record: Any) -> str:
    diag = record.diagnosis or {}
    out = ""
    wrong = diag.get("wrong")
    if wrong:
        rows = []
        for c in wrong.get("cases", [])[:12]:
            for h in c.get("held", []):
                rows.append([c["trial"], c["rank"], f"<b>{esc(h['name'])}</b>", "held", esc(h.get("figure"))])
            for h in c.get("rejected", [])[:8]:
                rows.append([c["trial"], c["rank"], esc(h["name"]), '<span class="muted">did not hold</span>', esc(h.get("figure"))])
        out += "<h3>Wrong-result hypotheses</h3>"
        out += table(["trial", "rank", "hypothesis", "verdict", "figure"], rows, raw={2, 3, 4}) if rows else '<p class="muted">no case could be tested</p>'
        for n in wrong.get("notes", []):
            out += f'<p class="muted">note: {esc(n)}</p>'
    slow = diag.get("slow") or []
    if slow:
        rows = [[esc(c["cause"]), esc(c["cost"]), "<br>".join(esc(e["text"]) for e in c["evidence"][:4])] for c in slow]
        out += "<h3>Slowness causes (ranked by measured cost)</h3>" + table(["cause", "cost", "evidence"], rows, raw={0, 1, 2})
    return out or '<p class="muted">nothing to diagnose</p>'


_PROFILE_COLUMNS = (("cpu_us", "CPU us"), ("gpu_span_us", "GPU span us"), ("comm_us", "comm us"), ("compute_us", "compute us"),
                    ("overlap_share", "overlap"), ("launches", "launches"), ("host_syncs", "host syncs"), ("achieved_GBps", "GB/s"))


def profile_html(record: Any) -> str:
    """The stored profile summary of `eval --profile`: per rank, the medians over its profiled
    calls, the trace it was read from, and what went wrong reading one; or why there is none."""
    prof = record.profile or {}
    ranks = [r for r in prof.get("ranks") or [] if r]
    errors = prof.get("errors") or []
    if not ranks and not errors:
        return '<p class="muted">no profile recorded (pkb-analyze eval --profile)</p>'
    rows = [[r.get("rank"), r.get("n_calls")] + [fmt((r.get("median") or {}).get(c)) for c, _ in _PROFILE_COLUMNS]
            + [f"<code>{esc(Path(str(r.get('path') or '')).name)}</code>"] for r in ranks]
    out = table(["rank", "calls"] + [h for _, h in _PROFILE_COLUMNS] + ["trace"], rows, num=set(range(0, 2 + len(_PROFILE_COLUMNS))),
                raw={2 + len(_PROFILE_COLUMNS)}) if rows else ""
    notes = sorted({n for r in ranks for n in r.get("notes") or []})
    out += "".join(f'<p class="muted">note: {esc(n)}</p>' for n in notes)
    for e in errors:
        text = e.get("error") if isinstance(e, dict) else e
        out += f'<p class="notice">profile: {esc(str(text)[:300])}</p>'
    return out


_NCU_COLUMNS = (("duration_ns", "ns"), ("nvlink_tx_bytes", "NVLink tx B"), ("nvlink_rx_bytes", "NVLink rx B"),
                ("peer_l2_bytes", "peer L2 B"), ("tma_load_bytes", "TMA load B"), ("tma_store_bytes", "TMA store B"),
                ("dram_bytes", "DRAM B"), ("sm_throughput_pct", "SM %"))


def ncu_html(record: Any) -> str:
    """The Nsight Compute rows of `eval --ncu`, one per profiled kernel and rank, or why none."""
    ncu = (record.profile or {}).get("ncu")
    if not ncu:
        return '<p class="muted">no Nsight Compute pass (pkb-analyze eval --ncu)</p>'
    out = ""
    if ncu.get("unavailable_metrics"):
        out += f'<p class="muted">not available on the machine: {esc(", ".join(ncu["unavailable_metrics"]))}</p>'
    if ncu.get("status") != "ok":
        return out + f'<p class="notice">ncu {esc(ncu.get("status"))}: {esc(ncu.get("error") or "")}</p>'
    rows = [[k.get("rank"), k.get("kernel", "")[:90]] + [fmt(k.get(c)) for c, _ in _NCU_COLUMNS] for k in ncu.get("kernels", [])]
    return out + table(["rank", "kernel"] + [h for _, h in _NCU_COLUMNS], rows, num=set(range(2, 2 + len(_NCU_COLUMNS))))


def explanation_html(expl: dict[str, Any]) -> str:
    """The explanation without what the findings and labels tables already show."""
    from reports.explain_view import explanation_parts
    from reports.templating import render

    if not expl:
        return ""
    return render("explanation.html.j2", **explanation_parts(expl))


def render(record: Any, back: str = "../index.html") -> tuple[str, int]:
    """(HTML, number of <img> plots) of one candidate's page."""
    ev = record.evaluation or {}
    expl = (record.diagnosis or {}).get("explanation") or {}
    where = ", ".join(x for x in (f"problem {record.problem_id}_{record.problem_name}" if record.problem_id is not None else record.problem_name,
                                  f"model {record.model}" if record.model else "", record.run_tree) if x)
    parts = [
        f'<nav class="toc"><a href="{esc(back)}">&larr; corpus report</a> <a href="#labels">labels</a> <a href="#kernels">kernels</a> '
        '<a href="#findings">findings</a> <a href="#evaluation">evaluation</a> <a href="#profile">profile</a> <a href="#ncu">ncu</a> <a href="#diagnosis">diagnosis</a> <a href="#timeline">timeline</a></nav>',
        f"<h1>{esc(record.path)}</h1>",
        f'<p class="sub">{esc(where)} &middot; {badge(ev.get("outcome", ""))}'
        + (f" <code>{esc(ev.get('subtype') or (record.diagnosis or {}).get('subtype'))}</code>" if (ev.get("subtype") or (record.diagnosis or {}).get("subtype")) else "")
        + f" &middot; read: {esc(record.parse_status)}"
        + (f" ({esc(record.parse_message)})" if record.parse_message else "") + "</p>",
        '<h2 id="explanation">Explanation</h2>', explanation_html(expl) or '<p class="muted">no explanation</p>',
        '<h2 id="labels">Labels of the candidate</h2>', labels_table(record.labels),
        '<h2 id="kernels">Kernels</h2>',
    ]
    if record.kernels:
        for k in record.kernels:
            parts.append(f"<h3>{esc(k.name)} <span class=\"muted\">({esc(k.language)}, line {k.line})</span></h3>")
            parts.append(labels_table(k.labels))
    else:
        parts.append('<p class="muted">no CUDA or Triton kernel found</p>')
    passes = ", ".join(f"{p.name}: {p.status}" + (f" ({p.message})" if p.message else "") for p in record.passes)
    if passes:
        parts.append(f'<p class="muted">passes: {esc(passes)}</p>')
    from reports.explain_view import explanation_parts

    parts += ['<h2 id="findings">Findings</h2>', _findings_html(record, explanation_parts(expl)["cited"] if expl else [])]
    parts += ['<h2 id="evaluation">Evaluation</h2>', _evaluation_html(record)]
    parts += ['<h2 id="profile">Profile (medians over the profiled calls)</h2>', profile_html(record)]
    parts += ['<h2 id="ncu">Nsight Compute counters (second call)</h2>', ncu_html(record)]
    parts += ['<h2 id="diagnosis">Diagnosis</h2>', _diagnosis_html(record)]
    img, n = timeline_img(record)
    parts += ['<h2 id="timeline">Timeline of one call</h2>', img]
    return page(f"pkb-analyze: {record.path}", "\n".join(parts)), n


def write(record: Any, out_dir: Path, name: str, back: str = "../index.html") -> tuple[Path, int]:
    out_dir.mkdir(parents=True, exist_ok=True)
    html_text, n = render(record, back)
    path = out_dir / name
    path.write_text(html_text, encoding="utf-8")
    return path, n
