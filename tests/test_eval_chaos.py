"""The evaluator SIGKILLed at seeded random moments of a CPU run of several candidates, then
resumed to the end: after each kill the store is whole (integrity check, one row per candidate at
most) and no rank of the killed run is alive; after the resume every candidate has exactly one
outcome in the store and one line in eval.jsonl, the two agree, and the innocent candidates are
correct (never suspect, whatever was left in their job folders by the killed launches)."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from test_eval_resume import _assert_ranks_die
from test_eval_support import REFERENCE, REPO, write_candidate

SEED = int(os.environ.get("PKB_CHAOS_SEED", "20261205"))
KILLS = 3


def _cli(paths: list[Path], tmp: Path) -> list[str]:
    return [
        sys.executable, "-m", "pkb", "eval", *map(str, paths), "--out", str(tmp / "out"), "--work-dir", str(tmp / "work"), "--jobs", "2",
        "--world-size", "2", "--backend", "gloo", "--dtype", "float32",
        "--trials", "2", "--warmup", "1", "--iters", "3", "--groups", "2", "--timeout", "120",
    ]


def _candidates(tmp: Path) -> tuple[list[Path], set[str]]:
    folder = tmp / "c"
    innocent = [
        write_candidate(folder, "1_a_reference.py", REFERENCE),
        write_candidate(folder, "1_b_copy_then_reduce.py",
                        "@torch.no_grad()\ndef solution(x):\n    out = torch.empty_like(x)\n    out.copy_(x)\n    dist.all_reduce(out)\n    return out\n"),
    ]
    wrong = [
        write_candidate(folder, "1_c_local.py", "def solution(x):\n    return x.clone()\n"),
        write_candidate(folder, "1_d_raises.py", "def solution(x):\n    raise ValueError('no')\n"),
    ]
    return innocent + wrong, {p.name for p in innocent}


def _store_rows(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    conn = sqlite3.connect(db, timeout=10)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name='outcomes'").fetchone():
            return []
        return conn.execute("SELECT sha256, config_key, status, outcome, subtype, speedup FROM outcomes").fetchall()
    finally:
        conn.close()


def _assert_run_gone(candidate: Path, limit_s: float = 15.0) -> None:
    needle = str(candidate).encode()
    deadline = time.monotonic() + limit_s
    while True:
        left = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and int(entry.name) != os.getpid():
                try:
                    if needle in (entry / "cmdline").read_bytes() and (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X"):
                        left.append(int(entry.name))
                except (OSError, IndexError):
                    continue
        if not left:
            return
        assert time.monotonic() < deadline, f"processes of the killed run outlived it: {left}"
        time.sleep(0.2)


def test_sigkill_at_random_moments_then_resume_loses_and_duplicates_nothing(tmp_path):
    rng = random.Random(SEED)
    paths, innocent = _candidates(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PKB_CACHE_DIR": str(tmp_path / "cache")}
    db = tmp_path / "out" / "pkb_eval.sqlite"
    moments: list[float] = []
    stored_after: list[int] = []  # outcomes stored when each kill landed
    for _ in range(KILLS):
        moment = rng.uniform(2.0, 16.0)
        moments.append(round(moment, 2))
        proc = subprocess.Popen(_cli(paths, tmp_path), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        deadline = time.monotonic() + moment
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)  # the evaluator alone: its launches must die with it
        proc.wait()
        rows = _store_rows(db)
        assert len({(r[0], r[1]) for r in rows}) == len(rows) <= len(paths), (SEED, moments, rows)
        stored_after.append(len(rows))
        _assert_ranks_die(tmp_path)
        _assert_run_gone(paths[0])  # its forked workers too: they hold the run's lock
    print(f"seed {SEED}: killed at {moments} s, outcomes stored by then {stored_after}")
    out = subprocess.run(_cli(paths, tmp_path), cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (SEED, moments, out.stdout[-3000:], out.stderr[-3000:])
    rows = _store_rows(db)
    assert len(rows) == len(paths) and len({(r[0], r[1]) for r in rows}) == len(paths), (SEED, moments, rows)
    lines = [json.loads(x) for x in (tmp_path / "out" / "eval.jsonl").read_text().splitlines()]
    assert len(lines) == len(paths) and len({x["sha256"] for x in lines}) == len(paths)
    stored = {r[0]: r for r in rows}
    for line in lines:
        ev = line["evaluation"]
        row = stored[line["sha256"]]
        # a result taken from the store is marked so in the line (skipped_cached); it was stored as ran
        status = "ran" if ev["status"] == "skipped_cached" else ev["status"]
        assert (row[2], row[3], row[4], row[5]) == (status, ev["outcome"], ev["subtype"], ev.get("speedup")), (line["path"], row, ev)
        name = Path(line["path"]).name
        if name in innocent:
            assert ev["outcome"] in ("faster", "slower"), (SEED, moments, name, ev["outcome"], ev["subtype"], ev.get("reason"))
        else:
            assert ev["outcome"] in ("wrong_result", "runtime_error"), (SEED, moments, name, ev["outcome"], ev.get("reason"))


def test_two_runs_started_together_on_one_out_one_runs_the_other_is_refused(tmp_path):
    """Both real runs, started at the same moment: one evaluates everything, the other says the
    folder is in use (exit 2) and writes nothing; the store holds each candidate once."""
    paths, innocent = _candidates(tmp_path)
    paths = [p for p in paths if p.name in innocent]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PKB_CACHE_DIR": str(tmp_path / "cache")}
    procs = [subprocess.Popen(_cli(paths, tmp_path), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
    codes = sorted(r[0] for r in results)
    assert codes == [0, 2], [(r[0], r[2][-800:]) for r in results]
    refused = next(r for r in results if r[0] == 2)
    assert "in use by another pkb-analyze run" in refused[2], refused[2][-800:]
    rows = _store_rows(tmp_path / "out" / "pkb_eval.sqlite")
    assert len(rows) == len(paths) and {r[3] for r in rows} <= {"faster", "slower"}, rows
    lines = (tmp_path / "out" / "eval.jsonl").read_text().splitlines()
    assert len(lines) == len(paths)


def test_a_forked_static_worker_leaves_when_its_run_is_killed(tmp_path):
    """The static pass's forked workers hold the run's lock on OUT (inherited descriptors):
    orphaned by a kill -9 they waited forever and every resume was refused as a second run."""
    code = (
        "import os, sys, time\n"
        "from analyzer.pipeline import _exit_with_parent\n"
        "parent = os.getpid()\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    _exit_with_parent(parent)\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "print(child, flush=True)\n"
        "os._exit(0)\n"  # the parent dies at once, as under kill -9
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                         capture_output=True, text=True, timeout=60)
    child = int(out.stdout.split()[0])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and (Path(f"/proc/{child}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")):
        assert time.monotonic() < deadline, f"the orphaned worker {child} is still alive"
        time.sleep(0.1)
