"""What the reports are views over: the static JSONL of a run, the evaluation store, or a corpus.

    records_from_jsonl(path)            static.jsonl lines back into CandidateRecords
    attach_store(records, store_path)   each record's latest evaluation from the SQLite store
    gather(path, out, ...)              a run folder, a static.jsonl, or a corpus (static passes run)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pkb.record import CandidateRecord, Evidence, Finding, KernelReport, Label, PassStatus

AXES = ("mechanism", "sync", "ordering", "overlap")
STORE_NAMES = ("pkb_eval.sqlite", "eval.sqlite")


def _labels(d: dict[str, Any]) -> dict[str, list[Label]]:
    out: dict[str, list[Label]] = {}
    for axis in (*AXES, "fallback"):
        labs = [Label(axis, item["label"], [Evidence(**e) for e in item.get("evidence", [])]) for item in d.get(axis) or []]
        if labs:
            out[axis] = labs
    return out


def record_from_json_line(d: dict[str, Any]) -> CandidateRecord:
    """The inverse of CandidateRecord.to_json_line (facts and source are not in the line)."""
    rec = CandidateRecord(path=d["path"])
    for key in ("sha256", "problem_id", "problem_name", "run_tree", "backend", "precision", "hardware", "provider", "model",
                "parse_status", "parse_message"):
        if key in d and d[key] is not None:
            setattr(rec, key, d[key])
    rec.passes = [PassStatus(**p) for p in d.get("passes", [])]
    rec.labels = _labels(d)
    rec.kernels = [KernelReport(name=k["name"], language=k.get("language", ""), line=k.get("line", 0), labels=_labels(k)) for k in d.get("kernels", [])]
    rec.findings = [Finding(**f) for f in d.get("findings", [])]
    rec.suppressed = [Finding(**f) for f in d.get("suppressed", [])]
    rec.evaluation = d.get("evaluation") or {}
    rec.profile = d.get("profile") or {}
    rec.diagnosis = d.get("diagnosis") or {}
    return rec


def records_from_jsonl(path: str | Path) -> list[CandidateRecord]:
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append(record_from_json_line(json.loads(line)))
    return out


def attach_store(records: list[CandidateRecord], store_path: str | Path) -> int:
    """Give each record without an evaluation its latest stored one (by content); returns how many."""
    from pkb.store import Store

    with Store(store_path) as store:
        frame = store.outcomes()
        latest: dict[str, str] = {}
        for row in frame.itertuples(index=False):  # ordered by creation: the last one wins
            latest[row.sha256] = row.config_key
        n = 0
        for rec in records:
            if rec.evaluation or rec.sha256 not in latest:
                continue
            ev = store.evaluation(rec.sha256, latest[rec.sha256])
            if ev:
                rec.evaluation = ev
                n += 1
    return n


def find_store(folder: Path) -> Path | None:
    for name in STORE_NAMES:
        if (folder / name).is_file():
            return folder / name
    return None


def run_static(corpus: Path, out: Path, ptx: bool = True, cache: bool = True) -> list[CandidateRecord]:
    """The static passes over a corpus, writing out/static.jsonl like `pkb-analyze PATH` does."""
    from analyzer.pipeline import StaticAnalyzer, StaticOptions
    from pkb.corpus import discover, read_candidate

    analyzer = StaticAnalyzer(StaticOptions(ptx=ptx, use_cache=cache))
    files = discover(corpus)
    base = corpus if corpus.is_dir() else corpus.parent
    out.mkdir(parents=True, exist_ok=True)
    records = []
    try:
        with (out / "static.jsonl").open("w", encoding="utf-8") as jsonl:
            for rec in analyzer.analyze_all(read_candidate(f, base) for f in files):
                jsonl.write(json.dumps(rec.to_json_line()) + "\n")
                records.append(rec)
    finally:
        analyzer.close()
    return records


def gather(path: Path, out: Path, *, store: Path | None = None, ptx: bool = True, cache: bool = True) -> tuple[list[CandidateRecord], dict[str, Any]]:
    """Records for a report, and where they came from."""
    info: dict[str, Any] = {"input": str(path), "static": "", "store": ""}
    if path.is_file() and path.suffix == ".jsonl":
        records = records_from_jsonl(path)
        info["static"] = str(path)
        folder = path.parent
    elif path.is_dir() and (path / "static.jsonl").is_file():
        records = records_from_jsonl(path / "static.jsonl")
        info["static"] = str(path / "static.jsonl")
        folder = path
    else:
        records = run_static(path, out, ptx=ptx, cache=cache)
        info["static"] = f"static passes run now on {path}"
        folder = path if path.is_dir() else path.parent
    store = store or find_store(folder) or find_store(out)
    if store is not None and Path(store).is_file():
        info["store"] = str(store)
        info["evaluated_from_store"] = attach_store(records, store)
    return records, info
