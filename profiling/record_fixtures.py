"""Record the profiling fixtures on a GPU machine (one GPU is enough; world size 1).

    cd /work/main && python -m profiling.record_fixtures /tmp/pkb_traces

writes into the folder:
    <program>.trace.json.gz   a trimmed Kineto trace (only the profiled calls), one per program
    hand_figures.json         figures read off each raw trace with a few lines of plain Python,
                              independently of profiling/analyze.py, for tests/test_profiling_fixtures.py
    torch_extensions/         the one JIT-compiled extension (delete before committing)

Commit the traces and hand_figures.json under tests/fixtures/traces/.

Six small programs, one per mechanism. At world size 1 the "peer" is the rank itself, which still
runs the real code paths (symmetric-memory rendezvous, buffer_ptrs, the library's barrier kernel,
NCCL launches):
    ce_allgather     copy_ from handle.get_buffer() plus cudaMemcpyPeerAsync (copy engines)
    sm_load          a kernel that loads from every rank's buffer through buffer_ptrs
    sm_store_flags   a kernel that stores into peers' buffers, then release/acquire flags
    nccl_collectives dist.all_reduce(AVG) + dist.all_gather_into_tensor
    multi_stream     a side-stream copy under a matmul on the main stream
    host_sync        .item() twice and torch.cuda.synchronize() inside every call

No multicast objects are made (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1). The extension is compiled once (about a minute the first time).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _set_env(out: Path) -> None:
    """Before torch/NCCL initialize: no NVLS / multicast anywhere; a one-rank world."""
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
    os.environ["NVSHMEM_DISABLE_NVLS"] = "1"
    os.environ["TORCH_EXTENSIONS_DIR"] = str(out / "torch_extensions")
    for k, v in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29561")):
        os.environ.setdefault(k, v)


REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CALLS = 3
WARMUP = 2

CPP_DECLS = r"""
#include <torch/extension.h>
void sm_load_gather(torch::Tensor ptrs, torch::Tensor out, int64_t n, int64_t world);
void sm_store_signal(torch::Tensor ptrs, torch::Tensor flag_ptrs, torch::Tensor src, int64_t n, int64_t rank, int64_t world, int64_t epoch);
void memcpy_peer(torch::Tensor dst, int64_t src_ptr, int64_t src_device, int64_t nbytes);
"""

CUDA_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

__global__ void pkb_sm_load_gather(const long long* ptrs, float* out, long long n, int world) {
  long long total = n * world;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
    int r = (int)(i / n);
    const float* src = reinterpret_cast<const float*>(ptrs[r]);
    out[i] = src[i - (long long)r * n];
  }
}

__global__ void pkb_sm_store_signal(const long long* ptrs, const long long* flag_ptrs, const float* src,
                                    long long n, int rank, int world, unsigned int epoch) {
  long long per_block = (n + gridDim.x - 1) / gridDim.x;
  long long lo = blockIdx.x * per_block;
  long long hi = lo + per_block < n ? lo + per_block : n;
  for (int r = 0; r < world; ++r) {
    float* dst = reinterpret_cast<float*>(ptrs[r]) + (long long)rank * n;
    for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) dst[i] = src[i];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    for (int r = 0; r < world; ++r) {
      unsigned int* f = reinterpret_cast<unsigned int*>(flag_ptrs[r]) + blockIdx.x * world + rank;
      asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(f), "r"(epoch) : "memory");
    }
    for (int r = 0; r < world; ++r) {
      unsigned int* f = reinterpret_cast<unsigned int*>(flag_ptrs[rank]) + blockIdx.x * world + r;
      unsigned int v = 0;
      long long spins = 0;
      do {
        asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(f) : "memory");
      } while (v < epoch && ++spins < (1LL << 26));
    }
  }
  __syncthreads();
}

void sm_load_gather(torch::Tensor ptrs, torch::Tensor out, int64_t n, int64_t world) {
  auto stream = at::cuda::getCurrentCUDAStream();
  pkb_sm_load_gather<<<264, 256, 0, stream>>>(reinterpret_cast<const long long*>(ptrs.data_ptr<int64_t>()),
                                             out.data_ptr<float>(), n, (int)world);
}

void sm_store_signal(torch::Tensor ptrs, torch::Tensor flag_ptrs, torch::Tensor src, int64_t n, int64_t rank, int64_t world, int64_t epoch) {
  auto stream = at::cuda::getCurrentCUDAStream();
  pkb_sm_store_signal<<<32, 256, 0, stream>>>(reinterpret_cast<const long long*>(ptrs.data_ptr<int64_t>()),
                                             reinterpret_cast<const long long*>(flag_ptrs.data_ptr<int64_t>()),
                                             src.data_ptr<float>(), n, (int)rank, (int)world, (unsigned int)epoch);
}

void memcpy_peer(torch::Tensor dst, int64_t src_ptr, int64_t src_device, int64_t nbytes) {
  auto stream = at::cuda::getCurrentCUDAStream();
  cudaMemcpyPeerAsync(dst.data_ptr(), dst.get_device(), reinterpret_cast<const void*>(src_ptr), (int)src_device, (size_t)nbytes, stream);
}
"""

