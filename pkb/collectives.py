"""The library collectives of torch.distributed, named once for every stage.

The static pass labels a call with these names, the evaluation's static checks and its runtime
counter (pkb/eval/guard.py) count them, and the emulation (pkb/emulate/fake_dist.py) says which of
them it replaces. Reads nothing; plain name sets only (no torch import).

    DATA_COLLECTIVES  move tensor payload between ranks (torch.distributed and its c10d module)
    FUNCOL_COLLECTIVES  the functional collectives (torch.distributed._functional_collectives)
                      that move payload, beyond the names they share with DATA_COLLECTIVES
    P2P               point-to-point transfers
    OBJECT_TRANSFERS  pickled Python objects through the library (host values, not the payload)
    HOST_SYNCS        rendezvous of the ranks on the host: they move nothing
    FUNCOL_WAITS      completion of an earlier functional collective (no transfer of its own)
    P2P_OP_CLASS      the descriptor class batch_isend_irecv takes: a p2p name, never a call to wrap
    PROCESS_GROUP_METHODS  the same calls one level down, as methods of c10d's ProcessGroup and
                      Backend objects (what torch.distributed's functions call), each mapped to the
                      torch.distributed name it is counted under
    DISPATCHER_OPS    the same calls as operators of PyTorch's dispatcher ("c10d::allreduce_",
                      "_c10d_functional::all_reduce"), each mapped to the torch.distributed name it
                      is counted under: every ProcessGroup method and functional collective ends in
                      one of them, and a candidate can call them itself through torch.ops
    SYMM_MEM_OPS      the ready-made collectives and one-sided transfers of torch's symmetric
                      memory ("symm_mem::one_shot_all_reduce", "symm_mem::nvshmem_put"): the
                      library moves the data, as it does for the c10d operators, each mapped to
                      the torch.distributed name of the transfer it makes
    LIBRARY_OPS       DISPATCHER_OPS and SYMM_MEM_OPS: every dispatcher operator counted as a
                      library call
    COLLECTIVE_LIBRARY  a file name of NCCL, RCCL or MPI (what a candidate hands ctypes or cffi
                      to call the library past torch.distributed)
    COLLECTIVE_ENTRY  an entry point of theirs that moves data (ncclAllReduce, MPI_Allreduce),
                      with the kind of transfer in its `nccl` or `mpi` group
"""

from __future__ import annotations

import re

DATA_COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
    "broadcast", "reduce", "all_to_all", "all_to_all_single", "gather", "scatter",
    "all_reduce_coalesced", "all_gather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced",
    # private spellings older code still calls
    "_all_gather_base", "_reduce_scatter_base",
})
FUNCOL_COLLECTIVES = frozenset({"all_gather_tensor", "permute_tensor"})
OBJECT_TRANSFERS = frozenset({"all_gather_object", "broadcast_object_list"})
P2P = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list"})
HOST_SYNCS = frozenset({"barrier", "monitored_barrier"})
FUNCOL_WAITS = frozenset({"wait_tensor"})
P2P_OP_CLASS = "P2POp"

# What the static pass labels `collective` (a call into the library for a transfer, or the wait
# that completes one).
STATIC_COLLECTIVES = DATA_COLLECTIVES | FUNCOL_COLLECTIVES | OBJECT_TRANSFERS | FUNCOL_WAITS
# Every library call that moves data between ranks: a try/except that falls back to one of these
# is a library fallback, and the runtime counter counts them per timed call.
MOVES_DATA = DATA_COLLECTIVES | FUNCOL_COLLECTIVES | OBJECT_TRANSFERS | P2P
# Every function the runtime counter wraps (barriers are counted apart, as host syncs).
COUNTED = MOVES_DATA | HOST_SYNCS


