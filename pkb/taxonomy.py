"""The label vocabulary of ../shared/TAXONOMY.md, as constants.

Every label, outcome and cause the tool writes comes from these tuples; `check_label` is how
stages refuse a word that is not in the vocabulary (a typo would otherwise silently become a new
category in every report).
"""

from __future__ import annotations

from typing import Iterable

AXES = ("mechanism", "sync", "overlap")

MECHANISM = (
    "copy_engine",
    "sm_load",
    "sm_store",
    "sm_atomic",
    "tma",
    "nvls",
    "nvshmem",
    "nccl",
    "host_staging",
    "none",
)

SYNC = (
    "symm_barrier",
    "device_flags",
    "host_sync",
    "stream_events",
    "grid_sync",
    "nvshmem_sync",
    "nccl_implicit",
    "none",
)

# Memory-ordering detail recorded for `device_flags`.
ORDERING = ("release_acquire", "fence_system", "volatile_only", "relaxed")

OVERLAP = ("none", "multi_stream", "chunked_pipeline", "fused_kernel", "n/a")

VOCABULARY = {
    "mechanism": MECHANISM,
    # Mechanisms that run only on a branch PKB's run does not take (a world_size == 1 shortcut, a
    # float32 or multicast-missing fallback): reported beside the axes, never in them.
    "fallback": MECHANISM,
    "sync": SYNC,
    "overlap": OVERLAP,
    "ordering": ORDERING,
}

# `unknown` is an honest answer on every axis (no pass could support a label).
UNKNOWN = "unknown"

PASSES = ("python", "clang", "ptx", "trace", "ncu")

OUTCOMES = (
    "compile_error",
    "load_error",
    "runtime_error",
    "hang",
    "wrong_result",
    "suspect",
    "slower",
    "faster",
)

# wrong_result subtypes, most telling first: where several hold for one case, the first names it.
# The evaluation, the emulation and the diagnosis all rank by this one order.
# "problem_specific" (a problem module's own hypothesis, named outside the vocabulary) sits where
# any unnamed hypothesis ranks.
WRONG_RESULT_PRIORITY = (
    "shape_mismatch",
    "dtype_mismatch",
    "nan_inf",
    "unwritten",
    "local_only",
    "missing_peer",
    "stale",
    "scaled",
    "tail_only",
    "problem_specific",
    "nondeterministic",
    "rank_subset",
    "tolerance",
)
# A case with one of these decides the candidate's subtype whatever the other cases say: nothing
# about data movement can be read from an output of the wrong shape, type, or with NaN in it.
DOMINANT_WRONG_RESULT = ("shape_mismatch", "dtype_mismatch", "nan_inf")


def wrong_result_rank(subtype: str) -> int:
    """Position in WRONG_RESULT_PRIORITY; a name outside it ranks as problem_specific."""
    if subtype in WRONG_RESULT_PRIORITY:
        return WRONG_RESULT_PRIORITY.index(subtype)
    return WRONG_RESULT_PRIORITY.index("problem_specific")


def most_telling(held: Iterable[str]) -> str:
    """The first of the subtypes that hold for one case ('' when none holds)."""
    named = [s for s in held if s]
    return min(named, key=lambda s: (wrong_result_rank(s), s)) if named else ""


def overall_wrong_result(case_subtypes: Iterable[str]) -> str:
    """The candidate's subtype from its wrong cases: a dominant subtype anywhere decides; else the
    most common, ties to the more telling."""
    named = [s for s in case_subtypes if s]
    for dominant in DOMINANT_WRONG_RESULT:
        if dominant in named:
            return dominant
    if not named:
        return ""
    counts = {s: named.count(s) for s in set(named)}
    top = max(counts.values())
    return most_telling(s for s, c in counts.items() if c == top)


SLOWNESS_CAUSES = (
    "host_sync_in_hot_path",
    "setup_in_hot_path",
    "nccl_fallback",
    "serialized",
    "launch_bound",
    "small_transfers",
    "low_link_utilization",
    "extra_copies",
    "low_occupancy",
)

SEVERITIES = ("error", "warning", "info")


def check_label(axis: str, value: str) -> str:
    """Return `value` if it is a word of `axis`, else raise ValueError naming the vocabulary."""
    allowed = VOCABULARY.get(axis)
    if allowed is None:
        raise ValueError(f"unknown axis {axis!r}; axes are {sorted(VOCABULARY)}")
    if value != UNKNOWN and value not in allowed:
        raise ValueError(f"{value!r} is not a {axis} label; allowed: {', '.join(allowed)}")
    return value


def check_pass(name: str) -> str:
    if name not in PASSES:
        raise ValueError(f"{name!r} is not a pass name; passes are {', '.join(PASSES)}")
    return name
