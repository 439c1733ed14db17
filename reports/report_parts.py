"""Parts of the corpus report that answer "which problems failed and why" at a glance, the
outcome colours, and the sortable candidates table.

Outcome colours are the Okabe-Ito palette (Okabe and Ito, "Color Universal Design"), chosen to
stay distinct under the common colour-vision deficiencies; every badge also carries its word, so
no reading depends on colour alone.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pkb import taxonomy

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


def badge_css() -> str:
    return "\n".join(f".o-{k or 'none'} {{ background: {bg}; color: {fg}; }}" for k, (bg, fg) in OUTCOME_PALETTE.items())


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
    for problem, fails in sorted(by_problem.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        counts = Counter(r["outcome"] for r in fails)
        subtypes = Counter((r["outcome"], r["subtype"]) for r in fails if r["subtype"])
        (top_outcome, top_sub), top_n = subtypes.most_common(1)[0] if subtypes else (("", ""), 0)
        correct = sum(1 for r in evaluated if r["problem"] == problem and (r["correct"] or r["outcome"] == "correct"))
        body.append([problem, *[counts.get(o, 0) for o in outcomes], correct,
                     f"{top_sub} ({top_n} of {len(fails)})" if top_sub else "", meaning(top_sub)])
    return ["problem", *outcomes, "correct", "most common subtype", "what it means"], body


SORT_SCRIPT = """
function pkbSort(th) {
  var table = th.closest('table'), body = table.tBodies[0], col = th.cellIndex;
  var dir = th.dataset.dir === 'asc' ? 'desc' : 'asc';
  Array.prototype.forEach.call(th.parentNode.cells, function (c) { delete c.dataset.dir; });
  th.dataset.dir = dir;
  var key = function (row) {
    var cell = row.cells[col], v = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
    var n = parseFloat(v);
    return v !== '' && !isNaN(n) && isFinite(v) ? [0, n] : [v === '' ? 2 : 1, v.toLowerCase()];
  };
  var rows = Array.prototype.slice.call(body.rows);
  rows.sort(function (a, b) {
    var x = key(a), y = key(b);
    if (x[0] !== y[0]) return x[0] - y[0];  // numbers, then words, then empty cells, either way
    var c = x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0;
    return dir === 'asc' ? c : -c;
  });
  rows.forEach(function (r) { body.appendChild(r); });
}
function pkbMeasure() {
  var t = document.getElementById('cand-table');
  if (t) { document.body.dataset.candWidth = String(t.scrollWidth); document.body.dataset.candVisible = String(t.clientWidth); }
}
window.addEventListener('load', pkbMeasure);
"""

SORT_CSS = """
.card.wide { grid-column: 1 / -1; }
table.sortable th { cursor: pointer; user-select: none; white-space: nowrap; }
table.sortable th::after { content: " \\2195"; color: var(--muted); font-weight: 400; }
table.sortable th[data-dir="asc"]::after { content: " \\2191"; } table.sortable th[data-dir="desc"]::after { content: " \\2193"; }
#cand-table { display: table; table-layout: fixed; width: 100%; }
#cand-table td { overflow-wrap: break-word; } #cand-table .badge { white-space: nowrap; }
#cand-table col.c-problem { width: 13%; } #cand-table col.c-model { width: 9%; } #cand-table col.c-candidate { width: 16%; }
#cand-table col.c-outcome { width: 10%; } #cand-table col.c-subtype { width: 9%; } #cand-table col.c-speedup { width: 8%; }
#cand-table col.c-mechanism { width: 10%; } #cand-table col.c-sync { width: 10%; } #cand-table col.c-overlap { width: 8%; }
#cand-table col.c-findings { width: 7%; }
"""


def breakable(html_text: str) -> str:
    """Escaped text that may wrap after its underscores (long problem and file names)."""
    return html_text.replace("_", "_<wbr>")


def candidates_table(headers: list[str], rows: list[list[str]], sort_keys: list[list[Any]]) -> str:
    """The candidates table: fixed column widths that fit the page, every header sorts (click),
    cells with a sort key sort by it (speedups as numbers, empty last)."""
    from reports.html_parts import esc

    cols = "".join(f'<col class="c-{esc(h)}">' for h in headers)
    head = "".join(f'<th onclick="pkbSort(this)" title="sort by {esc(h)}">{esc(h)}</th>' for h in headers)
    body = []
    for cells, keys in zip(rows, sort_keys):
        tds = "".join(f'<td data-sort="{esc(k)}">{c}</td>' if k is not None else f"<td>{c}</td>" for c, k in zip(cells, keys))
        body.append(f"<tr>{tds}</tr>")
    return f'<table id="cand-table" class="sortable"><colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
