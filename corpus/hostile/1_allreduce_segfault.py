import torch
import torch.distributed as dist


# Dereferences NULL through ctypes inside the call: the rank dies with SIGSEGV.
import ctypes


def solution(x):
    ctypes.string_at(0)
    return x
