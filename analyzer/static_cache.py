"""The static stage's two caches, in one SQLite file (static.sqlite under the cache folder).

- facts: content + run + analyzer code -> the passes' facts and statuses. A changed rule set or
  option re-labels from here without running a pass again.
- results: content + what the file's name and run tree say + the code that reads, labels and
  judges + the rule set -> the finished record (everything but the facts and the text); a copy of
  the file under another folder finds it too (result_key, moved_record). A hit returns the record without decoding, parsing or
  labelling anything: this is what makes a re-run of an unchanged corpus cost about a second.

Each entry is written and committed on its own as it is made (by whichever process made it; SQLite
in WAL mode serializes the writers), so an interrupted run keeps every entry it finished. An entry
that does not decode is a miss, and the next run overwrites it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import pickle
import sqlite3
import threading
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from pkb.facts import StaticFacts
from pkb.record import CandidateRecord

TABLES = ("facts", "results")
_NOT_CACHED = ("facts", "source", "tree")  # the facts have their own table; the text is the file's

# Outside analyzer/, the code a finished record also depends on: how a file is read and its problem
# matched, the problem catalogue the labels consult, the record and vocabulary, noqa suppression.
_PKB_MODULES = ("corpus.py", "problem_match.py", "roots.py", "record.py", "facts.py", "taxonomy.py", "suppress.py",
                "serde.py", "collectives.py")


def _hash_sources(h: Any, root: Path, suffixes: tuple[str, ...]) -> None:
    for p in sorted(root.rglob("*")):
        if p.suffix in suffixes and "__pycache__" not in p.parts:
            h.update(p.relative_to(root).as_posix().encode())
            h.update(p.read_bytes())


@lru_cache(maxsize=1)
def analyzer_version() -> str:
    """A hash of the analyzer's own sources and of the problem catalogue the passes read (which
    arguments the run leaves None or fixes, the inputs' dtype): cached facts from older code are not reused."""
    h = hashlib.sha256()
    _hash_sources(h, Path(__file__).parent, (".py", ".h"))
    h.update((Path(__file__).resolve().parents[1] / "problems" / "pkb_catalog.json").read_bytes())
    return h.hexdigest()[:16]


@lru_cache(maxsize=1)
def record_version() -> str:
    """analyzer_version, plus the problem catalogue and the pkb modules a finished record depends on."""
    pkb_dir = Path(__file__).resolve().parents[1] / "pkb"
    h = hashlib.sha256(analyzer_version().encode())
    _hash_sources(h, pkb_dir.parent / "problems", (".py", ".json"))
    for name in _PKB_MODULES:
        h.update(name.encode())
        h.update((pkb_dir / name).read_bytes())
    return h.hexdigest()[:16]


class FactCache:
    """key -> data in one table of the cache file (safe across threads and processes): JSON for
    the facts; a pickle for finished records (`raw=True`), since rebuilding a record's dataclasses
    from JSON cost more than the rest of a warm run, and a pickle of our own types in the user's own
    cache is as trusted as the byte code beside the sources."""

    def __init__(self, path: Path, table: str = "facts"):
        if table not in TABLES:
            raise ValueError(f"no cache table {table!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.table = path, table
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        for name in TABLES:
            self._db.execute(f"CREATE TABLE IF NOT EXISTS {name} (key TEXT PRIMARY KEY, data NOT NULL)")
        self._db.commit()

    def _row(self, key: str) -> Any:
        with self._lock:
            row = self._db.execute(f"SELECT data FROM {self.table} WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def _put_row(self, key: str, value: Any) -> None:
        with self._lock:
            self._db.execute(f"INSERT OR REPLACE INTO {self.table} VALUES (?, ?)", (key, value))
            self._db.commit()

    def get(self, key: str) -> dict | None:
        """The entry, or None where there is none or it does not decode (a corrupt entry is a miss)."""
        raw = self._row(key)
        if raw is None:
            return None
        try:
            data = json.loads(raw)
        except (TypeError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def put(self, key: str, data: dict) -> None:
        self._put_row(key, json.dumps(data))

    def get_record(self, key: str) -> CandidateRecord | None:
        """A finished record (put_record's), or None where there is none or it does not load."""
        raw = self._row(key)
        if not isinstance(raw, bytes):
            return None
        try:
            rec = pickle.loads(raw)
        except Exception:  # noqa: BLE001 - any damage to an entry is a miss, never a failed run
            return None
        return rec if isinstance(rec, CandidateRecord) and rec.path and rec.parse_status else None

    def put_record(self, key: str, rec: CandidateRecord) -> None:
        """The finished record without its facts (their own table has them), text or syntax tree."""
        keep = {name: getattr(rec, name) for name in _NOT_CACHED}
        try:
            rec.facts, rec.source, rec.tree = StaticFacts(), "", None
            blob = pickle.dumps(rec, protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            for name, value in keep.items():
                setattr(rec, name, value)
        self._put_row(key, blob)

    def close(self) -> None:
        self._db.close()


# ---- finished records -------------------------------------------------------------------------


def result_key(rec: CandidateRecord, ptx: str, rule_ids: list[str]) -> str:
    """What a finished static record is a function of: the bytes (sha256); what the file's name
    and run tree say (the name gives the problem id and name, the name or the tree the backend, the
    tree the precision, which prunes dtype branches, and the hardware, which gives the world size
    and multicast); the code; the PTX pass's compiler; and the rules run. Not the folders: a copy
    of the file elsewhere is the same record under its own path (moved_record)."""
    file_name = rec.path.replace("\\", "/").rsplit("/", 1)[-1]
    parts = [record_version(), rec.sha256, file_name, rec.backend, rec.precision, rec.hardware, ptx, ",".join(rule_ids)]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


# The fields a record takes from where its file lies rather than from what result_key covers.
PATH_FIELDS = ("path", "run_tree", "provider", "model")


def moved_record(done: CandidateRecord, read: CandidateRecord, in_place: bool = False) -> CandidateRecord:
    """`done`, the finished record of a file with the same result_key, as the record of the file
    `read` (read_file's record) names: its path fields, and its path in every piece of evidence
    and finding. `in_place`: change `done` itself (a record of its own, fresh from the cache)."""
    rec = done if in_place else copy.deepcopy(replace(done, tree=None))
    old = done.path
    for name in PATH_FIELDS:
        setattr(rec, name, getattr(read, name))
    if rec.path == old:
        return rec
    labels = [label for group in [rec.labels, *(k.labels for k in rec.kernels)] for axis in group.values() for label in axis]
    for evidence in (e for label in labels for e in label.evidence):
        if evidence.file == old:
            evidence.file = rec.path
    for finding in rec.findings + rec.suppressed:
        if finding.file == old:
            finding.file = rec.path
    return rec


def source_text(parse_status: str, content: bytes) -> str:
    """The text reading keeps for a file of this status (pkb.corpus._decode's choice, without
    parsing again): the text where it decoded and was not binary."""
    if parse_status not in ("ok", "syntax_error", "not_python") or b"\x00" in content:
        return ""
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        return ""
