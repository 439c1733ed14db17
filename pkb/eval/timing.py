"""Timing a callable over input groups, per iteration, with four clocks.

Two passes over the same groups on CUDA:
- isolated: CUDA events around each call, then a device-wide `torch.cuda.synchronize()` and a
  host clock. The events time the current stream's work of one call; the host clock catches work
  a candidate puts on side streams (which the events alone would miss). Both clocks start on an
  idle GPU, so they include the host's launch latency of the call.
- back to back (PKB's utils/performance.py): one event before the first call and one after each,
  no host sync inside the loop, so the host enqueues call i+1 while the GPU runs call i; one
  device-wide sync at the end. The intervals are PKB's per-iteration samples; the host clock over
  the whole loop, sync included, divided by the calls is the throughput with side streams counted.

A rank only measures (time_calls' raw measurements: per call the event ms and the host ns); the
figures (stats_from_rounds) are computed in the harness from what it sent (pkb.eval.timing_judge).
A rank is charged the back-to-back figures (the larger of the interval median and the loop's
per-call host time), so kernel times compare one to one with PKB's; the isolated pass stays for
the side-stream evidence and per-call spread. On CPU only the isolated host clock exists.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import torch

from pkb.eval.tensors import clone_tree, tensors_of

# PKB's convention (utils/performance.py): enough groups that their inputs span 3x the L2.
_L2_FALLBACK_BYTES = 60 * 1024 * 1024  # an H200's L2
_MAX_GROUPS = 128
_GROUP_MEMORY_SHARE = 0.25  # of free device memory, for all groups together
# isolated events, isolated host clock, back-to-back events, back-to-back host clock per call
CLOCKS = ("event", "wall", "pipelined", "pipelined_wall")


def input_bytes(inputs: Any) -> int:
    if isinstance(inputs, torch.Tensor):
        return inputs.numel() * inputs.element_size()
    if isinstance(inputs, (list, tuple)):
        return sum(input_bytes(x) for x in inputs)
    if isinstance(inputs, dict):
        return sum(input_bytes(x) for x in inputs.values())
    return 0


def l2_bytes(device: torch.device) -> int:
    if device.type != "cuda":
        return _L2_FALLBACK_BYTES
    try:
        n = int(torch.cuda.get_device_properties(device).L2_cache_size)
    except Exception:  # attribute name differs across versions
        try:
            n = int(torch.cuda.get_device_properties(device).l2_cache_size)
        except Exception:
            n = 0
    return n if n > 0 else _L2_FALLBACK_BYTES


def group_count(requested: int | None, bytes_per_group: int, device: torch.device) -> int:
    """At least PKB's rule on CUDA (1 group if one input already spans 3x L2, else 3xL2/bytes+1)."""
    if device.type != "cuda":
        return max(1, requested or 2)
    threshold = 3 * l2_bytes(device)
    if bytes_per_group <= 0:
        pkb_rule = 1
    elif bytes_per_group >= threshold:
        pkb_rule = 1
    else:
        pkb_rule = max(2, threshold // bytes_per_group + 1)
    n = min(max(requested or 0, pkb_rule), _MAX_GROUPS)
    free, _ = torch.cuda.mem_get_info(device)
    fit = max(1, int(free * _GROUP_MEMORY_SHARE) // max(1, 3 * bytes_per_group))  # inputs, outputs, expected
    return max(1, min(n, fit))


class InputEdits:
    """Every timed call sees inputs no earlier call saw. Before a call, one element of its group's
    largest floating-point input takes the value of another element of the same tensor, one far
    from its own (the best of a few drawn; x -> x +- (1 + |x|) / 2 where every value is the same),
    at a position drawn from a secret generator; after the call it is put back. The values stay
    the tensor's own, so an honest candidate meets nothing its inputs could not hold. A few
    isolated calls (plain_calls: one at random per group, and the last) run on the untouched
    inputs: their outputs are the ones the harness checks against the references it holds (drawn
    on those inputs). Edited calls are checked too, chosen at random as each returns
    (SpotChecks), against the reference on the same edited inputs: a candidate that tells the
    plain calls apart (by content, or by reading the plan in its process) and answers only those
    is wrong there. Groups without a floating input are left alone. Each edit and each undo is
    one small copy on the current stream; the rank takes their host time off the back-to-back
    loop's clock, and the events leave them out."""

    _PARTNERS = 8  # elements drawn per edit, the one farthest from the edited element's value taken

    def __init__(self, groups: list[tuple], calls_per_group: int) -> None:
        import random

        draw = random.Random(int.from_bytes(os.urandom(8), "little"))  # positions no candidate can foresee
        self.k = [0] * len(groups)
        self.current: tuple[int, int] | None = None  # (group, edit) of the last edit made
        # per group: (index of the edited tensor in tensors_of(group), its flat view, positions, values there, edited values)
        self.plans: list[tuple[int, Any, list[int], Any, Any] | None] = []
        n = max(1, calls_per_group)
        for group in groups:
            tensors = tensors_of(group)
            floats = [i for i, t in enumerate(tensors) if t.layout == torch.strided and t.is_floating_point() and t.numel() > 0 and t.is_contiguous()]
            if not floats:
                self.plans.append(None)
                continue
            index = max(floats, key=lambda i: tensors[i].numel())
            flat = tensors[index].view(-1)
            positions = draw.sample(range(flat.numel()), min(n, flat.numel()))  # distinct: no content twice
            with torch.no_grad():
                at = torch.tensor(positions, device=flat.device)
                orig = flat[at].clone()
                partners = torch.tensor([[draw.randrange(flat.numel()) for _ in range(self._PARTNERS)] for _ in positions], device=flat.device)
                values = flat[partners].float()
                gap = (values - orig.float()[:, None]).abs()
                farthest = values.gather(1, gap.argmax(dim=1, keepdim=True)).squeeze(1)
                signs = torch.tensor([draw.choice((-1.0, 1.0)) for _ in positions], device=flat.device)
                nudged = orig.float() + signs * (1 + orig.float().abs()) / 2
                same = gap.amax(dim=1) == 0  # every value drawn equals this one (a constant tensor)
                alt = torch.where(same | ~torch.isfinite(farthest), nudged, farthest).to(orig.dtype)
            self.plans.append((index, flat, positions, orig, alt))

    def edit(self, g: int) -> Callable[[], None] | None:
        """Rewrite group g's element for this call; returns the undo (None: nothing to do)."""
        plan = self.plans[g]
        if plan is None:
            self.current = None
            return None
        _, flat, positions, orig, alt = plan
        i = self.k[g] % len(positions)
        self.k[g] += 1
        self.current = (g, i)
        p = positions[i]
        with torch.no_grad():
            flat[p].copy_(alt[i])

        def undo() -> None:
            with torch.no_grad():
                flat[p].copy_(orig[i])

        return undo

    def rebuild(self, inputs: Any, g: int, i: int) -> None:
        """Make `inputs` (a copy of group g as drawn) what the call that made edit i of group g saw."""
        plan = self.plans[g]
        if plan is None:
            return
        index, _, positions, _, alt = plan
        with torch.no_grad():
            tensors_of(inputs)[index].view(-1)[positions[i]].copy_(alt[i])


BACK_TO_BACK_CALLS = 1 << 24  # SpotChecks keys of back-to-back calls: this plus the call's number


class SpotChecks:
    """Edited timed calls of one side (isolated, and back to back on CUDA) whose outputs are copied
    as they return, each chosen at random from the OS's generator: an isolated call once it has
    returned, so no code of the candidate's, before or during the call, can know whether it will
    be compared; a back-to-back call just before it starts, beside its input edit, so the draw
    stays off the clocks of calls that may last microseconds. The rank compares the copies with
    the reference on the same edited inputs afterwards (InputEdits.rebuild; every rank runs the
    reference for the calls any rank chose). `log` holds, for every edited call, its (group,
    edit), so a rank can rebuild the inputs of a call a peer chose. Each rank takes `expected`
    copies on average, at least one where it had an edited call, at most `cap`."""

    def __init__(self, edits: InputEdits, expected: int, cap: int, edited_calls: int) -> None:
        import random

        self.edits = edits
        self.odds = min(1.0, expected / max(1, edited_calls))
        self.cap = cap
        self.left = edited_calls  # the last one is taken where no earlier one was
        self.log: dict[int, tuple[int, int]] = {}
        self.copies: dict[int, Any] = {}
        self._draw = random.SystemRandom()

    def decide(self, n: int) -> bool:
        """Log call n's edit (the last one made) and draw whether its output is copied."""
        at = self.edits.current
        if at is None:
            return False
        self.log[n] = at
        self.left -= 1
        taken = self._draw.random() < self.odds or (not self.copies and self.left <= 0)
        return taken and len(self.copies) < self.cap

    def copy(self, n: int, out: Any, device: torch.device | None = None) -> tuple[Any, Any] | None:
        """Copy call n's output. With a CUDA `device` (a back-to-back call, whose work may still
        run), the copy is ordered on the stream and timed: the events around it are returned, for
        the caller to take its time off the call's."""
        if device is None or device.type != "cuda":
            self.copies[n] = clone_tree(out)
            return None
        before, after = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        before.record()
        self.copies[n] = clone_tree(out)
        after.record()
        return before, after


def calls_per_group(groups: int, warmup: int, iters: int, sides: int, cuda: bool) -> int:
    """An upper bound on the calls one group gets in time_interleaved (every side's warm-up, and
    both passes on CUDA), so InputEdits draws a distinct position for each."""
    per_side = warmup + iters * (2 if cuda else 1)
    return sides * (per_side // max(1, groups) + 1)


def plain_calls(groups: int, iters: int, picks: list[int] | None = None) -> tuple[set[int], set[int]]:
    """(the isolated calls that see the inputs as drawn, the checked ones among them), by their
    number in the walk over the groups. Each group's checked call is drawn at random among its
    isolated calls (from the OS's generator, or from `picks`, one number per group, which the
    ranks agree on: a collective's answer is the reference's only where every rank's inputs are
    as drawn), so a candidate that counts its calls cannot tell which output will be compared
    (answering from a kept result on the others); the last call is plain too, so one buffer
    returned by every call ends holding an answer on the drawn inputs."""
    import random

    if picks is None:
        picks = [random.SystemRandom().randrange(1 << 30) for _ in range(groups)]
    checked = set()
    for g in range(min(groups, iters)):
        choices = range(g, iters, groups)
        checked.add(choices[picks[g] % len(choices)])
    return checked | ({iters - 1} if iters else set()), checked


def summarize(samples_ms: list[float]) -> dict[str, float] | None:
    if not samples_ms:
        return None
    s = sorted(samples_ms)

    def q(p: float) -> float:
        # linear interpolation between closest ranks
        pos = p * (len(s) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (pos - lo)

    return {
        "median_ms": q(0.5),
        "p10_ms": q(0.1),
        "p90_ms": q(0.9),
        "mean_ms": sum(s) / len(s),
        "min_ms": s[0],
        "max_ms": s[-1],
        "n": len(s),
    }


def time_calls(
    fn: Callable[..., Any],
    groups: list[tuple],
    *,
    warmup: int,
    iters: int,
    device: torch.device,
    barrier: Callable[[], None] | None = None,
    raw: bool = False,
    start: int = 0,
    keep_last: bool = True,
    mark: Callable[[str, str], None] | None = None,
    edits: InputEdits | None = None,
    plain: set[int] | None = None,
    kept: set[int] | None = None,
    returned: dict[int, Any] | None = None,
    retired: list[Any] | None = None,
    sample: Callable[[str, dict[str, Any]], None] | None = None,
    spot: SpotChecks | None = None,
) -> tuple[dict[str, Any], dict[int, Any]]:
    """(stats, last output of each group). Calls fn(*groups[i % G]); raw=True gives the raw
    measurements instead of stats (`raw_samples`). keep_last=False keeps no output (the
    reference's answers must not outlive its own calls). mark(pass, 'start' | 'end') is called
    right before and after each timed loop (after its barrier), for a clock outside the rank.
    edits: each call's inputs changed before it and put back after it (InputEdits), except the
    isolated calls whose number in the walk over the groups (start + i) is in `plain`, which see
    the inputs as drawn. kept: the isolated calls (by that number) whose outputs are kept (None:
    every call's, so the last of each group). returned: a copy of each plain call's output, taken
    as the call returns (by its number): what it held then, before any later code of the
    candidate (a thread, a finalizer, the next call) could finish it. retired: where a kept output
    that a later call of its group replaces goes, for the caller to let go once no timed call is
    left. sample(pass, values) gets each measurement as it is taken, before any code of the
    candidate's runs again: the back-to-back pass's as it ends, each isolated call's as it returns
    (the last one's once its output is let go). spot (SpotChecks): edited calls (isolated, and back
    to back on CUDA) whose outputs may be copied, chosen as each returns. On CUDA fn is called
    2 * iters times: the back-to-back pass, then the isolated one."""
    cuda = device.type == "cuda"

    def edit(g: int) -> Callable[[], None] | None:
        return edits.edit(g) if edits is not None else None

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    def at(pass_name: str, when: str) -> None:
        if mark is not None:
            mark(pass_name, when)

    sync()
    for i in range(warmup):
        undo = edit(i % len(groups))
        fn(*groups[i % len(groups)])
        if undo is not None:
            undo()
    sync()
    measured: dict[str, Any] = {"event_ms": [], "wall_ns": [], "pipelined_ms": [], "pipelined_loop_ns": None, "calls": iters}
    last: dict[int, Any] = {}
    if cuda and iters:
        if barrier is not None:
            barrier()
        at("pipelined", "start")
        measured["pipelined_ms"], measured["pipelined_loop_ns"] = _back_to_back(fn, groups, start, iters, device, edit, spot)
        if sample is not None:
            sample("pipelined", {"pipelined_ms": list(measured["pipelined_ms"]), "pipelined_loop_ns": measured["pipelined_loop_ns"]})
        at("pipelined", "end")
    if barrier is not None:
        barrier()  # ranks start the timed loop together
    at("isolated", "start")
    # Each call's output is let go inside the next call's clock, the last one's inside a clock of
    # its own added to that call: a finalizer the candidate hangs on an output (weakref.finalize,
    # __del__) runs on the clock, where it cannot do the next call's work unseen.
    previous: Any = None
    for i in range(iters):
        g = (start + i) % len(groups)
        undo = edit(g) if plain is None or start + i not in plain else None
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter_ns()
            begin.record()
            previous = None
            out = fn(*groups[g])
            end.record()
            torch.cuda.synchronize(device)  # device-wide: side streams included
            wall_ns, event_ms = time.perf_counter_ns() - t0, begin.elapsed_time(end)
            measured["event_ms"].append(event_ms)
        else:
            t0 = time.perf_counter_ns()
            previous = None
            out = fn(*groups[g])
            wall_ns, event_ms = time.perf_counter_ns() - t0, None
        measured["wall_ns"].append(wall_ns)
        if sample is not None and i + 1 < iters:  # the last call's after its output is let go, below
            sample("isolated", {"call": i, "wall_ns": wall_ns, "event_ms": event_ms})
        if spot is not None and undo is not None and spot.decide(start + i):
            spot.copy(start + i, out)
        if undo is not None:
            undo()
        if returned is not None and plain is not None and start + i in plain:
            returned[start + i] = clone_tree(out)
        if keep_last and (kept is None or start + i in kept):
            if g in last and retired is not None:
                retired.append(last[g])  # let go after every timed loop, not between two
            last[g] = out
        previous = out
        del out
    if iters:
        holder, previous = [previous], None
        more_ns, more_ms = _release_timed(holder, device)
        measured["wall_ns"][-1] += more_ns
        if cuda:
            measured["event_ms"][-1] += more_ms
        if sample is not None:
            sample("isolated", {"call": iters - 1, "wall_ns": wall_ns + more_ns, "event_ms": None if event_ms is None else event_ms + more_ms})
    at("isolated", "end")
    if raw:
        return measured, last
    stats = {clock: summarize(values) for clock, values in samples_ms(measured).items()}
    stats.update(iters=iters, warmup=warmup, groups=len(groups))
    return stats, last


def samples_ms(measured: dict[str, Any]) -> dict[str, list[float]]:
    """The clocks' samples in ms (CLOCKS) from one timed loop's raw measurements: isolated CUDA
    events, isolated host ns per call, back-to-back event intervals, and the back-to-back loop's
    host ns (sync included) over its calls."""
    pipelined = [float(v) for v in measured.get("pipelined_ms") or []]
    loop_ns = measured.get("pipelined_loop_ns")
    return {
        "event": [float(v) for v in measured.get("event_ms") or []],
        "wall": [int(v) / 1e6 for v in measured.get("wall_ns") or []],
        "pipelined": pipelined,
        "pipelined_wall": [int(loop_ns) / 1e6 / len(pipelined)] if pipelined and loop_ns is not None else [],
    }


def stats_from_rounds(rounds_measured: list[dict[str, Any]], *, iters: int, warmup: int, rounds: int, groups: int) -> dict[str, Any]:
    """One side's timing figures from its rounds' raw measurements: each clock's summary over every
    call, and each round's median per clock (the spread across rounds bounds the speedup). The
    harness computes them from what the rank sent; time_interleaved from what it measured."""
    samples: dict[str, list[float]] = {c: [] for c in CLOCKS}
    per_round: dict[str, list[float]] = {c: [] for c in CLOCKS}
    for measured in rounds_measured:
        for clock, values in samples_ms(measured).items():
            samples[clock].extend(values)
            if values:
                per_round[clock].append(summarize(values)["median_ms"])  # type: ignore[index]
    return {
        **{clock: summarize(samples[clock]) for clock in CLOCKS},
        "round_medians_ms": {c: v for c, v in per_round.items() if v},
        "iters": iters,
        "warmup": warmup,
        "rounds": rounds,
        "groups": groups,
    }


def _release_timed(holder: list[Any], device: torch.device) -> tuple[int, float]:
    """Let go of the last isolated call's output (the only reference left, in `holder`) on a clock:
    (host ns, event ms; 0 off CUDA) to add to that call's samples."""
    t0 = time.perf_counter_ns()
    if device.type == "cuda":
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        holder.clear()
        end.record()
        torch.cuda.synchronize(device)
        return time.perf_counter_ns() - t0, begin.elapsed_time(end)
    holder.clear()
    return time.perf_counter_ns() - t0, 0.0


def _back_to_back(fn: Callable[..., Any], groups: list[tuple], start: int, iters: int, device: torch.device,
                  edit: Callable[[int], Callable[[], None] | None] | None = None,
                  spot: SpotChecks | None = None) -> tuple[list[float], int]:
    """PKB's loop: (per-call event intervals in ms, host ns of the whole loop and its device sync).
    With `edit`, each call's input edit is enqueued before its start event and its undo after its
    end event, so the intervals leave them out, and their host time is taken off the loop's. With
    `spot`, whether an edited call's output is copied is drawn beside its edit (keyed
    BACK_TO_BACK_CALLS + its number); the copy is taken as the call returns, inside its interval,
    right before its output is let go; the copy's device time is taken off that interval, and the
    larger of its device and host time off the loop's."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]  # made before the clock starts
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    edit_ns = 0
    copied: list[tuple[int, int, Any, Any]] = []  # (call, host ns, events around its copy)
    t0 = time.perf_counter_ns()
    for i in range(iters):
        g = (start + i) % len(groups)
        e0 = time.perf_counter_ns()
        undo = edit(g) if edit is not None else None
        chosen = spot is not None and undo is not None and spot.decide(BACK_TO_BACK_CALLS + start + i)
        edit_ns += time.perf_counter_ns() - e0
        starts[i].record()
        out = fn(*groups[g])
        if chosen:
            e0 = time.perf_counter_ns()
            around = spot.copy(BACK_TO_BACK_CALLS + start + i, out, device)  # type: ignore[union-attr]
            copied.append((i, time.perf_counter_ns() - e0, *around))  # type: ignore[misc]
        del out  # let go inside the interval: a finalizer on it runs timed
        ends[i].record()
        if undo is not None:
            e0 = time.perf_counter_ns()
            undo()
            edit_ns += time.perf_counter_ns() - e0
    torch.cuda.synchronize(device)
    loop_ns = time.perf_counter_ns() - t0 - edit_ns
    intervals = [starts[i].elapsed_time(ends[i]) for i in range(iters)]
    for i, host_ns, before, after in copied:
        ms = before.elapsed_time(after)
        intervals[i] -= ms
        loop_ns -= max(host_ns, int(ms * 1e6))
    return intervals, loop_ns


def time_interleaved(
    fns: dict[str, Callable[..., Any]],
    groups: list[tuple],
    *,
    warmup: int,
    iters: int,
    rounds: int,
    device: torch.device,
    barrier: Callable[[], None] | None = None,
    keep: set[str] | None = None,
    before: Callable[[str], None] | None = None,
    on_round: Callable[[str, int, dict[str, Any]], None] | None = None,
    mark: Callable[[str, int, str, str], None] | None = None,
    edits: InputEdits | None = None,
    plain: tuple[set[int], set[int]] | None = None,
    returned: dict[str, dict[int, Any]] | None = None,
    sample: Callable[[str, int, str, dict[str, Any]], None] | None = None,
    spot: SpotChecks | None = None,
) -> dict[str, tuple[dict[str, Any], dict[int, Any]]]:
    """Time several callables in alternating rounds (A B, B A, ...), so clock ramps, thermal drift
    and cache state do not favour whichever side happens to run second.

    Each callable is warmed up once, then gets `iters` timed calls split over `rounds`.
    keep: the names whose last outputs are returned (default all); before(name) runs ahead of
    each round of a callable, outside its timed loop (poisoning, cache resets, checks).
    on_round(name, round, measured) gets each round's raw measurements as soon as the round ends,
    and mark(name, round, pass, 'start' | 'end') each timed loop's edges (the rank sends both to
    the harness, which computes the figures and checks them against its own clock).
    edits (InputEdits): every call's inputs changed and put back, except the isolated calls of
    `plain` (plain_calls: those on the inputs as drawn, and the checked ones among them, the same
    on every rank and for each side); the output kept of each group is then its checked call's.
    returned: filled per side in `keep` with a copy of each plain call's output taken as it
    returned (time_calls), by the call's number. sample(name, round, pass, values): each
    measurement as it is taken (time_calls' `sample`). spot: the SpotChecks of the sides in `keep`.
    """
    keep = set(fns) if keep is None else keep
    rounds = max(1, min(rounds, iters)) if iters else 1
    measured: dict[str, list[dict[str, Any]]] = {n: [] for n in fns}
    last: dict[str, dict[int, Any]] = {n: {} for n in fns}
    for name, fn in fns.items():
        if before is not None:
            before(name)
        time_calls(fn, groups, warmup=warmup, iters=0, device=device, edits=edits)
    names = list(fns)
    unedited, checked = plain if plain is not None else (None, None)
    retired: list[Any] = []  # kept outputs replaced by later ones, let go once every round is over
    done = 0  # calls so far per side: the next round continues the walk over the groups
    for r in range(rounds):
        chunk = iters // rounds + (1 if r < iters % rounds else 0)
        # A B, then B A: neither side is always the one that runs right after the other.
        for name in names if r % 2 == 0 else names[::-1]:
            fn = fns[name]
            if before is not None:
                before(name)
            edges = (lambda p, w, n=name, rr=r: mark(n, rr, p, w)) if mark is not None else None
            taken = (lambda p, v, n=name, rr=r: sample(n, rr, p, v)) if sample is not None else None
            one, out = time_calls(fn, groups, warmup=0, iters=chunk, device=device, barrier=barrier, raw=True, start=done,
                                  keep_last=name in keep, mark=edges, edits=edits, plain=unedited, kept=checked,
                                  returned=returned.setdefault(name, {}) if returned is not None and name in keep else None,
                                  retired=retired, sample=taken, spot=spot if name in keep else None)
            if on_round is not None:
                on_round(name, r, one)
            measured[name].append(one)
            retired.extend(last[name][g] for g in out if g in last[name])
            last[name].update(out)
        done += chunk
    return {
        name: (stats_from_rounds(measured[name], iters=iters, warmup=warmup, rounds=rounds, groups=len(groups)), last[name])
        for name in fns
    }


def rank_time_ms(stats: dict[str, Any] | None) -> float | None:
    """The time one rank is charged. Back-to-back pass (CUDA): the larger of the event intervals'
    median and the loop's host time per call (side streams included). Otherwise (CPU, or stats
    of an older protocol): the larger of the isolated clocks' medians."""
    if not stats:
        return None
    pair = ("pipelined", "pipelined_wall") if stats.get("pipelined") else ("event", "wall")
    values = [stats[c]["median_ms"] for c in pair if stats.get(c)]
    return max(values) if values else None


def event_time_ms(stats: dict[str, Any] | None) -> float | None:
    """CUDA events only, PKB's clock: the back-to-back intervals' median (isolated events on
    stats of an older protocol)."""
    for clock in ("pipelined", "event"):
        if stats and stats.get(clock):
            return stats[clock]["median_ms"]
    return None


def rank_time_range_ms(stats: dict[str, Any] | None) -> tuple[float, float] | None:
    """The low and high ends of what one rank is charged (the clocks rank_time_ms picks): the
    smallest and largest of the per-round medians when there are two rounds or more, else the
    per-call p10 and p90 (one round, or stats of an older protocol)."""
    if not stats:
        return None
    pair = ("pipelined", "pipelined_wall") if stats.get("pipelined") else ("event", "wall")
    rounds = stats.get("round_medians_ms") or {}
    per_round = [rounds[c] for c in pair if len(rounds.get(c) or []) >= 2]
    if per_round and len({len(v) for v in per_round}) == 1:
        charged = [max(vals) for vals in zip(*per_round)]  # per round, the larger clock as rank_time_ms
        return min(charged), max(charged)
    lows = [stats[c].get("p10_ms", stats[c]["median_ms"]) for c in pair if stats.get(c)]
    highs = [stats[c].get("p90_ms", stats[c]["median_ms"]) for c in pair if stats.get(c)]
    return (max(lows), max(highs)) if lows else None
