"""The CUDA and C++ names the clang pass and its regex fallback recognise: atomics, load/store
intrinsics, fences, host waits, allocations, copies, NVSHMEM calls, tensor views. Reads nothing."""

from __future__ import annotations

import re

ATOMIC_RE = re.compile(r"^(?:gpuA|a)tomic(Add|Sub|Exch|Max|Min|And|Or|Xor|Inc|Dec|CAS)(_system|_block)?$")
ATOMIC_REF_METHODS = {"load", "store", "exchange", "compare_exchange_strong", "compare_exchange_weak",
                       "fetch_add", "fetch_sub", "fetch_or", "fetch_and", "fetch_xor", "fetch_max",
                       "fetch_min", "wait"}
LOAD_INTRINSICS = {"__ldg", "__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv"}
STORE_INTRINSICS = {"__stcg", "__stcs", "__stwt", "__stwb"}
FENCE_CALLS = {"__threadfence_system": "system", "__threadfence": "gpu", "__threadfence_block": "cta"}
HOST_SYNC = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "device_synchronize"}
ALLOC = {"cudaMalloc", "cudaMallocAsync", "cudaMallocManaged", "cudaMallocHost", "cudaHostAlloc",
          "empty", "empty_like", "zeros", "zeros_like", "ones", "full", "empty_strided", "nvshmem_malloc",
          "nvshmem_align", "nvshmem_calloc"}
TORCH_ALLOC = {"empty", "empty_like", "zeros", "zeros_like", "ones", "full", "empty_strided"}
MEMCPY_RE = re.compile(r"^(cudaMemcpy\w*|cuMemcpy\w*)$")
BLAS_GEMM_RE = re.compile(r"^(cublas\w*[Gg]emm\w*|cublasLtMatmul)$")
NVSHMEM_SYNC_RE = re.compile(r"^nvshmemx?_(\w+_)?(barrier\w*|sync_all\w*|team_sync|quiet\w*|fence|"
                              r"signal_wait_until\w*|wait_until\w*|wait\w*)$")
NVSHMEM_XFER_RE = re.compile(r"^nvshmemx?_\w*(put|get|_p|_g|ptr|signal_op)\w*$")
TENSOR_VIEW_METHODS = {"contiguous", "view", "reshape", "narrow", "slice", "select", "flatten", "t",
                        "transpose", "data", "get", "to", "cuda", "detach", "view_as", "as_strided"}
DATA_PTR_METHODS = {"data_ptr", "mutable_data_ptr", "const_data_ptr"}
VECTOR_TYPE_RE = re.compile(r"\b(float|int|uint|double|longlong|ulonglong|short|ushort|char|uchar)[24]\b"
                             r"|\b(__half2|__nv_bfloat162|half2|nv_bfloat162)\b")
CLOCK_NAMES = {"clock64", "clock", "globaltimer", "__globaltimer"}
# Launch APIs that take the kernel as a function pointer (its arguments in an array of pointers).
LAUNCH_APIS = ("cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cudaLaunchKernelExC")
