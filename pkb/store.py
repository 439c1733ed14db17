"""SQLite store of the candidate records (standard library sqlite3, WAL mode): what each stage
produced, as it was produced, so the views (reports/) read it instead of re-running a stage.

    candidates, trials, timings, outcomes   the evaluation (pkb.eval writes them, one launch a transaction)
    record_parts                            the other parts of the record, as plain JSON: the static
                                            labels and findings (the static.jsonl line), the profile
                                            summary with its ncu results, and the diagnosis

One transaction per launch writes that candidate's trial rows, timings and outcome together, so a
run killed at any moment leaves each candidate either fully recorded or not at all: a rerun
redoes exactly the unfinished ones and never duplicates an outcome. Rows are keyed by the
candidate's content (sha256) and a config key, so an edited file is evaluated again.

Misuse it survives: a second run on the same store is refused (an flock on `<store>.lock`, held
while the store is open for a run and released by the kernel when its owner dies, so it never goes
stale); a store SQLite cannot read is renamed aside with a timestamp and a fresh one started; the
schema version lives in `PRAGMA user_version`, and an older store is migrated one step at a time
(MIGRATIONS) while a newer one is refused, all before anything is launched.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS candidates (
    sha256 TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    problem_id INTEGER,
    problem_name TEXT,
    model TEXT,
    provider TEXT,
    backend TEXT,
    first_seen REAL
);
CREATE TABLE IF NOT EXISTS trials (
    sha256 TEXT NOT NULL,
    config_key TEXT NOT NULL,
    kind TEXT NOT NULL,            -- trial | timed | refresh
    trial INTEGER NOT NULL,        -- the trial, or the input group of a timed check
    rank INTEGER NOT NULL,
    matched INTEGER,
    shape_ok INTEGER,
    dtype_ok INTEGER,
    numel INTEGER,
    mismatches INTEGER,
    max_abs_err REAL,
    max_rel_err REAL,
    max_violation REAL,
    nan_inf INTEGER,
    sentinel INTEGER,
    mutates_inputs INTEGER,
    first_mismatches TEXT,         -- JSON
    saved TEXT,
    PRIMARY KEY (sha256, config_key, kind, trial, rank)
);
CREATE TABLE IF NOT EXISTS timings (
    sha256 TEXT NOT NULL,
    config_key TEXT NOT NULL,
    rank INTEGER NOT NULL,
    side TEXT NOT NULL,            -- reference | candidate
    clock TEXT NOT NULL,           -- event | wall
    median_ms REAL,
    p10_ms REAL,
    p90_ms REAL,
    mean_ms REAL,
    n INTEGER,
    groups INTEGER,
    PRIMARY KEY (sha256, config_key, rank, side, clock)
);
CREATE TABLE IF NOT EXISTS outcomes (
    sha256 TEXT NOT NULL,
    config_key TEXT NOT NULL,
    problem_id INTEGER,
    status TEXT NOT NULL,
    outcome TEXT,
    subtype TEXT,
    speedup REAL,
    correct INTEGER,
    world_size INTEGER,
    backend TEXT,
    dtype TEXT,
    wall_s REAL,
    details TEXT,                  -- JSON: the whole evaluation dict
    created REAL,
    emulated INTEGER DEFAULT 0,    -- 1: virtual ranks in one process (world_size is the virtual one), never timed
    PRIMARY KEY (sha256, config_key)
);
"""
RECORD_PARTS_TABLE = """
CREATE TABLE IF NOT EXISTS record_parts (
    sha256 TEXT NOT NULL,
    config_key TEXT NOT NULL,      -- the evaluation's configuration; '' for parts that have none (static, a diagnosis without evaluation)
    part TEXT NOT NULL,            -- static | profile | diagnosis
    data TEXT NOT NULL,            -- JSON: the record's field (static: its JSON line without the later stages)
    created REAL,
    PRIMARY KEY (sha256, config_key, part)
);
"""
SCHEMA += RECORD_PARTS_TABLE

# The parts of a record kept in record_parts (the evaluation has tables of its own).
PARTS = ("static", "profile", "diagnosis")
# Parts that describe one evaluation: a new evaluation under the same key drops them.
EVALUATION_PARTS = ("profile", "diagnosis")


# The schema this code writes. A store without a version (user_version 0) holding the tables is
# one written before versions were kept. Version 1: the tables of that time; 2: outcomes.emulated;
# 3: record_parts (static labels, profile, diagnosis stored beside the evaluation).
SCHEMA_VERSION = 3


