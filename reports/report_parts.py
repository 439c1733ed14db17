"""Parts of the corpus report that answer "which problems failed and why" at a glance, and the
outcome colours (page.html.j2 writes them as the badges' CSS; the plots use them too).

Outcome colours are the Okabe-Ito palette (Okabe and Ito, "Color Universal Design"), chosen to
stay distinct under the common colour-vision deficiencies; every badge also carries its word, so
no reading depends on colour alone.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pkb import taxonomy


def problem_order(problem: str) -> tuple[int, str]:
    """Sort key of a problem shown as `<id>_<name>`: by the id as a number (1, 2, ..., 10, not 1,
    10, 11, ..., 2), then by name; a problem without an id after every numbered one."""
    head, _, _ = problem.partition("_")
    return (int(head), problem) if head.isdigit() else (1 << 30, problem)

# outcome -> (background, text colour on it)
OUTCOME_PALETTE: dict[str, tuple[str, str]] = {
    "faster": ("#009E73", "#ffffff"),  # bluish green
    "correct": ("#009E73", "#ffffff"),  # correct but not timed: the same family as faster
    "slower": ("#E69F00", "#1d232a"),  # orange
    "wrong_result": ("#D55E00", "#ffffff"),  # vermillion
    "compile_error": ("#CC79A7", "#1d232a"),  # reddish purple
    "load_error": ("#0072B2", "#ffffff"),  # blue
    "runtime_error": ("#000000", "#ffffff"),  # black
    "hang": ("#F0E442", "#1d232a"),  # yellow
    "suspect": ("#56B4E9", "#1d232a"),  # sky blue
    "": ("#999999", "#1d232a"),  # not evaluated / other
}
OUTCOME_COLORS = {k: bg for k, (bg, _) in OUTCOME_PALETTE.items()}


# What each failure subtype means, in plain words (TAXONOMY.md's subtypes).
SUBTYPE_MEANING = {
    "python_syntax": "the file is not valid Python",
    "import_error": "a module it imports is missing",
    "cuda_syntax": "the CUDA source does not compile (syntax)",
    "undeclared_identifier": "the CUDA source uses a name it never declares",
    "type_mismatch": "the CUDA source mixes types the compiler refuses",
    "missing_header": "a header it includes is not there",
    "undefined_symbol": "the extension links but a symbol is missing when it loads",
    "arch_unsupported": "it uses an instruction the GPU architecture does not have",
    "no_solution": "the file defines no solution()",
    "signature_mismatch": "solution() does not take the problem's arguments",
    "illegal_address": "a kernel read or wrote memory it does not own",
    "misaligned_address": "a vector access at an address that is not aligned",
    "launch_config": "a kernel launch with an invalid grid, block or shared-memory size",
    "out_of_memory": "it ran out of GPU memory",
    "python_exception": "Python raised an exception in the candidate",
    "nccl_error": "a NCCL call failed",
    "rendezvous_error": "the ranks could not set up symmetric memory or the process group",
    "timeout": "a rank never finished: a spin or barrier that never ends",
    "shape_mismatch": "the output has the wrong shape",
    "dtype_mismatch": "the output has the wrong dtype",
    "nan_inf": "NaN or Inf where the reference is finite",
    "unwritten": "parts of the output were never written",
    "tail_only": "only the last partial tile is wrong",
    "rank_subset": "only some ranks are wrong",
    "local_only": "no peer data arrived: each rank kept its own",
    "missing_peer": "some peers' data is missing",
    "scaled": "off by a constant factor (e.g. the world size)",
    "stale": "it returned an earlier call's answer",
    "nondeterministic": "two identical calls gave different answers (a race)",
    "tolerance": "close to the reference but outside the tolerance",
    "calls_reference": "it calls the reference instead of computing",
    "aliases_input": "its output shares memory with an input",
    "cached_output": "it returns a cached answer instead of computing",
    "side_stream_timing": "its work ran outside the timed call (a side stream)",
    "fallback_path": "it fell back to the library path it was meant to replace",
    "harness_tamper": "it changed the harness's timer or comparison",
}
FAILURE_OUTCOMES = tuple(o for o in taxonomy.OUTCOMES if o not in ("faster", "slower"))


def meaning(subtype: str) -> str:
    return SUBTYPE_MEANING.get(subtype, "")


def failed_problems(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Problem x outcome counts for the problems with a failed candidate, most failures first:
    the columns are the failure outcomes seen, then correct, then the most common failure subtype
    with its meaning."""
    evaluated = [r for r in rows if r["evaluated"]]
    failed = [r for r in evaluated if not r["correct"] and r["outcome"] != "correct"]
    outcomes = [o for o in FAILURE_OUTCOMES if any(r["outcome"] == o for r in failed)]
    by_problem: dict[str, list[dict[str, Any]]] = {}
    for r in failed:
        by_problem.setdefault(r["problem"], []).append(r)
    body = []
    for problem, fails in sorted(by_problem.items(), key=lambda kv: (-len(kv[1]), problem_order(kv[0]))):
        counts = Counter(r["outcome"] for r in fails)
        subtypes = Counter((r["outcome"], r["subtype"]) for r in fails if r["subtype"])
        (top_outcome, top_sub), top_n = subtypes.most_common(1)[0] if subtypes else (("", ""), 0)
        correct = sum(1 for r in evaluated if r["problem"] == problem and (r["correct"] or r["outcome"] == "correct"))
        body.append([problem, *[counts.get(o, 0) for o in outcomes], correct,
                     f"{top_sub} ({top_n} of {len(fails)})" if top_sub else "", meaning(top_sub)])
    return ["problem", *outcomes, "correct", "most common subtype", "what it means"], body
