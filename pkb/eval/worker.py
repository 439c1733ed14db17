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
    log_paths,
    read_json,
    result_path,
    status_path,
    tensors_dir,
    verdict_path,
    write_json_atomic,
)

# Seeds of the timing groups and of the refresh check start past the correctness trials.
GROUP_TRIAL_BASE = 1000
REFRESH_TRIAL = 999
# Reference and candidate alternate in this many rounds of timed calls.
TIMING_ROUNDS = 5


class Reporter:
    """This rank's status and result files."""

    def __init__(self, job: JobSpec, rank: int, world_size: int) -> None:
        self.job, self.rank = job, rank
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
            "error": None,
            "compile_s": 0.0,
            "finished": False,
        }

    def phase(self, name: str) -> None:
        self.current = name
        now = time.time()
        self.history.append([name, round(now, 3)])
        write_json_atomic(
            status_path(self.job.job_dir, self.rank),
            {"rank": self.rank, "pid": os.getpid(), "phase": name, "since": now, "history": self.history[-50:]},
        )

    def save(self) -> None:
        write_json_atomic(result_path(self.job.job_dir, self.rank), self.result)

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
            previous = reporter.current
            reporter.phase("compile")
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                try:
                    exc.pkb_during_build = True  # type: ignore[attr-defined]
                except Exception:
                    pass
                raise
            finally:
                reporter.result["compile_s"] += time.perf_counter() - t0
                reporter.phase(previous)

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
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if x.numel() and not torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)):
            return False
    return True


