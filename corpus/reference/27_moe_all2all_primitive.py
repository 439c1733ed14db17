"""Reference for problem 27: MoE token exchange, a variable-size all-to-all of token rows.

local_tensor: [T, hidden], the rows this rank sends, grouped by destination in rank order
(input_split_sizes[j] rows for rank j); output_split_sizes[j] rows arrive from rank j. No split
sizes means equal blocks. Returns the received rows in source rank order, [sum(output_split_sizes), hidden].
"""
import torch
import torch.distributed as dist


def solution(local_tensor: torch.Tensor, input_split_sizes=None, output_split_sizes=None,
             group=None) -> torch.Tensor:
    rows = local_tensor.shape[0] if output_split_sizes is None else int(sum(output_split_sizes))
    out = local_tensor.new_empty((rows,) + tuple(local_tensor.shape[1:]))
    dist.all_to_all_single(out, local_tensor.contiguous(), output_split_sizes=output_split_sizes,
                           input_split_sizes=input_split_sizes, group=group)
    return out
