"""Ctrl-C during an evaluation (pkb.eval.interrupt): SIGINT raises KeyboardInterrupt in the main
thread as before and tells the build and launch threads to kill their process groups and stop.
The end-to-end case (a SIGINT to a running `pkb-analyze eval`) is in test_newcomer_run.py."""

import os
import signal
import threading
import time

import pytest

from pkb.eval import interrupt
from pkb.eval.build import BuildOptions, prebuild


def test_sigint_raises_in_the_main_thread_and_sets_the_flag_until_the_end():
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with interrupt.stopping_on_sigint():
            assert not interrupt.requested()
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler raises here
    assert signal.getsignal(signal.SIGINT) is before and not interrupt.requested()


def test_a_prebuild_in_a_worker_thread_stops_when_ctrl_c_was_pressed(tmp_path):
    """The prebuild imports the candidate in a process of its own session; a slow import (here
    60 s) used to hold the thread, and the evaluation's pool with it, until its end."""
    cand = tmp_path / "1_allreduce_slow.py"
    cand.write_text("import time\ntime.sleep(60)\ndef solution(x):\n    return x\n")
    caught = []

    def build():
        try:
            prebuild(cand, BuildOptions(root=str(tmp_path / "builds")), timeout_s=120)
        except BaseException as exc:  # noqa: BLE001 - what the thread ended with is the point
            caught.append(exc)

    with interrupt.stopping_on_sigint():
        worker = threading.Thread(target=build)
        t0 = time.monotonic()
        worker.start()
        time.sleep(1.0)
        interrupt._requested.set()  # what the SIGINT handler does, without a KeyboardInterrupt here
        worker.join(timeout=30)
        took = time.monotonic() - t0
    assert not worker.is_alive() and took < 15, took
    assert len(caught) == 1 and isinstance(caught[0], interrupt.Interrupted)
