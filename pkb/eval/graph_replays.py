"""Library collectives inside CUDA graphs: counted again at every replay.

A collective captured into a torch.cuda.CUDAGraph runs again at every `replay()` with no
torch.distributed function, ProcessGroup method or dispatcher operator in between, and no
backend sequence number advanced: the counter's wrappers see it once, at capture, or never
inside the candidate's calls when the capture happened at import. The ledger notes, while a
graph is being captured, which library calls the capture recorded; the counter adds them again
at every replay of that graph.

    GraphLedger     which graph (by identity) captured which counted calls; a replay of a graph
                    whose capture was never seen (begun past the wrappers) counts as one
                    collective of unknown content, UNSEEN_CAPTURE: what it runs cannot be told,
                    and a candidate only gets there by going around the harness
    graph_classes   torch's CUDA graph classes, whose GRAPH_METHODS the counter wraps

Plain bookkeeping: no CUDA is needed to exercise it (a stand-in class with the same three
methods is enough), which is how the CPU tests drive it.
"""

from __future__ import annotations

import weakref
from typing import Any

# The methods of a CUDA graph the counter wraps: the two ends of a capture, and the replay.
GRAPH_METHODS = ("capture_begin", "capture_end", "replay")
# The name a replay of a graph captured out of the counter's sight is counted under.
UNSEEN_CAPTURE = "cuda_graph_replay_unseen_capture"


class GraphLedger:
    """The counted calls each CUDA graph captured, keyed by the graph's identity."""

    def __init__(self) -> None:
        self.capturing: list[int] = []  # graphs between capture_begin and capture_end, innermost last
        self.captured: dict[int, dict[str, int]] = {}

    def begin(self, graph: Any) -> None:
        """A capture into `graph` starts: what it held before is gone (a graph is recaptured
        only after reset)."""
        key = id(graph)
        if key in self.capturing:
            return
        self.capturing.append(key)
        self.captured[key] = {}
        try:  # forget it with the graph, so a later graph at the same address starts clean
            weakref.finalize(graph, self.captured.pop, key, None)
        except TypeError:
            pass  # not weak-referenceable: kept (a rank makes few graphs)

    def end(self, graph: Any) -> None:
        key = id(graph)
        if key in self.capturing:
            self.capturing.remove(key)

    def note(self, name: str) -> None:
        """A counted library call ran: recorded in the graph being captured, if any."""
        if self.capturing:
            inside = self.captured.setdefault(self.capturing[-1], {})
            inside[name] = inside.get(name, 0) + 1

    def replayed(self, graph: Any) -> dict[str, int]:
        """The counted calls one replay of `graph` runs again."""
        inside = self.captured.get(id(graph))
        if inside is None:
            return {UNSEEN_CAPTURE: 1}
        return dict(inside)


def graph_classes() -> list[type]:
    """torch.cuda.CUDAGraph and its C++ base (the Python class's methods call the base's; a
    candidate may call either); present, with no working methods, in a CPU build."""
    try:
        import torch
        import torch.cuda.graphs as graphs
    except Exception:
        return []
    out = []
    for cls in (getattr(graphs, "CUDAGraph", None), getattr(torch._C, "_CUDAGraph", None)):
        if isinstance(cls, type) and cls not in out:
            out.append(cls)
    return out
