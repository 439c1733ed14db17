import torch
import torch.distributed as dist


# GPU: a kernel that writes through a null pointer (an illegal address).
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
__global__ void bad(float* p) { p[threadIdx.x] = 1.0f; }
torch::Tensor poke(torch::Tensor x) {
    bad<<<1, 32>>>(nullptr);
    return x.clone();
}
"""
_ext = load_inline(name="pkb_hostile_illegal", cpp_sources="torch::Tensor poke(torch::Tensor x);", cuda_sources=CUDA_SRC, functions=["poke"])


def solution(x):
    return _ext.poke(x)
