"""Inside one rank: load the candidate, run every trial against the reference, then time both.

Started by torchrun (`python -m pkb.eval.worker <job.json>`), one process per GPU. Everything this
rank learns goes to files in the job directory: `status_rank<r>.json` (the phase it is in, so a
hang can be located), `result_rank<r>.json` (rewritten after every step, so a later crash or hang
keeps what was already measured) and, on mismatch, small tensors for the diagnosis stage.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import signal
import sys
import time
import traceback
from typing import Any, Callable

from pkb.eval.job import (
    JobSpec,
    key_path,
    log_paths,
    read_json,
    result_path,
    status_path,
    tensors_dir,
    signed,
    verdict_path,
    verify,
    write_json_atomic,
)

# Seeds of the timing groups and of the refresh check start past the correctness trials.
GROUP_TRIAL_BASE = 1000
REFRESH_TRIAL = 999
# Reference and candidate alternate in this many rounds of timed calls.
TIMING_ROUNDS = 5
# The mixed-inputs check (even ranks repeat an earlier input, odd ranks get new ones) runs only
# where every rank's inputs are independent, so mixing seeds cannot break the reference.
PEER_CHANGE_PROBLEMS = frozenset({1, 2, 4, 7})
PEER_CHANGE_TRIAL = 998
# Timing groups called again, each output read at return, when no output was seen shared (all
# groups when one was).
AT_RETURN_GROUPS = 4
# NVLink speed of light per direction (H100/H200 NVLink 4: 18 links x 25 GB/s).
NVLINK_BYTES_PER_S = 450e9


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
        }
        if subtype == "binding_mismatch":
            from pkb.eval.classify import binding_details

            self.result["error"]["binding"] = binding_details(str(exc))
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


# ---- helpers over nested inputs/outputs ---------------------------------------------------------


def clone_tree(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, tuple):
        return tuple(clone_tree(v) for v in x)
    if isinstance(x, list):
        return [clone_tree(v) for v in x]
    if isinstance(x, dict):
        return {k: clone_tree(v) for k, v in x.items()}
    return x


def tensors_of(x: Any) -> list[Any]:
    import torch

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in tensors_of(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in tensors_of(v)]
    return []


def bitwise_equal(a: Any, b: Any) -> bool:
    ta, tb = tensors_of(a), tensors_of(b)
    if len(ta) != len(tb):
        return False
    import torch

    for x, y in zip(ta, tb):
        if x.shape != y.shape or x.dtype != y.dtype or x.layout != y.layout:
            return False
        if x.layout != torch.strided:  # sparse inputs (PKB's spherical convolution): no flat byte view
            x, y = x.to_dense(), y.to_dense()
        if x.numel() and not torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)):
            return False
    return True


def copy_into(dst: Any, src: Any) -> bool:
    """Copy src's values into dst's tensors in place; False when the shapes differ."""
    td, ts = tensors_of(dst), tensors_of(src)
    if len(td) != len(ts) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(td, ts)):
        return False
    import torch

    with torch.no_grad():  # the harness's own write: an input that requires grad is still a buffer here
        for a, b in zip(td, ts):
            a.copy_(b)
    return True


def storage_ptrs(x: Any) -> set[int]:
    out = set()
    for t in tensors_of(x):
        try:
            if t.numel():
                out.add(t.untyped_storage().data_ptr())
        except Exception:
            pass
    return out


def repeat_summary(first: Any, second: Any) -> dict[str, Any]:
    """How a second call on identical inputs differs from the first (bitwise; NaN equals NaN)."""
    import torch

    if bitwise_equal(first, second):
        return {"equal": True, "differing": 0, "max_abs_diff": 0.0}
    ta, tb = tensors_of(first), tensors_of(second)
    differing, worst = 0, 0.0
    for a, b in zip(ta, tb):
        if a.shape != b.shape:
            return {"equal": False, "differing": None, "max_abs_diff": None, "note": "shapes differ between the two calls"}
        af, bf = a.detach().double(), b.detach().double()
        same = (af == bf) | (torch.isnan(af) & torch.isnan(bf))
        differing += int((~same).sum().item())
        d = (af - bf).abs()[~same & torch.isfinite(af - bf)]
        if d.numel():
            worst = max(worst, float(d.max().item()))
    return {"equal": False, "differing": differing, "max_abs_diff": worst}


def _cap_for_saving(x: Any, cap_elems: int) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        t = x.detach().to("cpu")
        if t.numel() > cap_elems:
            return {"truncated_from_shape": list(t.shape), "flat_head": t.reshape(-1)[:cap_elems].clone()}
        return t
    if isinstance(x, (list, tuple)):
        return [_cap_for_saving(v, cap_elems) for v in x]
    if isinstance(x, dict):
        return {k: _cap_for_saving(v, cap_elems) for k, v in x.items()}
    return x


# ---- the rank -------------------------------------------------------------------------------------


class Rank:
    def __init__(self, job: JobSpec, rank: int, world_size: int, local_rank: int, key: str | None = None) -> None:
        self.job, self.rank, self.ws, self.local_rank = job, rank, world_size, local_rank
        self.key = key
        self.reporter = Reporter(job, rank, world_size, key)
        self.snapshot: Any = None
        self.counter: Any = None
        self.watchdog: Any = None
        self.module: Any = None
        self.reference_checked = False  # the reference ran once before any candidate code
        self.device: Any = None
        self.dtype: Any = None
        self.source: Any = None
        self.solution: Callable[..., Any] | None = None
        self.handed: list[Any] = []  # every input the candidate was handed (see `hand`)
        self.handed_bytes = 0

    def hand(self, inputs: Any) -> None:
        """Keep what the candidate is handed alive until the rank ends, so that no later input
        lands at an address the candidate has already seen. Otherwise the allocator reuses a
        freed address on one rank and not on another, a cache keyed on pointers hits on that
        rank only, and it skips a collective its peers enter: a deadlock the harness caused.
        Only the refresh probe reuses addresses, on every rank alike. Past a memory budget
        (a quarter of the device, 4 GiB off CUDA) inputs are no longer kept, and the result says so."""
        import torch

        from pkb.eval.timing import input_bytes

        if any(h is inputs for h in self.handed):
            return
        nbytes = input_bytes(inputs)
        if self.device is not None and self.device.type == "cuda":
            budget = torch.cuda.get_device_properties(self.device).total_memory // 4
        else:
            budget = 4 << 30
        if self.handed_bytes + nbytes > budget:
            self.reporter.result["inputs_kept_alive"] = False
            return
        self.handed.append(inputs)
        self.handed_bytes += nbytes

    # -- phases --

    def run(self) -> int:
        from pkb.eval.guard import Watchdog

        rep = self.reporter
        self.watchdog = rep.watchdog = Watchdog(rep.expire)
        self.watchdog.start()
        rep.phase("init")
        rep.save()
        try:
            self.init_distributed()
        except BaseException as exc:
            from pkb.eval.classify import runtime_subtype

            rep.fail(exc, "runtime_error", runtime_subtype(str(exc)) or "rendezvous_error", "harness")
            return 1
        try:
            self.load_problem()
            rep.phase("reference check", self.job.call_timeout_s)
            self.check_reference()
            if self.job.reference_only:  # a probe: does the reference run at this world size?
                rep.result["reference_ran"] = True
                rep.phase("done")
                rep.result["finished"] = True
                rep.save()
                return 0
            rep.phase("load", self.job.import_timeout_s)
            self.load()
            all_matched = self.correctness()
            rep.phase("sync")
            verdicts = self.exchange_verdicts(all_matched)
            self.save_peer_inputs(verdicts)
            if self.job.timing and all(v.get("matched") for v in verdicts):
                rep.phase("timing")
                self.timing(min(int(v.get("groups", 1)) for v in verdicts))
            self.check_tamper("the end of the evaluation")
            if self.job.profile and all(v.get("matched") for v in verdicts):
                rep.phase("profile", self.job.call_timeout_s * 4)
                self.profile()
        except CandidateFailure as failure:
            if self.snapshot is not None:
                self.snapshot.restore()
            rep.fail(failure.cause, failure.outcome, failure.subtype, "candidate")
            return 1
        except ReferenceFailure as failure:
            rep.fail(failure.cause, "", "", "reference")
            where = reference_frame(failure.cause, getattr(self.source, "module", None))
            if where:
                rep.result["error"]["where"] = where
                rep.save()
            return 1
        except BaseException as exc:  # a fault of this harness: say so, do not blame the candidate
            rep.fail(exc, "", "", "harness")
            return 1
        finally:
            if self.counter is not None:
                rep.result["dist_calls"] = dict(self.dist_calls)
        rep.phase("done")
        rep.result["finished"] = True
        rep.save()
        return 0

    def init_distributed(self) -> None:
        import datetime

        import torch
        import torch.distributed as dist

        self.dtype = getattr(torch, self.job.dtype)
        timeout = datetime.timedelta(seconds=self.job.timeout_s + 120)
        if self.job.device == "cuda":
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
            dist.init_process_group(self.job.backend, timeout=timeout, device_id=self.device)
        else:
            self.device = torch.device("cpu")
            dist.init_process_group(self.job.backend, timeout=timeout)

    def load_problem(self) -> None:
        from pkb.eval import problem_source

        for p in reversed(self.job.extra_sys_path):
            if p not in sys.path:
                sys.path.insert(0, p)
        try:
            self.source = problem_source.load(self.job.problem, self.job.dtype, self.job.scale, self.job.tolerance)
        except BaseException as exc:
            raise ReferenceFailure(exc) from exc

    def check_reference(self) -> None:
        """The reference once on trial 0's inputs, before any candidate code exists in this process:
        a reference that fails later, after the candidate ran, was broken by the candidate."""
        inputs = self._inputs(0)
        pristine = clone_tree(inputs)
        out = self.call_reference(inputs)
        from pkb.eval.guard import overlaps

        self.reference_mutates = not bitwise_equal(inputs, pristine)
        self.reference_aliases = overlaps(out, inputs)
        self.reference_checked = True
        del out, inputs, pristine

    def load(self) -> None:
        from pkb.eval.classify import classify_exception
        from pkb.eval.guard import DistCounter, HarnessSnapshot, ReferenceWatch

        import pkb.eval.classify  # noqa: F401  (every harness module in sys.modules before the snapshot)
        import pkb.eval.compare  # noqa: F401
        import pkb.eval.poison  # noqa: F401
        import pkb.eval.timing  # noqa: F401

        # data-moving collectives per kind of call; barriers (host syncs) apart, under host_syncs
        self.dist_calls = {"trials": 0, "timed": 0, "checks": 0, "names": {}, "host_syncs": {"trials": 0, "timed": 0, "checks": 0}}
        self.counter = DistCounter()
        self.counter.install()  # before the candidate binds any name to a collective
        if self.job.build_root:  # our build directories and lock (pkb.eval.build), under the tracker
            from pathlib import Path

            from pkb.eval.build import route_builds

            route_builds(Path(self.job.build_root))
        BuildTracker(self.reporter).install()
        self.snapshot = HarnessSnapshot()
        scratch = os.path.join(self.job.job_dir, "scratch", f"rank{self.rank}")
        os.makedirs(scratch, exist_ok=True)
        os.chdir(scratch)  # files a candidate writes land here, not in the repo
        name = f"pkb_candidate_{self.job.candidate_sha256[:12] or 'x'}"
        from pkb.eval.shims import provide_for_candidate

        # `from utils.cuda_helpers import compile_cuda_extension` (PKB's build helper): PKB's own
        # with --pkb-root, else ours; after the snapshot, so the harness never depends on it.
        self.reporter.result["cuda_helpers"] = provide_for_candidate()
        ref_module = getattr(self.source, "module", None)
        watch = ReferenceWatch(ref_module)
        before_modules = {id(m) for m in list(sys.modules.values())}
        try:
            spec = importlib.util.spec_from_file_location(name, self.job.candidate_path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            with watch:
                spec.loader.exec_module(module)
        except BaseException as exc:
            if isinstance(exc, CandidateFailure):
                raise
            outcome, subtype = classify_exception(exc, during_build=getattr(exc, "pkb_during_build", False))
            raise CandidateFailure(outcome, subtype, exc) from exc
        self.module = module
        self.check_tamper("the import")
        # The reference reached from the candidate: bound in its namespace, run at import, or a
        # second copy of the reference's file loaded as a module of its own.
        bound = watch.reaches_module(module, ref_module) if ref_module is not None else []
        copies = [
            m.__name__ for m in list(sys.modules.values())
            if id(m) not in before_modules and m is not module and str(getattr(m, "__file__", "") or "") in watch.files
        ]
        if bound or copies or watch.hits:
            what = ", ".join([f"binds {n}" for n in bound] + [f"loads {c}" for c in copies] + [f"runs {h}" for h in watch.hits[:2]])
            raise CandidateFailure("suspect", "calls_reference", RuntimeError(f"the candidate reaches the reference: {what}"))
        fn = getattr(module, "solution", None)
        if fn is None or not callable(fn):
            what = "no `solution`" if fn is None else f"`solution` is a {type(fn).__name__}, not callable"
            raise CandidateFailure("load_error", "no_solution", AttributeError(f"{what} in {self.job.candidate_path}"))
        self.solution = fn

    def check_tamper(self, where: str) -> None:
        if self.snapshot is None:
            return
        changed = self.snapshot.changed()
        if changed:
            self.snapshot.restore()
            shown = ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
            raise CandidateFailure("suspect", "harness_tamper", RuntimeError(f"after {where}, the harness's {shown} had been replaced"))

    def _inputs(self, trial: int) -> tuple:
        try:
            return self.source.make_inputs(self.rank, self.ws, trial, self.device, self.dtype)
        except BaseException as exc:
            raise ReferenceFailure(exc) from exc

    def check_signature(self, inputs: tuple) -> None:
        try:
            sig = inspect.signature(self.solution)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return  # a builtin or extension function: nothing to check before calling
        try:
            sig.bind(*inputs)
        except TypeError as exc:
            raise CandidateFailure(
                "load_error",
                "signature_mismatch",
                TypeError(f"solution{sig} cannot take the problem's {len(inputs)} inputs: {exc}"),
            ) from exc

    def call_reference(self, inputs: tuple) -> Any:
        wd = self.watchdog
        try:
            if wd is not None:
                wd.call_start("reference", self.job.call_timeout_s)
            # No torch.no_grad(): PKB's worker calls the reference as it is, and references that
            # take gradients (ZeRO, FSDP optimizer steps) fail without autograd.
            out = self.source.reference(*inputs)
            self.sync()
            return out
        except BaseException as exc:
            if self.reference_checked and self.module is not None:
                # It ran before the candidate was loaded; now it does not: the candidate broke it.
                from pkb.eval.classify import classify_exception

                outcome, subtype = classify_exception(exc)
                raise CandidateFailure(outcome, subtype, RuntimeError(f"the reference failed after the candidate ran (it passed before the candidate was loaded): {type(exc).__name__}: {exc}")) from exc
            raise ReferenceFailure(exc) from exc
        finally:
            if wd is not None:
                wd.call_end()

    def call_candidate(self, inputs: tuple, count: str = "trials") -> Any:
        from pkb.eval.classify import classify_exception

        wd, counter = self.watchdog, self.counter
        before = counter.total if counter is not None else 0
        syncs_before = counter.host_syncs if counter is not None else 0
        self.hand(inputs)
        try:
            if wd is not None:
                wd.call_start("candidate", self.job.call_timeout_s)
            if counter is not None:
                counter.active = True
            out = self.solution(*inputs)  # type: ignore[misc]  (autograd on, as under PKB's worker)
            self.sync()  # asynchronous CUDA errors surface here, inside the candidate's phase
        except BaseException as exc:
            if isinstance(exc, CandidateFailure):
                raise
            outcome, subtype = classify_exception(exc, during_build=getattr(exc, "pkb_during_build", False))
            raise CandidateFailure(outcome, subtype, exc) from exc
        finally:
            if counter is not None:
                counter.active = False
            if wd is not None:
                wd.call_end()
        if counter is not None:
            self.dist_calls[count] += counter.total - before
            self.dist_calls["host_syncs"][count] += counter.host_syncs - syncs_before
            self.dist_calls["names"] = dict(counter.counts)
        self.check_tamper("a call of the candidate")
        self.check_output_type(out)
        return out

    def check_output_type(self, out: Any) -> None:
        from pkb.eval.guard import foreign_tensor_types

        foreign = foreign_tensor_types(out)
        if foreign:
            raise CandidateFailure(
                "suspect", "harness_tamper",
                TypeError(f"the output is a tensor subclass ({', '.join(sorted(set(foreign)))}), not torch.Tensor: its comparison and timing cannot be trusted"),
            )

    def compare(self, expected: Any, got: Any) -> dict[str, Any]:
        from pkb.eval.compare import compare_outputs

        atol, rtol = self.source.tolerance
        try:
            return compare_outputs(expected, got, atol, rtol)
        except Exception as exc:  # an output the comparison cannot read is the candidate's
            raise CandidateFailure("runtime_error", "python_exception", RuntimeError(f"the output could not be compared: {type(exc).__name__}: {exc}")) from exc

    def sync(self) -> None:
        import torch

        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def correctness(self) -> bool:
        """Every trial: the candidate first, on fresh inputs in fresh memory (the allocator
        poisoned), then the reference on a private clone. The reference's answer does not exist
        while the candidate runs, so no trick (a freed block of the caching allocator, a gc scan, a
        look into the caller's frame) can hand it over; it is dropped before the next trial's
        candidate call, except the previous trial's answer the diagnosis keeps (a wrong answer
        for any other inputs)."""
        from pkb.eval.guard import ReferenceWatch, live_threads, new_live_threads, overlaps, started_threads
        from pkb.eval.poison import poison_allocator
        from pkb.eval.timing import input_bytes

        rep, job = self.reporter, self.job
        all_matched = True
        self.first_inputs: tuple | None = None
        self.wrong_trials: list[int] = []
        previous_expected: Any = None  # the diagnosis tests `stale` against the trial before
        watch = ReferenceWatch(getattr(self.source, "module", None))
        for t in range(job.trials):
            rep.phase(f"trial {t} inputs")
            inputs = self._inputs(t)
            if t == 0:
                self.first_inputs = inputs
                self.check_signature(inputs)
            candidate_inputs = clone_tree(inputs)
            poisoned = poison_allocator(self.device, 4 * input_bytes(inputs))
            threads = live_threads()
            rep.phase(f"trial {t} candidate", job.call_timeout_s)
            with watch:
                got = self.call_candidate(candidate_inputs)
            if watch.hits:
                raise CandidateFailure("suspect", "calls_reference", RuntimeError(f"the candidate's call ran the reference's code: {watch.hits[0]}"))
            at_return = clone_tree(got)  # what the call returned, before anything else runs
            started = new_live_threads(threads)
            mutated = not bitwise_equal(candidate_inputs, inputs)
            aliased = overlaps(got, candidate_inputs)
            extra: dict[str, Any] = {}
            repeat = None
            if t == 0:  # one repeat of identical inputs tells a race from a deterministic bug
                rep.phase("trial 0 repeat", job.call_timeout_s)
                again = self.call_candidate(clone_tree(inputs))
                repeat = repeat_summary(got, again)
                if not repeat["equal"]:
                    extra["repeat_got"] = again
            rep.phase(f"trial {t} reference", job.call_timeout_s)
            expected = self.call_reference(clone_tree(inputs))
            cmp = self.compare(expected, at_return)
            cmp["trial"] = t
            cmp["kind"] = "trial"
            cmp["poisoned_bytes"] = poisoned
            cmp["mutates_inputs"] = mutated and not getattr(self, "reference_mutates", False)
            cmp["aliases_input"] = aliased and not getattr(self, "reference_aliases", False)
            cmp["threads_started"] = started
            if repeat is not None:
                cmp["repeat"] = repeat
            if not cmp["matched"]:
                # Wrong when the call returned; right a moment later? Then the work went on
                # elsewhere (a thread, an unjoined stream). Give its threads a moment first.
                for th in started_threads(threads):
                    th.join(timeout=2.0)
                self.sync()
                if self.compare(expected, got)["matched"]:
                    cmp["completed_after_return"] = True
            if not cmp["matched"]:
                all_matched = False
                self.wrong_trials.append(t)
                if previous_expected is not None:
                    extra.update(previous_expected=previous_expected, previous_trial=t - 1)
                cmp["saved"] = self.save_tensors(f"trial{t}", inputs, expected, at_return, extra)
            previous_expected = expected
            del expected, got, at_return, extra
            rep.result["trials"].append(cmp)
            rep.save()
        return all_matched

    def save_tensors(self, tag: str, inputs: Any, expected: Any, got: Any, extra: dict[str, Any] | None = None) -> str:
        import torch

        try:
            d = tensors_dir(self.job.job_dir)
            d.mkdir(parents=True, exist_ok=True)
            # a third of the cap each for inputs, expected and got; 8 bytes per element at most
            cap_elems = max(1, self.job.save_cap_bytes // 3 // 8)
            path = d / f"{tag}_rank{self.rank}.pt"
            torch.save(
                {
                    "rank": self.rank,
                    "inputs": _cap_for_saving(inputs, cap_elems),
                    "expected": _cap_for_saving(expected, cap_elems),
                    "got": _cap_for_saving(got, cap_elems),
                    # previous_expected / previous_trial / repeat_got, for the diagnosis
                    **{k: _cap_for_saving(v, cap_elems) for k, v in (extra or {}).items()},
                },
                path,
            )
            return str(path)
        except Exception as exc:  # saving is a convenience; never a reason to fail the rank
            return f"not saved: {exc}"

    def exchange_verdicts(self, all_matched: bool) -> list[dict[str, Any]]:
        """Every rank's verdict through files, so all ranks agree whether to time (and how)."""
        from pkb.eval.timing import group_count, input_bytes

        groups = group_count(self.job.groups, input_bytes(self.first_inputs), self.device) if all_matched else 1
        data = {"rank": self.rank, "matched": all_matched, "groups": groups, "wrong_trials": self.wrong_trials}
        write_json_atomic(verdict_path(self.job.job_dir, self.rank), signed(data, self.key))
        verdicts: list[dict[str, Any] | None] = [None] * self.ws
        while True:
            for r in range(self.ws):
                if verdicts[r] is None:
                    v = read_json(verdict_path(self.job.job_dir, r))
                    if v is not None and not (verify(v, self.key) and v.get("rank", r) == r):
                        # not written by rank r's harness: ignore it and wait for the real one
                        self.reporter.result["forged_files"] = sorted(set(self.reporter.result.get("forged_files", [])) | {verdict_path("", r).name})
                        v = None
                    verdicts[r] = v
            if all(v is not None for v in verdicts):
                return verdicts  # type: ignore[return-value]
            time.sleep(0.02)  # a rank that never arrives is the launcher's to time out

    def save_peer_inputs(self, verdicts: list[dict[str, Any]]) -> None:
        """This rank's inputs of every trial some other rank got wrong, for the differential
        diagnosis (which needs all ranks' inputs); regenerated from the seed, capped like the rest."""
        import torch

        wanted = sorted({t for v in verdicts for t in v.get("wrong_trials", [])} - set(self.wrong_trials))
        if not wanted:
            return
        cap_elems = max(1, self.job.save_cap_bytes // 3 // 8)
        try:
            d = tensors_dir(self.job.job_dir)
            d.mkdir(parents=True, exist_ok=True)
            for t in wanted:
                inputs = self.source.make_inputs(self.rank, self.ws, t, self.device, self.dtype)
                torch.save({"rank": self.rank, "trial": t, "inputs": _cap_for_saving(inputs, cap_elems)}, d / f"inputs_trial{t}_rank{self.rank}.pt")
        except Exception:
            pass  # a convenience, like save_tensors: never a reason to fail the rank

    def profile(self) -> None:
        """A few candidate calls under the profiler, after timing, so they cost the timing nothing.

        Profiling problems are recorded, never blamed on the candidate (the hook does not raise).
        """
        from profiling.hooks import profile_candidate

        inputs = self._inputs(GROUP_TRIAL_BASE)
        self.hand(inputs)
        solution = self.solution
        self.reporter.result["profile"] = profile_candidate(
            lambda: solution(*inputs), job_dir=self.job.job_dir, rank=self.rank,  # type: ignore[misc]
            backend=self.job.profile_backend or None,
            meta={"candidate": self.job.candidate_sha256, "problem": self.job.problem.get("id")},
        )

    def timing(self, n_groups: int) -> None:
        """Interleaved timed rounds over fresh input groups (new contents at new addresses), then
        every group's last timed output checked against the reference computed only afterwards
        on pristine copies, then two cache probes: new values at the old addresses (a cache on
        the pointer or id) and, on problems whose ranks' inputs are independent, an earlier
        input at a new address on even ranks with new inputs on odd ranks (a cache on the local
        input's content answers with the old sum)."""
        import torch.distributed as dist

        from pkb.eval.poison import poison_allocator
        from pkb.eval.timing import input_bytes, time_interleaved

        rep, job = self.reporter, self.job
        groups = [self._inputs(GROUP_TRIAL_BASE + g) for g in range(n_groups)]
        for g in groups:
            self.hand(g)
        pristine = [clone_tree(g) for g in groups]  # the reference's inputs, after the timing
        self.note_speed_floor(groups[0])
        wd, counter = self.watchdog, self.counter

        def guarded(fn: Callable[..., Any], side: str) -> Callable[..., Any]:
            limit = job.call_timeout_s

            def call(*args: Any) -> Any:
                wd.call_start(side, limit)
                if side == "candidate":
                    counter.active = True
                try:
                    return fn(*args)
                finally:
                    counter.active = False
                    wd.call_end()

            return call

        def barrier() -> None:
            dist.barrier()

        dist_before, syncs_before = counter.total, counter.host_syncs
        reset_l2 = _l2_persisting_reset(self.device)

        def before(side: str) -> None:
            self.check_tamper("timed calls of the candidate")
            if reset_l2 is not None:
                reset_l2()  # lines a candidate marked persisting do not carry over between rounds
            if side == "candidate":
                poison_allocator(self.device, 2 * input_bytes(groups[0]))  # the reference's freed outputs

        # An exception in this loop is charged to the candidate: the reference ran on trial
        # inputs of the same shapes already.
        try:
            timed = time_interleaved(
                {"reference": guarded(self.source.reference, "reference"), "candidate": guarded(self.solution, "candidate")},  # type: ignore[arg-type]
                groups, warmup=job.warmup, iters=job.iters, rounds=TIMING_ROUNDS, device=self.device, barrier=barrier,
                keep={"candidate"}, before=before,
            )
        except BaseException as exc:
            if isinstance(exc, CandidateFailure):
                raise
            from pkb.eval.classify import classify_exception

            outcome, subtype = classify_exception(exc, during_build=getattr(exc, "pkb_during_build", False))
            raise CandidateFailure(outcome, subtype, exc) from exc
        self.sync()
        self.check_tamper("timed calls of the candidate")
        self.dist_calls["timed"] += counter.total - dist_before
        self.dist_calls["host_syncs"]["timed"] += counter.host_syncs - syncs_before
        self.dist_calls["names"] = dict(counter.counts)
        (ref_stats, _), (cand_stats, last) = timed["reference"], timed["candidate"]
        for g, out in last.items():
            self.check_output_type(out)
        rep.result["timing"] = {"reference": ref_stats, "candidate": cand_stats}
        rep.result["timed_inputs_mutated"] = any(not bitwise_equal(a, b) for a, b in zip(groups, pristine)) and not getattr(self, "reference_mutates", False)
        # The timed calls' own outputs: a candidate that answers from a cache would pass the
        # correctness trials and still be wrong here. An output sharing storage with another
        # group's (one persistent buffer returned by every call) holds whichever call came last:
        # it is judged at return time below, not here.
        rep.phase("timing check")
        shared = shared_output_groups(last)
        for g, out in sorted(last.items()):
            if g in shared:
                continue
            want = self.call_reference(clone_tree(pristine[g]))
            cmp = self.compare(want, out)
            cmp.update(kind="timed", trial=g)
            cmp["aliases_input"] = overlaps_any(out, groups) and not getattr(self, "reference_aliases", False)
            if not cmp["matched"]:
                cmp["saved"] = self.save_tensors(f"timed{g}", pristine[g], want, out)
            rep.result["timed_checks"].append(cmp)
            del want
        self.check_at_return(groups, pristine, sorted(last) if shared else sorted(last)[:AT_RETURN_GROUPS], shared)
        del last, timed
        rep.save()
        # New values at the old addresses: a cache keyed on pointers answers with stale data.
        fresh = self._inputs(REFRESH_TRIAL)
        in_place = copy_into(groups[0], fresh)
        target = groups[0] if in_place else fresh
        reference_inputs = clone_tree(target)
        rep.phase("timing refresh", job.call_timeout_s)
        got = self.call_candidate(target, count="checks")
        want = self.call_reference(reference_inputs)
        cmp = self.compare(want, got)
        cmp.update(kind="refresh", trial=0, in_place=in_place)
        if not cmp["matched"]:
            cmp["saved"] = self.save_tensors("refresh", reference_inputs, want, got)
        rep.result["refresh_check"] = cmp
        del got, want
        rep.save()
        if self.ws > 1 and self.source.id in PEER_CHANGE_PROBLEMS:
            # Even ranks: group 1's values again, at a new address. Odd ranks: new values. The sum
            # changes on every rank; a cache keyed on the local input's content does not notice.
            src = pristine[min(1, len(pristine) - 1)] if self.rank % 2 == 0 else self._inputs(PEER_CHANGE_TRIAL)
            target = clone_tree(src)
            reference_inputs = clone_tree(src)
            rep.phase("timing peer change", job.call_timeout_s)
            got = self.call_candidate(target, count="checks")
            want = self.call_reference(reference_inputs)
            cmp = self.compare(want, got)
            cmp.update(kind="peer_change", trial=0)
            if not cmp["matched"]:
                cmp["saved"] = self.save_tensors("peer_change", reference_inputs, want, got)
            rep.result["peer_change_check"] = cmp
            rep.save()

    def check_at_return(self, groups: list[Any], pristine: list[Any], order: list[int], shared: set[int]) -> None:
        """The candidate on the timing groups in turn, each output copied the moment its call
        returns and compared with the reference: right at return time is right (PKB's contract).
        Then each returned output is read again after the later calls: one a later call
        overwrote is an aliasing hazard a caller must know about (`output_reuse`), not a cache."""
        rep, job = self.reporter, self.job
        rep.phase("timing check at return", job.call_timeout_s * max(1, 2 * len(order)))
        returned = []
        for g in order:
            out = self.call_candidate(groups[g], count="checks")
            at_return = clone_tree(out)
            want = self.call_reference(clone_tree(pristine[g]))
            cmp = self.compare(want, at_return)
            cmp.update(kind="at_return", trial=g, shared_output=g in shared)
            if not cmp["matched"]:
                cmp["saved"] = self.save_tensors(f"at_return{g}", pristine[g], want, at_return)
            rep.result["timed_checks"].append(cmp)
            returned.append((g, out, at_return))
            del want
        self.sync()
        overwritten = [g for g, out, snap in returned if not bitwise_equal(out, snap)]
        if overwritten:
            spans = [storage_ptrs(out) for _, out, _ in returned]
            rep.result["output_reuse"] = {
                "groups_overwritten": overwritten,
                "calls": len(returned),
                "same_storage": len(returned) > 1 and all(sp and sp == spans[0] for sp in spans),
            }

    def note_speed_floor(self, inputs: tuple) -> None:
        """The problem's bytes over NVLink's per-direction speed: no correct candidate is faster."""
        mod = getattr(self.source, "module", None)
        fn = getattr(mod, "traffic_bytes", None)
        floor: dict[str, Any] = {"applies": False}
        if fn is None:
            floor["why"] = "the problem gives no traffic figure"
        else:
            try:
                traffic = fn(inputs, self.ws)
                nbytes = max(int(v) for v in traffic.values()) if isinstance(traffic, dict) and traffic else int(traffic or 0)
                floor.update(bytes=nbytes, floor_ms=nbytes / NVLINK_BYTES_PER_S * 1e3, link_bytes_per_s=NVLINK_BYTES_PER_S)
                if self.ws <= 1:
                    floor["why"] = "world size 1: nothing crosses a link, the floor does not apply"
                elif self.device.type != "cuda":
                    floor["why"] = "not on GPUs: the NVLink floor does not apply"
                elif nbytes <= 0:
                    floor["why"] = "no bytes cross a link"
                else:
                    floor["applies"] = True
            except Exception as exc:
                floor["why"] = f"traffic_bytes failed: {type(exc).__name__}: {exc}"
        self.reporter.result["speed_floor"] = floor

def reference_frame(exc: BaseException, module: Any) -> dict[str, Any] | None:
    """The innermost frame of the reference's own file in an exception's traceback (the line that
    failed, for the evidence of a reference that cannot run at a world size)."""
    path = getattr(module, "__file__", None)
    if not path:
        return None
    files = {path, os.path.realpath(path)}
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename in files or os.path.realpath(frame.filename) in files:
            found = {"file": os.path.basename(frame.filename), "line": frame.lineno, "function": frame.name, "code": (frame.line or "").strip()[:200]}
    return found


def shared_output_groups(outputs: dict[int, Any]) -> set[int]:
    """Groups whose output shares storage with another group's output."""
    from pkb.eval.guard import overlaps

    keys = sorted(outputs)
    return {a for a in keys for b in keys if a != b and overlaps(outputs[a], outputs[b])}


def overlaps_any(out: Any, groups: list[Any]) -> bool:
    from pkb.eval.guard import overlaps

    return any(overlaps(out, g) for g in groups)


def _l2_persisting_reset(device: Any) -> Callable[[], None] | None:
    """cudaCtxResetPersistingL2Cache through the CUDA runtime torch loaded (None off CUDA or
    when the runtime cannot be found): persisting L2 lines are demoted to normal ones."""
    if device is None or device.type != "cuda":
        return None
    try:
        import ctypes
        import glob

        import torch

        lib = None
        for cand in ["libcudart.so", *sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cuda_runtime", "lib", "libcudart.so*")))]:
            try:
                lib = ctypes.CDLL(cand)
                break
            except OSError:
                continue
        if lib is None or not hasattr(lib, "cudaCtxResetPersistingL2Cache"):
            return None
        fn = lib.cudaCtxResetPersistingL2Cache

        def reset() -> None:
            fn()

        return reset
    except Exception:
        return None


# ---- process plumbing -----------------------------------------------------------------------------


def _redirect_output(job_dir: str, rank: int) -> None:
    """This rank's stdout/stderr (C-level writes included) go to its own files."""
    out, err = log_paths(job_dir, rank)
    for fd, path in ((1, out), (2, err)):
        f = open(path, "ab", buffering=0)
        os.dup2(f.fileno(), fd)
        f.close()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)  # type: ignore[attr-defined]
        except Exception:
            pass


def _die_with_parent() -> None:
    """If torchrun dies (SIGKILL of the evaluator), this rank must not live on."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            os._exit(1)
    except Exception:
        pass


def _take_key(job_dir: str, rank: int) -> str | None:
    """The job's secret, read and deleted before any candidate code exists in this process
    (every rank does this before the rendezvous, so no candidate can read a peer's copy)."""
    path = key_path(job_dir, rank)
    try:
        key = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    try:
        path.unlink()
    except OSError:
        pass
    return key or None


def _short_tmpdir(scratch: str, rank: int) -> str:
    """A private TMPDIR with a short path.

    torch's symmetric memory binds a Unix socket at $TMPDIR/symm_mem-<pid>; a socket path has at
    most 107 bytes, and past that bind fails ("Failed to bind socket: Invalid argument", seen on
    the H200 with a job directory under a long output folder). So the scratch TMPDIR lives under
    /tmp, and the scratch folder records where, for the launcher's clean-up.
    """
    import atexit
    import shutil
    import tempfile

    tmp = tempfile.mkdtemp(prefix=f"pkb-r{rank}-", dir="/tmp" if os.path.isdir("/tmp") else None)
    with open(os.path.join(scratch, "tmpdir.txt"), "w", encoding="utf-8") as fh:
        fh.write(tmp)
    atexit.register(shutil.rmtree, tmp, True)
    return tmp


def _enter_scratch(job_dir: str, rank: int) -> None:
    """The candidate's working directory, HOME and TMPDIR: a scratch folder of this rank."""
    scratch = os.path.join(job_dir, "scratch", f"rank{rank}")
    os.makedirs(scratch, exist_ok=True)
    tmp = _short_tmpdir(scratch, rank)
    os.environ["HOME"] = scratch
    for name in ("TMPDIR", "TEMP", "TMP"):
        os.environ[name] = tmp
    import tempfile

    tempfile.tempdir = tmp
    os.chdir(scratch)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m pkb.eval.worker <job.json>", file=sys.stderr)
        sys.exit(2)
    job = JobSpec.read(argv[0])
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    _redirect_output(job.job_dir, rank)
    _die_with_parent()
    key = _take_key(job.job_dir, rank)
    _enter_scratch(job.job_dir, rank)
    try:
        import faulthandler

        faulthandler.enable(file=sys.stderr, all_threads=True)  # a segfault names itself in the log
    except Exception:
        pass
    code = Rank(job, rank, world_size, local_rank, key).run()
    sys.stdout.flush()
    sys.stderr.flush()
    # No process-group teardown: with a failed or stuck peer it can block forever, and every
    # result is already on disk.
    os._exit(code)


if __name__ == "__main__":
    main()
