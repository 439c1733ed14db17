"""The static stage: what a candidate does, read from its text without running it.

A record goes through `pipeline.StaticAnalyzer` (python -> clang -> ptx -> classify -> rules) and
comes out with its labels (TAXONOMY's mechanism, sync, ordering, overlap, fallback), its kernels
and its rule findings, each with file:line evidence. The passes write facts (pkb.facts); only
`classify` turns facts into labels and only the rules raise findings.

    pipeline.py            the stages in order, file by file, here or in a process pool
    static_cache.py        the two caches: pass facts by content, finished records by content and path
    python_pass.py         the Python file, with the standard `ast`; its parts: python_api (which
                           calls), python_reach (what solution() reaches, set-up or timed),
                           python_cache (run-once guards), python_run (branches PKB's run takes),
                           python_pointers, python_sources (CUDA sources and bindings),
                           python_triton, python_asserts; strings.py evaluates string expressions
    clang_pass.py          each CUDA source, with libclang; its parts: clang_ast, cuda_pointers,
                           cuda_accesses, cuda_launches, cuda_spin_loops, cuda_tail_scan,
                           cuda_regex_scan (no libclang), cuda_calls, cuda_text; and idioms read
                           from the text: kittens, cuda_branches, cuda_waits, tail_guards, brackets
    ptx_pass.py            what nvcc really emits, where the source leaves a label open; its parts:
                           cpp_scan, device_tu, nvcc, ptx_reader
    ptx_ops.py             what a PTX instruction means: the one decoder, for every pass
    classify.py            facts -> labels with evidence
    rules/                 the rule catalogue, one module per rule (id, message, rationale, fix)
"""
