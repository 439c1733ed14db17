"""The corpus report: one self-contained HTML page (plus the same tables in Markdown) and a page
per candidate under kernels/.

Python prepares the page's data; templates/corpus.html.j2 writes its markup.

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
from reports.html_parts import Plot, fig_to_img, fmt, matplotlib_agg, pct
from reports.report_parts import failed_problems, problem_order
from reports.templating import render

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
    for problem in sorted({r["problem"] for r in rows if r["evaluated"]} - set(fastest), key=problem_order):
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


def _plot_shares(mech: list[dict[str, Any]], evaluated: bool) -> Plot:
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


def _plot_sync_overlap(rows: list[dict[str, Any]]) -> Plot:
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


def _plot_findings(rows: list[dict[str, Any]], rule_names: dict[str, str]) -> Plot:
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


def _plot_outcomes(rows: list[dict[str, Any]], key: str) -> Plot:
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


def _plot_speedups(rows: list[dict[str, Any]]) -> Plot:
    plt = matplotlib_agg()
    sp = [r for r in rows if r["correct"] and r["speedup"]]
    probs = sorted({r["problem"] for r in sp}, key=problem_order)
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
    cols = [key, *METRIC_HEADERS]
    body = [[row[c] if c in (key, "n", "correct") else fmt(row[c]) for c in cols] for _, row in summary.iterrows()]
    return [key, *METRIC_HEADERS.values()], body


# pkb.metrics.summarize's columns and the words the report heads them with (the key in brackets
# for readers who know KernelBench's names)
METRIC_HEADERS = {"n": "candidates", "correct": "correct", "pass@1": "solved in 1 sample (pass@1)",
                  "pass@5": "solved in 5 samples (pass@5)", "fast_0": "share correct (fast_0)",
                  "fast_1": "share correct and faster (fast_1)", "fast_1@1": "correct and faster in 1 sample (fast_1@1)",
                  "fast_1@5": "correct and faster in 5 samples (fast_1@5)", "geomean_speedup": "geometric mean speedup"}


def timing_note(rows: list[dict[str, Any]]) -> str:
    """Where the speedups behind faster/slower, fast_p and the mean were timed, when any was on a
    CPU: those figures say little about a GPU kernel, so every table built on them says so."""
    timed = [r for r in rows if r["evaluated"] and r["speedup"] is not None]
    cpu = sum(1 for r in timed if r["device"])
    if not cpu:
        return ""
    devices = ", ".join(sorted({r["device"] for r in timed if r["device"]}))
    return (f"Timings of {cpu} of {len(timed)} timed candidates are from {devices}: the faster/slower split, fast_p and "
            "the mean speedup rest on them and say little about the kernels on a GPU.")


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
STATIC_NOTE = ("Static data only: no candidate was run, so this report names no failed problem and no fastest kernel "
               "(no outcomes, pass@k or speedups); it shows labels and findings. An evaluation gives them: ")
TOC = ("summary", "outcomes", "metrics", "mechanisms", "sync-overlap", "findings", "failures", "paper-table", "fastest", "candidates")
CANDIDATE_HEADERS = ["problem", "model", "candidate", "outcome", "subtype", "speedup", "mechanism", "sync", "overlap", "findings"]


def _table(headers: list[str], rows: list[list[Any]], num: set[int] | range = frozenset(), id: str = "", key: str = "") -> dict[str, Any]:
    """A plain table for macros.html.j2 (`key` names it where the page titles it)."""
    return {"headers": headers, "rows": rows, "num": set(num), "id": id, "key": key}


def _candidate_cells(r: dict[str, Any]) -> dict[str, Any]:
    """One row of the candidates table: what each cell shows and the keys cells sort by."""
    return {"problem": r["problem"], "problem_key": r["problem_id"] if r["problem_id"] is not None else "", "model": r["model"],
            "path": r["path"], "page": r["page"], "file": Path(r["path"]).name, "evaluated": r["evaluated"], "outcome": r["outcome"],
            "subtype": r["subtype"], "speed": r["speed"], "speedup_key": "" if r["speedup"] is None else r["speedup"],
            "mechanism": " + ".join(r["mechanism"]) or "-", "sync": " + ".join(r["sync"]) or "-", "overlap": " + ".join(r["overlap"]) or "-",
            "findings": " ".join(sorted(set(r["findings"]))), "n_findings": len(r["findings"])}


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
    # the candidates in problem order (1, 2, ..., 10), then model, then path
    rows = sorted(candidate_rows(records, names), key=lambda r: (problem_order(r["problem"]), r["model"], r["path"]))
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
    run_eval, run_report = how_to_evaluate(info)
    n_correct = sum(r["correct"] for r in evaluated)

    # ---- the minute answers ----
    # most used first: "which mechanisms were used" is answered by the top of the list
    used = [f"{m['name']} {m['n']} ({pct(m['share'])})" for m in sorted(mech, key=lambda m: -m["n"])
            if m["n"] and m["name"] not in ("none found", "unknown")]
    no_transfer = sum(m["n"] for m in mech if m["name"] in ("none found", "unknown"))
    unused = [m["name"] for m in mech if not m["n"] and m["name"] not in ("none found", "unknown")]
    fastest = fastest_per_problem(rows)
    unnamed = no_fastest(rows, fastest)
    counts = Counter(f for r in rows for f in set(r["findings"]))
    example = {k: next(r for r in rows if k in r["findings"]) for k in counts}
    fails = Counter((r["outcome"], r["subtype"]) for r in evaluated if not r["correct"])
    fh, fb_ = failed_problems(rows) if any_eval else ([], [])

    page = {
        "title": "pkb-analyze corpus report", "n": n, "n_problems": len(problems_seen), "n_models": len(models),
        "sources": [f"{k}: {v}" for k, v in info.items() if v not in ("", None)],
        "evaluated": any_eval, "n_evaluated": len(evaluated), "n_correct": n_correct,
        "static_note": STATIC_NOTE, "how": {"eval": run_eval, "report": run_report, "where": EVALUATE_WHERE}, "not_run_text": NOT_RUN,
        "toc": TOC, "mechanisms_used": used, "never_used": ", ".join(unused), "no_transfer": no_transfer,
        # ties in rule order: Counter's order follows set iteration, which varies with the hash seed
        "top_findings": [{"rule": k, "name": rule_names.get(k, ""), "n": v} for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]],
        "failed_table": _table(fh, fb_, num=range(1, len(fh) - 2), id="failed-table"),
        "fastest": [{"problem": p, "page": r["page"], "path": r["path"], "short": Path(r["path"]).parent.name + "/" + Path(r["path"]).name,
                     "model": r["model"], "speed": r["speed"], "mechanism": "+".join(r["mechanism"]), "sync": "+".join(r["sync"]),
                     "overlap": "+".join(r["overlap"])} for p, r in sorted(fastest.items(), key=lambda kv: problem_order(kv[0]))],
        "unnamed": [{"problem": p, "why": why} for p, why in unnamed.items()],
        "outcome_tables": [_table(h, b, num=range(1, len(h)), key=key) for key, (h, b) in
                           ((key, _crosstab(rows, key)) for key in ("category", "model"))] if any_eval else [],
        "outcome_plot": _plot_outcomes(rows, "category") if any_eval else None,
        "metric_tables": [],
        "timing_note": timing_note(rows),
        "findings": [{"rule": k, "name": rule_names.get(k, ""), "severity": catalogue[k].severity if k in catalogue else "", "n": v,
                      "page": example[k]["page"], "path": example[k]["path"]} for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))],
        "failures": [],
        "paper": None,
        "candidate_headers": CANDIDATE_HEADERS, "candidates": [_candidate_cells(r) for r in rows],
    }
    md: list[str] = []
    md += ["# pkb-analyze corpus report", "", f"{n} candidates, {len(problems_seen)} problems, {len(models)} models.", ""]
    if not any_eval:
        md += [f"> {STATIC_NOTE}`{run_eval}`, then `{run_report}` ({EVALUATE_WHERE}).", ""]
    else:
        md += [f"{len(evaluated)} of {n} candidates evaluated; {n_correct} correct.", ""]
    md += ["## At a glance", "", "Mechanisms used: " + (", ".join(used) or "none") + (f"; never used: {', '.join(unused)}" if unused else ""), ""]
    if any_eval:
        md += ["Failed problems and why:", "", _md_table(fh, fb_) if fb_ else "none failed", ""]
        md += ["Fastest per problem: " + "; ".join([f"{p}: {r['path']} {r['speed']}" for p, r in sorted(fastest.items(), key=lambda kv: problem_order(kv[0]))]
                                                  + [f"{p}: {why}" for p, why in unnamed.items()]), ""]

    # outcomes
    md.append("## Outcomes by problem category and by model\n")
    if page["timing_note"]:
        md.append(page["timing_note"] + "\n")
    for t in page["outcome_tables"]:
        md += [f"### by {t['key']}", "", _md_table(t["headers"], t["rows"]), ""]
    if not any_eval:
        md.append("No evaluation: no outcomes.\n")

    # metrics
    md.append("## pass@k and fast_p@k\n")
    if page["timing_note"]:
        md.append(page["timing_note"] + "\n")
    if any_eval:
        for key in ("category", "model", "problem"):
            h, b = _metrics(rows, key)
            page["metric_tables"].append(_table(h, b, num=range(1, len(h)), key=key))
            md += [f"### by {key}", "", _md_table(h, b), ""]
    else:
        md.append("No evaluation: no pass@k.\n")

    # mechanisms
    h = ["mechanism", "labels", "candidates", "share of candidates", "correct candidates", "share of correct"]
    b = [[m["name"], ", ".join(m["words"]), m["n"], pct(m["share"]), "" if m["n_correct"] is None else m["n_correct"],
          "n/a (no evaluation)" if m["share_correct"] is None and not any_eval else pct(m["share_correct"])] for m in mech]
    page["mechanism_table"] = _table(h, b, num={2, 3, 4, 5})
    page["mechanism_plot"] = _plot_shares(mech, any_eval)
    md += ["## Transfer mechanisms", "", _md_table(h, b), ""]

    # sync / overlap
    md.append("## Synchronization and overlap\n")
    page["sync_overlap_tables"] = []
    for title, shares in (("synchronization", sync), ("overlap", overlap)):
        h = [title, "candidates", "share", "share of correct"]
        b = [[s["name"], s["n"], pct(s["share"]), pct(s["share_correct"]) if any_eval else "n/a"] for s in shares if s["n"]]
        page["sync_overlap_tables"].append(_table(h, b, num={1, 2, 3}, key=title))
        md += [f"### {title}", "", _md_table(h, b), ""]
    page["sync_overlap_plot"] = _plot_sync_overlap(rows)

    # findings
    page["findings_plot"] = _plot_findings(rows, rule_names) if counts else None
    md += ["## Most common findings", "", _md_table(["rule", "name", "severity", "candidates", "example"],
                                                    [[f["rule"], f["name"], f["severity"], f["n"], f"[{f['path']}]({f['page']}#findings)"] for f in page["findings"]])
           if counts else "none", ""]

    # failures
    for (o, s), v in sorted(fails.items(), key=lambda kv: -kv[1]):
        ex = next(r for r in evaluated if (r["outcome"], r["subtype"]) == (o, s) and not r["correct"])
        page["failures"].append({"outcome": o, "subtype": s, "n": v, "page": ex["page"], "path": ex["path"], "headline": ex["headline"][:200]})
    md += ["## Failure outcomes and subtypes", "", _md_table(["outcome", "subtype", "candidates"], [[o, s, v] for (o, s), v in fails.most_common()])
           if fails else ("none" if any_eval else "not known: no candidate was run"), ""]
    has_speedups = any_eval and any(r["speedup"] for r in rows if r["correct"])
    page["speedup_plot"] = _plot_speedups(rows) if has_speedups else None

    # the paper's failure table (columns of PKB's blog), ours beside its figures
    md.append("## Failures in the paper's columns\n")
    if any_eval:
        prows = paper_table.model_rows(records)
        paper_table.write_csv(prows, out_dir / "paper_table.csv")
        note = f"Rules in reports/paper_table.py; the paper's rows: {paper_table.PAPER_SOURCE}. Also in paper_table.csv."
        ph, pb = paper_table.table_cells(prows)
        page["paper"] = {"note": note, "table": _table(ph, pb, num=range(3, len(ph)))}
        md += [note, "", paper_table.markdown(prows), ""]
    else:
        md.append("No evaluation.\n")

    # fastest
    h = ["problem", "fastest candidate", "model", "speedup", "mechanism", "sync", "overlap"]
    md += ["## Fastest kernel per problem", "", _md_table(h, [[f["problem"], f"[{f['path']}]({f['page']})", f["model"], f["speed"], f["mechanism"], f["sync"], f["overlap"]]
                                                           for f in page["fastest"]]) if fastest else ("none" if any_eval else "not known: no candidate was run"), ""]

    # candidates
    md += ["## Candidates", "", _md_table(CANDIDATE_HEADERS, [[r["problem"], r["model"], f"[{r['path']}]({r['page']})", r["outcome"] or "not evaluated", r["subtype"], r["speed"],
                                                              "+".join(r["mechanism"]), "+".join(r["sync"]), "+".join(r["overlap"]), " ".join(sorted(set(r["findings"])))] for r in rows]), ""]

    plots = [p for p in (page["outcome_plot"], page["mechanism_plot"], page["sync_overlap_plot"], page["findings_plot"], page["speedup_plot"]) if p]
    html_path = out_dir / "index.html"
    html_path.write_text(render("corpus.html.j2", **page), encoding="utf-8")
    md_path = out_dir / "report.md"
    md_path.write_text("\n".join(md) + "\n", encoding="utf-8")
    return {"html": str(html_path), "markdown": str(md_path), "plots": len(plots), "pages": [str(out_dir / kernel_page.PAGES_DIR / n_) for n_ in names],
            "page_plots": page_imgs, "evaluated": len(evaluated), "candidates": n}
