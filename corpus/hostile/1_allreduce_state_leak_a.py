import torch
import torch.distributed as dist


# Leaves marks in the interpreter; the candidate evaluated after it must not see them.
import os
import sys
import types

sys.modules["pkb_hostile_leak_marker"] = types.ModuleType("pkb_hostile_leak_marker")
os.environ["PKB_HOSTILE_LEAK"] = "1"
torch._pkb_hostile_leak = True


@torch.no_grad()
def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    return out
