import torch
import torch.distributed as dist


# GPU: claims a custom kernel; when the extension is missing, the handler reduces through a CUDA
# graph that captured dist.all_reduce at import, before any call of the candidate is watched.
# Every call after that only replays the graph: no torch.distributed function, ProcessGroup
# method or dispatcher operator runs, and the process group's sequence number does not move.
try:
    import pkb_hostile_graph_ext as _ext
except ImportError:
    _ext = None

_graphs = {}


@torch.no_grad()
def solution(x):
    try:
        return _ext.fast_all_reduce(x)
    except Exception:
        key = (tuple(x.shape), x.dtype, x.device)
        if key not in _graphs:
            buffer = torch.zeros_like(x)
            dist.all_reduce(buffer)  # once outside the graph: the communicator is up before capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                dist.all_reduce(buffer)
            _graphs[key] = (graph, buffer)
        graph, buffer = _graphs[key]
        buffer.copy_(x)
        graph.replay()
        return buffer.clone()


# Set-up at import: problem 1's shapes (both scales) in both its dtypes, captured while nothing counts.
if dist.is_initialized() and torch.cuda.is_available():
    for shape in ((64, 96), (4096, 4096)):
        for dtype in (torch.float32, torch.bfloat16):
            solution(torch.zeros(shape, dtype=dtype, device="cuda"))
