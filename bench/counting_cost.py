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
    """The median over five rounds of the host time per call (the device finishing each round)."""
    rounds = []
    for _ in range(5):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        rounds.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(rounds)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--numel", type=int, default=1024)
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
    calls = {
        "dist.all_reduce": lambda: dist.all_reduce(x),
        "ProcessGroup.allreduce": lambda: group.allreduce([x]).wait(),
    }
    for fn in calls.values():  # warm up: NCCL's communicator, the allocator
        for _ in range(50):
            fn()
    plain = {name: per_call_us(fn, args.calls, sync) for name, fn in calls.items()}
    counter = DistCounter()
    counter.install()
    calls = {  # rebound: the names resolve through the counter's wrappers now
        "dist.all_reduce": lambda: dist.all_reduce(x),
        "ProcessGroup.allreduce": lambda: group.allreduce([x]).wait(),
    }
    counted = {name: per_call_us(fn, args.calls, sync) for name, fn in calls.items()}
    counter.uninstall()
    dist.destroy_process_group()
    os.unlink(store)
    print(f"{backend} on {device}, world size 1, {args.numel} elements, {args.calls} calls x 5 rounds (median)")
    for name in plain:
        print(f"  {name:24s} plain {plain[name]:7.2f} us   counted {counted[name]:7.2f} us   "
              f"+{counted[name] - plain[name]:6.2f} us per call   ratio {counted[name] / plain[name]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