def _migrate_0_to_1(conn: sqlite3.Connection) -> None:
    """Unversioned stores: the tables, created where missing (an empty file has none)."""
    conn.executescript(SCHEMA)


def _migrate_1_to_2(conn: sqlite3.Connection) -> None:
    """Emulated results are kept beside real ones, marked (outcomes.emulated)."""
    cols = {row[1] for row in conn.execute("PRAGMA table_info(outcomes)")}
    if "emulated" not in cols:  # absent from a store made before; present in one made by step 0->1
        conn.execute("ALTER TABLE outcomes ADD COLUMN emulated INTEGER DEFAULT 0")


def _migrate_2_to_3(conn: sqlite3.Connection) -> None:
    """The record's other parts are stored too (record_parts); older stores have none yet, and
    the views say so and compute what is missing."""
    conn.execute(RECORD_PARTS_TABLE)  # execute, not executescript: it stays in the step's transaction


# from_version -> the step to from_version + 1, run in one transaction with the version bump.
MIGRATIONS = {0: _migrate_0_to_1, 1: _migrate_1_to_2, 2: _migrate_2_to_3}


class StoreError(RuntimeError):
    """A store that cannot be used as asked; the message says why and what to do."""


class StoreLocked(StoreError):
    pass


class StoreVersionError(StoreError):
    pass


