"""Score the static passes against hand labels of real ParallelKernelBench files.

    python bench/real_labels.py --pkb-root PATH [--labels DIR_OR_FILE ...] [--jobs N]
                                [--no-ptx] [--cache-dir DIR] [--static-jsonl FILE] [--json FILE]

The labels (default: every .toml under bench/real_labels/, sub-folders included) are facts about files of a PKB checkout,
keyed by their path under it; their schema is one table per file with `mechanism`, `sync`,
`overlap` (sets of TAXONOMY words), optional `ordering` and `fallback`, and `defects` (a rule id
and a line each, `rule = "other"` for a real defect no rule covers). The static pipeline runs over
exactly the labelled files (or a static.jsonl written earlier is read with --static-jsonl), and the
script prints:

  - per-axis accuracy (a file is right on an axis when the set of labels the tool gives equals the
    labelled set; labels whose every piece of evidence is tagged `fallback` do not count), per-label
    precision and recall, and how many files are right on all three axes;
  - rule precision (distinct findings on the labelled files that match a labelled defect: same
    rule id, line within LINE_WINDOW of the finding's line or of one of its related lines, the
    other end of a race that the finding names; --primary-line-only scores the finding's own line
    alone) and recall (labelled defects with a rule id that some finding matches; `other` defects
    are counted and listed, never scored);
  - every axis mismatch (file, axis, expected, got), every false finding and every missed defect.

The comparison lives in small pure functions over plain dicts (the static.jsonl record layout), so
tests feed them labels and records of their own.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LABELS = ROOT / "bench" / "real_labels"
AXES = ("mechanism", "sync", "overlap")
LINE_WINDOW = 5  # a finding matches a defect of its rule within this many lines
OTHER = "other"
RULE_ID = re.compile(r"^PKB\d{3}$")

# The vocabulary, repeated from pkb.taxonomy so that loading and scoring need no import of the
# project (the static run imports it anyway); validate_labels checks both agree.
VOCABULARY = {
    "mechanism": ("copy_engine", "sm_load", "sm_store", "sm_atomic", "tma", "nvls", "nvshmem", "nccl",
                  "host_staging", "none", "unknown"),
    "sync": ("symm_barrier", "device_flags", "host_sync", "stream_events", "grid_sync", "nvshmem_sync",
             "nccl_implicit", "none", "unknown"),
    "overlap": ("none", "multi_stream", "chunked_pipeline", "fused_kernel", "n/a", "unknown"),
    "ordering": ("release_acquire", "fence_system", "volatile_only", "relaxed", "unknown"),
}


@dataclass(frozen=True)
class Defect:
    rule: str  # PKBnnn or "other"
    line: int
    why: str = ""


@dataclass
class LabelledFile:
    source: str  # the label file it came from
    path: str  # relative to the PKB root
    problem: str = ""
    axes: dict[str, frozenset[str]] = field(default_factory=dict)  # mechanism, sync, overlap
    ordering: frozenset[str] = frozenset()
    fallback: frozenset[str] = frozenset()
    defects: list[Defect] = field(default_factory=list)
    notes: str = ""


# ---- labels -----------------------------------------------------------------------------------


def label_files(paths: list[Path]) -> list[Path]:
    """The .toml files named by `paths` (a folder stands for every .toml in it and its sub-folders,
    so held-out draws kept in their own folders are scored by the default run too)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(p.rglob("*.toml")))
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such label file or folder")
    return out


def parse_labels(data: dict, source: str) -> list[LabelledFile]:
    """One LabelledFile per table of a parsed label file."""
    out = []
    for path, entry in data.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{source}: [{path}] is not a table")
        defects = [Defect(str(d["rule"]), int(d["line"]), str(d.get("why", ""))) for d in entry.get("defects", [])]
        out.append(LabelledFile(
            source=source,
            path=path,
            problem=str(entry.get("problem", "")),
            axes={axis: frozenset(entry.get(axis, [])) for axis in AXES},
            ordering=frozenset(entry.get("ordering", [])),
            fallback=frozenset(entry.get("fallback", [])),
            defects=defects,
            notes=str(entry.get("notes", "")),
        ))
    return out


def load_labels(paths: list[Path]) -> list[LabelledFile]:
    out: list[LabelledFile] = []
    for f in label_files(paths):
        with f.open("rb") as fh:
            out.extend(parse_labels(tomllib.load(fh), str(f)))
    return out


