"""Each emulated candidate runs in a process of its own: a candidate that hangs in native code or
ends its process costs itself only, the parent gets a record for it, and the next candidate runs
normally. Hang records say where every stuck rank was (file:line, function)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from emulate_helpers import EmulatedCandidate

from pkb.emulate import emulated_evaluate
from pkb.emulate.isolate import parse_stacks, run_child
from pkb.emulate.records import emulate_records
from pkb.eval.options import EvalOptions
from pkb.store import Store

GOOD = '''
import torch
import torch.distributed as dist


def solution(tensor):
    out = tensor.clone()
    dist.all_reduce(out)
    return out
'''

# time.sleep blocks in C: the injected exception cannot stop it (a stand-in for a spinning kernel)
SLEEPS = '''
import time
import torch


def solution(tensor):
    time.sleep(3600)
    return tensor
'''

EXITS = '''
import os
import torch


def solution(tensor):
    os._exit(7)
'''

# rank 1 skips the collective: the others wait in it
SKIPS = '''
import torch
import torch.distributed as dist


def solution(tensor):
    out = tensor.clone()
    if dist.get_rank() != 1:
        dist.all_reduce(out)
    return out
'''


def _line(source: str, text: str) -> int:
    return next(i for i, ln in enumerate(textwrap.dedent(source).splitlines(), 1) if text in ln)


def _files(tmp_path: Path, **sources: str) -> list[Path]:
    d = tmp_path / "c"
    d.mkdir()
    out = []
    for name, src in sources.items():
        p = d / f"1_allreduce_{name}.py"
        p.write_text(textwrap.dedent(src))
        out.append(p)
    return out


def test_a_hanging_or_exiting_candidate_costs_only_itself(tmp_path):
    files = _files(tmp_path, sleeps=SLEEPS, exits=EXITS, good=GOOD)
    recs = [EmulatedCandidate(p) for p in files]
    options = EvalOptions(trials=1, dtype="float32", store_path=str(tmp_path / "s.sqlite"), work_dir=str(tmp_path / "w"))
    parent = os.getpid()
    emulate_records(recs, 2, options, device="cpu", call_timeout_s=3.0)
    assert os.getpid() == parent
    sleeps, exits, good = (r.evaluation for r in recs)
    assert (sleeps["outcome"], sleeps["subtype"]) == ("hang", "timeout"), sleeps
    stuck = sleeps["details"]["stuck_ranks"]
    assert sorted(s["rank"] for s in stuck) == [0, 1]
    # where each rank waited: the candidate's own line and function, from the rank's Python stack
    line = _line(SLEEPS, "time.sleep")
    for s in stuck:
        assert f"1_allreduce_sleeps.py:{line} in solution" in s["where"], s["where"]
        assert any(f["function"] == "solution" and f["line"] == line for f in s["stack"])
    assert f"1_allreduce_sleeps.py:{line} in solution" in sleeps["reason"]
    assert (exits["outcome"], exits["subtype"]) == ("runtime_error", "crash"), exits
    assert "exited with code 7" in exits["reason"] and "trial 0 candidate" in exits["reason"]
    assert good["correct"] and good["status"] == "ran", good
    assert all(r.evaluation["emulated"] for r in recs)


def test_a_rank_waiting_in_a_collective_says_where(tmp_path):
    (p,) = _files(tmp_path, skips=SKIPS)
    rec = emulated_evaluate(p, 1, 3, trials=1, device="cpu", dtype="float32", call_timeout_s=2.0)
    assert (rec["outcome"], rec["subtype"]) == ("hang", "timeout"), rec
    stuck = {s["rank"]: s for s in rec["details"]["stuck_ranks"]}
    assert sorted(stuck) == [0, 2]
    for s in stuck.values():
        assert s["blocked_in"] != "candidate code"
        assert f"1_allreduce_skips.py:{_line(SKIPS, 'dist.all_reduce')} in solution" in s["where"], s
    assert f"1_allreduce_skips.py:{_line(SKIPS, 'dist.all_reduce')} in solution" in rec["reason"]


def test_a_child_that_stops_answering_is_killed_with_its_stacks(tmp_path):
    # stuck in the import (its own limit is long): only the parent's wall limit ends it
    (p,) = _files(tmp_path, import_sleeps="import time\ntime.sleep(3600)\n\ndef solution(t):\n    return t\n")
    job = {"candidate_path": str(p), "problem": {"kind": "registry", "id": 1}, "world_size": 2, "trials": 1,
           "device": "cpu", "dtype": "float32", "load_timeout_s": 3600}
    rec = run_child(job, tmp_path / "job", wall_limit_s=25.0)
    assert (rec["outcome"], rec["subtype"]) == ("hang", "timeout"), rec
    assert rec["details"]["process"]["killed_at_limit"]
    stuck = {s["rank"]: s for s in rec["details"]["stuck_ranks"]}
    assert sorted(stuck) == [0, 1], rec["details"]
    assert all("1_allreduce_import_sleeps.py:2 in <module>" in s["where"] for s in stuck.values()), stuck
    assert "load" in rec["reason"]


def test_parse_stacks_maps_threads_to_ranks():
    text = textwrap.dedent('''\
        Thread 0x00007f0000000001 (most recent call first):
          File "/x/cand.py", line 12 in spin
          File "/x/cand.py", line 30 in solution
          File "/repo/pkb/emulate/world.py", line 300 in _rank_main

        Current thread 0x00007f0000000009 (most recent call first):
          File "/repo/pkb/emulate/child.py", line 80 in main
        ''')
    out = parse_stacks(text, {"0x7f0000000001": 3})
    assert len(out) == 1 and out[0]["rank"] == 3
    assert out[0]["where"].startswith("/x/cand.py:12 in spin")
    assert [f["line"] for f in out[0]["stack"]] == [300, 30, 12]


def test_emulated_results_are_stored_beside_real_ones_and_resume(tmp_path):
    (p,) = _files(tmp_path, good=GOOD)
    store_path = tmp_path / "s.sqlite"
    options = EvalOptions(trials=1, dtype="float32", store_path=str(store_path), work_dir=str(tmp_path / "w"))
    rec = EmulatedCandidate(p)
    import hashlib

    sha = hashlib.sha256(rec.source.encode()).hexdigest()
    with Store(store_path) as store:  # a real evaluation of the same content, stored before
        store.write_evaluation(sha, "realkey", 1, {"status": "ran", "outcome": "faster", "world_size": 2, "backend": "gloo"})
    emulate_records([rec], 4, options, device="cpu")
    assert rec.evaluation["correct"] and rec.evaluation["config_key"].startswith("emu-")
    with Store(store_path) as store:
        frame = store.outcomes().set_index("config_key")
        assert frame.loc["realkey", "outcome"] == "faster" and frame.loc["realkey", "emulated"] == 0
        emu = frame.loc[rec.evaluation["config_key"]]
        assert emu["emulated"] == 1 and emu["world_size"] == 4 and emu["backend"] == "emulated" and emu["status"] == "ran"
        assert len(store.trials(sha)) == 4  # one trial row per virtual rank
    again = EmulatedCandidate(p)
    emulate_records([again], 4, options, device="cpu")
    assert again.evaluation["status"] == "skipped_cached" and again.evaluation["correct"]
    other = EmulatedCandidate(p)
    emulate_records([other], 2, options, device="cpu")  # another virtual world size: its own row
    assert other.evaluation["status"] == "ran" and other.evaluation["config_key"] != rec.evaluation["config_key"]


def test_packed_runs_keep_their_verdicts_and_the_store_has_each(tmp_path):
    files = _files(tmp_path, sleeps=SLEEPS, exits=EXITS, good=GOOD)
    recs = [EmulatedCandidate(p) for p in files]
    options = EvalOptions(trials=1, dtype="float32", store_path=str(tmp_path / "s.sqlite"), work_dir=str(tmp_path / "w"), jobs=3)
    landed = []
    emulate_records(recs, 2, options, device="cpu", call_timeout_s=3.0, on_result=lambda r: landed.append(r.path))
    sleeps, exits, good = (r.evaluation for r in recs)
    assert (sleeps["outcome"], exits["outcome"]) == ("hang", "runtime_error")
    # the hang of the packed batch was run again alone before it landed, and landed once
    assert sleeps["details"]["packed_run"]["outcome"] == "hang"
    assert "packed_run" not in exits["details"] and "packed_run" not in good["details"]
    assert good["correct"], good
    assert sorted(landed) == sorted(r.path for r in recs)
    import hashlib

    from pkb.store import Store

    with Store(options.store_path) as store:  # written by the parent as each landed
        assert store.done(hashlib.sha256(recs[2].source.encode()).hexdigest(), good["config_key"])