class Store:
    """The results store. `lock=True` (an evaluation run) holds the store's lock for as long as it
    is open, and may set a corrupt store aside; readers (reports) take no lock and never move it.
    Both bring an older store to this version (each step one transaction, safe beside a run)."""

    def __init__(self, path: str | Path, *, lock: bool = False) -> None:
        self.path = str(path)
        self.set_aside: str | None = None  # where a corrupt store was moved
        self._lock: _RunLock | None = None
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        if lock:
            self._lock = _RunLock.acquire(self.path + ".lock", what=f"the store {self.path}")
        try:
            self.conn = self._open()
        except BaseException:
            self._release()
            raise

    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect_and_migrate()
        except sqlite3.DatabaseError as exc:
            # Only damage is set aside: a busy, unreadable or full disk is an error the user fixes.
            if self._lock is None or isinstance(exc, sqlite3.OperationalError):
                raise StoreError(f"{self.path}: cannot use this store ({exc})") from exc
            self.set_aside = _set_aside(self.path, exc)
            print(f"pkb-analyze: the store {self.path} is corrupt ({exc}); moved to {self.set_aside}, "
                  "starting a fresh store (its candidates are evaluated again)", file=sys.stderr)
            return self._connect_and_migrate()

    def _connect_and_migrate(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30.0)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreVersionError(
                    f"{self.path} has store schema version {version}; this pkb-analyze writes version "
                    f"{SCHEMA_VERSION} and cannot use it: upgrade pkb-analyze, or pass another --store/--out"
                )
            # quick_check reads every page: a truncated or overwritten file fails here, not mid-run
            problems = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
            if problems != ["ok"]:
                raise sqlite3.DatabaseError("; ".join(problems[:3]))
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable at checkpoints, never corrupt
            while version < SCHEMA_VERSION:
                with conn:
                    MIGRATIONS[version](conn)
                    conn.execute(f"PRAGMA user_version={version + 1}")
                version += 1
            return conn
        except BaseException:
            conn.close()
            raise

    def close(self) -> None:
        try:
            self.conn.close()
        finally:
            self._release()

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- writes ---------------------------------------------------------------------------------

    def add_candidate(self, sha256: str, path: str, problem_id: int | None, problem_name: str = "", model: str = "", provider: str = "", backend: str = "") -> None:
        with self.conn:
            self.conn.execute(
                "INSERT INTO candidates (sha256, path, problem_id, problem_name, model, provider, backend, first_seen)"
                " VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(sha256) DO UPDATE SET path=excluded.path",
                (sha256, path, problem_id, problem_name, model, provider, backend, time.time()),
            )

    def write_evaluation(self, sha256: str, config_key: str, problem_id: int | None, evaluation: dict[str, Any], rank_results: list[dict[str, Any] | None] | None = None) -> None:
        """Trials, timings and the outcome of one candidate, in one transaction."""
        rank_results = rank_results or []
        with self.conn:
            self._drop_foreign_objects()
            self.conn.execute("DELETE FROM trials WHERE sha256=? AND config_key=?", (sha256, config_key))
            self.conn.execute("DELETE FROM timings WHERE sha256=? AND config_key=?", (sha256, config_key))
            # a profile or a diagnosis of an earlier evaluation under this key is not this one's
            self.conn.execute(f"DELETE FROM record_parts WHERE sha256=? AND config_key=? AND part IN ({','.join('?' * len(EVALUATION_PARTS))})",
                              (sha256, config_key, *EVALUATION_PARTS))
            for res in rank_results:
                if not res:
                    continue
                rank = int(res.get("rank", -1))
                checks = list(res.get("trials") or []) + list(res.get("timed_checks") or [])
                if res.get("refresh_check"):
                    checks.append(res["refresh_check"])
                for c in checks:
                    self.conn.execute(
                        "INSERT OR REPLACE INTO trials VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (
                            sha256, config_key, c.get("kind", "trial"), int(c.get("trial", 0)), rank,
                            _b(c.get("matched")), _b(c.get("shape_ok")), _b(c.get("dtype_ok")),
                            c.get("numel"), c.get("mismatches"), _f(c.get("max_abs_err")), _f(c.get("max_rel_err")),
                            _f(c.get("max_violation")), c.get("nan_inf"), c.get("sentinel"), _b(c.get("mutates_inputs")),
                            json.dumps(_first_mismatches(c)), c.get("saved"),
                        ),
                    )
                timing = res.get("timing") or {}
                for side in ("reference", "candidate"):
                    stats = timing.get(side) or {}
                    for clock, s in stats.items():
                        if not isinstance(s, dict) or "median_ms" not in s:
                            continue  # iters, groups, ...; a clock the device had not
                        self.conn.execute(
                            "INSERT OR REPLACE INTO timings VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                            (sha256, config_key, rank, side, clock, s["median_ms"], s["p10_ms"], s["p90_ms"], s["mean_ms"], s["n"], stats.get("groups")),
                        )
            _test_pause("PKB_EVAL_TEST_PAUSE_IN_STORE_WRITE")  # tests: a SIGKILL lands mid-transaction
            self.conn.execute(
                "INSERT OR REPLACE INTO outcomes (sha256, config_key, problem_id, status, outcome, subtype, speedup, correct,"
                " world_size, backend, dtype, wall_s, details, created, emulated) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    sha256, config_key, problem_id, evaluation.get("status"), evaluation.get("outcome"),
                    evaluation.get("subtype"), _f(evaluation.get("speedup")), _b(evaluation.get("correct")),
                    evaluation.get("world_size"), evaluation.get("backend"), evaluation.get("dtype"),
                    evaluation.get("wall_s"), json.dumps(evaluation, default=str), time.time(),
                    int(bool(evaluation.get("emulated"))),
                ),
            )

    def write_part(self, sha256: str, config_key: str, part: str, data: dict[str, Any]) -> None:
        """One part of a candidate's record (PARTS), replacing what was stored for it. `config_key`
        is the evaluation's ('' for the static part, or a diagnosis of a record never evaluated)."""
        if part not in PARTS:
            raise ValueError(f"unknown record part {part!r}; one of {', '.join(PARTS)}")
        with self.conn:
            self.conn.execute(
                "INSERT OR REPLACE INTO record_parts (sha256, config_key, part, data, created) VALUES (?,?,?,?,?)",
                (sha256, config_key, part, json.dumps(data, default=str), time.time()),
            )

    def _drop_foreign_objects(self) -> None:
        """This store defines no triggers: one found was planted (a candidate that reached the file
        where no sandbox hid it) and would rewrite what the harness writes; it goes, loudly."""
        for (name,) in self.conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall():
            self.conn.execute(f'DROP TRIGGER IF EXISTS "{name}"')
            print(f"pkb-analyze: dropped trigger {name!r} from the store {self.path}: not written by pkb-analyze", file=sys.stderr)

    # ---- reads ----------------------------------------------------------------------------------

    def done(self, sha256: str, config_key: str, statuses: tuple[str, ...] = ("ran",)) -> bool:
        """True when this content was evaluated under this configuration with one of `statuses`
        (emulation also counts its verdicts that need no rerun: inconclusive, needs multicast)."""
        marks = ",".join("?" * len(statuses))
        row = self.conn.execute(
            f"SELECT 1 FROM outcomes WHERE sha256=? AND config_key=? AND status IN ({marks})", (sha256, config_key, *statuses)
        ).fetchone()
        return row is not None

    def evaluation(self, sha256: str, config_key: str) -> dict[str, Any] | None:
        row = self.conn.execute("SELECT details FROM outcomes WHERE sha256=? AND config_key=?", (sha256, config_key)).fetchone()
        return json.loads(row[0]) if row else None

    def part(self, sha256: str, config_key: str, part: str) -> dict[str, Any] | None:
        """A stored part of a record (PARTS), or None when nothing is stored for it."""
        row = self.conn.execute("SELECT data FROM record_parts WHERE sha256=? AND config_key=? AND part=?",
                                (sha256, config_key, part)).fetchone()
        return json.loads(row[0]) if row else None

    def latest_config_key(self, sha256: str) -> str | None:
        """The configuration of this content's newest evaluation (real or emulated), or None."""
        row = self.conn.execute("SELECT config_key FROM outcomes WHERE sha256=? ORDER BY created DESC LIMIT 1", (sha256,)).fetchone()
        return row[0] if row else None

    def outcomes(self) -> Any:
        """Outcomes joined with what is known of each candidate (a pandas DataFrame)."""
        return self._frame(
            "SELECT o.sha256, o.config_key, c.path, o.problem_id, c.problem_name, c.model, c.provider,"
            " c.backend AS candidate_backend, o.status, o.outcome, o.subtype, o.speedup, o.correct,"
            " o.world_size, o.backend, o.dtype, o.wall_s, o.created, o.emulated"
            " FROM outcomes o LEFT JOIN candidates c ON c.sha256 = o.sha256 ORDER BY o.created"
        )

    def trials(self, sha256: str | None = None) -> Any:
        if sha256:
            return self._frame("SELECT * FROM trials WHERE sha256=? ORDER BY kind, trial, rank", (sha256,))
        return self._frame("SELECT * FROM trials ORDER BY sha256, kind, trial, rank")

    def timings(self, sha256: str | None = None) -> Any:
        if sha256:
            return self._frame("SELECT * FROM timings WHERE sha256=? ORDER BY side, rank, clock", (sha256,))
        return self._frame("SELECT * FROM timings ORDER BY sha256, side, rank, clock")

    def candidates(self) -> Any:
        return self._frame("SELECT * FROM candidates ORDER BY first_seen")

    def _frame(self, sql: str, params: tuple = ()) -> Any:
        import pandas as pd

        cur = self.conn.execute(sql, params)
        cols = [d[0] for d in cur.description]
        return pd.DataFrame(cur.fetchall(), columns=cols)


