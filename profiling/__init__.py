"""The profiling stage: what a candidate's calls did on the GPU, as measured.

    hooks.py          what the evaluation calls: a hook inside each rank, a summary in the parent
    capture.py        recording: Kineto (torch.profiler), CUPTI, and the NVTX ranges (ranges.py)
    trace.py          a recorded trace read once into pandas frames
    analyze.py        pure functions of a trace: communication, overlap, per-kernel times
    merge.py          the ranks' traces of one launch merged into one Perfetto-ready trace
    timeline.py       a picture of one call, drawn from a stored trace (for the views)
    synthetic.py, record_fixtures.py, gpu_check.py, tma_check.py   fixtures and checks on a GPU

Its results reach the record's `profile` part, stored with the evaluation (pkb.store).
"""
