"""Reference for problem 27: MoE token dispatch with capacity padding.

tokens: [world, capacity, hidden]; tokens[j] are the (padded) tokens this rank routes to the
experts of rank j. Returns [world, capacity, hidden] where out[j] are the tokens rank j routed here.
"""
import torch
import torch.distributed as dist


def solution(tokens: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(tokens)
    dist.all_to_all_single(out, tokens.contiguous())
    return out
