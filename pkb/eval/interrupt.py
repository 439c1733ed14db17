"""Ctrl-C during an evaluation stops it at once.

The launches and builds run in worker threads, each waiting on its own process group (a group of
its own, so the terminal's SIGINT never reaches a candidate). Python raises KeyboardInterrupt in
the main thread only, and the thread pools' exits then wait for every running launch to reach its
own end: a candidate sleeping in its import held a Ctrl-C for its whole import limit. While
`stopping_on_sigint()` is active, SIGINT also sets a flag that those threads poll: each kills its
process group and raises, so the run ends within a poll interval and the kill's grace period.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

_requested = threading.Event()


def requested() -> bool:
    """Whether Ctrl-C was pressed during the evaluation now running."""
    return _requested.is_set()


class Interrupted(KeyboardInterrupt):
    """Raised in a launch or build thread when Ctrl-C was pressed: its process group is killed."""


def raise_if_requested() -> None:
    if _requested.is_set():
        raise Interrupted


@contextmanager
def stopping_on_sigint() -> Iterator[None]:
    """SIGINT sets the flag and raises KeyboardInterrupt in the main thread, as Python's own
    handler does. Outside the main thread (signals cannot be handled there) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum, frame):  # noqa: ARG001 - the signal handler's signature
        _requested.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    _requested.clear()
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _requested.clear()
