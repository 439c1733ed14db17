"""The corpus report: one self-contained HTML page (plus the same tables in Markdown) and a page
per candidate under kernels/.

Made to answer within a minute: which mechanisms were used (and by correct candidates), which
problems failed and why, which kernel is fastest per problem. With static data only it says so
and shows labels and findings.

    build(records, out_dir, info) -> {"html", "markdown", "plots", "pages", "evaluated"}
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from pkb import taxonomy
from pkb.metrics import device_label, speed_text, speed_verdict
from reports import kernel_page, paper_table
from reports.html_parts import badge, esc, fig_to_img, fmt, matplotlib_agg, page, pct, table
from reports.report_parts import breakable, candidates_table, failed_problems

# The paper's mechanism families (TAXONOMY words in each).
MECHANISM_GROUPS = (
    ("copy engine", ("copy_engine",)),
    ("SM load/store/atomic", ("sm_load", "sm_store", "sm_atomic")),
    ("TMA", ("tma",)),
    ("NVLS (multicast)", ("nvls",)),
    ("NVSHMEM", ("nvshmem",)),
    ("NCCL", ("nccl",)),
    ("host staging", ("host_staging",)),
    ("none found", ("none",)),
    ("unknown", ("unknown",)),
)
EVALUATED = ("ran", "skipped_cached")


def _category(problem_id: int | None) -> str:
    if problem_id is None:
        return "(no problem)"
    try:
        import problems

        spec = problems.spec(problem_id)
    except Exception:
        spec = None
    return spec.category if spec is not None else "(not in problems/)"


def candidate_rows(records: list[Any], pages: list[str]) -> list[dict[str, Any]]:
    rows = []
    for rec, name in zip(records, pages):
        ev = rec.evaluation or {}
        diag = rec.diagnosis or {}
        evaluated = ev.get("status") in EVALUATED and bool(ev.get("outcome") or ev.get("correct"))
        outcome = ev.get("outcome") or ("correct" if ev.get("correct") else "") if evaluated else ""
        rows.append({
            "path": rec.path, "page": f"{kernel_page.PAGES_DIR}/{name}",
            "problem_id": rec.problem_id, "problem": f"{rec.problem_id}_{rec.problem_name}" if rec.problem_id is not None else rec.problem_name or "-",
            "category": _category(rec.problem_id), "model": rec.model or "(none)",
            "evaluated": evaluated, "outcome": outcome, "subtype": diag.get("subtype") or ev.get("subtype") or "",
            "speedup": ev.get("speedup") if isinstance(ev.get("speedup"), (int, float)) else None,
            "correct": ev.get("outcome") in ("faster", "slower"),
            # speed_verdict: faster | slower | tie (the interval spans 1x); speed: the speedup as shown
            # everywhere, with its tie and a CPU (gloo) label; unsuspected: no reused-output evidence.
            "speed_verdict": speed_verdict(ev), "speed": speed_text(ev) or fmt(None),
            "speedup_lo": ((ev.get("details") or {}).get("speedup_interval") or [None])[0],
            "device": device_label(ev),
            "unsuspected": not (ev.get("details") or {}).get("output_reused"),
            "mechanism": rec.label_values("mechanism"), "sync": rec.label_values("sync"), "overlap": rec.label_values("overlap"),
            "findings": [f.rule for f in rec.findings], "parse": rec.parse_status,
            "headline": ((diag.get("explanation") or {}).get("headline") or ""),
        })
    return rows


def fastest_per_problem(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per problem, the candidate with the largest speedup among the correct, unsuspected ones
    whose speed verdict is not a tie (a tie within the timing spread names no winner)."""
    fastest: dict[str, dict[str, Any]] = {}
    for r in rows:
        if not (r["correct"] and r["unsuspected"] and r["speedup"] is not None and r["speed_verdict"] in ("faster", "slower")):
            continue
        if r["problem"] not in fastest or r["speedup"] > fastest[r["problem"]]["speedup"]:
            fastest[r["problem"]] = r
    return fastest


