"""SQLite store of evaluation results (standard library sqlite3, WAL mode).

One transaction per launch writes that candidate's trial rows, timings and outcome together, so a
run killed at any moment leaves each candidate either fully recorded or not at all: a rerun
redoes exactly the unfinished ones and never duplicates an outcome. Rows are keyed by the
candidate's content (sha256) and a config key, so an edited file is evaluated again.
"""

from __future__ import annotations

import json
import math
import sqlite3
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


class Store:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(self.path, timeout=30.0)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable at checkpoints, never corrupt
        self.conn.executescript(SCHEMA)
        cols = {row[1] for row in self.conn.execute("PRAGMA table_info(outcomes)")}
        if "emulated" not in cols:  # a store written before emulated results were kept
            self.conn.execute("ALTER TABLE outcomes ADD COLUMN emulated INTEGER DEFAULT 0")
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()

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
            self.conn.execute("DELETE FROM trials WHERE sha256=? AND config_key=?", (sha256, config_key))
            self.conn.execute("DELETE FROM timings WHERE sha256=? AND config_key=?", (sha256, config_key))
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
