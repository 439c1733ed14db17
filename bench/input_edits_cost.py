"""What the timed calls' input edits (pkb.eval.timing.InputEdits) cost a measurement: one callable
timed against itself through time_interleaved, with the edits and without, rounds alternated, in
one process (CUDA where a GPU is present, else the CPU).

    python bench/input_edits_cost.py [--numel 1048576] [--iters 60] [--repeat 5]

Each timed call sees inputs no earlier call saw: one element of the group's largest floating
input is rewritten before the call and put back after it, outside the events and off the
back-to-back loop's host clock. Timing a callable against itself, the speedup should stay 1.0
with the edits as without them; the charged time per call (pkb.eval.timing.rank_time_ms) is
printed for both, with their ratio (the anchor: the same loop without edits, in the same run),
and the host cost of one edit and its undo. A third mode adds spot checks (SpotChecks) to one
side only (--spot copies on average, as a rank takes; more for a worse case): on CUDA the copies
of back-to-back calls are taken off their clocks, so the speedup against the side without them
should stay 1.0 too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--numel", type=int, default=1 << 20, help="elements of the input (float32)")
    ap.add_argument("--iters", type=int, default=60, help="timed calls per side")
    ap.add_argument("--repeat", type=int, default=5, help="alternating runs of each mode")
    ap.add_argument("--spot", type=int, default=3, help="edited calls spot-checked per side a timing, on average (a rank's: 3)")
    args = ap.parse_args(argv)

    import torch

    from pkb.eval.timing import InputEdits, SpotChecks, calls_per_group, plain_calls, rank_time_ms, time_interleaved

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device.type == "cuda"
    groups = [(torch.randn(args.numel, device=device),) for _ in range(2)]

    def work(x):  # a small, bandwidth-bound call: what a launch-bound reference looks like
        return x * 2 + 1

    def one(mode: str) -> tuple[float, float]:
        """(charged ms of side a, speedup a/b) for one interleaved timing of `work` against itself;
        mode: 'plain' (no edits), 'edited', or 'spot' (edited, side a spot-checked on every call)."""
        edits = InputEdits(groups, calls_per_group(len(groups), 2, args.iters, 2, cuda)) if mode != "plain" else None
        plain = plain_calls(len(groups), args.iters) if mode != "plain" else None
        spot = SpotChecks(edits, args.spot, max(args.spot, 6), args.iters) if mode == "spot" else None
        out = time_interleaved({"a": work, "b": work}, groups, warmup=2, iters=args.iters, rounds=5, device=device,
                               keep={"a"} if spot else set(), edits=edits, plain=plain, spot=spot)
        a, b = rank_time_ms(out["a"][0]), rank_time_ms(out["b"][0])
        return a, b / a

    rows: dict[str, list[tuple[float, float]]] = {"plain": [], "edited": [], "spot": []}
    for _ in range(args.repeat):
        for mode in rows:
            rows[mode].append(one(mode))

    edits = InputEdits(groups, 1000)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for _ in range(500):
        edits.edit(0)()
    sync()
    edit_us = (time.perf_counter() - t0) / 500 * 1e6

    plain_ms = statistics.median(a for a, _ in rows["plain"])
    edited_ms = statistics.median(a for a, _ in rows["edited"])
    print(f"device {device} ({torch.cuda.get_device_name(device) if cuda else 'cpu'}), numel {args.numel}, iters {args.iters}, "
          f"repeat {args.repeat}")
    print(f"charged ms per call: without edits {plain_ms:.4f}, with edits {edited_ms:.4f}, ratio {edited_ms / plain_ms:.3f}")
    print(f"speedup of a callable against itself: without edits {statistics.median(s for _, s in rows['plain']):.3f}, "
          f"with edits {statistics.median(s for _, s in rows['edited']):.3f}, "
          f"with edits and one side spot-checked {statistics.median(s for _, s in rows['spot']):.3f}")
    print(f"one edit and its undo: {edit_us:.1f} us of host time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
