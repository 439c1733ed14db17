"""Read, from a PKB checkout, the dtype of each tensor PKB's input factory passes `solution()`.

    python -m problems.read_pkb_inputs PKB_ROOT [--world-size 8]

Runs PKB's `create_input_tensor` (utils/input_output_tensors.py) for every problem on CPU gloo
ranks, once with bfloat16 and once with float32 as the run's precision, and prints, as JSON, the
problem id -> {parameter: dtype} of the tensor parameters whose dtype is an integer or bool one
and the same in both runs (offsets, counts, labels, masks): the `tensor_dtypes` fact of
problems/pkb_catalog.json. A problem whose factory fails on CPU is listed under "failed".
A maintainer's tool: the catalogue carries its output, so nothing reads a checkout at run time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

PRECISIONS = ("bfloat16", "float32")
FIXED_KINDS = ("int8", "int16", "int32", "int64", "uint8", "bool")


def _rank(rank: int, world_size: int, root: str, store_dir: str, out_path: str) -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, root)
    from utils.input_output_tensors import create_input_tensor

    from problems import catalog

    dist.init_process_group("gloo", init_method=f"file://{store_dir}/store", rank=rank, world_size=world_size)
    seen: dict[int, dict[str, dict[str, str]]] = {}
    failed: dict[int, str] = {}
    for pid, entry in sorted(catalog.entries().items()):
        for precision in PRECISIONS:
            try:
                args = create_input_tensor(rank, world_size, pid, (1024, 1024), getattr(torch, precision), device="cpu")
            except Exception as exc:  # CUDA-only factories, groups gloo cannot build
                failed[pid] = f"{type(exc).__name__}: {exc}"[:200]
                break
            seen.setdefault(pid, {})[precision] = {
                name: str(value.dtype).removeprefix("torch.")
                for name, value in zip(entry.params, args) if isinstance(value, torch.Tensor)
            }
    if rank == 0:
        fixed = {}
        for pid, runs in seen.items():
            if len(runs) != len(PRECISIONS):
                continue
            first, *rest = runs.values()
            same = {n: d for n, d in first.items() if d in FIXED_KINDS and all(r.get(n) == d for r in rest)}
            if same:
                fixed[pid] = same
        with open(out_path, "w", encoding="utf-8") as fh:
            json.dump({"tensor_dtypes": fixed, "failed": failed}, fh, indent=1, sort_keys=True)
    dist.barrier()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pkb_root")
    ap.add_argument("--world-size", type=int, default=8)
    args = ap.parse_args(argv)
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "facts.json")
        mp.spawn(_rank, args=(args.world_size, os.path.abspath(args.pkb_root), tmp, out), nprocs=args.world_size)
        with open(out, encoding="utf-8") as fh:
            print(fh.read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