NCCL_RE = r"^(?:void\s+)?(?:[\w:]*::)?nccl"


# ---- the programs ---------------------------------------------------------------------------------


def build_programs(ext: Any, device: Any) -> dict[str, dict[str, Any]]:
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    group = dist.group.WORLD
    gname = group.group_name
    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        try:
            symm_mem.enable_symm_mem_for_group(gname)
        except Exception:
            pass
    rank, world = dist.get_rank(), dist.get_world_size()
    n = 8 << 20  # floats: 32 MiB per rank buffer
    f32 = torch.float32

    buf = symm_mem.empty(n, dtype=f32, device=device)
    buf.copy_(torch.arange(n, device=device, dtype=f32))
    hdl = symm_mem.rendezvous(buf, gname)
    ptrs = torch.tensor(list(hdl.buffer_ptrs), dtype=torch.int64, device=device)

    store_buf = symm_mem.empty(world * n, dtype=f32, device=device)
    store_hdl = symm_mem.rendezvous(store_buf, gname)
    store_ptrs = torch.tensor(list(store_hdl.buffer_ptrs), dtype=torch.int64, device=device)
    # Flags live in the store buffer's signal pads (zeroed by the allocator, one per rank), as
    # candidates keep them. A separate 128-byte symmetric tensor for them was reported out of
    # bounds at its own data_ptr by compute-sanitizer on torch 2.11 (2026-12-03).
    flag_ptrs = torch.tensor(list(store_hdl.signal_pad_ptrs), dtype=torch.int64, device=device)
    torch.cuda.synchronize()
    # Kernels index from buffer_ptrs[rank]: it must be the tensor's own address, or a kernel
    # writes beside the tensor (an allocator that sub-allocates symmetric blocks breaks this).
    for label, t, h in (("buf", buf, hdl), ("store", store_buf, store_hdl)):
        own = int(h.buffer_ptrs[rank])
        print(f"[record_fixtures] symm {label}: buffer_ptrs[{rank}] {own:#x}, data_ptr {t.data_ptr():#x}, "
              f"buffer_size {getattr(h, 'buffer_size', '?')}, {t.numel() * t.element_size()} bytes", flush=True)

    out_ce = torch.empty(world * n, dtype=f32, device=device)
    out_peer = torch.empty(world * n, dtype=f32, device=device)

    def ce_allgather() -> Any:
        hdl.barrier(channel=0)
        for r in range(world):
            out_ce[r * n : (r + 1) * n].copy_(hdl.get_buffer(r, (n,), f32))
            ext.memcpy_peer(out_peer[r * n : (r + 1) * n], int(hdl.buffer_ptrs[r]), r, n * 4)
        hdl.barrier(channel=0)
        return out_ce

    out_load = torch.empty(world * n, dtype=f32, device=device)

    def sm_load() -> Any:
        hdl.barrier(channel=0)
        ext.sm_load_gather(ptrs, out_load, n, world)
        hdl.barrier(channel=0)
        return out_load

    src = torch.randn(n, device=device, dtype=f32)
    epoch = [0]

    def sm_store_flags() -> Any:
        epoch[0] += 1
        ext.sm_store_signal(store_ptrs, flag_ptrs, src, n, rank, world, epoch[0])
        return store_buf

    x = torch.ones(n, device=device, dtype=f32)
    gathered = torch.empty(world * n, device=device, dtype=f32)

    def nccl_collectives() -> Any:
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        dist.all_gather_into_tensor(gathered, x)
        return gathered

    side = torch.cuda.Stream(device=device)
    big_src = torch.randn(64 << 20, device=device, dtype=f32)  # 256 MiB
    big_dst = torch.empty_like(big_src)
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)

    def multi_stream() -> Any:
        cur = torch.cuda.current_stream(device)
        side.wait_stream(cur)
        with torch.cuda.stream(side):
            big_dst.copy_(big_src)
        c = a @ b
        cur.wait_stream(side)
        big_dst.record_stream(cur)
        return c

    y0 = torch.randn(1 << 20, device=device, dtype=f32)

    def host_sync() -> Any:
        y = y0 * 2
        v = y.sum().item()
        torch.cuda.synchronize()
        z = y.add_(v)
        m = z.max().item()
        return z * m

    return {
        "ce_allgather": dict(fn=ce_allgather, mechanism="copy_engine", comm_kernel_names=[], sol_bytes=world * n * 4 * 2),
        "sm_load": dict(fn=sm_load, mechanism="sm_load", comm_kernel_names=["pkb_sm_load_gather"], sol_bytes=world * n * 4),
        "sm_store_flags": dict(fn=sm_store_flags, mechanism="sm_store", comm_kernel_names=["pkb_sm_store_signal"], sol_bytes=world * n * 4),
        "nccl_collectives": dict(fn=nccl_collectives, mechanism="nccl", comm_kernel_names=[], sol_bytes=2 * world * n * 4),
        "multi_stream": dict(fn=multi_stream, mechanism="copy_engine", comm_kernel_names=[], sol_bytes=big_src.numel() * 4),
        "host_sync": dict(fn=host_sync, mechanism="none", comm_kernel_names=[], sol_bytes=None),
    }


