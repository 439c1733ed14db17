"""The store under misuse: two runs on one store or output folder, a corrupt or truncated file, a
store of another schema version, an unversioned store of an older release. No launch, no torch."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pkb.store import SCHEMA, SCHEMA_VERSION, Store, StoreError, StoreLocked, StoreVersionError, run_lock

REPO = Path(__file__).resolve().parents[1]
EVALUATION = {"status": "ran", "outcome": "faster", "subtype": "", "speedup": 2.0, "correct": True, "world_size": 2}


def _hold(lock_target: str, kind: str = "store") -> subprocess.Popen:
    """Another process holding a store (or a folder) open for a run, until killed."""
    code = (
        "import sys, time\n"
        "from pkb.store import Store, run_lock\n"
        f"held = Store(sys.argv[1], lock=True) if {kind!r} == 'store' else run_lock(sys.argv[1])\n"
        "print('held', flush=True)\n"
        "time.sleep(120)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code, lock_target], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_second_run_on_the_store_is_refused_and_the_lock_dies_with_its_owner(tmp_path):
    path = tmp_path / "s.sqlite"
    holder = _hold(str(path))
    try:
        with pytest.raises(StoreLocked, match=f"in use by another pkb-analyze run \\(pid {holder.pid}"):
            Store(path, lock=True)
        with Store(path) as reader:  # a report reads while a run writes
            assert reader.done("x", "k") is False
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with Store(path, lock=True) as store:  # no stale lock after a kill -9
        store.write_evaluation("a" * 64, "k", 1, EVALUATION)
        assert store.done("a" * 64, "k")


def test_one_process_may_open_its_own_store_many_times(tmp_path):
    path = tmp_path / "s.sqlite"
    outer = Store(path, lock=True)
    inner = Store(path, lock=True)  # evaluate() opens it again inside a CLI run
    inner.close()
    try:
        code = "import sys\nfrom pkb.store import Store\nStore(sys.argv[1], lock=True)\n"
        other = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": str(REPO)})
        assert other.returncode != 0 and "StoreLocked" in other.stderr  # still held by `outer`
    finally:
        outer.close()
    Store(path, lock=True).close()


def test_output_folder_lock(tmp_path):
    holder = _hold(str(tmp_path / "out"), kind="folder")
    try:
        with pytest.raises(StoreLocked, match="the output folder"):
            run_lock(tmp_path / "out")
    finally:
        holder.kill()
        holder.wait()
    run_lock(tmp_path / "out").release()


def _stored(path: Path, n: int = 40) -> None:
    with Store(path, lock=True) as store:
        for i in range(n):
            store.write_evaluation(f"{i:064x}", "k", 1, {**EVALUATION, "reason": "x" * 2000})


@pytest.mark.parametrize("damage", ["junk", "truncated"])
def test_a_corrupt_store_is_set_aside_and_a_fresh_one_started(tmp_path, capsys, damage):
    path = tmp_path / "s.sqlite"
    if damage == "junk":
        path.write_bytes(b"this is not a database\n" * 100)
    else:
        _stored(path)
        size = path.stat().st_size
        with open(path, "r+b") as f:
            f.truncate(size // 2)
    before = path.read_bytes()
    with pytest.raises(StoreError):
        Store(path)  # a reader never moves a store
    with Store(path, lock=True) as store:
        assert store.set_aside and Path(store.set_aside).read_bytes() == before
        assert ".corrupt-" in store.set_aside
        assert not store.done(f"{0:064x}", "k")
        store.write_evaluation("b" * 64, "k", 1, EVALUATION)
    assert "is corrupt" in capsys.readouterr().err
    with Store(path) as store:
        assert store.done("b" * 64, "k")
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_store_of_a_newer_version_is_refused_untouched(tmp_path):
    path = tmp_path / "s.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    for lock in (True, False):
        with pytest.raises(StoreVersionError, match=f"schema version {SCHEMA_VERSION + 1}"):
            Store(path, lock=lock)
    assert path.read_bytes() == before
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_an_unversioned_store_is_migrated_keeping_its_rows(tmp_path):
    path = tmp_path / "s.sqlite"
    conn = sqlite3.connect(path)  # what releases before the version wrote (no emulated column yet)
    conn.executescript(SCHEMA.replace("    emulated INTEGER DEFAULT 0,", "-- no emulated column"))
    conn.execute("INSERT INTO outcomes (sha256, config_key, status, outcome, details) VALUES (?,?,?,?,?)",
                 ("c" * 64, "k", "ran", "slower", "{}"))
    conn.commit()
    conn.close()
    with Store(path) as reader:  # a report of an old run: brought forward too
        assert reader.done("c" * 64, "k")
        assert reader.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert "emulated" in set(reader.outcomes().columns)
    with Store(path, lock=True) as store:
        assert store.done("c" * 64, "k")
        store.write_evaluation("e" * 64, "k", 1, EVALUATION)


def test_cli_refuses_a_second_run_before_touching_the_folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "eval.jsonl").write_text('{"kept": true}\n')
    (out / "static.jsonl").write_text('{"kept": true}\n')
    holder = _hold(str(out), kind="folder")
    try:
        # refused while the holder still holds it: a run that waited for the folder would not return here
        res = _cli_main(["eval", str(REPO / "corpus" / "hostile" / "1_allreduce_empty.py"), "--out", str(out)], tmp_path)
        assert res.returncode == 2, res.stdout + res.stderr
        assert "in use by another pkb-analyze run" in res.stderr and f"pid {holder.pid}" in res.stderr
    finally:
        holder.kill()
        holder.wait()
    assert (out / "eval.jsonl").read_text() == '{"kept": true}\n'
    assert (out / "static.jsonl").read_text() == '{"kept": true}\n'


def test_cli_refuses_a_store_of_a_newer_version(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    conn = sqlite3.connect(out / "pkb_eval.sqlite")
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 5}")
    conn.commit()
    conn.close()
    res = _cli_main(["eval", str(REPO / "corpus" / "hostile" / "1_allreduce_empty.py"), "--out", str(out)], tmp_path)
    assert res.returncode == 2 and "upgrade pkb-analyze" in res.stderr, res.stderr
    assert not (out / "eval.jsonl").exists() and not (out / "static.jsonl").exists()


def test_cli_keeps_the_previous_eval_jsonl_beside_a_corrupt_store(tmp_path):
    """The run rewrites eval.jsonl; with the store set aside as corrupt, the previous eval.jsonl
    is the last readable copy of its results: kept beside the set-aside store, said on stderr."""
    out = tmp_path / "out"
    out.mkdir()
    _stored(out / "pkb_eval.sqlite")
    with open(out / "pkb_eval.sqlite", "r+b") as f:
        f.truncate(f.seek(0, 2) // 2)
    (out / "eval.jsonl").write_text('{"kept": true}\n')
    res = _cli_main(["eval", str(REPO / "corpus" / "hostile" / "1_allreduce_empty.py"), "--out", str(out)], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "is corrupt" in res.stderr and "is kept as" in res.stderr, res.stderr
    kept = list(out.glob("pkb_eval.sqlite.corrupt-*.eval.jsonl"))
    assert len(kept) == 1 and kept[0].read_text() == '{"kept": true}\n'
    assert len((out / "eval.jsonl").read_text().splitlines()) == 1  # this run's one candidate


def _cli_main(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    code = "import sys\nfrom pkb.cli import main\nmain(sys.argv[1:])\n"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PKB_CACHE_DIR": str(cwd / "cache"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_a_planted_trigger_is_dropped_before_it_can_rewrite_an_outcome(tmp_path, capsys):
    path = tmp_path / "s.sqlite"
    with Store(path, lock=True) as store:
        other = sqlite3.connect(path)  # what a candidate with the file's path could do
        other.execute("CREATE TRIGGER win AFTER INSERT ON outcomes BEGIN UPDATE outcomes SET outcome='faster', speedup=3.7 "
                      "WHERE sha256=NEW.sha256; END")
        other.commit()
        other.close()
        store.write_evaluation("d" * 64, "k", 1, {**EVALUATION, "outcome": "wrong_result", "speedup": None})
        assert store.evaluation("d" * 64, "k")["outcome"] == "wrong_result"
        row = store.conn.execute("SELECT outcome, speedup FROM outcomes").fetchone()
        assert row == ("wrong_result", None)
    assert "dropped trigger 'win'" in capsys.readouterr().err
