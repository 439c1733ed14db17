"""The rank's timing and the checks that ride on it: interleaved timed rounds over fresh input groups
(measured only: each measurement as it is taken, each round's and its loops' edges go to the
harness through the rank's channel, and the harness computes the figures, pkb.eval.timing_judge),
each checked timed output (copied as it returned: the plain calls', and edited calls' chosen at
random as they return) compared with the reference afterwards, outputs read again at
return, the two cache probes (new values at old addresses; an earlier input on even ranks only),
and the NVLink speed floor. A mixin of pkb.eval.worker.Rank: it reads the rank's job, reporter,
source, solution, watchdog and counter."""

from __future__ import annotations

import contextlib
import os
import secrets
from typing import Any, Callable, Iterator

from pkb.eval.guard import dispatcher_hook_lines
from pkb.eval.rank_report import CandidateFailure
from pkb.eval.tensors import bitwise_equal, clone_tree, copy_into, overlaps_any, shared_output_groups, storage_ptrs
from pkb.eval.verdict_channel import REFERENCE_ALONE

# Seeds of the timing groups and of the refresh check start past the correctness trials.
GROUP_TRIAL_BASE = 1000
REFRESH_TRIAL = 999
# Reference and candidate alternate in this many rounds of timed calls.
TIMING_ROUNDS = 5
# The mixed-inputs check (even ranks repeat an earlier input, odd ranks get new ones) runs only
# where every rank's inputs are independent, so mixing seeds cannot break the reference.
PEER_CHANGE_PROBLEMS = frozenset({1, 2, 4, 7})
PEER_CHANGE_TRIAL = 998
# The timing groups whose last timed output the harness compares itself (their references sent
# before the load): a candidate that skips work in its timed calls shows in any of them, and small
# inputs can make a hundred groups.
RECHECKED_GROUPS = 8
# Timing groups called again, each output read at return, when no output was seen shared (all
# groups when one was).
AT_RETURN_GROUPS = 4
# Edited timed calls of the candidate each rank compares with the reference on the same inputs:
# about this many, chosen as they return (pkb.eval.timing.SpotChecks), and never more than the cap.
SPOT_CHECKS = 3
SPOT_CHECK_CAP = 6
# NVLink speed of light per direction (H100/H200 NVLink 4: 18 links x 25 GB/s).
NVLINK_BYTES_PER_S = 450e9


def functional_works_counter() -> Callable[[], int] | None:
    """c10d's count of functional collectives started and not yet waited (its work registry), None
    where this torch does not keep one. Looked up once: it is read inside the timed calls."""
    try:
        from torch._C._distributed_c10d import _get_work_registry_size
    except ImportError:
        return None
    return _get_work_registry_size