def validate_labels(items: list[LabelledFile]) -> list[str]:
    """Problems a labeller must fix (a typo would silently become a new category)."""
    errors = []
    for it in items:
        where = f"{it.source}: [{it.path}]"
        for axis in AXES:
            if not it.axes.get(axis):
                errors.append(f"{where}: no `{axis}` labels")
            for v in it.axes.get(axis, ()):
                if v not in VOCABULARY[axis]:
                    errors.append(f"{where}: `{v}` is not a {axis} label")
        for v in it.ordering:
            if v not in VOCABULARY["ordering"]:
                errors.append(f"{where}: `{v}` is not an ordering label")
        for v in it.fallback:
            if v not in VOCABULARY["mechanism"]:
                errors.append(f"{where}: fallback `{v}` is not a mechanism label")
        for d in it.defects:
            if d.rule != OTHER and not RULE_ID.match(d.rule):
                errors.append(f"{where}: defect rule `{d.rule}` is neither PKBnnn nor `{OTHER}`")
            if d.line < 1:
                errors.append(f"{where}: defect line {d.line} is not a 1-based line")
    return errors


# ---- records (the static.jsonl layout) ----------------------------------------------------------


def is_fallback(entry: dict) -> bool:
    """A label the tool reports only for a branch the run does not take.

    Accepted spellings: `"fallback": true` on the label, or every piece of its evidence tagged
    (`"fallback": true`, `"fallback"` in `tags`, or a `note` that starts with "fallback").
    """
    if entry.get("fallback") is True:
        return True
    evidence = entry.get("evidence") or []

    def tagged(ev: dict) -> bool:
        return (ev.get("fallback") is True or "fallback" in (ev.get("tags") or [])
                or str(ev.get("note", "")).lower().startswith("fallback"))

    return bool(evidence) and all(tagged(ev) for ev in evidence)


def record_labels(record: dict | None, axis: str) -> frozenset[str]:
    """The labels the tool gives the candidate on `axis`, fallback-only labels left out."""
    if record is None:
        return frozenset()
    return frozenset(e["label"] for e in record.get(axis, []) if not is_fallback(e))


def record_fallback(record: dict | None) -> frozenset[str]:
    """Mechanisms the tool reports as running only on another branch."""
    if record is None:
        return frozenset()
    out = {e["label"] for e in record.get("mechanism", []) if is_fallback(e)}
    extra = record.get("fallback")
    if isinstance(extra, dict):
        extra = extra.get("mechanism", [])
    for e in extra or []:
        out.add(e["label"] if isinstance(e, dict) else str(e))
    return frozenset(out)


def record_findings(record: dict | None, related: bool = True) -> list[tuple[str, int, str, tuple[int, ...]]]:
    """Distinct findings of a record as (rule, line, message, related lines), in line order;
    related=False drops the related lines."""
    if record is None:
        return []
    seen: dict[tuple[str, int], tuple[str, tuple[int, ...]]] = {}
    for f in record.get("findings", []):
        also = tuple(int(n) for n in f.get("related_lines", [])) if related else ()
        seen.setdefault((f["rule"], int(f["line"])), (f.get("message", ""), also))
    return sorted(((r, ln, m, also) for (r, ln), (m, also) in seen.items()), key=lambda t: (t[1], t[0]))


# ---- comparison ---------------------------------------------------------------------------------


def finding_matches(rule: str, line: int, defect: Defect, window: int = LINE_WINDOW, related: tuple[int, ...] = ()) -> bool:
    return defect.rule == rule and any(abs(defect.line - n) <= window for n in (line, *related))


def _matches(f: tuple, defect: Defect, window: int) -> bool:
    """A finding tuple (rule, line, message[, related lines]) against one defect."""
    return finding_matches(f[0], f[1], defect, window, f[3] if len(f) > 3 else ())


def match_findings(defects: list[Defect], findings: list[tuple], window: int = LINE_WINDOW):
    """Split one file's findings into true and false, and its rule defects into found and missed.

    A finding is true when it matches some labelled defect; a defect is found when some finding
    matches it. `other` defects take no part (no rule can find them).
    """
    scored = [d for d in defects if d.rule != OTHER]
    true, false = [], []
    for f in findings:
        (true if any(_matches(f, d, window) for d in scored) else false).append(f)
    found = [d for d in scored if any(_matches(f, d, window) for f in findings)]
    missed = [d for d in scored if d not in found]
    return true, false, found, missed


def ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def per_label_scores(pairs: list[tuple[frozenset[str], frozenset[str]]]) -> dict[str, dict]:
    """Precision and recall of each label value over (expected, got) pairs of one axis."""
    tp, fp, fn = Counter(), Counter(), Counter()
    for expected, got in pairs:
        for v in expected & got:
            tp[v] += 1
        for v in got - expected:
            fp[v] += 1
        for v in expected - got:
            fn[v] += 1
    out = {}
    for v in sorted(set(tp) | set(fp) | set(fn)):
        out[v] = {"tp": tp[v], "fp": fp[v], "fn": fn[v],
                  "precision": ratio(tp[v], tp[v] + fp[v]), "recall": ratio(tp[v], tp[v] + fn[v])}
    return out