# Methods of torch._C._distributed_c10d.ProcessGroup / Backend that move data or sync ranks. A
# candidate can call them directly (dist.group.WORLD.allreduce([t])) and skip every function above.
PROCESS_GROUP_METHODS = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced",
    "allgather": "all_gather",
    "allgather_coalesced": "all_gather",
    "_allgather_base": "all_gather_into_tensor",
    "all_gather_single": "all_gather_into_tensor",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor_coalesced",
    "all_gather_single_coalesced": "all_gather_into_tensor_coalesced",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor_coalesced",
    "reduce_scatter_single_coalesced": "reduce_scatter_tensor_coalesced",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all_single",
    "all_to_all_single": "all_to_all_single",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "send": "send",
    "recv": "recv",
    "recv_anysource": "recv",
    "barrier": "barrier",
    "monitored_barrier": "monitored_barrier",
}


# Operators of the dispatcher that move data or sync ranks (namespace::name -> counted name). The
# ProcessGroup methods above call the c10d ones; torch.ops.c10d.* and torch.ops._c10d_functional.*
# reach them with no Python function or method in between. wait_tensor (FUNCOL_WAITS) moves nothing.
DISPATCHER_OPS = {
    "c10d::allreduce_": "all_reduce",
    "c10d::allreduce_coalesced_": "all_reduce_coalesced",
    "c10d::allgather_": "all_gather",
    "c10d::allgather_coalesced_": "all_gather",
    "c10d::_allgather_base_": "all_gather_into_tensor",
    "c10d::allgather_into_tensor_coalesced_": "all_gather_into_tensor_coalesced",
    "c10d::reduce_scatter_": "reduce_scatter",
    "c10d::_reduce_scatter_base_": "reduce_scatter_tensor",
    "c10d::reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor_coalesced",
    "c10d::alltoall_": "all_to_all",
    "c10d::alltoall_base_": "all_to_all_single",
    "c10d::broadcast_": "broadcast",
    "c10d::reduce_": "reduce",
    "c10d::gather_": "gather",
    "c10d::scatter_": "scatter",
    "c10d::send": "send",
    "c10d::recv_": "recv",
    "c10d::recv_any_source_": "recv",
    "c10d::barrier": "barrier",
    "c10d::monitored_barrier_": "monitored_barrier",
    "_c10d_functional::all_reduce": "all_reduce",
    "_c10d_functional::all_reduce_": "all_reduce",
    "_c10d_functional::all_reduce_coalesced": "all_reduce_coalesced",
    "_c10d_functional::all_reduce_coalesced_": "all_reduce_coalesced",
    "_c10d_functional::all_gather_into_tensor": "all_gather_into_tensor",
    "_c10d_functional::all_gather_into_tensor_out": "all_gather_into_tensor",
    "_c10d_functional::all_gather_into_tensor_coalesced": "all_gather_into_tensor_coalesced",
    "_c10d_functional::reduce_scatter_tensor": "reduce_scatter_tensor",
    "_c10d_functional::reduce_scatter_tensor_out": "reduce_scatter_tensor",
    "_c10d_functional::reduce_scatter_tensor_coalesced": "reduce_scatter_tensor_coalesced",
    "_c10d_functional::all_to_all_single": "all_to_all_single",
    "_c10d_functional::broadcast": "broadcast",
    "_c10d_functional::broadcast_": "broadcast",
    "_c10d_functional::isend": "isend",
    "_c10d_functional::irecv": "irecv",
    "_c10d_functional::batch_p2p_ops": "batch_isend_irecv",
    "_dtensor::shard_dim_alltoall": "all_to_all",
}


