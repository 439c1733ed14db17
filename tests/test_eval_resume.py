"""A run SIGKILLed at more points than after a finished candidate: while ranks are running (mid
launch) and inside the store's transaction (mid write). The rerun loses and duplicates nothing.
Both kills come before one resume, so its launches are paid once."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_eval_support import REFERENCE, REPO, write_candidate



def _cli(paths: list[Path], tmp: Path) -> list[str]:
    return [
        sys.executable, "-m", "pkb", "eval", *map(str, paths), "--out", str(tmp / "out"), "--jobs", "1",
        "--store", str(tmp / "kill.sqlite"), "--work-dir", str(tmp / "work"),
        "--world-size", "2", "--backend", "gloo", "--dtype", "float32",
        "--trials", "2", "--warmup", "1", "--iters", "3", "--groups", "2", "--timeout", "120",
    ]


def _rows(db: Path, table: str) -> list[tuple]:
    if not db.exists():
        return []
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return conn.execute(f"SELECT * FROM {table}").fetchall()
    except sqlite3.OperationalError:
        return []


def _candidates(tmp: Path) -> list[Path]:
    folder = tmp / "c"
    return [
        write_candidate(folder, "1_a_reference.py", REFERENCE),
        write_candidate(folder, "1_b_local.py", "def solution(x):\n    return x.clone()\n"),
    ]


def _wait(pred, proc, what, limit=120):
    deadline = time.monotonic() + limit
    while not pred():
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _resume_and_check(paths, tmp, env):
    out = subprocess.run(_cli(paths, tmp), cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    db = tmp / "kill.sqlite"
    outcomes = _rows(db, "outcomes")
    assert len(outcomes) == 2 and len({(r[0], r[1]) for r in outcomes}) == 2
    assert sorted(r[4] for r in outcomes)[1] == "wrong_result"
    trials = _rows(db, "trials")
    # 2 trials x 2 ranks for both, plus timed and refresh checks for the correct one: no more
    per = {}
    for r in trials:
        per.setdefault(r[0], []).append(r)
    assert len(per) == 2
    assert all(len({(x[2], x[3], x[4]) for x in rows}) == len(rows) for rows in per.values())
    return out


def _assert_ranks_die(tmp: Path):
    from pkb.eval.sandbox import processes_of_job

    for job in (tmp / "work" / "jobs").glob("*/"):  # rank pids are the sandbox's: look by job file
        for _ in range(100):
            if not processes_of_job(job):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"ranks of {job.name} survived the killed evaluator: {processes_of_job(job)}")


def test_sigkill_mid_launch_then_mid_store_write_then_resume(tmp_path):
    """Two killed runs, then one resume: what each kill left is checked before the next run, and
    the resume (which launches every candidate) serves both."""
    paths = _candidates(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    db = tmp_path / "kill.sqlite"

    # killed while its ranks are running
    proc = subprocess.Popen(_cli(paths, tmp_path), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    jobs = tmp_path / "work" / "jobs"
    _wait(lambda: any(jobs.glob("*/status_rank*.json")), proc, "no rank started")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _rows(db, "outcomes") == []
    _assert_ranks_die(tmp_path)

    # the next run killed inside the store's transaction
    flag = tmp_path / "in_store_write"
    proc = subprocess.Popen(
        _cli(paths, tmp_path), cwd=REPO, env={**env, "PKB_EVAL_TEST_PAUSE_IN_STORE_WRITE": str(flag)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )
    _wait(flag.exists, proc, "never reached the store write")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # the transaction died with the process: neither the outcome nor its trial rows are there
    assert _rows(db, "outcomes") == [] and _rows(db, "trials") == [] and _rows(db, "timings") == []

    out = _resume_and_check(paths, tmp_path, env)
    assert "(stored result)" not in out.stdout
