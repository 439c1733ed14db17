"""`compile_cuda_extension`, the build helper PKB's generated solutions call, as pkb-analyze provides it.

A solution passes one CUDA source that holds its kernels and its own PYBIND11_MODULE; the helper
builds it as an inline torch extension for Hopper (sm_90, unless TORCH_CUDA_ARCH_LIST says
otherwise) at -O3 and returns the loaded module.

`load_inline` is looked up on torch.utils.cpp_extension at every call, never bound at import: the
evaluation wraps it (to time builds under their own limit and to give every source its own build
directory by content hash), and a name bound earlier would bypass that.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import torch.utils.cpp_extension as cpp_extension

HOPPER_ARCH = "9.0"


def compile_cuda_extension(
    name: str,
    cuda_src: str,
    extra_cuda_cflags: Sequence[str] | None = None,
    extra_include_paths: Sequence[str] | None = None,
    extra_ldflags: Sequence[str] | None = None,
) -> Any:
    """Build `cuda_src` as extension `name` (cached by torch under TORCH_EXTENSIONS_DIR) and load it."""
    # One target architecture keeps a build to one nvcc pass; a user's setting wins.
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", HOPPER_ARCH)
    return cpp_extension.load_inline(
        name=name,
        cpp_sources="",
        cuda_sources=cuda_src,
        extra_cuda_cflags=["-O3", *(extra_cuda_cflags or [])],
        extra_include_paths=list(extra_include_paths or []),
        extra_ldflags=list(extra_ldflags or []),
        with_cuda=True,
        verbose=False,
    )
