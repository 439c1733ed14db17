"""What the reports are views over: stored records. Reads static.jsonl / eval.jsonl lines and the
SQLite store (pkb.store); runs no stage (the command line runs one where a part is missing).

    records_from_jsonl(path)              JSON lines back into CandidateRecords
    attach_store(records, store_path)     each record's stored evaluation, profile and diagnosis
    stored_record(store_path, sha256)     one candidate's whole stored record, or None
    gather(path, store=...)               a run folder or a .jsonl, with its store's parts attached
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pkb.record import CandidateRecord

STORE_NAMES = ("pkb_eval.sqlite", "eval.sqlite")


def record_from_json_line(d: dict[str, Any]) -> CandidateRecord:
    """The inverse of CandidateRecord.to_json_line (facts and source are not in the line)."""
    return CandidateRecord.from_json_line(d)


def records_from_jsonl(path: str | Path) -> list[CandidateRecord]:
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append(record_from_json_line(json.loads(line)))
    return out


def _attach(store: Any, rec: CandidateRecord, latest: dict[str, str] | None = None) -> dict[str, bool]:
    """Fill the record's empty later parts from the store; which ones it filled. The profile and
    the diagnosis are read under the key of the evaluation the record shows, so a diagnosis never
    describes another evaluation than the one beside it."""
    filled = {"evaluation": False, "profile": False, "diagnosis": False}
    if not rec.sha256:
        return filled
    key = latest.get(rec.sha256) if latest is not None else store.latest_config_key(rec.sha256)
    if not rec.evaluation and key:
        ev = store.evaluation(rec.sha256, key)
        if ev:
            rec.evaluation, filled["evaluation"] = ev, True
    key = (rec.evaluation or {}).get("config_key") or ""  # '': a record never evaluated (or not past its key)
    for part in ("profile", "diagnosis"):
        if not getattr(rec, part):
            data = store.part(rec.sha256, key, part)
            if data:
                setattr(rec, part, data)
                filled[part] = True
    return filled


def attach_store(records: list[CandidateRecord], store_path: str | Path) -> dict[str, int]:
    """Give each record its stored evaluation (the latest, by content), and the profile and
    diagnosis stored with it, where the record has none; how many of each were attached."""
    from pkb.store import Store

    counts = {"evaluation": 0, "profile": 0, "diagnosis": 0}
    with Store(store_path) as store:
        latest: dict[str, str] = {}
        for row in store.outcomes().itertuples(index=False):  # ordered by creation: the last one wins
            latest[row.sha256] = row.config_key
        for rec in records:
            for part, filled in _attach(store, rec, latest).items():
                counts[part] += filled
    return counts


def stored_record(store_path: str | Path, sha256: str) -> CandidateRecord | None:
    """The record the store holds for this content (static part, with the latest evaluation and
    what was stored with it), or None when its static part was never stored."""
    from pkb.store import Store

    with Store(store_path) as store:
        static = store.part(sha256, "", "static")
        if static is None:
            return None
        rec = record_from_json_line(static)
        _attach(store, rec)
    return rec


def find_store(folder: Path) -> Path | None:
    for name in STORE_NAMES:
        if (folder / name).is_file():
            return folder / name
    return None


def gather(path: Path, *, store: Path | None = None) -> tuple[list[CandidateRecord], dict[str, Any]]:
    """Records of a run folder (its static.jsonl) or of a .jsonl, with the parts of its store
    (`store`, else the one beside it) attached, and where they came from."""
    info: dict[str, Any] = {"input": str(path), "static": "", "store": ""}
    jsonl = path if path.is_file() else path / "static.jsonl"
    records = records_from_jsonl(jsonl)
    info["static"] = str(jsonl)
    store = store or find_store(jsonl.parent)
    if store is not None and Path(store).is_file():
        info["store"] = str(store)
        counts = attach_store(records, store)
        info["read from the store"] = ", ".join(f"{part} {n}" for part, n in counts.items())
    return records, info
