"""Where a boxed c10d all-reduce faults: the call two hostile candidates make
(`torch.ops.c10d.allreduce_` with the group boxed and a default-built ReduceOp), next to controls,
each in its own process at world size 1, on NCCL (GPU) and gloo (CPU).

    python bench/c10d_boxed_probe.py [--backends nccl gloo] [--gdb]

On NCCL at one rank (torch 2.11, H100, 2026-12-06) the candidates' call killed the rank with
SIGSEGV where gloo ran it; this prints each variant's exit status and, for a fault, the native
stack (gdb, where installed) or Python's (faulthandler).

On the H200 (2026-12-06, later session; no gdb there): NCCL faults in both async_op=False forms
(with and without an explicit timeout) and runs the async_op=True form and every control; gloo
runs all six. torch's own wrappers call `wait()` only on a Work that is not None, for backends
that sync in C++ and return none when async_op is False; the fault is consistent with the boxed
call's caller doing `[1].wait()` on that empty Work.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys

# Each variant reduces a tensor of ones at one rank: the sum is the input.
VARIANTS = {
    "dist_all_reduce": "dist.all_reduce(out)",
    "process_group_allreduce": "group.allreduce([out]).wait()",
    "funcol_all_reduce": "out = torch.ops._c10d_functional.wait_tensor(torch.ops._c10d_functional.all_reduce(out, 'sum', group.group_name))",
    "boxed_default_op_sync": "torch.ops.c10d.allreduce_([out], group.boxed(), torch.classes.c10d.ReduceOp(), None, False)[1].wait()",
    "boxed_default_op_async": "torch.ops.c10d.allreduce_([out], group.boxed(), torch.classes.c10d.ReduceOp(), None, True)[1].wait()",
    "boxed_default_op_timeout": "torch.ops.c10d.allreduce_([out], group.boxed(), torch.classes.c10d.ReduceOp(), None, False, 60000)[1].wait()",
}

CHILD = """
import faulthandler, os, sys
faulthandler.enable()
import torch, torch.distributed as dist
backend = sys.argv[1]
dist.init_process_group(backend, rank=0, world_size=1, init_method="tcp://127.0.0.1:" + sys.argv[2])
device = "cuda" if backend == "nccl" else "cpu"
if device == "cuda":
    torch.cuda.set_device(0)
group = dist.distributed_c10d._get_default_group()
out = torch.ones(1024, device=device)
{body}
if device == "cuda":
    torch.cuda.synchronize()
print("result", float(out.sum()), "expected", 1024.0)
dist.destroy_process_group()
"""


def run_variant(backend: str, name: str, port: int, gdb: bool) -> tuple[str, str]:
    code = CHILD.replace("{body}", VARIANTS[name])
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    cmd = [sys.executable, "-c", code, backend, str(port)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
    rc = proc.returncode
    status = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}"
    tail = (proc.stdout + proc.stderr).strip().splitlines()
    detail = next((line for line in reversed(tail) if line.startswith("result")), "")
    if rc != 0:
        detail = " | ".join(tail[-25:])
        if gdb and rc < 0 and shutil.which("gdb"):
            g = subprocess.run(["gdb", "-batch", "-ex", "run", "-ex", "bt 40", "--args", *cmd],
                               capture_output=True, text=True, env=env, timeout=300)
            frames = [line for line in g.stdout.splitlines() if line.startswith("#")]
            detail += "\n    gdb: " + "\n    gdb: ".join(frames[:40])
    return status, detail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", nargs="*", default=["nccl", "gloo"])
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--gdb", action="store_true", help="for a fault: the native stack under gdb, where installed")
    args = ap.parse_args(argv)
    port = 29700
    rows = []
    for backend in args.backends:
        for name in args.variants:
            port += 1
            status, detail = run_variant(backend, name, port, args.gdb)
            rows.append((backend, name, status))
            print(f"== {backend} {name}: {status}\n   {detail}", flush=True)
    print("\nbackend  variant                    status")
    for backend, name, status in rows:
        print(f"{backend:8s} {name:26s} {status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
