"""Reference for problem 33: Ulysses sequence-parallel all-to-all.

x: [B, S // world, H, D] (sequence shard, all heads). Returns [B, S, H // world, D]
(full sequence, this rank's head shard). H divisible by world.
"""
import torch
import torch.distributed as dist


def solution(x: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    # split heads into world groups: send group j to rank j
    send = torch.stack(x.chunk(world, dim=2), dim=0).contiguous()  # [w, B, S/w, H/w, D]
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    # recv[j] is rank j's sequence shard of our heads: concatenate along the sequence
    return torch.cat(list(recv.unbind(0)), dim=1)
