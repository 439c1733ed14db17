"""What one rank writes about itself: its status file (the phase it is in, so the launcher can
locate a hang or a limit passed), its result file (rewritten after every step), the two failures
that stop it (the candidate's, classified; the reference's), and the marking of JIT builds so a
build runs under the compile limit and its errors are known as build errors."""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Any, Callable

from pkb.eval.job import JobSpec, result_path, signed, status_path, write_json_atomic


class Reporter:
    """This rank's status and result files."""

    def __init__(self, job: JobSpec, rank: int, world_size: int, key: str | None = None) -> None:
        self.job, self.rank = job, rank
        self.key = key  # the job's secret: signs every file this rank writes
        self.watchdog: Any = None
        self.deadline: float | None = None  # monotonic deadline of the current phase
        self.current = ""
        self.history: list[list[Any]] = []
        self.result: dict[str, Any] = {
            "rank": rank,
            "world_size": world_size,
            "pid": os.getpid(),
            "trials": [],
            "timing": None,
            "timed_checks": [],
            "refresh_check": None,
            "inputs_kept_alive": True,  # False: past the budget of `Rank.hand`
            "error": None,
            "compile_s": 0.0,
            "finished": False,
        }

    def phase(self, name: str, limit_s: float | None = None, deadline: float | None = None) -> None:
        """Enter a phase; with a limit (or a monotonic deadline) the launcher kills past it."""
        self.current = name
        now = time.time()
        if deadline is None and limit_s:
            deadline = time.monotonic() + limit_s
        self.deadline = deadline
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if self.watchdog is not None:
            self.watchdog.set_phase(name, deadline, limit_s or left or 0.0)
        self.history.append([name, round(now, 3)])
        self._status({"phase": name, "since": now, "deadline": None if left is None else now + left, "limit_s": limit_s})

    def _status(self, fields: dict[str, Any]) -> None:
        data = {"rank": self.rank, "pid": os.getpid(), "pgid": os.getpgid(0), **fields, "history": self.history[-50:]}
        write_json_atomic(status_path(self.job.job_dir, self.rank), signed(data, self.key))

    def expire(self, where: str, limit_s: float) -> None:
        """Called by the watchdog thread: this rank is past a limit; the launcher kills the job."""
        self._status({"phase": self.current, "since": time.time(), "expired": True, "expired_in": where, "limit_s": limit_s})
        print(f"[pkb.eval rank {self.rank}] past the {limit_s:g} s limit of {where}", file=sys.stderr, flush=True)

    def save(self) -> None:
        write_json_atomic(result_path(self.job.job_dir, self.rank), signed(self.result, self.key))

    def fail(self, exc: BaseException, outcome: str, subtype: str, source: str) -> None:
        tb = traceback.format_exc()
        self.result["error"] = {
            "outcome": outcome,
            "subtype": subtype,
            "source": source,  # candidate | reference | harness
            "phase": self.current,
            "type": type(exc).__name__,
            "message": str(exc)[:4000],
            "traceback": tb[-8000:],
            "at": time.time(),  # against a peer's expiry: an error after it is that hang's echo
        }
        from pkb.eval.classify import error_extras

        self.result["error"].update(error_extras(subtype, exc))
        self.save()
        print(f"[pkb.eval rank {self.rank}] {source} failed in {self.current}:\n{tb}", file=sys.stderr, flush=True)


class CandidateFailure(Exception):
    """An error the candidate caused, already classified."""

    def __init__(self, outcome: str, subtype: str, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.outcome, self.subtype, self.cause = outcome, subtype, cause


class ReferenceFailure(Exception):
    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class BuildTracker:
    """Marks the phase `compile` while a JIT build runs and tags the exceptions it raises."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter

    def install(self) -> None:
        try:
            import torch.utils.cpp_extension as cpp_extension
        except Exception:
            return
        for name in ("load_inline", "load"):
            fn = getattr(cpp_extension, name, None)
            if fn is not None and not getattr(fn, "_pkb_wrapped", False):
                setattr(cpp_extension, name, self.wrap(fn))

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        reporter = self.reporter

        def build(*args: Any, **kwargs: Any) -> Any:
            previous, previous_deadline = reporter.current, reporter.deadline
            # A build inside a call (load_inline on the first call) runs under the compile limit,
            # not the call's: the call's clock stops for the build and restarts after it.
            wd = reporter.watchdog
            call_left = wd.pause_call() if wd is not None else None
            reporter.phase("compile", reporter.job.compile_timeout_s)
            reporter.result["built_extension"] = True
            t0 = time.perf_counter()
            m0 = time.monotonic()
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                from pkb.eval.classify import mark_during_build

                mark_during_build(exc)
                raise
            finally:
                reporter.result["compile_s"] += time.perf_counter() - t0
                # the enclosing phase (the import, a call) does not pay for the build
                extended = None if previous_deadline is None else previous_deadline + (time.monotonic() - m0)
                reporter.phase(previous, deadline=extended)
                if wd is not None:
                    wd.resume_call(call_left)

        build._pkb_wrapped = True  # type: ignore[attr-defined]
        build.__wrapped__ = fn  # type: ignore[attr-defined]
        return build