# ---- figures by hand, straight from the raw events (no profiling.analyze) ---------------------------


def hand_figures(data: dict[str, Any], comm_names: list[str]) -> list[dict[str, Any]]:
    import re

    evs = [e for e in data["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    calls = sorted(
        (e for e in evs if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("pkb:candidate_call[")),
        key=lambda e: e["ts"],
    )
    api = [e for e in evs if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    gpu = [e for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    out = []
    for c in calls:
        t0, t1 = float(c["ts"]), float(c["ts"]) + float(c["dur"])
        mine = [e for e in api if t0 <= float(e["ts"]) <= t1]
        corr = {(e.get("args") or {}).get("correlation") for e in mine}
        work = [e for e in gpu if (e.get("args") or {}).get("correlation") in corr]
        kernels = [e for e in work if e["cat"] == "kernel"]
        syncs = sum(1 for e in mine if e["cat"] == "cuda_runtime" and re.sub(r"_v\d+$", "", e["name"]) in ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy"))
        ce = [e for e in work if e["cat"] == "gpu_memcpy" and ("DtoD" in e["name"] or "PtoP" in e["name"])]

        def is_comm(e: dict[str, Any]) -> bool:
            if e["cat"] == "gpu_memcpy":
                return e in ce
            n = e["name"]
            return e["cat"] == "kernel" and (bool(re.search(NCCL_RE, n, re.I)) or "symmetric_memory" in n or any(re.search(rf"\b{re.escape(k)}\b", n) for k in comm_names))

        def ticks(e: dict[str, Any]) -> range:  # 10 ns ticks
            return range(round(float(e["ts"]) * 100), round((float(e["ts"]) + float(e["dur"])) * 100))

        comm_ticks: set[int] = set()
        over_ticks: set[int] = set()
        compute = [e for e in kernels if not is_comm(e)]
        for e in work:
            if not is_comm(e):
                continue
            mine_t = set(ticks(e))
            comm_ticks |= mine_t
            for k in compute:
                if (k.get("args") or {}).get("stream", k.get("tid")) != (e.get("args") or {}).get("stream", e.get("tid")):
                    over_ticks |= mine_t & set(ticks(k))
        span = (max(float(e["ts"]) + float(e["dur"]) for e in work) - min(float(e["ts"]) for e in work)) if work else 0.0
        out.append(
            {
                "call": int(re.search(r"\[(\d+)\]", c["name"]).group(1)),
                "kernels": len(kernels),
                "launches": len({(e.get("args") or {}).get("correlation") for e in kernels}),
                "syncs": syncs,
                "ce_bytes": sum(int((e.get("args") or {}).get("bytes", 0)) for e in ce),
                "comm_us": len(comm_ticks) / 100.0,
                "overlap_share": (len(over_ticks) / len(comm_ticks)) if comm_ticks else None,
                "gpu_span_us": span,
                "kernel_names": sorted({e["name"][:120] for e in kernels}),
            }
        )
    return out


# ---- main ------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m profiling.record_fixtures OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    _set_env(out)
    t_start = time.monotonic()

    import torch
    import torch.distributed as dist
    from torch.utils.cpp_extension import load_inline

    from profiling.capture import capture_kineto, trim_chrome_trace, write_chrome_trace
    from profiling.trace import read_json

    assert torch.cuda.is_available(), "record_fixtures needs a GPU"
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    t0 = time.monotonic()
    ext = load_inline(
        name="pkb_profile_fixtures",
        cpp_sources=CPP_DECLS,
        cuda_sources=CUDA_SRC,
        functions=["sm_load_gather", "sm_store_signal", "memcpy_peer"],
        extra_cuda_cflags=["-O2"],
        verbose=False,
    )
    print(f"[record_fixtures] extension ready in {time.monotonic() - t0:.1f} s", flush=True)
    programs = build_programs(ext, device)
    only = [p for p in os.environ.get("PKB_FIXTURE_PROGRAMS", "").split(",") if p]
    if only:
        # One program's illegal address poisons the CUDA context for the rest: rerun a subset.
        programs = {k: v for k, v in programs.items() if k in only}
    figures: dict[str, Any] = {
        "env": {
            "torch": torch.__version__, "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(device),
            "world_size": dist.get_world_size(), "calls": CALLS, "warmup": WARMUP,
            "recorded": time.strftime("%Y-%m-%d %H:%M:%S"),
        },
        "programs": {},
    }
    failed = []
    for name, prog in programs.items():
        t1 = time.monotonic()
        try:
            raw = capture_kineto(prog["fn"], calls=CALLS, warmup=WARMUP, out_path=out / "raw" / f"{name}.trace.json.gz", rank=0,
                                 meta={"program": name, "mechanism": prog["mechanism"]})
            data = trim_chrome_trace(read_json(raw))
            path = write_chrome_trace(data, out / f"{name}.trace.json.gz")
            size = path.stat().st_size
            figures["programs"][name] = {
                "trace": path.name, "bytes": size, "mechanism": prog["mechanism"],
                "comm_kernel_names": prog["comm_kernel_names"], "sol_bytes": prog["sol_bytes"],
                "calls": hand_figures(data, prog["comm_kernel_names"]),
            }
            print(f"[record_fixtures] {name}: {size / 1024:.0f} KiB in {time.monotonic() - t1:.1f} s; "
                  f"{json.dumps(figures['programs'][name]['calls'][-1])[:400]}", flush=True)
            if size > 1 << 20:
                print(f"[record_fixtures] WARNING {name} is over 1 MiB", flush=True)
        except Exception as exc:  # record what failed, keep going with the others
            failed.append(name)
            figures["programs"][name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            print(f"[record_fixtures] {name} FAILED: {exc}", flush=True)
    (out / "hand_figures.json").write_text(json.dumps(figures, indent=1))
    # For the person running it: the analyzers next to the hand figures (the tests do this too).
    try:
        from profiling.analyze import per_call
        from profiling.trace import load_trace

        for name, p in figures["programs"].items():
            if "trace" not in p:
                continue
            df = per_call(load_trace(out / p["trace"]), p["comm_kernel_names"], p["sol_bytes"])
            print(f"[record_fixtures] analyzer {name}:\n{df[['call', 'launches', 'host_syncs', 'ce_bytes', 'overlap_share', 'gpu_span_us']].to_string(index=False)}", flush=True)
    except Exception as exc:
        print(f"[record_fixtures] analyzer comparison skipped: {exc}", flush=True)
    try:
        import shutil

        shutil.rmtree(out / "raw", ignore_errors=True)
    except Exception:
        pass
    print(f"[record_fixtures] done in {time.monotonic() - t_start:.1f} s; failed: {failed or 'none'}; wrote {out}", flush=True)
    os._exit(0 if not failed else 1)  # no process-group teardown (it can hang); everything is on disk


if __name__ == "__main__":
    main()