class RankTiming:
    """Timing and its checks; the rest of the rank is pkb.eval.worker.Rank."""

    @contextlib.contextmanager
    def _dispatcher_suspended(self) -> Iterator[None]:
        """The counter's dispatcher kernels away for the timed loops (DistCounter.
        dispatcher_suspended), the tamper snapshot not expecting them meanwhile. Put back, they
        must sit on every operator they sat on before: a kernel a candidate registered at that key
        meanwhile would keep ours off and hide its collectives from every later call."""
        counter, snapshot = self.counter, getattr(self, "snapshot", None)
        hooked = set(counter.dispatcher_ops)
        try:
            with counter.dispatcher_suspended():
                if snapshot is not None:  # the kernels that stay (symmetric memory's) still checked
                    snapshot.dispatcher_hooks = dispatcher_hook_lines()
                yield
        finally:
            if snapshot is not None:
                snapshot.dispatcher_hooks = dispatcher_hook_lines()
        lost = sorted(hooked - set(counter.dispatcher_ops))
        if lost:
            raise CandidateFailure("suspect", "harness_tamper", RuntimeError(
                f"after the timed calls of the candidate, the harness's dispatcher kernels could not be put back on {', '.join(lost[:6])}"))

    def time_reference_alone(self) -> None:
        """The reference's timed calls before the candidate is loaded: no code of the candidate's
        is in this process yet, so nothing of it (a thread that holds the GIL or the GPU while the
        reference runs, a signal timer) can slow them. The harness charges the reference this time
        where its interleaved time is more than REFERENCE_SLOWED_FACTOR slower
        (pkb.eval.outcome.speedups), so slowing the reference once loaded buys a candidate at most
        that factor. Raw measurements go through the channel as side `reference_alone`, like the
        interleaved ones."""
        import torch.distributed as dist

        from pkb.eval.timing import InputEdits, calls_per_group, group_count, input_bytes, time_interleaved

        job, channel = self.job, getattr(self, "channel", None)
        if not (job.timing and job.iters):
            return
        # as many input groups as the interleaved timing takes (past 3x the L2 on CUDA), so the
        # reference's inputs are no warmer in the cache here than there; every rank takes part
        # (the reference is collective) or none does, where a rank's channel is not open
        first = self._inputs(GROUP_TRIAL_BASE)
        opened, n_groups = self._agreed([int(channel is not None and channel.open),
                                                 group_count(job.groups, input_bytes(first), self.device)])
        if not opened:
            return
        groups = [first, *(self._inputs(GROUP_TRIAL_BASE + g) for g in range(1, max(1, n_groups)))]
        meta = {"iters": job.iters, "warmup": job.warmup, "rounds": max(1, min(TIMING_ROUNDS, job.iters)), "groups": len(groups)}

        def on_round(side: str, r: int, measured: dict[str, Any]) -> None:
            channel.send({"kind": "timing_round", "side": REFERENCE_ALONE, "round": r, **meta, "measured": measured})

        def mark(side: str, r: int, loop: str, at: str) -> None:
            channel.send({"kind": "timing_mark", "side": REFERENCE_ALONE, "round": r, "pass": loop, "at": at})

        try:
            edits = InputEdits(groups, calls_per_group(len(groups), job.warmup, job.iters, 1, self.device.type == "cuda"))
            time_interleaved({"reference": self._timed_call(self.source.reference, "reference")}, groups, warmup=job.warmup, iters=job.iters,
                             rounds=TIMING_ROUNDS, device=self.device, barrier=dist.barrier, keep=set(),
                             on_round=on_round, mark=mark, edits=edits)
        except Exception as exc:  # the reference ran these inputs' shapes in its check: a harness matter
            from pkb.eval.rank_report import ReferenceFailure

            raise ReferenceFailure(exc) from exc
        del groups, first
        self.send_group_references(meta["groups"])

    def _timed_call(self, fn: Callable[..., Any], side: str) -> Callable[..., Any]:
        """`fn` under the watchdog's per-call limit, the collective counter on while the candidate
        runs (before the load there is no counter yet). A candidate's call is over when the
        collectives it started are (DistCounter.finish_pending): those it left running with a
        Work handle are waited for inside the call. On the CPU, where a finished gloo work says so
        at once, the calls that left one, or left a functional collective in c10d's registry (no
        handle to wait on), are counted in `timed_unwaited_calls`."""
        wd, counter, limit = self.watchdog, getattr(self, "counter", None), self.job.call_timeout_s
        host_backend = self.device.type != "cuda"
        # only the CPU's count is read (a waited NCCL work is not complete on the device yet), so
        # only there is the registry read inside the candidate's timed calls
        registry = functional_works_counter() if host_backend and side == "candidate" else None

        def call(*args: Any) -> Any:
            wd.call_start(side, limit)
            if side == "candidate":
                counter.pending.clear()
                counter.active = True
                registered = registry() if registry is not None else 0
            try:
                out = fn(*args)
                if side == "candidate":
                    counter.active = False
                    unfinished = counter.finish_pending()
                    # a functional collective (torch.ops._c10d_functional) hands back a tensor,
                    # no Work: one left unwaited stays in c10d's registry past the call
                    if host_backend and (unfinished or (registry is not None and registry() > registered)):
                        self.timed_unwaited_calls += 1
                return out
            finally:
                if counter is not None:
                    counter.active = False
                wd.call_end()

        return call

    def _agreed(self, mine: list[int], rank0s: bool = False) -> list[int]:
        """The same integers on every rank: each value's minimum over the ranks (whether every
        channel is open, the fewest input groups any rank can hold), or with `rank0s` rank 0's
        (its random picks, timing.plain_calls), so every rank makes the same collective calls."""
        import torch
        import torch.distributed as dist

        n = torch.tensor(mine, dtype=torch.int64, device=self.device)
        if rank0s:
            dist.broadcast(n, src=0)
        else:
            dist.all_reduce(n, op=dist.ReduceOp.MIN)
        return [int(v) for v in n.tolist()]

    def send_group_references(self, n_groups: int) -> None:
        """The reference's output on the first RECHECKED_GROUPS timing groups' fresh inputs (and
        the group the last timed call is likely to use), sent to the harness before the candidate
        loads (as trial GROUP_TRIAL_BASE + g), so that the harness compares the candidate's last
        timed output of those groups itself (pkb.eval.judge.recheck): the rank's own timed check
        runs in the candidate's process, on copies the candidate can reach. Not where the
        reference changes its inputs (the timed calls then see other values). The groups sent are
        kept in `self.sent_groups`: only their outputs are saved for the harness."""
        from pkb.eval.verdict_channel import DEFAULT_CAP_BYTES, scrub

        channel = self.channel
        self.sent_groups: set[int] = set()
        if getattr(self, "reference_mutates", False):
            return
        # the first few, and the one the last timed call is likely to use (a shared buffer holds it)
        for g in sorted({*range(min(n_groups, RECHECKED_GROUPS)), (self.job.iters - 1) % n_groups}):
            self.sent_groups.add(g)
            out = self.call_reference(self._inputs(GROUP_TRIAL_BASE + g))
            channel.send_reference(GROUP_TRIAL_BASE + g, out, self.job.judge_cap_bytes or DEFAULT_CAP_BYTES)
            scrub(out)
            del out

    def timing(self, n_groups: int) -> None:
        """Interleaved timed rounds over fresh input groups (new contents at new addresses; every
        call's inputs edited but the plain calls', pkb.eval.timing.InputEdits), then each group's
        checked call's output, as copied when it returned, compared with the reference computed
        only afterwards on pristine copies (and saved for the harness), and the edited calls
        chosen as they returned compared with the reference on their own inputs (check_spot),
        then two cache probes:
        new values at the old addresses (a cache on the pointer or id) and, on problems whose
        ranks' inputs are independent, an earlier input at a new address on even ranks with new
        inputs on odd ranks (a cache on the local input's content answers with the old sum)."""
        import torch.distributed as dist

        from pkb.eval.poison import poison_allocator
        from pkb.eval.timing import InputEdits, SpotChecks, calls_per_group, input_bytes, plain_calls, time_interleaved
        from pkb.eval.verdict_channel import DEFAULT_CAP_BYTES, save_output

        rep, job = self.reporter, self.job
        groups = [self._inputs(GROUP_TRIAL_BASE + g) for g in range(n_groups)]
        for g in groups:
            self.hand(g)
        pristine = [clone_tree(g) for g in groups]  # the reference's inputs, after the timing
        # every timed call on inputs no earlier call saw, but the checked ones (timing.plain_calls)
        edits = InputEdits(groups, calls_per_group(len(groups), job.warmup, job.iters, 2, self.device.type == "cuda"))
        self.note_speed_floor(groups[0])
        counter = self.counter
        guarded = self._timed_call

        def barrier() -> None:
            dist.barrier()

        dist_before, syncs_before = counter.total, counter.host_syncs
        reset_l2 = _l2_persisting_reset(self.device)

        # The dispatcher kernels are suspended in the timed loops (their cost would fall on a
        # launch-bound reference's calls); what bypasses the wrappers meanwhile shows in the
        # backends' sequence numbers, checked around each round of the candidate's.
        round_mark: list[Any] = []

        def close_round() -> None:
            if round_mark:
                counter.add_uncounted(counter.uncounted_since(round_mark.pop()))

        def before(side: str) -> None:
            close_round()
            if side == "candidate":
                round_mark.append(counter.mark())
            self.check_tamper("timed calls of the candidate")
            if reset_l2 is not None:
                reset_l2()  # lines a candidate marked persisting do not carry over between rounds
            if side == "candidate":
                poison_allocator(self.device, 2 * input_bytes(groups[0]))  # the reference's freed outputs

        # An exception in this loop is charged to the candidate: the reference ran on trial
        # inputs of the same shapes already.
        channel = getattr(self, "channel", None)
        sent = channel is not None and channel.open
        raw: dict[str, list[dict[str, Any]]] = {"rounds": []}  # kept in the result only without a channel
        meta = {"iters": job.iters, "warmup": job.warmup, "rounds": max(1, min(TIMING_ROUNDS, job.iters)) if job.iters else 1, "groups": len(groups)}

        def on_round(side: str, r: int, measured: dict[str, Any]) -> None:
            msg = {"kind": "timing_round", "side": side, "round": r, **meta, "measured": measured}
            channel.send(msg) if sent else raw["rounds"].append(msg)

        def mark(side: str, r: int, loop: str, at: str) -> None:
            if sent:  # the harness stamps it with its own clock as it arrives
                channel.send({"kind": "timing_mark", "side": side, "round": r, "pass": loop, "at": at})

        def sample(side: str, r: int, loop: str, values: dict[str, Any]) -> None:
            # each measurement leaves the process before the candidate's code runs again; the
            # harness compares them with the round's (pkb.eval.timing_judge)
            if sent:
                channel.send({"kind": "timing_sample", "side": side, "round": r, "pass": loop, **values})

        picks = self._agreed([secrets.randbelow(1 << 30) for _ in groups], rank0s=True)
        plain = plain_calls(len(groups), job.iters, picks)
        # edited calls: the isolated ones but the plain, and on CUDA every back-to-back one
        spot = SpotChecks(edits, SPOT_CHECKS, SPOT_CHECK_CAP, job.iters - len(plain[0]) + (job.iters if self.device.type == "cuda" else 0))
        # each plain call's output as it returned: work finished later (a thread of the
        # candidate's, a finalizer) is not in it
        returned: dict[str, dict[int, Any]] = {}
        try:
            with self._dispatcher_suspended():
                timed = time_interleaved(
                    {"reference": guarded(self.source.reference, "reference"), "candidate": guarded(self.solution, "candidate")},  # type: ignore[arg-type]
                    groups, warmup=job.warmup, iters=job.iters, rounds=TIMING_ROUNDS, device=self.device, barrier=barrier,
                    keep={"candidate"}, before=before, on_round=on_round, mark=mark, edits=edits, plain=plain, returned=returned,
                    sample=sample, spot=spot,
                )
                close_round()
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
        last = timed["candidate"][1]
        for g, out in last.items():
            self.check_output_type(out)
        at_return = returned.get("candidate", {})
        checked_call = {i % len(groups): i for i in plain[1]}
        # Measurements only: the harness computes the figures and checks them (pkb.eval.timing_judge).
        if not sent:
            rep.result["timing_raw"] = raw
        rep.result["timed_unwaited_calls"] = self.timed_unwaited_calls
        rep.result["timed_inputs_mutated"] = any(not bitwise_equal(a, b) for a, b in zip(groups, pristine)) and not getattr(self, "reference_mutates", False)
        # The timed calls' own outputs: a candidate that answers from a cache would pass the
        # correctness trials and still be wrong here. An output sharing storage with another
        # group's (one persistent buffer returned by every call) holds whichever call came last:
        # it is judged at return time below, not here.
        rep.phase("timing check")
        shared = shared_output_groups(last)
        sent = getattr(self, "sent_groups", set())  # whose references the harness holds
        if shared and job.iters:
            # one buffer returned by every call holds the last timed call's answer (group
            # (iters - 1) % G): saved for the harness, which compares it with that group's reference
            final = (job.iters - 1) % len(groups)
            if final in last and final in sent:
                held = at_return.get(job.iters - 1, last[final])  # as the last call returned it
                save_output(job.job_dir, self.rank, GROUP_TRIAL_BASE + final, held, job.judge_cap_bytes or DEFAULT_CAP_BYTES)
        for g, out in sorted(last.items()):
            if g in shared:
                continue
            held = at_return.get(checked_call.get(g, -1), out)  # as its checked call returned it
            # on the host for the harness's own comparison, before the rank's (pkb.eval.judge)
            saved = (save_output(job.job_dir, self.rank, GROUP_TRIAL_BASE + g, held, job.judge_cap_bytes or DEFAULT_CAP_BYTES)
                     if g in sent else "not one of the groups the harness rechecks")
            want = self.call_reference(clone_tree(pristine[g]))
            cmp = self.compare(want, held)
            cmp.update(kind="timed", trial=g, output_saved=saved)
            cmp["aliases_input"] = overlaps_any(out, groups) and not getattr(self, "reference_aliases", False)
            if not cmp["matched"]:
                cmp["saved"] = self.save_tensors(f"timed{g}", pristine[g], want, held)
            rep.result["timed_checks"].append(cmp)
            del want, held
        self.check_spot(spot, pristine)
        self.check_at_return(groups, pristine, sorted(last) if shared else sorted(last)[:AT_RETURN_GROUPS], shared)
        del last, timed, returned, at_return
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

    def check_spot(self, spot: Any, pristine: list[Any]) -> None:
        """The edited timed calls the ranks chose as they returned (pkb.eval.timing.SpotChecks): for
        each call any rank chose, every rank rebuilds the inputs it gave that call and runs the
        reference (a collective), and the ranks that chose it compare their copy. A candidate
        that answers only the calls on the inputs as drawn (telling them apart by content, say)
        is wrong here."""
        import torch
        import torch.distributed as dist

        from pkb.eval.timing import BACK_TO_BACK_CALLS

        rep, job = self.reporter, self.job
        mine = sorted(spot.copies)[: spot.cap]
        chosen = torch.full((spot.cap,), -1, dtype=torch.int64, device=self.device)
        chosen[: len(mine)] = torch.tensor(mine, dtype=torch.int64)
        every = [torch.empty_like(chosen) for _ in range(self.ws)]
        dist.all_gather(every, chosen)
        calls = sorted({int(n) for t in every for n in t.tolist() if n >= 0})
        if not calls:
            return
        rep.phase("timing spot checks", job.call_timeout_s * len(calls))
        for n in calls:
            g = spot.log[n][0] if n in spot.log else n % BACK_TO_BACK_CALLS % len(pristine)
            inputs = clone_tree(pristine[g])
            if n in spot.log:
                spot.edits.rebuild(inputs, *spot.log[n])
            want = self.call_reference(clone_tree(inputs))
            if n in spot.copies:
                held = spot.copies.pop(n)
                cmp = self.compare(want, held)
                cmp.update(kind="timed_edited", trial=g, call=n % BACK_TO_BACK_CALLS, back_to_back=n >= BACK_TO_BACK_CALLS)
                if not cmp["matched"]:
                    cmp["saved"] = self.save_tensors(f"timed_edited{n}", inputs, want, held)
                rep.result["timed_checks"].append(cmp)
                del held
            del want, inputs

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
