"""Inside one rank: load the candidate, run every trial against the reference, then time both.

Started by the rank spawner (`python -m pkb.eval.worker <job.json>`), one process per GPU. Everything this
rank learns goes to files in the job directory: `status_rank<r>.json` (the phase it is in, so a
hang can be located), `result_rank<r>.json` (rewritten after every step, so a later crash or hang
keeps what was already measured) and, on mismatch, small tensors for the diagnosis stage.
The rank's verdicts are not the last word: before the candidate loads, the reference's outputs of
every trial go to the harness through its channel, and each candidate output is saved as it
returned, so the harness judges again where the candidate never was (pkb.eval.judge).
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import inspect
import os
import sys
import time
import traceback
from typing import Any, Callable

from pkb.eval.job import JobSpec, harness_umask, read_json, signed, tensors_dir, verdict_path, verify, write_json_atomic
from pkb.eval.rank_process import die_with_parent, enter_scratch, redirect_output, take_key
from pkb.eval.rank_report import BuildTracker, CandidateFailure, ReferenceFailure, Reporter
from pkb.eval.rank_timing import GROUP_TRIAL_BASE, RankTiming
from pkb.eval.tensors import bitwise_equal, cap_for_saving, clone_tree, repeat_summary
from pkb.eval.timing_gate import GATE_PHASE, wait_at_gate
from pkb.eval.verdict_channel import RankChannel


# ---- the rank -------------------------------------------------------------------------------------


# What the harness's own write or read in the job folder meets when its path was replaced: a
# directory or a link where a file goes, a file where a folder goes, a file removed or locked.
_REPLACED_PATH_ERRNOS = frozenset({errno.EISDIR, errno.ENOTDIR, errno.ELOOP, errno.EEXIST, errno.ENOTEMPTY,
                                   errno.ENOENT, errno.EACCES, errno.EPERM})


class Rank(RankTiming):
    """One rank's evaluation: the problem and reference, the candidate's load, the correctness
    trials, the verdict exchange with its peers, then timing (pkb.eval.rank_timing) and profile."""

    def __init__(self, job: JobSpec, rank: int, world_size: int, local_rank: int, key: str | None = None,
                 channel: Any = None) -> None:
        self.job, self.rank, self.ws, self.local_rank = job, rank, world_size, local_rank
        self.key = key
        self.channel = channel  # pkb.eval.verdict_channel.RankChannel: to the harness (references, then timing)
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
        self.input_key: bytes | None = None  # the launch's secret for drawing inputs (agree_input_key)
        self.timed_unwaited_calls = 0  # timed calls that left a collective running (RankTiming._timed_call)

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
            rep.phase("reference check", self.job.call_timeout_s * (1 + (0 if self.job.reference_only else self.job.trials)))
            self.check_reference()
            if self.job.reference_only:  # a probe: does the reference run at this world size?
                rep.result["reference_ran"] = True
                rep.phase("done")
                rep.result["finished"] = True
                rep.save()
                return 0
            if self.job.timing:
                rep.phase("reference timing")  # each call under the call limit (the watchdog)
                self.time_reference_alone()
            if self.channel is not None:
                # the harness takes references and the reference's own timing only until this
                # mark; the channel stays open for the interleaved timing's measurements
                self.channel.end_references()
            rep.phase("load", self.job.import_timeout_s)
            self.load()
            all_matched = self.correctness()
            rep.phase("sync")
            verdicts = self.exchange_verdicts(all_matched)
            self.save_peer_inputs(verdicts)
            if self.job.timing and all(v.get("matched") for v in verdicts):
                if self.job.timing_gate:  # no limit here: the launcher pauses the launch's clock
                    rep.phase(GATE_PHASE)
                    wait_at_gate(self.job.job_dir)
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
            if self.solution is not None and self._job_file_replaced(exc):
                # ... unless the candidate, loaded, put something else where the harness writes its
                # own files in the job folder (a directory at verdict_rank0.json)
                rep.fail(exc, "suspect", "harness_tamper", "candidate")
                return 1
            if self.solution is not None and isinstance(exc, OSError) and exc.errno == errno.EMFILE:
                # the process's descriptors ran out after the load: the candidate holds them (the
                # harness keeps none open between its writes), as when its own call hits the limit
                rep.fail(exc, "runtime_error", "python_exception", "candidate")
                return 1
            rep.fail(exc, "", "", "harness")
            return 1
        finally:
            if self.counter is not None:
                rep.result["dist_calls"] = dict(self.dist_calls)
            if self.input_key is not None:  # every draw is done: for the diagnosis
                rep.result["input_key"] = self.input_key.hex()
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
        self.input_key = self.agree_input_key()
        self.draw_inputs = problem_source.salted_inputs(self.source.make_inputs, self.input_key)

    def agree_input_key(self) -> bytes:
        """The launch's secret for drawing inputs (pkb.eval.problem_source.salted_inputs): rank
        0's random bytes, broadcast before any candidate code exists. Every draw of this launch,
        before and after the load, uses it, so the references sent before the load and the
        candidate's calls see the same inputs; it reaches the rank's report only at the end."""
        import secrets

        import torch
        import torch.distributed as dist

        key = torch.zeros(16, dtype=torch.uint8, device=self.device)
        if self.rank == 0:
            key.copy_(torch.frombuffer(bytearray(secrets.token_bytes(16)), dtype=torch.uint8))
        dist.broadcast(key, src=0)
        return bytes(key.cpu().tolist())

    def check_reference(self) -> None:
        """The reference on every trial's inputs, before any candidate code exists in this process:
        a reference that fails later, after the candidate ran, was broken by the candidate. Each
        output goes to the harness (pkb.eval.verdict_channel), which judges the candidate's outputs
        against these with code the candidate never reaches; here it is overwritten and dropped, so
        the candidate cannot find it in freed memory. No reference output is taken after this
        (the harness ignores one that comes later); the channel stays open for the timing."""
        from pkb.eval.guard import overlaps
        from pkb.eval.verdict_channel import DEFAULT_CAP_BYTES, scrub

        channel = self.channel
        trials = 1 if channel is None or not channel.open or self.job.reference_only else max(1, self.job.trials)
        if channel is not None and channel.open:
            atol, rtol = self.source.tolerance
            channel.send({"kind": "meta", "rank": self.rank, "trials": self.job.trials, "atol": atol, "rtol": rtol,
                          "cap_bytes": self.job.judge_cap_bytes or DEFAULT_CAP_BYTES})
        sent = []
        for t in range(trials):
            inputs = self._inputs(t)
            pristine = clone_tree(inputs) if t == 0 else None
            out = self.call_reference(inputs)
            aliases = overlaps(out, inputs)
            if t == 0:
                self.reference_mutates = not bitwise_equal(inputs, pristine)
                self.reference_aliases = aliases
            if channel is not None and channel.open and not self.job.reference_only:
                sent.append(channel.send_reference(t, out, self.job.judge_cap_bytes or DEFAULT_CAP_BYTES))
                if not aliases:
                    scrub(out)
                    self.sync()
            del out, inputs, pristine
        if channel is not None:
            self.reporter.result["judge_channel"] = {"sent": sent} if sent else {"why_not": channel.why_not or "not used"}
        self.reference_checked = True

    def load(self) -> None:
        from pkb.eval.classify import classify_exception
        from pkb.eval.guard import DistCounter, HarnessSnapshot, ReferenceWatch

        for harness_module in ("pkb.eval.classify", "pkb.eval.compare", "pkb.eval.poison", "pkb.eval.timing"):
            importlib.import_module(harness_module)  # every harness module in sys.modules before the snapshot

        # data-moving collectives per kind of call; barriers (host syncs) apart, under host_syncs
        self.dist_calls = {"trials": 0, "timed": 0, "checks": 0, "names": {}, "host_syncs": {"trials": 0, "timed": 0, "checks": 0}}
        self.counter = DistCounter()
        self.counter.install()  # before the candidate binds any name to a collective
        from pkb.eval.library_loads import CollectiveLibraryWatch

        # NCCL / MPI loaded through ctypes or cffi: recorded, not counted (the outcome weighs it)
        CollectiveLibraryWatch(self.reporter.result.setdefault("collective_libraries", [])).install()
        if self.job.build_root:  # our build directories and lock (pkb.eval.build), under the tracker
            from pathlib import Path

            from pkb.eval.build import route_builds

            route_builds(Path(self.job.build_root))
        BuildTracker(self.reporter).install()
        from pkb.eval.multicast import MulticastAddressWatch

        # handles with a multicast address of 0: the run's evidence for a "needs multicast" verdict
        MulticastAddressWatch(self.reporter.result.setdefault("symm_mem", {}), on_first_zero=self.reporter.save).install()
        self.snapshot = HarnessSnapshot()
        # the rank's report, signed and written by the harness's code: a dict of the candidate's
        # put in its place could turn every check it records into a match
        self.snapshot.watch("the rank's report", self.reporter, "result")
        if self.channel is not None and self.channel.open:
            # the timing's raw figures go through it: a wrapped file object or a descriptor
            # replaced by dup2 could rewrite them on the way to the harness
            self.snapshot.watch("verdict channel file", self.channel, "file")
            self.snapshot.watch_descriptor("verdict channel descriptor", self.channel.file.fileno())
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

    def _job_file_replaced(self, exc: BaseException) -> bool:
        """Whether `exc` is the harness failing on a path of its own in the job folder, which only
        the candidate's process (after the load) could have changed there."""
        if not isinstance(exc, OSError) or exc.errno not in _REPLACED_PATH_ERRNOS:
            return False  # a full disk or an I/O error is the machine's, whoever wrote last
        job = os.path.realpath(self.job.job_dir)
        paths = [p for p in (exc.filename, getattr(exc, "filename2", None)) if p]
        return any(os.path.realpath(str(p)).startswith(job + os.sep) for p in paths)

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
            return self.draw_inputs(self.rank, self.ws, trial, self.device, self.dtype)
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
        mark = counter.mark() if counter is not None else None
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
                counter.pending.clear()  # an untimed call's unfinished work shows in its output read at return
            if wd is not None:
                wd.call_end()
        if counter is not None:
            counter.add_uncounted(counter.uncounted_since(mark))  # type: ignore[arg-type]
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
                TypeError(f"the output is not a plain torch.Tensor ({', '.join(sorted(set(foreign)))}): its comparison and timing cannot be trusted"),
            )

    def compare(self, expected: Any, got: Any) -> dict[str, Any]:
        from pkb.eval.compare import compare_outputs

        self.check_tamper("the candidate's call, before its output was compared")  # a torch mode would sit in every op of the comparison

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
        from pkb.eval.guard import ReferenceWatch, backend_sequence_numbers, live_threads, new_live_threads, overlaps, started_threads
        from pkb.eval.poison import poison_allocator
        from pkb.eval.timing import input_bytes
        from pkb.eval.verdict_channel import DEFAULT_CAP_BYTES, save_output

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
            # ...and on the host, out of the device's reach, for the harness's own comparison
            output_saved = save_output(job.job_dir, self.rank, t, at_return, job.judge_cap_bytes or DEFAULT_CAP_BYTES)
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
            # On the CPU peers share no memory: data between ranks moves through the backend,
            # whose sequence numbers count the reference's collectives (pkb.eval.outcome, a
            # candidate right with none of its own)
            issued = backend_sequence_numbers() if t == 0 and self.device.type != "cuda" else None
            expected = self.call_reference(clone_tree(inputs))
            if issued is not None:
                after = backend_sequence_numbers()
                rep.result["reference_collectives"] = sum(max(0, n - issued.get(g, n)) for g, n in after.items())
            cmp = self.compare(expected, at_return)
            cmp["trial"] = t
            cmp["kind"] = "trial"
            cmp["poisoned_bytes"] = poisoned
            cmp["mutates_inputs"] = mutated and not getattr(self, "reference_mutates", False)
            cmp["aliases_input"] = aliased and not getattr(self, "reference_aliases", False)
            cmp["threads_started"] = started
            cmp["output_saved"] = output_saved
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
            with harness_umask():
                d.mkdir(parents=True, exist_ok=True)
                (d / f"{tag}_rank{self.rank}.pt").touch()
            # a third of the cap each for inputs, expected and got; 8 bytes per element at most
            cap_elems = max(1, self.job.save_cap_bytes // 3 // 8)
            path = d / f"{tag}_rank{self.rank}.pt"
            torch.save(
                {
                    "rank": self.rank,
                    "inputs": cap_for_saving(inputs, cap_elems),
                    "expected": cap_for_saving(expected, cap_elems),
                    "got": cap_for_saving(got, cap_elems),
                    # previous_expected / previous_trial / repeat_got, for the diagnosis
                    **{k: cap_for_saving(v, cap_elems) for k, v in (extra or {}).items()},
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
        diagnosis (which needs all ranks' inputs); drawn again with the launch's key, capped like the rest."""
        import torch

        wanted = sorted({t for v in verdicts for t in v.get("wrong_trials", [])} - set(self.wrong_trials))
        if not wanted:
            return
        cap_elems = max(1, self.job.save_cap_bytes // 3 // 8)
        try:
            d = tensors_dir(self.job.job_dir)
            with harness_umask():
                d.mkdir(parents=True, exist_ok=True)
                (d / f"{tag}_rank{self.rank}.pt").touch()
            for t in wanted:
                inputs = self.draw_inputs(self.rank, self.ws, t, self.device, self.dtype)
                torch.save({"rank": self.rank, "trial": t, "inputs": cap_for_saving(inputs, cap_elems)}, d / f"inputs_trial{t}_rank{self.rank}.pt")
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


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m pkb.eval.worker <job.json>", file=sys.stderr)
        sys.exit(2)
    job = JobSpec.read(argv[0])
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    redirect_output(job.job_dir, rank)
    die_with_parent(exit_if_orphaned=True)
    key = take_key(job.job_dir, rank)
    # opened (and its name removed) before the rendezvous: no candidate, this rank's or a peer's,
    # exists yet to open it
    channel = None if job.reference_only else RankChannel(job.job_dir, rank)
    enter_scratch(job.job_dir, rank)
    try:
        import faulthandler

        faulthandler.enable(file=sys.stderr, all_threads=True)  # a segfault names itself in the log
    except Exception:
        pass
    code = Rank(job, rank, world_size, local_rank, key, channel).run()
    if channel is not None:
        try:
            channel.close()
        except OSError:  # the candidate closed or broke it: the harness then lacks the `done` mark only
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    # No process-group teardown: with a failed or stuck peer it can block forever, and every
    # result is already on disk.
    os._exit(code)


if __name__ == "__main__":
    main()
