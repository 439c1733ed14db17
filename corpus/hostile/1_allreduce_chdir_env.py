import os
import tempfile

import torch
import torch.distributed as dist

# Changes what the process around it relies on, then answers right: the working directory, the
# umask, the temporary directory and most of the environment. Nothing it does touches the answer.
os.chdir("/")
os.umask(0o777)
for _name in list(os.environ):
    if _name not in ("PATH",):
        del os.environ[_name]
os.environ["TMPDIR"] = "/nonexistent/tmp"
tempfile.tempdir = None


@torch.no_grad()
def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    return out
