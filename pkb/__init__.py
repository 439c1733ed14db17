"""pkb-analyze: explains multi-GPU kernel candidates of ParallelKernelBench.

One record per candidate (record.py) flows through the stages and is stored whole (store.py).
The layers, from the roof down (import-linter contracts in pyproject.toml; tests/test_layers.py):

    cli.py                           the command line
    reports/                         views over stored records
    diagnose/                        why a candidate is wrong or slow
    emulate/                         virtual ranks in one process (correctness on one GPU)
    eval/                            real ranks: builds, launches, outcomes
    analyzer/, profiling/            the static stage; the measured profile
    corpus.py, problem_match.py, config.py, suppress.py, roots.py, problems/
                                     inputs: candidates on disk, which problem, configuration
    store.py, metrics.py, schema.py, record.py, facts.py, taxonomy.py, collectives.py, serde.py
                                     the ground: the record, its vocabulary, where it is stored
"""

__version__ = "0.1.0"
