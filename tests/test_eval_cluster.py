"""The cluster path end to end through submitit's LocalExecutor (gloo, CPU candidates): shards
write their own result files, the submitter merges them into the store, a resubmission skips
what is stored."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from test_eval_support import REFERENCE, allreduce_then, quick_options, write_candidate

pytest.importorskip("submitit")

from pkb.corpus import read_candidate  # noqa: E402
from pkb.eval.cluster import ClusterOptions, ShardsInterrupted, collect, run_sharded, split  # noqa: E402
from pkb.store import Store  # noqa: E402


def test_split_keeps_order_and_sizes():
    assert split(list(range(5)), 2) == [[0, 1, 2], [3, 4]]
    assert split(list(range(2)), 5) == [[0], [1]]
    assert split([], 3) == []


def test_local_executor_end_to_end_then_resubmission_skips(tmp_path):
    folder = tmp_path / "cands"
    good = write_candidate(folder, "1_allreduce_good.py", REFERENCE)
    wrong = write_candidate(folder, "1_allreduce_wrong.py", allreduce_then("return out[:-1]"))
    options = quick_options(tmp_path, iters=2, jobs=1)
    cluster = ClusterOptions(executor="local", folder=str(tmp_path / "shards"), shards=2, time_min=10)
    records = [read_candidate(good), read_candidate(wrong)]
    summary = run_sharded(records, options, cluster)
    assert summary["errors"] == [], summary
    assert (summary["submitted"], summary["shards"], summary["merged"], summary["skipped"]) == (2, 2, 2, 0)
    results = sorted((tmp_path / "shards" / "merged").glob("shard-*.jsonl"))
    assert len(results) == 2 and all(len(p.read_text().splitlines()) == 1 for p in results)
    outcomes = {r.path.split("/")[-1]: (r.evaluation["outcome"], r.evaluation["subtype"]) for r in records}
    assert outcomes["1_allreduce_wrong.py"] == ("wrong_result", "shape_mismatch")
    assert outcomes["1_allreduce_good.py"][0] in ("correct", "slower", "faster"), outcomes
    with Store(options.store_path) as store:
        frame = store.outcomes()
        assert len(frame) == 2
        assert store.done(records[0].sha256, records[0].evaluation["config_key"])
        assert len(store.trials(records[1].sha256)) > 0  # the ranks' rows travelled through the file
    again = [read_candidate(good), read_candidate(wrong)]
    summary = run_sharded(again, options, cluster)
    assert (summary["submitted"], summary["shards"], summary["skipped"]) == (0, 0, 2)
    assert all(r.evaluation["status"] == "skipped_cached" for r in again)


def test_ctrl_c_while_waiting_cancels_the_shards_and_keeps_what_landed(tmp_path):
    """Ctrl-C in the submitter while one shard's candidate hangs in its import: the shards are
    cancelled (their launches die with them), the landed result is merged into the store, and
    the interruption reaches the caller (the command line says what was saved; exit 130)."""
    folder = tmp_path / "cands"
    good = write_candidate(folder, "1_allreduce_good.py", REFERENCE)
    stuck = write_candidate(folder, "1_allreduce_stuck.py", "import time\ntime.sleep(300)\n" + REFERENCE)
    options = quick_options(tmp_path, iters=0, trials=1, jobs=1, import_timeout_s=280.0)
    cluster = ClusterOptions(executor="local", folder=str(tmp_path / "shards"), shards=2, time_min=10)
    records = [read_candidate(good), read_candidate(stuck)]
    results = tmp_path / "shards" / "results"
    landed = threading.Event()

    def press_ctrl_c_once_good_landed():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if any("1_allreduce_good.py" in p.read_text() for p in results.glob("shard-*.jsonl")):
                landed.set()
                time.sleep(1.0)  # the stuck candidate is sleeping in its import
                break
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)

    presser = threading.Thread(target=press_ctrl_c_once_good_landed, daemon=True)
    presser.start()
    t0 = time.monotonic()
    with pytest.raises(ShardsInterrupted) as stop:
        run_sharded(records, options, cluster)
    presser.join()
    assert landed.is_set(), "the good candidate's result never landed"
    assert time.monotonic() - t0 < 200  # not the stuck import's 300 s
    assert (stop.value.merged, stop.value.cancelled) == (1, 2)
    with Store(options.store_path) as store:
        assert store.done(records[0].sha256, records[0].evaluation["config_key"])
        assert len(store.outcomes()) == 1
    assert not records[1].evaluation
    here = str(tmp_path)
    for _ in range(50):  # the cancelled shard's processes (submitit's, the launch's) are gone
        left = [pid for pid in _pids() if pid != os.getpid() and _names(pid, here)]
        if not left:
            break
        time.sleep(0.2)
    assert not left, f"processes of the cancelled shards outlived the interruption: {left}"


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").glob("[0-9]*")]


def _names(pid: int, here: str) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/cwd").startswith(here) or here in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False


def test_collect_merges_a_left_over_file_and_tolerates_a_cut_line(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    ev = {"status": "ran", "outcome": "wrong_result", "subtype": "shape_mismatch", "config_key": "k1", "world_size": 2}
    row = {"sha256": "a" * 64, "path": "x.py", "problem_id": 1, "config_key": "k1", "evaluation": ev, "rank_results": []}
    (results / "shard-7.jsonl").write_text(json.dumps(row) + "\n" + '{"sha256": "b', encoding="utf-8")
    store_path = str(tmp_path / "s.sqlite")
    assert collect(tmp_path, store_path) == 1
    with Store(store_path) as store:
        assert store.done("a" * 64, "k1")
    assert not list(results.iterdir()) and (tmp_path / "merged" / "shard-7.jsonl").exists()
