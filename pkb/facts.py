"""What the static passes see, before any label is decided.

Each pass turns source into facts (one dataclass tree per pass); `analyzer.classify` turns facts
into TAXONOMY labels with evidence, and the rules read facts to raise findings. Every `line` here
is a line of the candidate's Python file (1-based), already mapped back from the CUDA string, so
evidence always points at what the user sees in their editor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Where a Python call sits with respect to the timed call `solution(...)`.
#   timed:  runs on every call of solution()
#   setup:  reachable from solution() but inside a cached branch that runs once
#   module: runs at import
#   unreached: defined but not reachable from solution() (dead code or other entry points)
PATHS = ("timed", "setup", "module", "unreached")

# What a value that reaches a kernel argument points at (Python -> C++ -> kernel dataflow).
#   peer_ptr:        one peer's buffer address (e.g. int(hdl.buffer_ptrs[peer]))
#   peer_ptr_array:  an array of every rank's buffer addresses (buffer_ptrs_dev, a tensor of buffer_ptrs)
#   signal_ptr / signal_ptr_array: the same for signal pads (flags)
#   multicast_ptr:   hdl.multicast_ptr
#   peer_tensor:     a tensor viewing a peer's buffer (hdl.get_buffer(peer, ...))
#   symm_local:      this rank's own symmetric buffer (symm_mem.empty / buffer_ptrs[rank])
#   nvshmem_ptr:     an address from nvshmem_ptr()
#   local:           ordinary local memory
#   unknown:         nothing known
POINTER_KINDS = (
    "peer_ptr",
    "peer_ptr_array",
    "signal_ptr",
    "signal_ptr_array",
    "multicast_ptr",
    "peer_tensor",
    "symm_local",
    "nvshmem_ptr",
    "local",
    "unknown",
)

PEER_KINDS = ("peer_ptr", "peer_ptr_array", "peer_tensor", "nvshmem_ptr")
SIGNAL_KINDS = ("signal_ptr", "signal_ptr_array")


# --------------------------------------------------------------------------------------------
# Python pass
# --------------------------------------------------------------------------------------------


@dataclass
class CudaSource:
    """One CUDA/C++ source string found in the Python file."""

    index: int  # position among the file's CUDA sources
    origin: str  # load_inline.cuda_sources | load_inline.cpp_sources | compile_cuda_extension
    #              | cupy.RawKernel | cupy.RawModule | string_literal (a string with __global__)
    text: str
    line_map: list[int]  # line_map[i] = file line of line i (0-based) of `text`
    var_name: str = ""  # the Python name the string was bound to, if any
    ext_name: str = ""  # load_inline(name=...) / RawKernel name argument
    functions: list[str] = field(default_factory=list)  # load_inline(functions=[...])
    compile_line: int = 0  # line of the compile call (load_inline, RawKernel, ...)
    compile_path: str = "module"  # one of PATHS: where the compile call sits
    exact: bool = True  # False when parts were substituted (f-string fields, unknown names)

    def file_line(self, text_line: int) -> int:
        """File line of 1-based line `text_line` of the CUDA text."""
        if not self.line_map:
            return self.compile_line
        i = min(max(text_line - 1, 0), len(self.line_map) - 1)
        return self.line_map[i]


@dataclass
class ArgInfo:
    """One argument of a call, as the Python dataflow sees it."""

    position: int  # positional index; -1 for keyword
    keyword: str = ""
    text: str = ""  # source text of the argument expression
    pointer_kind: str = "unknown"  # one of POINTER_KINDS
    origin_line: int = 0  # where the pointer came from (e.g. the buffer_ptrs line)
    value_type: str = ""  # int (an address: hdl.buffer_ptrs_dev, multicast_ptr, data_ptr()) | tensor | ''
    line: int = 0  # where the argument is written (a call may span lines)
    integer_tensor: bool = False  # a tensor of integers (split sizes, counts): metadata, not payload
    read_back: bool = False  # a collective's output that is only read back to the host as numbers (.tolist())


@dataclass
class CallSite:
    """A call the Python pass recorded (torch.distributed, symmetric memory, torch.cuda, ...)."""

    qualname: str  # resolved dotted name: torch.distributed.all_reduce, torch.cuda.synchronize,
    #                symm_mem.rendezvous, handle.barrier, tensor.item, ext.<fn>, ...
    category: str  # collective | p2p | symm_mem | symm_handle | cuda_sync | stream | event
    #                | alloc | compile | host_transfer | ext_kernel | triton_launch | cupy_launch
    #                | tensor_copy | tensor_fill | other
    line: int
    col: int = 0
    end_line: int = 0
    snippet: str = ""
    function: str = ""  # enclosing Python function ('' at module level)
    path: str = "module"  # one of PATHS
    args: list[ArgInfo] = field(default_factory=list)
    rank_conditional: bool = False  # inside a branch on the rank (if rank == 0: ...)
    in_loop: bool = False  # inside a for/while loop of its function
    stream_context: str = ""  # text of the enclosing `with torch.cuda.stream(s):`, if any
    target: str = ""  # ext function name / triton kernel name / cupy kernel for launches


@dataclass
class TritonKernel:
    name: str
    line: int
    end_line: int
    params: list[str] = field(default_factory=list)
    loads: list[int] = field(default_factory=list)  # lines of tl.load
    stores: list[int] = field(default_factory=list)  # lines of tl.store
    atomics: list[int] = field(default_factory=list)  # lines of tl.atomic_*
    peer_params: dict[str, str] = field(default_factory=dict)  # param -> pointer kind (from launches)
    peer_loads: list[int] = field(default_factory=list)  # tl.load through a peer param
    peer_stores: list[int] = field(default_factory=list)
    peer_atomics: list[int] = field(default_factory=list)
    spin_loops: list[int] = field(default_factory=list)  # while loops polling a load/atomic


@dataclass
class AssertFact:
    """An assertion or check in the timed path that narrows what the solution accepts."""

    line: int
    kind: str  # world_size | dtype | shape | contiguity | device | other
    snippet: str
    literal: str = ""  # the constant compared against (e.g. '2', 'torch.float32')


@dataclass
class ConstantFact:
    """A literal that looks like a hard-coded rank count (world_size = 8, range(8) over peers)."""

    line: int
    name: str
    value: str
    snippet: str


@dataclass
class ReusedReturn:
    """A value solution() returns that lives on after the call and is overwritten by the next."""

    line: int  # the return statement
    name: str  # the returned expression's base name
    reason: str  # symmetric | cached
    origin_line: int = 0  # where the buffer was made or read from the cache


@dataclass
class PythonFacts:
    status: str = "ok"  # ok | failed
    message: str = ""
    has_solution: bool = False
    solution_line: int = 0
    solution_params: list[str] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)  # top-level module names imported
    cuda_sources: list[CudaSource] = field(default_factory=list)
    triton_kernels: list[TritonKernel] = field(default_factory=list)
    calls: list[CallSite] = field(default_factory=list)
    asserts: list[AssertFact] = field(default_factory=list)
    constants: list[ConstantFact] = field(default_factory=list)
    streams: list[int] = field(default_factory=list)  # lines creating torch.cuda.Stream()
    chunk_loops: list[int] = field(default_factory=list)  # loops in the timed path that launch
    #                                                       transfers and compute per chunk
    # names bound to host (CPU or pinned) tensors: a copy into them is staging, not peer traffic
    host_tensors: list[str] = field(default_factory=list)
    # ext function name -> kinds of its positional args seen at call sites (for the C++ pass)
    ext_arg_kinds: dict[str, list[str]] = field(default_factory=dict)
    # ext function name -> its parameters' C++ types as the binding declares them
    # ('torch::Tensor', 'int64_t', ...; from the source's declaration or TORCH_LIBRARY schema)
    ext_signatures: dict[str, list[str]] = field(default_factory=dict)
    # solution() returning a buffer it keeps (a cached or symmetric one, or a view of it)
    reused_returns: list[ReusedReturn] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# libclang pass (one CudaFacts per CudaSource)
# --------------------------------------------------------------------------------------------


@dataclass
class Param:
    name: str
    type: str
    is_pointer: bool = False
    pointer_kind: str = "unknown"  # after dataflow: one of POINTER_KINDS
    # how pointer_kind was decided: seed (Python side) | dataflow (followed in C++) | name (a guess
    # from the identifier only) | '' (nothing known)
    basis: str = ""


@dataclass
class Launch:
    """A kernel launch in host code (<<<...>>>, cudaLaunchKernel, cudaLaunchCooperativeKernel)."""

    kernel: str
    line: int
    caller: str
    args: list[str] = field(default_factory=list)  # argument source texts
    arg_kinds: list[str] = field(default_factory=list)  # POINTER_KINDS per argument
    grid: str = ""
    block: str = ""
    template_args: str = ""  # e.g. '<float, 256>' as written
    cooperative: bool = False
    stream: str = ""


@dataclass
class Function:
    name: str
    kind: str  # global | device | host | host_device
    line: int  # file line of the definition
    end_line: int
    text_line: int  # 1-based line in the CUDA text (for PTX mapping and extraction)
    text_end_line: int
    params: list[Param] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # names of functions it calls
    is_template: bool = False
    launch_bounds: str = ""


@dataclass
class MemAccess:
    """A load, store or atomic through a pointer whose kind the dataflow decided."""

    function: str
    line: int
    kind: str  # load | store | atomic
    pointer: str  # the pointer expression's base variable
    pointer_kind: str  # POINTER_KINDS
    via: str = "subscript"  # subscript | deref | member | asm | intrinsic | memcpy_async
    #                          | tma (a bulk copy through a library call) | library (a library's
    #                          own barrier or signal, which manages its flags itself)
    width_bits: int = 0
    scope: str = ""  # atomics and asm: system | gpu | cta | ''
    order: str = ""  # relaxed | acquire | release | acq_rel | seq_cst | volatile | ''
    snippet: str = ""


@dataclass
class MemcpyCall:
    api: str  # cudaMemcpyPeerAsync, cudaMemcpyAsync, cuMemcpyPeerAsync, cudaMemcpy2DAsync, ...
    line: int
    function: str
    kind_arg: str = ""  # cudaMemcpyDeviceToDevice / cudaMemcpyDefault / ...
    peer: bool = False  # a peer pointer is an operand, or the API is a Peer copy
    host: bool = False  # a host transfer (DtoH / HtoD)
    snippet: str = ""

    @property
    def blocks_host(self) -> bool:
        """A synchronous copy to the host (`cudaMemcpy(..., cudaMemcpyDeviceToHost)`, `cuMemcpyDtoH`):
        the host thread waits for it, and so for the work queued before it."""
        return "Async" not in self.api and self.kind_arg in ("cudaMemcpyDeviceToHost", "DtoH")

    @property
    def few_numbers(self) -> bool:
        """The copy's size is one element or a few (`sizeof(int32_t)`, `2 * sizeof(int)`): a count
        or a flag read back, not the payload."""
        return re.search(r",\s*(?:\d{1,2}\s*\*\s*)?sizeof\s*\(\s*[\w:]+\s*\)\s*(?:\*\s*\d{1,2}\s*)?,", self.snippet) is not None


@dataclass
class Fence:
    kind: str  # __threadfence_system | __threadfence | __threadfence_block | fence.sc.sys
    #            | fence.acq_rel.sys | fence.acq_rel.gpu | membar.sys | atomic_thread_fence
    #            | fence.proxy.async
    line: int
    function: str
    scope: str = ""  # system | gpu | cta


@dataclass
class AsmStmt:
    line: int
    function: str
    mnemonics: list[str]  # e.g. ['ld.acquire.sys.global.u32']
    text: str = ""


@dataclass
class SpinLoop:
    line: int
    function: str
    condition: str  # source text of the loop condition
    has_exit: bool  # a bound, timeout, break/return/trap reachable inside the loop
    polls: str = ""  # pointer kind polled (signal_ptr, peer_ptr, local, unknown)
    order: str = ""  # how the poll reads: acquire | volatile | relaxed | atomic
    cached: bool = False  # a plain or read-only-cache read the compiler may hoist: the loop may never see the store


@dataclass
class ApiCall:
    """Any other call of interest in the CUDA source (sync, grid sync, nvshmem, TMA, multimem...)."""

    api: str
    line: int
    function: str
    category: str  # host_sync | grid_sync | nvshmem | nvshmem_sync | tma | nvls | cooperative
    #                | barrier | alloc | ipc | other
    snippet: str = ""


@dataclass
class Diagnostic:
    severity: str  # error | warning | fatal
    message: str
    line: int  # file line (0 when unknown)


@dataclass
class CudaFacts:
    source_index: int
    status: str = "ok"  # ok | partial (parsed with errors) | failed | skipped
    message: str = ""
    includes: list[str] = field(default_factory=list)
    missing_headers: list[str] = field(default_factory=list)  # includes the pass did not read
    diagnostics: list[Diagnostic] = field(default_factory=list)
    functions: list[Function] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    accesses: list[MemAccess] = field(default_factory=list)
    memcpys: list[MemcpyCall] = field(default_factory=list)
    fences: list[Fence] = field(default_factory=list)
    asm: list[AsmStmt] = field(default_factory=list)
    spin_loops: list[SpinLoop] = field(default_factory=list)
    api_calls: list[ApiCall] = field(default_factory=list)
    # pybind name -> C++ host function (m.def("name", &fn))
    bindings: dict[str, str] = field(default_factory=dict)
    # tail handling: kernels whose element loops are guarded by a bound (idx < n) check
    bounds_checked: list[str] = field(default_factory=list)
    # kernels indexing by a tile with no guard against the element count
    unguarded_tiles: list[int] = field(default_factory=list)  # file lines
    # [first, last] file lines of branches that do not run on PKB's run (the multicast-missing
    # or unaligned path of an `if (multicast_ptr != 0) ... else ...`)
    fallback_ranges: list[list[int]] = field(default_factory=list)
    seconds: float = 0.0


# --------------------------------------------------------------------------------------------
# PTX pass (one PtxFacts per CudaSource)
# --------------------------------------------------------------------------------------------


@dataclass
class PtxInstr:
    mnemonic: str  # full opcode with modifiers, e.g. 'ld.acquire.sys.global.u32'
    count: int
    lines: list[int] = field(default_factory=list)  # file lines from .loc, where known


@dataclass
class PtxEntry:
    name: str  # demangled kernel name
    mangled: str
    instructions: list[PtxInstr] = field(default_factory=list)  # only the interesting ones


@dataclass
class PtxFacts:
    source_index: int
    status: str = "ok"  # ok | failed | skipped
    message: str = ""
    entries: list[PtxEntry] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class StaticFacts:
    python: PythonFacts = field(default_factory=PythonFacts)
    cuda: list[CudaFacts] = field(default_factory=list)
    ptx: list[PtxFacts] = field(default_factory=list)