def score(items: list[LabelledFile], records: dict[str, dict], window: int = LINE_WINDOW, related: bool = True) -> dict:
    """Everything the report prints, as plain data (the --json summary)."""
    axis_right = Counter()
    all_three = 0
    mismatches = []
    pairs: dict[str, list] = {axis: [] for axis in AXES}
    fallback_right = 0
    fallback_mismatches = []
    findings_total = findings_true = 0
    defects_scored = defects_found = 0
    other_defects = []
    false_findings, missed_defects = [], []
    rule_stats: dict[str, Counter] = {}
    missing = []

    for it in items:
        rec = records.get(it.path)
        if rec is None:
            missing.append(it.path)
        right = 0
        for axis in AXES:
            expected, got = it.axes[axis], record_labels(rec, axis)
            pairs[axis].append((expected, got))
            if expected == got:
                axis_right[axis] += 1
                right += 1
            else:
                mismatches.append({"file": it.path, "axis": axis, "expected": sorted(expected), "got": sorted(got)})
        all_three += right == len(AXES)

        got_fb = record_fallback(rec)
        if got_fb == it.fallback:
            fallback_right += 1
        else:
            fallback_mismatches.append({"file": it.path, "expected": sorted(it.fallback), "got": sorted(got_fb)})

        findings = record_findings(rec, related)
        true, false, found, missed = match_findings(it.defects, findings, window)
        findings_total += len(findings)
        findings_true += len(true)
        defects_scored += len(found) + len(missed)
        defects_found += len(found)
        for rule, line, msg, *_ in false:
            false_findings.append({"file": it.path, "rule": rule, "line": line, "message": msg})
        for d in missed:
            missed_defects.append({"file": it.path, "rule": d.rule, "line": d.line, "why": d.why})
        other_defects += [{"file": it.path, "line": d.line, "why": d.why} for d in it.defects if d.rule == OTHER]
        for rule, *_ in true:
            rule_stats.setdefault(rule, Counter())["true_findings"] += 1
        for rule, *_ in false:
            rule_stats.setdefault(rule, Counter())["false_findings"] += 1
        for d in found:
            rule_stats.setdefault(d.rule, Counter())["found"] += 1
        for d in missed:
            rule_stats.setdefault(d.rule, Counter())["missed"] += 1

    n = len(items)
    rules = {}
    for rule in sorted(rule_stats):
        c = rule_stats[rule]
        rules[rule] = {"true_findings": c["true_findings"], "false_findings": c["false_findings"],
                       "defects": c["found"] + c["missed"], "found": c["found"],
                       "precision": ratio(c["true_findings"], c["true_findings"] + c["false_findings"]),
                       "recall": ratio(c["found"], c["found"] + c["missed"])}
    return {
        "files": n,
        "missing_records": missing,
        "axes": {axis: {"right": axis_right[axis], "accuracy": ratio(axis_right[axis], n),
                        "labels": per_label_scores(pairs[axis])} for axis in AXES},
        "all_three_right": all_three,
        "fallback": {"right": fallback_right, "accuracy": ratio(fallback_right, n), "mismatches": fallback_mismatches},
        "findings": {"distinct": findings_total, "true": findings_true, "false": findings_total - findings_true,
                     "precision": ratio(findings_true, findings_total)},
        "defects": {"with_rule": defects_scored, "found": defects_found, "recall": ratio(defects_found, defects_scored),
                    "other": len(other_defects)},
        "rules": rules,
        "line_window": window,
        "related_lines": related,
        "mismatches": mismatches,
        "false_findings": false_findings,
        "missed_defects": missed_defects,
        "other_defects": other_defects,
    }


# ---- report -----------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "  n/a" if x is None else f"{100 * x:5.1f}%"


