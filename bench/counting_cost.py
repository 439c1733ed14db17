"""What counting library collectives costs a timed call: the host time of one `dist.all_reduce`
(and of a ProcessGroup's own allreduce) with pkb.eval.guard.DistCounter installed, against the
same calls without it, in one process at world size 1 (NCCL on a GPU, else gloo on CPU).

    python bench/counting_cost.py [--calls 2000] [--numel 1024]

The rank installs the counter before the candidate loads, so a reference's timed loop runs through
the wrappers and the dispatcher kernel too (inactive, but entered): a problem whose reference is
launch-bound (small tensors, many collectives per call) then looks slower than it is, and a
candidate that moves data itself looks faster. This prints the cost per call and the ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def per_call_us(fn, calls: int, sync) -> float:
    """The host time per call of one round (the device finishing the round)."""
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t0) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--numel", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)

    import torch
    import torch.distributed as dist

    from pkb.eval.guard import DistCounter

    cuda = torch.cuda.is_available()
    backend, device = ("nccl", "cuda") if cuda else ("gloo", "cpu")
    store = tempfile.NamedTemporaryFile(prefix="pkb-counting-", delete=False).name
    dist.init_process_group(backend, init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0) if cuda else None)
    x = torch.ones(args.numel, device=device)
    group = dist.group.WORLD
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    # Names resolved at each call: through the counter's wrappers while it is installed.
    calls = {
        "dist.all_reduce": lambda: dist.all_reduce(x),
        "ProcessGroup.allreduce": lambda: group.allreduce([x]).wait(),
    }
    for fn in calls.values():  # warm up: NCCL's communicator, the allocator
        for _ in range(50):
            fn()
    counter = DistCounter()
    modes = ("plain", "counted", "wrappers only")
    times: dict[str, dict[str, list[float]]] = {m: {n: [] for n in calls} for m in modes}
    # The modes alternate round by round, so a machine's changing load falls on all of them.
    for _ in range(args.rounds):
        for mode in modes:
            if mode == "plain":
                counter.uninstall()
            elif not counter.installed:
                counter.install()
            suspended = counter.dispatcher_suspended() if mode == "wrappers only" else contextlib.nullcontext()
            with suspended:
                for name, fn in calls.items():
                    times[mode][name].append(per_call_us(fn, args.calls, sync))
    counter.uninstall()
    dist.destroy_process_group()
    os.unlink(store)
    print(f"{backend} on {device}, world size 1, {args.numel} elements, {args.calls} calls per round, {args.rounds} rounds "
          "per mode (median us per call; ratio to plain)")
    for name in calls:
        med = {m: statistics.median(times[m][name]) for m in modes}
        print(f"  {name:24s} " + "   ".join(f"{m} {med[m]:7.2f}" + ("" if m == "plain" else f" ({med[m] / med['plain']:.2f})") for m in modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
