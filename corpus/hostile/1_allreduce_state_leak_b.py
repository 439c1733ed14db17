import torch
import torch.distributed as dist


# Fails if an earlier candidate marks are visible (each candidate must start on a clean process).
import os
import sys

if "pkb_hostile_leak_marker" in sys.modules or os.environ.get("PKB_HOSTILE_LEAK") or hasattr(torch, "_pkb_hostile_leak"):
    raise RuntimeError("state leaked from an earlier candidate")


@torch.no_grad()
def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    return out
