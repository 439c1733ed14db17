"""The gate between a screen's correctness and its timing (pkb.eval.timing_gate): the launcher's
clock stands still while the ranks wait there, and timing that did not wait is not trusted."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from test_eval_support import REFERENCE, quick_options, run_eval, write_candidate

from pkb.eval import launcher
from pkb.eval.job import JobSpec
from pkb.eval.timing_gate import TimingGate

# A stand-in rank (no torch): takes its key, says it waits at the gate, waits for the gate file.
FAKE_RANK = """
import os, sys, time
from pkb.eval.job import JobSpec, signed, status_path, write_json_atomic
from pkb.eval.rank_process import take_key
from pkb.eval.timing_gate import GATE_PHASE, wait_at_gate
job = JobSpec.read(sys.argv[1])
rank = int(os.environ["RANK"])
key = take_key(job.job_dir, rank)
write_json_atomic(status_path(job.job_dir, rank), signed({"rank": rank, "phase": GATE_PHASE, "since": time.time(), "deadline": None}, key))
wait_at_gate(job.job_dir)
"""


def test_a_launch_waiting_at_its_gate_is_not_killed_by_its_time_limit(tmp_path, monkeypatch):
    script = tmp_path / "fake_rank.py"
    script.write_text(FAKE_RANK)
    real = launcher.rank_command

    def fake_rank_command(job_file, world_size, port, python=None, wrapper=None):
        cmd = real(job_file, world_size, port, python, wrapper)
        return [*cmd[: cmd.index("--") + 1], sys.executable, str(script), str(job_file)]

    monkeypatch.setattr(launcher, "rank_command", fake_rank_command)
    job = JobSpec(job_dir=str(tmp_path / "job"), candidate_path=str(script), candidate_sha256="", problem={},
                  world_size=2, backend="gloo", device="cpu", dtype="float32", trials=1, timeout_s=6.0, timing_gate=True)
    gate = TimingGate()
    out: list = []
    thread = threading.Thread(target=lambda: out.append(launcher.launch(job, gate=gate)))
    thread.start()
    assert gate.waiting.wait(60), "the ranks never reached the gate"
    time.sleep(7.0)  # parked past the launch's 6 s limit (a limit that leaves a loaded machine time to reach the gate)
    assert thread.is_alive()
    gate.grant()
    thread.join(60)
    (result,) = out
    assert not result.timed_out and result.returncode == 0, result.launcher_tail
    assert gate.opened_ns is not None and gate.waited_s >= 6.5
    assert (Path(job.job_dir) / "timing_gate").exists() and not result.unexpected_files


def test_a_candidate_that_opens_its_own_timing_gate_is_suspect(tmp_path, monkeypatch):
    # The gate is a file in the job folder, which the candidate can write: one that makes it at
    # import skips the wait and times beside the other screens; its rounds reach the harness
    # before the harness opened the gate, so its timing is not trusted.
    import pkb.eval as ev

    monkeypatch.setattr(ev, "plan_slots", lambda options, env: ["", ""] if options.iters == 0 else [""])
    opener = "import os\nopen(os.path.join(os.getcwd(), '..', '..', 'timing_gate'), 'w').close()\n"
    cand = write_candidate(tmp_path / "c", "1_allreduce_opens_gate.py", opener + REFERENCE)
    (rec,) = run_eval([cand], quick_options(tmp_path, jobs=0, iters=3))
    ev_ = rec.evaluation
    assert (ev_["outcome"], ev_["subtype"]) == ("suspect", "harness_tamper"), (ev_["outcome"], ev_["reason"])
    assert "timing gate" in ev_["reason"] and "screened" not in ev_["details"]  # it did time, without leave