def copy_into(dst: Any, src: Any) -> bool:
    """Copy src's values into dst's tensors in place; False when the shapes differ."""
    td, ts = tensors_of(dst), tensors_of(src)
    if len(td) != len(ts) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(td, ts)):
        return False
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
    def __init__(self, job: JobSpec, rank: int, world_size: int, local_rank: int) -> None:
        self.job, self.rank, self.ws, self.local_rank = job, rank, world_size, local_rank
        self.reporter = Reporter(job, rank, world_size)
        self.device: Any = None
        self.dtype: Any = None
        self.source: Any = None
        self.solution: Callable[..., Any] | None = None

    # -- phases --

    def run(self) -> int:
        rep = self.reporter
        rep.phase("init")
        rep.save()
        try:
            self.init_distributed()
        except BaseException as exc:
            from pkb.eval.classify import runtime_subtype

            rep.fail(exc, "runtime_error", runtime_subtype(str(exc)) or "rendezvous_error", "harness")
            return 1
        try:
            rep.phase("load")
            self.load()
            all_matched = self.correctness()
            rep.phase("sync")
            verdicts = self.exchange_verdicts(all_matched)
            self.save_peer_inputs(verdicts)
            if self.job.timing and all(v.get("matched") for v in verdicts):
                rep.phase("timing")
                self.timing(min(int(v.get("groups", 1)) for v in verdicts))
        except CandidateFailure as failure:
            rep.fail(failure.cause, failure.outcome, failure.subtype, "candidate")
            return 1
        except ReferenceFailure as failure:
            rep.fail(failure.cause, "", "", "reference")
            return 1
        except BaseException as exc:  # a fault of this harness: say so, do not blame the candidate
            rep.fail(exc, "", "", "harness")
            return 1
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

    def load(self) -> None:
        from pkb.eval import problem_source
        from pkb.eval.classify import classify_exception

        for p in reversed(self.job.extra_sys_path):
            if p not in sys.path:
                sys.path.insert(0, p)
        try:
            self.source = problem_source.load(self.job.problem, self.job.dtype, self.job.scale, self.job.tolerance)
        except BaseException as exc:
            raise ReferenceFailure(exc) from exc
        BuildTracker(self.reporter).install()
        scratch = os.path.join(self.job.job_dir, "scratch", f"rank{self.rank}")
        os.makedirs(scratch, exist_ok=True)
        os.chdir(scratch)  # files a candidate writes land here, not in the repo
        name = f"pkb_candidate_{self.job.candidate_sha256[:12] or 'x'}"
        try:
            spec = importlib.util.spec_from_file_location(name, self.job.candidate_path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        except BaseException as exc:
            outcome, subtype = classify_exception(exc, during_build=getattr(exc, "pkb_during_build", False))
            raise CandidateFailure(outcome, subtype, exc) from exc
        fn = getattr(module, "solution", None)
        if fn is None or not callable(fn):
            what = "no `solution`" if fn is None else f"`solution` is a {type(fn).__name__}, not callable"
            raise CandidateFailure("load_error", "no_solution", AttributeError(f"{what} in {self.job.candidate_path}"))
        self.solution = fn

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
        import torch

        try:
            with torch.no_grad():
                out = self.source.reference(*inputs)
            self.sync()
            return out
        except BaseException as exc:
            raise ReferenceFailure(exc) from exc

    def call_candidate(self, inputs: tuple) -> Any:
        import torch

        from pkb.eval.classify import classify_exception

        try:
            with torch.no_grad():
                out = self.solution(*inputs)  # type: ignore[misc]
            self.sync()  # asynchronous CUDA errors surface here, inside the candidate's phase
            return out
        except BaseException as exc:
            outcome, subtype = classify_exception(exc, during_build=getattr(exc, "pkb_during_build", False))
            raise CandidateFailure(outcome, subtype, exc) from exc

    def sync(self) -> None:
        import torch

        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def correctness(self) -> bool:
        from pkb.eval.compare import compare_outputs
        from pkb.eval.poison import poison_allocator
        from pkb.eval.timing import input_bytes

        rep, job = self.reporter, self.job
        atol, rtol = self.source.tolerance
        all_matched = True
        self.first_inputs: tuple | None = None
        self.wrong_trials: list[int] = []
        previous_expected: Any = None  # the diagnosis tests `stale` against the trial before
        for t in range(job.trials):
            rep.phase(f"trial {t} reference")
            try:
                inputs = self.source.make_inputs(self.rank, self.ws, t, self.device, self.dtype)
            except BaseException as exc:
                raise ReferenceFailure(exc) from exc
            if t == 0:
                self.first_inputs = inputs
                self.check_signature(inputs)
            expected = self.call_reference(clone_tree(inputs))
            rep.phase(f"trial {t} candidate")
            candidate_inputs = clone_tree(inputs)
            poisoned = poison_allocator(self.device, input_bytes(expected) + input_bytes(inputs))
            got = self.call_candidate(candidate_inputs)
            cmp = compare_outputs(expected, got, atol, rtol)
            cmp["trial"] = t
            cmp["kind"] = "trial"
            cmp["poisoned_bytes"] = poisoned
            cmp["mutates_inputs"] = not bitwise_equal(candidate_inputs, inputs)
            cmp["aliases_input"] = bool(storage_ptrs(got) & storage_ptrs(candidate_inputs))
            extra: dict[str, Any] = {}
            if t == 0:  # one repeat of identical inputs tells a race from a deterministic bug
                rep.phase("trial 0 repeat")
                again = self.call_candidate(clone_tree(inputs))
                cmp["repeat"] = repeat_summary(got, again)
                if not cmp["repeat"]["equal"]:
                    extra["repeat_got"] = again
            if not cmp["matched"]:
                all_matched = False
                self.wrong_trials.append(t)
                if previous_expected is not None:
                    extra.update(previous_expected=previous_expected, previous_trial=t - 1)
                cmp["saved"] = self.save_tensors(f"trial{t}", inputs, expected, got, extra)
            previous_expected = expected
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
        write_json_atomic(verdict_path(self.job.job_dir, self.rank), {"matched": all_matched, "groups": groups, "wrong_trials": self.wrong_trials})
        verdicts: list[dict[str, Any] | None] = [None] * self.ws
        while True:
            for r in range(self.ws):
                if verdicts[r] is None:
                    verdicts[r] = read_json(verdict_path(self.job.job_dir, r))
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

    def timing(self, n_groups: int) -> None:
        import torch.distributed as dist

        from pkb.eval.compare import compare_outputs
        from pkb.eval.timing import time_interleaved

        rep, job = self.reporter, self.job
        atol, rtol = self.source.tolerance
        try:
            groups = [
                self.source.make_inputs(self.rank, self.ws, GROUP_TRIAL_BASE + g, self.device, self.dtype)
                for g in range(n_groups)
            ]
        except BaseException as exc:
            raise ReferenceFailure(exc) from exc
        expected = [self.call_reference(clone_tree(g)) for g in groups]

        def barrier() -> None:
            dist.barrier()

        # An exception in this loop is charged to the candidate: the reference already ran on
        # every group just above.
        try:
            timed = time_interleaved(
                {"reference": self.source.reference, "candidate": self.solution},  # type: ignore[dict-item]
                groups, warmup=job.warmup, iters=job.iters, rounds=TIMING_ROUNDS, device=self.device, barrier=barrier,
            )
        except BaseException as exc:
            from pkb.eval.classify import classify_exception

            outcome, subtype = classify_exception(exc, during_build=getattr(exc, "pkb_during_build", False))
            raise CandidateFailure(outcome, subtype, exc) from exc
        self.sync()
        (ref_stats, _), (cand_stats, last) = timed["reference"], timed["candidate"]
        rep.result["timing"] = {"reference": ref_stats, "candidate": cand_stats}
        # The timed calls' own outputs: a candidate that answers from a cache would pass the
        # correctness trials and still be wrong here.
        for g, out in sorted(last.items()):
            cmp = compare_outputs(expected[g], out, atol, rtol)
            cmp.update(kind="timed", trial=g)
            if not cmp["matched"]:
                cmp["saved"] = self.save_tensors(f"timed{g}", groups[g], expected[g], out)
            rep.result["timed_checks"].append(cmp)
        rep.save()
        # New values at the old addresses: a cache keyed on pointers answers with stale data.
        rep.phase("timing refresh")
        try:
            fresh = self.source.make_inputs(self.rank, self.ws, REFRESH_TRIAL, self.device, self.dtype)
        except BaseException as exc:
            raise ReferenceFailure(exc) from exc
        in_place = copy_into(groups[0], fresh)
        target = groups[0] if in_place else fresh
        want = self.call_reference(clone_tree(target))
        got = self.call_candidate(target)
        cmp = compare_outputs(want, got, atol, rtol)
        cmp.update(kind="refresh", trial=0, in_place=in_place)
        if not cmp["matched"]:
            cmp["saved"] = self.save_tensors("refresh", target, want, got)
        rep.result["refresh_check"] = cmp
        rep.save()


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
    code = Rank(job, rank, world_size, local_rank).run()
    sys.stdout.flush()
    sys.stderr.flush()
    # No process-group teardown: with a failed or stuck peer it can block forever, and every
    # result is already on disk.
    os._exit(code)


if __name__ == "__main__":
    main()