def no_fastest(rows: list[dict[str, Any]], fastest: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Per evaluated problem without a fastest kernel, why none is named: no correct candidate, or
    the correct ones are suspected, untimed or ties within their timing spread."""
    why: dict[str, str] = {}
    for problem in sorted({r["problem"] for r in rows if r["evaluated"]} - set(fastest)):
        correct = [r for r in rows if r["problem"] == problem and r["correct"]]
        if not correct:
            why[problem] = "no correct candidate"
            continue
        parts = Counter("suspected" if not r["unsuspected"] else "not timed" if r["speedup"] is None
                        else "a tie within its timing spread" for r in correct)
        why[problem] = f"none named: {len(correct)} correct, " + ", ".join(f"{n} {what}" for what, n in parts.most_common())
    return why


def _shares(rows: list[dict[str, Any]], axis: str, values: list[tuple[str, tuple[str, ...]]]) -> list[dict[str, Any]]:
    n = len(rows)
    correct = [r for r in rows if r["correct"]]
    evaluated = any(r["evaluated"] for r in rows)
    out = []
    for name, words in values:
        has = [r for r in rows if set(r[axis]) & set(words)]
        has_c = [r for r in correct if set(r[axis]) & set(words)]
        out.append({"name": name, "words": words, "n": len(has), "share": len(has) / n if n else None,
                    "n_correct": len(has_c) if evaluated else None, "share_correct": (len(has_c) / len(correct) if correct else None) if evaluated else None})
    return out


# ---- plots -----------------------------------------------------------------------------------


def _plot_shares(mech: list[dict[str, Any]], evaluated: bool) -> str:
    plt = matplotlib_agg()
    names = [m["name"] for m in mech][::-1]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    y = range(len(names))
    ax.barh([i + (0.2 if evaluated else 0) for i in y], [100 * (m["share"] or 0) for m in mech][::-1], height=0.4 if evaluated else 0.6, color="#2b5d9b", label="of all candidates")
    if evaluated:
        ax.barh([i - 0.2 for i in y], [100 * (m["share_correct"] or 0) for m in mech][::-1], height=0.4, color="#2e8540", label="of correct candidates")
    ax.set_yticks(list(y))
    ax.set_yticklabels(names)
    ax.set_xlabel("% of candidates using the mechanism (a candidate may use several)")
    ax.set_title("Transfer mechanisms", fontsize=11)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    return fig_to_img(fig, "transfer mechanism shares")


def _plot_sync_overlap(rows: list[dict[str, Any]]) -> str:
    plt = matplotlib_agg()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    for ax, axis, words in ((axes[0], "sync", taxonomy.SYNC), (axes[1], "overlap", taxonomy.OVERLAP)):
        counts = Counter(v for r in rows for v in r[axis])
        labels = [w for w in (*words, taxonomy.UNKNOWN) if counts.get(w)]
        ax.barh(labels[::-1], [100 * counts[w] / max(1, len(rows)) for w in labels][::-1], color="#7d5ba6" if axis == "sync" else "#c17d11")
        ax.set_title(f"{axis} labels (% of candidates)", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig_to_img(fig, "synchronization and overlap shares")


def _plot_findings(rows: list[dict[str, Any]], rule_names: dict[str, str]) -> str:
    plt = matplotlib_agg()
    counts = Counter(f for r in rows for f in set(r["findings"]))
    rules = sorted(counts, key=lambda k: (-counts[k], k))[:16]
    fig, ax = plt.subplots(figsize=(8, 0.8 + 0.28 * len(rules)))
    ax.barh([f"{k} {rule_names.get(k, '')}" for k in rules][::-1], [counts[k] for k in rules][::-1], color="#a93226")
    ax.set_xlabel("candidates with the finding")
    ax.set_title("Rule findings", fontsize=11)
    ax.grid(axis="x", alpha=0.3)
    return fig_to_img(fig, "rule findings per candidate")


from reports.report_parts import OUTCOME_COLORS  # noqa: E402  (colour-blind safe; one palette for plots and badges)


def _plot_outcomes(rows: list[dict[str, Any]], key: str) -> str:
    plt = matplotlib_agg()
    ev = [r for r in rows if r["evaluated"]]
    groups = sorted({r[key] for r in ev})
    outcomes = [o for o in OUTCOME_COLORS if any(r["outcome"] == o for r in ev)]
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.4 * len(groups)))
    left = [0] * len(groups)
    for o in outcomes:
        vals = [sum(1 for r in ev if r[key] == g and r["outcome"] == o) for g in groups]
        ax.barh(groups, vals, left=left, color=OUTCOME_COLORS[o], label=o or "other")
        left = [a + b for a, b in zip(left, vals)]
    ax.set_xlabel("evaluated candidates")
    ax.set_title(f"Outcomes by {key}", fontsize=11)
    ax.legend(fontsize=7, ncol=len(outcomes), loc="upper center", bbox_to_anchor=(0.5, -0.35), frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return fig_to_img(fig, f"outcomes by {key}")


TIE_COLOR = "#9e9e9e"  # a speed tie: neither the faster nor the slower colour


def _plot_speedups(rows: list[dict[str, Any]]) -> str:
    plt = matplotlib_agg()
    sp = [r for r in rows if r["correct"] and r["speedup"]]
    probs = sorted({r["problem"] for r in sp})
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.4 * len(probs)))
    for i, p in enumerate(probs):
        xs = [r["speedup"] for r in sp if r["problem"] == p]
        verdicts = [r["speed_verdict"] for r in sp if r["problem"] == p]
        ax.scatter(xs, [i] * len(xs), color=[OUTCOME_COLORS.get(v, TIE_COLOR) for v in verdicts], zorder=3)
    ax.axvline(1.0, color="#555", lw=1, ls="--")
    ax.set_xscale("log")
    ax.set_yticks(range(len(probs)))
    ax.set_yticklabels(probs)
    devices = sorted({r["device"] for r in sp if r["device"]})
    ax.set_xlabel("speedup over the reference (log scale; dashed = 1x; grey = a tie within the spread)"
                  + (f"; {', '.join(devices)} timings" if devices else ""))
    ax.set_title("Speedups of correct candidates", fontsize=11)
    ax.grid(axis="x", alpha=0.3)
    return fig_to_img(fig, "speedups of correct candidates per problem")


# ---- tables ---------------------------------------------------------------------------------


def _crosstab(rows: list[dict[str, Any]], key: str) -> tuple[list[str], list[list[Any]]]:
    ev = [r for r in rows if r["evaluated"]]
    outcomes = [o for o in (*taxonomy.OUTCOMES, "correct") if any(r["outcome"] == o for r in ev)]
    groups = sorted({r[key] for r in ev})
    body = [[g, *[sum(1 for r in ev if r[key] == g and r["outcome"] == o) for o in outcomes], sum(1 for r in ev if r[key] == g)] for g in groups]
    return [key, *outcomes, "total"], body


def _metrics(rows: list[dict[str, Any]], key: str) -> tuple[list[str], list[list[Any]]]:
    import pandas as pd

    from pkb.metrics import summarize

    ev = [r for r in rows if r["evaluated"]]
    frame = pd.DataFrame([{key: r[key], "outcome": r["outcome"], "speedup": r["speedup"], "speedup_lo": r["speedup_lo"], "correct": r["correct"]} for r in ev])
    summary = summarize(frame, by=key, ks=(1, 5), ps=(0.0, 1.0))
    cols = [key, "n", "correct", "pass@1", "pass@5", "fast_0", "fast_1", "fast_1@1", "fast_1@5", "geomean_speedup"]
    body = [[row[c] if c in (key, "n", "correct") else fmt(row[c]) for c in cols] for _, row in summary.iterrows()]
    return cols, body


def _md_table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return str("" if v is None else v).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(map(cell, headers)) + " |", "| " + " | ".join("---" for _ in headers) + " |"]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(out)


def how_to_evaluate(info: dict[str, Any]) -> tuple[str, str]:
    """The two commands that give failed problems and the fastest kernel, for a report of static
    records alone: the evaluation (into the run folder the report was read from, where it is one)
    and the report again."""
    given = Path(str(info.get("input") or ""))
    run = given if given.name and (given / "static.jsonl").is_file() else Path("RUN")
    return f"pkb-analyze eval CORPUS -o {run}", f"pkb-analyze report {run}"


NOT_RUN = "not known: no candidate was run (see the note at the top)"
EVALUATE_WHERE = "CORPUS is the folder the static run was given; CUDA GPUs run every candidate, a CPU only the pure-PyTorch ones"


def _commands_html(info: dict[str, Any]) -> str:
    run_eval, run_report = how_to_evaluate(info)
    return f"<code>{esc(run_eval)}</code>, then <code>{esc(run_report)}</code> ({esc(EVALUATE_WHERE)})"


def build(records: list[Any], out_dir: str | Path, info: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report of these records as they are: their diagnosis is the one they carry (stored, or
    computed by the command line where none was), none is computed here."""
    from analyzer.rules import all_rules

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = info or {}
    names = [kernel_page.page_name(i, rec) for i, rec in enumerate(records)]
    page_imgs = 0
    for rec, name in zip(records, names):
        _, n = kernel_page.write(rec, out_dir / kernel_page.PAGES_DIR, name)
        page_imgs += n
    rows = candidate_rows(records, names)
    catalogue = {r.id: r for r in all_rules()}
    rule_names = {k: r.name for k, r in catalogue.items()}
    evaluated = [r for r in rows if r["evaluated"]]
    any_eval = bool(evaluated)
    mech = _shares(rows, "mechanism", list(MECHANISM_GROUPS))
    sync = _shares(rows, "sync", [(w, (w,)) for w in (*taxonomy.SYNC, taxonomy.UNKNOWN)])
    overlap = _shares(rows, "overlap", [(w, (w,)) for w in (*taxonomy.OVERLAP, taxonomy.UNKNOWN)])
    n = len(rows)
    problems_seen = sorted({r["problem"] for r in rows})
    models = sorted({r["model"] for r in rows})

    # ---- the minute answers ----
    # most used first: "which mechanisms were used" is answered by the top of the list
    used = [f"{m['name']} {m['n']} ({pct(m['share'])})" for m in sorted(mech, key=lambda m: -m["n"])
            if m["n"] and m["name"] not in ("none found", "unknown")]
    no_transfer = sum(m["n"] for m in mech if m["name"] in ("none found", "unknown"))
    unused = [m["name"] for m in mech if not m["n"] and m["name"] not in ("none found", "unknown")]
    fastest = fastest_per_problem(rows)
    unnamed = no_fastest(rows, fastest)

    def link(r: dict[str, Any], text: str | None = None, anchor: str = "") -> str:
        return f'<a href="{esc(r["page"])}{anchor}">{esc(text or r["path"])}</a>'

    cards = [
        "<div class=\"card\"><h3>Mechanisms used</h3><ul>" + "".join(f"<li>{esc(u)}</li>" for u in used)
        + (f"<li class=\"muted\">never used: {esc(', '.join(unused))}</li>" if unused else "")
        + (f"<li class=\"muted\">no peer transfer found: {no_transfer}</li>" if no_transfer else "")
        + "</ul><p class=\"muted\">candidates using each (a candidate may use several)</p></div>",
    ]
    if any_eval:
        fh, fb_ = failed_problems(rows)
        ftable = table(fh, fb_, num=set(range(1, len(fh) - 2)), id="failed-table") if fb_ else "<p>none failed</p>"
        fa = "".join(f"<li><b>{esc(p)}</b>: {link(r, Path(r['path']).parent.name + '/' + Path(r['path']).name)} {esc(r['speed'])}</li>" for p, r in sorted(fastest.items()))
        fa += "".join(f"<li class=\"muted\"><b>{esc(p)}</b>: {esc(why)}</li>" for p, why in unnamed.items())
        cards.append(f"<div class=\"card\"><h3>Fastest kernel per problem</h3><ul>{fa}</ul></div>")
        cards.append(f"<div class=\"card wide\"><h3>Failed problems and why</h3>{ftable}</div>")  # a full row, under the two lists
    else:
        top = Counter(f for r in rows for f in set(r["findings"])).most_common(5)
        cards.append("<div class=\"card\"><h3>Most common findings</h3><ul>" + "".join(f"<li><b>{esc(k)}</b> {esc(rule_names.get(k, ''))}: {v} candidates</li>" for k, v in top) + "</ul></div>")
        cards.append("<div class=\"card\"><h3>Failed problems / fastest kernel</h3><p><b>Not known: no candidate was run</b> "
                     "(static passes only), so none is failed and none is fastest.</p>"
                     f"<p>They come from an evaluation: {_commands_html(info)}.</p></div>")

    body: list[str] = []
    md: list[str] = []
    plots: list[str] = []
    body.append("<h1>pkb-analyze corpus report</h1>")
    src = " &middot; ".join(esc(f"{k}: {v}") for k, v in info.items() if v not in ("", None))
    body.append(f'<p class="sub">{n} candidates, {len(problems_seen)} problems, {len(models)} models &middot; {src}</p>')
    md += ["# pkb-analyze corpus report", "", f"{n} candidates, {len(problems_seen)} problems, {len(models)} models.", ""]
    if not any_eval:
        note = ("Static data only: no candidate was run, so this report names no failed problem and no fastest kernel "
                "(no outcomes, pass@k or speedups); it shows labels and findings. An evaluation gives them: ")
        body.append(f'<p class="notice">{esc(note)}{_commands_html(info)}.</p>')
        md += [f"> {note}`{how_to_evaluate(info)[0]}`, then `{how_to_evaluate(info)[1]}` ({EVALUATE_WHERE}).", ""]
    else:
        body.append(f'<p class="sub">{len(evaluated)} of {n} candidates evaluated; {sum(r["correct"] for r in evaluated)} correct.</p>')
        md += [f"{len(evaluated)} of {n} candidates evaluated; {sum(r['correct'] for r in evaluated)} correct.", ""]
    toc = ["summary", "outcomes", "metrics", "mechanisms", "sync-overlap", "findings", "failures", "paper-table", "fastest", "candidates"]
    body.append('<nav class="toc">' + "".join(f'<a href="#{t}">{t.replace("-", " and ")}</a>' for t in toc) + "</nav>")
    body.append('<h2 id="summary">At a glance</h2><div class="cards">' + "".join(cards) + "</div>")
    md += ["## At a glance", "", "Mechanisms used: " + (", ".join(used) or "none") + (f"; never used: {', '.join(unused)}" if unused else ""), ""]
    if any_eval:
        fh, fb_ = failed_problems(rows)
        md += ["Failed problems and why:", "", _md_table(fh, fb_) if fb_ else "none failed", ""]
        md += ["Fastest per problem: " + "; ".join([f"{p}: {r['path']} {r['speed']}" for p, r in sorted(fastest.items())]
                                                  + [f"{p}: {why}" for p, why in unnamed.items()]), ""]

    # outcomes
    body.append('<h2 id="outcomes">Outcomes by problem category and by model</h2>')
    md.append("## Outcomes by problem category and by model\n")
    if any_eval:
        for key in ("category", "model"):
            h, b = _crosstab(rows, key)
            body.append(f"<h3>by {key}</h3>" + table(h, b, num=set(range(1, len(h)))))
            md += [f"### by {key}", "", _md_table(h, b), ""]
        img = _plot_outcomes(rows, "category")
        plots.append(img)
        body.append(img)
    else:
        body.append(f'<p class="muted">{NOT_RUN}</p>')
        md.append("No evaluation: no outcomes.\n")

    # metrics
    body.append('<h2 id="metrics">pass@k and fast_p@k</h2>')
    md.append("## pass@k and fast_p@k\n")
    if any_eval:
        body.append('<p class="muted">pass@k: unbiased estimator over the samples of a group; fast_p: share correct with speedup &gt; p; fast_p@k: pass@k with "correct and faster than p".</p>')
        for key in ("category", "model", "problem"):
            h, b = _metrics(rows, key)
            body.append(f"<h3>by {key}</h3>" + table(h, b, num=set(range(1, len(h)))))
            md += [f"### by {key}", "", _md_table(h, b), ""]
    else:
        body.append(f'<p class="muted">{NOT_RUN}</p>')
        md.append("No evaluation: no pass@k.\n")

    # mechanisms
    body.append('<h2 id="mechanisms">Transfer mechanisms</h2>')
    h = ["mechanism", "labels", "candidates", "share of candidates", "correct candidates", "share of correct"]
    b = [[m["name"], ", ".join(m["words"]), m["n"], pct(m["share"]), "" if m["n_correct"] is None else m["n_correct"],
          "n/a (no evaluation)" if m["share_correct"] is None and not any_eval else pct(m["share_correct"])] for m in mech]
    body.append(table(h, b, num={2, 3, 4, 5}))
    md += ["## Transfer mechanisms", "", _md_table(h, b), ""]
    img = _plot_shares(mech, any_eval)
    plots.append(img)
    body.append(img)

    # sync / overlap
    body.append('<h2 id="sync-overlap">Synchronization and overlap</h2>')
    md.append("## Synchronization and overlap\n")
    for title, shares in (("synchronization", sync), ("overlap", overlap)):
        h = [title, "candidates", "share", "share of correct"]
        b = [[s["name"], s["n"], pct(s["share"]), pct(s["share_correct"]) if any_eval else "n/a"] for s in shares if s["n"]]
        body.append(f"<h3>{title}</h3>" + table(h, b, num={1, 2, 3}))
        md += [f"### {title}", "", _md_table(h, b), ""]
    img = _plot_sync_overlap(rows)
    plots.append(img)
    body.append(img)

    # findings
    body.append('<h2 id="findings">Most common findings</h2>')
    counts = Counter(f for r in rows for f in set(r["findings"]))
    example = {k: next(r for r in rows if k in r["findings"]) for k in counts}
    h = ["rule", "name", "severity", "candidates", "example"]
    fb = [[k, rule_names.get(k, ""), catalogue[k].severity if k in catalogue else "", v, link(example[k], example[k]["path"], "#findings")]
          for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    body.append(table(h, fb, raw={4}, num={3}) if fb else '<p class="muted">no findings</p>')
    md += ["## Most common findings", "", _md_table(h, [[*r[:4], f"[{example[r[0]]['path']}]({example[r[0]]['page']}#findings)"] for r in fb]) if fb else "none", ""]
    if counts:
        img = _plot_findings(rows, rule_names)
        plots.append(img)
        body.append(img)

    # failures
    body.append('<h2 id="failures">Failure outcomes and subtypes</h2>')
    fails = Counter((r["outcome"], r["subtype"]) for r in evaluated if not r["correct"])
    h = ["outcome", "subtype", "candidates", "example", "explanation of the example"]
    fr = []
    for (o, s), v in sorted(fails.items(), key=lambda kv: -kv[1]):
        ex = next(r for r in evaluated if (r["outcome"], r["subtype"]) == (o, s) and not r["correct"])
        fr.append([badge(o), esc(s), v, link(ex), esc(ex["headline"][:200])])
    body.append(table(h, fr, raw={0, 1, 3, 4}, num={2}) if fr else f'<p class="muted">{"no failures" if any_eval else NOT_RUN}</p>')
    md += ["## Failure outcomes and subtypes", "", _md_table(h[:3], [[o, s, v] for (o, s), v in fails.most_common()]) if fails else ("none" if any_eval else "not known: no candidate was run"), ""]
    if any_eval and any(r["speedup"] for r in rows if r["correct"]):
        img = _plot_speedups(rows)
        plots.append(img)

    # the paper's failure table (columns of PKB's blog), ours beside its figures
    body.append('<h2 id="paper-table">Failures in the paper\'s columns</h2>')
    md.append("## Failures in the paper's columns\n")
    if any_eval:
        prows = paper_table.model_rows(records)
        paper_table.write_csv(prows, out_dir / "paper_table.csv")
        note = f"Rules in reports/paper_table.py; the paper's rows: {paper_table.PAPER_SOURCE}. Also in paper_table.csv."
        body.append(f'<p class="muted">{esc(note)}</p>' + paper_table.html(prows))
        md += [note, "", paper_table.markdown(prows), ""]
    else:
        body.append(f'<p class="muted">{NOT_RUN}</p>')
        md.append("No evaluation.\n")

    # fastest
    body.append('<h2 id="fastest">Fastest kernel per problem</h2>')
    h = ["problem", "fastest candidate", "model", "speedup", "mechanism", "sync", "overlap"]
    fb2 = [[esc(p), link(r), esc(r["model"]), esc(r["speed"]), esc("+".join(r["mechanism"])), esc("+".join(r["sync"])), esc("+".join(r["overlap"]))] for p, r in sorted(fastest.items())]
    body.append(table(h, fb2, raw=set(range(7)), num={3}) if fb2 else f'<p class="muted">{"none named" if any_eval else NOT_RUN}</p>')
    if unnamed:
        body.append('<ul class="muted">' + "".join(f"<li><b>{esc(p)}</b>: {esc(why)}</li>" for p, why in unnamed.items()) + "</ul>")
    if any_eval and any(r["speedup"] for r in rows if r["correct"]):
        body.append(plots[-1])
    md += ["## Fastest kernel per problem", "", _md_table(h, [[p, f"[{r['path']}]({r['page']})", r["model"], r["speed"], "+".join(r["mechanism"]), "+".join(r["sync"]), "+".join(r["overlap"])] for p, r in sorted(fastest.items())]) if fastest else ("none" if any_eval else "not known: no candidate was run"), ""]

    # candidates
    body.append('<h2 id="candidates">Candidates</h2>')
    body.append('<input class="filter" placeholder="filter rows (problem, model, label, outcome...)" oninput="pkbFilter(this, \'cand-table\')">')
    h = ["problem", "model", "candidate", "outcome", "subtype", "speedup", "mechanism", "sync", "overlap", "findings"]
    # The model has its own column: the candidate shows its file name, the full path on hover.
    cb = [[breakable(esc(r["problem"])), breakable(esc(r["model"])), f'<a href="{esc(r["page"])}" title="{esc(r["path"])}">{breakable(esc(Path(r["path"]).name))}</a>',
           badge(r["outcome"]) if r["evaluated"] else '<span class="muted">not evaluated</span>', breakable(esc(r["subtype"])), esc(r["speed"]),
           breakable(esc(" + ".join(r["mechanism"]) or "-")), breakable(esc(" + ".join(r["sync"]) or "-")), breakable(esc(" + ".join(r["overlap"]) or "-")), esc(" ".join(sorted(set(r["findings"]))))] for r in rows]
    keys = [[r["problem_id"] if r["problem_id"] is not None else "", None, r["path"], r["outcome"] or "not evaluated", None,
             "" if r["speedup"] is None else r["speedup"], None, None, None, len(r["findings"])] for r in rows]
    body.append(candidates_table(h, cb, keys))
    md += ["## Candidates", "", _md_table(h, [[r["problem"], r["model"], f"[{r['path']}]({r['page']})", r["outcome"] or "not evaluated", r["subtype"], r["speed"],
                                               "+".join(r["mechanism"]), "+".join(r["sync"]), "+".join(r["overlap"]), " ".join(sorted(set(r["findings"])))] for r in rows]), ""]

    html_path = out_dir / "index.html"
    html_path.write_text(page("pkb-analyze corpus report", "\n".join(body)), encoding="utf-8")
    md_path = out_dir / "report.md"
    md_path.write_text("\n".join(md) + "\n", encoding="utf-8")
    return {"html": str(html_path), "markdown": str(md_path), "plots": len(plots), "pages": [str(out_dir / kernel_page.PAGES_DIR / n_) for n_ in names],
            "page_plots": page_imgs, "evaluated": len(evaluated), "candidates": n}