def format_report(s: dict) -> str:
    n = s["files"]
    lines = [f"{n} labelled files"]
    if s["missing_records"]:
        lines.append(f"no record for {len(s['missing_records'])}: " + ", ".join(s["missing_records"]))
    lines.append("")
    lines.append("axis accuracy (set of labels equal to the labelled set)")
    for axis in AXES:
        a = s["axes"][axis]
        lines.append(f"  {axis:10s} {a['right']:3d}/{n}  {_pct(a['accuracy'])}")
    lines.append(f"  all three  {s['all_three_right']:3d}/{n}  {_pct(ratio(s['all_three_right'], n))}")
    fb = s["fallback"]
    lines.append(f"  fallback   {fb['right']:3d}/{n}  {_pct(fb['accuracy'])}   (secondary: mechanisms only on other branches)")
    lines.append("")
    lines.append("per label: precision / recall  (tp fp fn)")
    for axis in AXES:
        for v, c in s["axes"][axis]["labels"].items():
            lines.append(f"  {axis:10s} {v:17s} {_pct(c['precision'])} / {_pct(c['recall'])}  ({c['tp']} {c['fp']} {c['fn']})")
    lines.append("")
    f, d = s["findings"], s["defects"]
    lines.append(f"rule precision {f['true']}/{f['distinct']} {_pct(f['precision'])}   (false findings: {f['false']})")
    lines.append(f"rule recall    {d['found']}/{d['with_rule']} {_pct(d['recall'])}   (plus {d['other']} `other` defects, not scored)")
    lines.append(f"  (a finding matches a labelled defect of its rule within {s['line_window']} lines of "
                 + ("its line or a related line it names)" if s.get("related_lines", True) else "its own line)"))
    for rule, r in s["rules"].items():
        lines.append(f"  {rule}  findings {r['true_findings']} true / {r['false_findings']} false   "
                     f"defects {r['found']}/{r['defects']} found")
    if s["mismatches"]:
        lines.append("")
        lines.append("axis mismatches (file, axis, expected, got)")
        for m in s["mismatches"]:
            lines.append(f"  {m['file']}  {m['axis']}  expected {m['expected']}  got {m['got']}")
    if s["fallback"]["mismatches"]:
        lines.append("")
        lines.append("fallback mismatches (file, expected, got)")
        for m in s["fallback"]["mismatches"]:
            lines.append(f"  {m['file']}  expected {m['expected']}  got {m['got']}")
    if s["false_findings"]:
        lines.append("")
        lines.append("false findings (file:line rule message)")
        for m in s["false_findings"]:
            lines.append(f"  {m['file']}:{m['line']}  {m['rule']}  {m['message']}")
    if s["missed_defects"]:
        lines.append("")
        lines.append("missed defects (file:line rule why)")
        for m in s["missed_defects"]:
            lines.append(f"  {m['file']}:{m['line']}  {m['rule']}  {m['why']}")
    if s["other_defects"]:
        lines.append("")
        lines.append("`other` defects (no rule covers them; not scored)")
        for m in s["other_defects"]:
            lines.append(f"  {m['file']}:{m['line']}  {m['why']}")
    return "\n".join(lines)


# ---- running the static pipeline ------------------------------------------------------------------


def static_records(pkb_root: Path, paths: list[str], *, jobs: int, ptx: bool, cache_dir: Path | None) -> dict[str, dict]:
    """Run the project's static slice over exactly `paths` (relative to pkb_root)."""
    sys.path.insert(0, str(ROOT))
    from analyzer.pipeline import StaticAnalyzer, StaticOptions

    analyzer = StaticAnalyzer(StaticOptions(ptx=ptx, jobs=jobs, cache_dir=cache_dir))
    files = [pkb_root / p for p in paths if (pkb_root / p).is_file()]
    out = {}
    try:
        for rec in analyzer.analyze_files(files, pkb_root):
            out[rec.path] = rec.to_json_line()
    finally:
        analyzer.close()
    return out


def read_jsonl(path: Path) -> dict[str, dict]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            rec = json.loads(line)
            out[rec["path"]] = rec
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pkb-root", type=Path, required=True, help="a ParallelKernelBench checkout")
    ap.add_argument("--labels", type=Path, nargs="+", default=[DEFAULT_LABELS],
                    help="label files or folders of them, read recursively (default: bench/real_labels/)")
    ap.add_argument("--jobs", type=int, default=0, help="threads for nvcc (0: one per core)")
    ap.add_argument("--no-ptx", action="store_true", help="skip the PTX pass")
    ap.add_argument("--cache-dir", type=Path, default=None, help="the static fact cache (default: the project's)")
    ap.add_argument("--static-jsonl", type=Path, default=None, help="score this static.jsonl instead of running the passes")
    ap.add_argument("--json", type=Path, default=None, help="write the summary here as JSON")
    ap.add_argument("--primary-line-only", action="store_true",
                    help="match a finding by its own line alone, not by the related lines it names (the scoring before 2026-12-07)")
    args = ap.parse_args(argv)

    items = load_labels(args.labels)
    errors = validate_labels(items)
    if errors:
        print("label errors:\n  " + "\n  ".join(errors), file=sys.stderr)
        return 2
    if not items:
        print("no labels found", file=sys.stderr)
        return 2
    paths = sorted({it.path for it in items})
    if args.static_jsonl is not None:
        records = read_jsonl(args.static_jsonl)
    else:
        if not args.pkb_root.is_dir():
            print(f"{args.pkb_root}: not a folder", file=sys.stderr)
            return 2
        records = static_records(args.pkb_root, paths, jobs=args.jobs, ptx=not args.no_ptx, cache_dir=args.cache_dir)
    summary = score(items, records, related=not args.primary_line_only)
    summary["label_files"] = sorted({it.source for it in items})
    print(format_report(summary))
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