def _set_aside(path: str, exc: BaseException) -> str:
    """Rename a store SQLite cannot read (and its WAL files) to `<name>.corrupt-<UTC time>`."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest = f"{path}.corrupt-{stamp}"
    n = 1
    while os.path.exists(dest):
        n += 1
        dest = f"{path}.corrupt-{stamp}-{n}"
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.replace(path + suffix, dest + suffix)
    return dest


class _RunLock:
    """An exclusive flock on a lock file, shared by every user in this process (one evaluation run
    opens the store many times) and refused to any other process while held. The kernel drops it
    when the holder dies, so a killed run never leaves a stale lock; the pid written inside is
    only for the message."""

    _held: dict[str, _RunLock] = {}
    _guard = threading.Lock()

    def __init__(self, path: str, fd: int) -> None:
        self.path, self.fd, self.users = path, fd, 1

    @classmethod
    def acquire(cls, path: str, what: str) -> _RunLock:
        key = os.path.realpath(path)
        with cls._guard:
            held = cls._held.get(key)
            if held is not None:
                held.users += 1
                return held
            fd = os.open(key, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
                os.close(fd)
                raise StoreLocked(
                    f"{what} is in use by another pkb-analyze run ({owner or 'pid unknown'}); "
                    "wait for it to finish, or give this run another --out (or --store)"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}".encode(), 0)
            lock = cls(key, fd)
            cls._held[key] = lock
            return lock

    def release(self) -> None:
        with self._guard:
            self.users -= 1
            if self.users > 0:
                return
            self._held.pop(self.path, None)
            os.close(self.fd)  # closing the last descriptor drops the flock


def run_lock(folder: str | Path) -> _RunLock:
    """The lock of an output folder: one run writes it at a time (release() when done)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    return _RunLock.acquire(str(Path(folder) / ".pkb-analyze.lock"), what=f"the output folder {folder}")


def _test_pause(var: str) -> None:
    """When the variable names a file (tests only): create it and stall, so the test can kill
    this process at exactly this point."""
    import os

    path = os.environ.get(var)
    if path:
        Path(path).write_text(str(os.getpid()))
        time.sleep(600)


def _b(v: Any) -> int | None:
    return None if v is None else int(bool(v))


def _f(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if not math.isnan(f) else None


def _first_mismatches(c: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for leaf in c.get("leaves", []) or []:
        for m in leaf.get("first_mismatches", []) or []:
            out.append({"leaf": leaf.get("name"), **m})
    return out[:8]
