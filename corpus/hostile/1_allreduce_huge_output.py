import os
import sys

import torch
import torch.distributed as dist

# Writes 256 MiB to standard output and 256 MiB to standard error at import, then answers right.
_line = ("x" * 1023 + "\n").encode()
_block = _line * 1024  # 1 MiB
for _stream in (sys.stdout, sys.stderr):
    _stream.flush()
    for _ in range(256):
        os.write(_stream.fileno(), _block)


@torch.no_grad()
def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    return out
