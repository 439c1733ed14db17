"""pkb-analyze: explains multi-GPU kernel candidates of ParallelKernelBench."""

__version__ = "0.1.0"