# Operators of torch's symmetric memory (torch.ops.symm_mem.*) in which the library, not the
# candidate, moves the data. Its other operators move nothing between ranks or leave the moving
# to the candidate's own kernels: rendezvous and barriers, signal waits, local memsets and stream
# writes, get_remote_tensors (views of the peers' buffers) and _async_input_mm (a local matmul
# that waits on signals). The fused_* and _low_contention_* ones exist once
# torch.distributed._symmetric_memory is imported.
SYMM_MEM_OPS = {
    "symm_mem::one_shot_all_reduce": "all_reduce",
    "symm_mem::one_shot_all_reduce_out": "all_reduce",
    "symm_mem::one_shot_all_reduce_copy": "all_reduce",
    "symm_mem::one_shot_all_reduce_copy_out": "all_reduce",
    "symm_mem::two_shot_all_reduce_": "all_reduce",
    "symm_mem::two_shot_all_reduce_out": "all_reduce",
    "symm_mem::multimem_all_reduce_": "all_reduce",
    "symm_mem::multimem_one_shot_all_reduce": "all_reduce",
    "symm_mem::multimem_one_shot_all_reduce_out": "all_reduce",
    "symm_mem::multimem_one_shot_reduce_out": "reduce",
    "symm_mem::multimem_all_gather_out": "all_gather_into_tensor",
    "symm_mem::reduce_scatter_out": "reduce_scatter_tensor",
    "symm_mem::nccl_reduce_scatter_offset": "reduce_scatter_tensor",
    "symm_mem::tile_reduce": "reduce",
    "symm_mem::multi_root_tile_reduce": "reduce",
    "symm_mem::all_to_all_vdev": "all_to_all_single",
    "symm_mem::all_to_all_vdev_2d": "all_to_all_single",
    "symm_mem::all_to_all_vdev_2d_offset": "all_to_all_single",
    "symm_mem::nvshmem_all_to_all": "all_to_all_single",
    "symm_mem::nvshmem_broadcast": "broadcast",
    "symm_mem::nvshmem_put": "send",
    "symm_mem::nvshmem_put_with_signal": "send",
    "symm_mem::nvshmem_get": "recv",
    "symm_mem::nccl_put": "send",
    "symm_mem::nccl_put_with_signal": "send",
    "symm_mem::nccl_put_signal": "send",
    "symm_mem::nccl_get": "recv",
    "symm_mem::fused_all_gather_matmul": "all_gather_into_tensor",
    "symm_mem::fused_all_gather_scaled_matmul": "all_gather_into_tensor",
    "symm_mem::fused_matmul_reduce_scatter": "reduce_scatter_tensor",
    "symm_mem::fused_scaled_matmul_reduce_scatter": "reduce_scatter_tensor",
    "symm_mem::_low_contention_all_gather": "all_gather_into_tensor",
    "symm_mem::_low_contention_reduce_scatter": "reduce_scatter_tensor",
}
# The symm_mem operators that are no library transfer (see above): a new operator of torch's in
# neither list fails tests/test_hidden_collectives.py instead of slipping past the counter.
SYMM_MEM_NOT_TRANSFERS = frozenset({
    "symm_mem::_rendezvous", "symm_mem::_barrier", "symm_mem::memset32_", "symm_mem::stream_write_value32_",
    "symm_mem::nccl_wait_for_signal", "symm_mem::nccl_wait_signal", "symm_mem::nvshmem_wait_for_signal",
    "symm_mem::get_remote_tensors", "symm_mem::_async_input_mm",
})
LIBRARY_OPS = {**DISPATCHER_OPS, **SYMM_MEM_OPS}


# NCCL, RCCL and MPI reached without torch.distributed (ctypes.CDLL("libnccl.so.2"), cffi's dlopen):
# the library's file name, and the entry points that move data, by name.
COLLECTIVE_LIBRARY = re.compile(r"(?i)(?:^|[/\\_.-]|lib)(nccl|rccl|mpi)(?:[._-]|$)")
COLLECTIVE_ENTRY = re.compile(
    r"(?:nccl|rccl)(?P<nccl>AllReduce|Reduce|Broadcast|Bcast|AllGather|ReduceScatter|AlltoAll|AllToAll\w*|Gather|Scatter|Send|Recv)"
    r"|MPI_(?P<mpi>Allreduce|Reduce|Bcast|Allgather\w*|Reduce_scatter\w*|Alltoall\w*|Gather\w*|Scatter\w*|I?send|I?recv|Sendrecv\w*)"
)
