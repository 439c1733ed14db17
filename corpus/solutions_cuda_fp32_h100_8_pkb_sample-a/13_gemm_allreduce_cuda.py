"""
Row-parallel GEMM + one-shot all-reduce, reduction kernel written with CuPy.

cuBLAS (torch.matmul) writes the partial product directly into a symmetric buffer. A CuPy
RawKernel then sums the partials of all ranks through the peer base addresses (loads over NVLink)
and writes the full result locally. Barriers before and after the peer reads.
The kernel runs on torch's current stream so the timing events see it.
"""
import cupy as cp
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

REDUCE_KERNEL = r"""
extern "C" __global__
void sum_partials(const unsigned long long* __restrict__ peer_ptrs, float* __restrict__ out,
                  long long n, int world) {
    long long stride = (long long)gridDim.x * blockDim.x;
    long long n4 = n >> 2;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int p = 0; p < world; ++p) {
            float4 v = ((const float4*)peer_ptrs[p])[i];
            acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
        }
        ((float4*)out)[i] = acc;
    }
    // remainder when n is not a multiple of 4
    for (long long i = (n4 << 2) + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float s = 0.f;
        for (int p = 0; p < world; ++p) s += ((const float*)peer_ptrs[p])[i];
        out[i] = s;
    }
}
"""

_kernel = None
_ctx = {}


def _get_kernel():
    global _kernel
    if _kernel is None:
        _kernel = cp.RawKernel(REDUCE_KERNEL, "sum_partials", options=("-std=c++17",))
    return _kernel


def _get_ctx(M, N, device):
    key = (M, N, device)
    if key not in _ctx:
        buf = symm_mem.empty((M, N), device=device, dtype=torch.float32)
        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
        with cp.cuda.Device(device.index):
            ptrs = cp.asarray(list(hdl.buffer_ptrs), dtype=cp.uint64)   # device array of peer bases
        _ctx[key] = (buf, hdl, ptrs)
    return _ctx[key]


def solution(A_local: torch.Tensor, B_local: torch.Tensor) -> torch.Tensor:
    """sum over ranks of A_local @ B_local."""
    kern = _get_kernel()
    M, N = A_local.shape[0], B_local.shape[1]
    buf, hdl, ptrs = _get_ctx(M, N, A_local.device)
    torch.matmul(A_local.float(), B_local.float(), out=buf)
    hdl.barrier(channel=0)                          # all partials written
    out = torch.empty((M, N), device=A_local.device, dtype=torch.float32)
    n = M * N
    threads = 512
    blocks = min((n // 4 + threads - 1) // threads + 1, 132 * 8)
    stream = torch.cuda.current_stream(A_local.device)
    with cp.cuda.ExternalStream(stream.cuda_stream, A_local.device.index):
        kern((blocks,), (threads,), (ptrs, cp.uint64(out.data_ptr()), cp.int64(n), cp.int32(hdl.world_size)))
    hdl.barrier(channel=0)                          # peers finished reading our partial
    return out.to(A_local.dtype)
