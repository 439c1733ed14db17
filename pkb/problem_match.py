"""Which problem a candidate file answers: its file name and `solution()` parameters against the
references (PKB's catalog, or a PKB checkout's `reference/` folder).

A file name is `<id>_<name>_<backend>.py`, but neither part can be taken on trust. In PKB's initial
commit the generated files numbered 34 and up carry the reference's id plus one
(`34_ulysses_all_to_all_tensor_primitive_cuda.py` answers `33_ulysses_all_to_all_tensor_primitive`),
and some names are the model's own words for the problem (`18_rms_norm` answers `18_tp_rms_norm`,
`14_gemm_allscatter` answers `14_gemm_allgather`). A name is not proof either: `12_gemm_allgather`
is exactly reference 14's name, yet its `solution(A_local, B)` is reference 12's
(`allgather_gemm`). So the rules below run in order and the first that holds decides; each match
says which rule it was, so a report can show how sure it is.

    exact_stem      a reference is `<id>_<name>`
    shifted_name    the reference at id - 1 is `<name>` (PKB's generator numbered from 34 on one up)
    name_elsewhere  the reference named `<name>` sits at another id, and the file's parameters
                    agree with it better than with the reference at the file's id
    name_variant    `<name>` is a reference's name (at id or id - 1) plus a suffix:
                    `allreduce_alias_input` is a variant of `allreduce`
    token_set       the same words in another order, at id or id - 1 (`gemm_allgather_AT`)
    fuzzy_name      a close spelling at id or id - 1 (similarity >= FUZZY_MIN), the parameters first
    params          the one reference at id or id - 1 whose parameters are exactly the file's
    id_only         the reference at the file's id: the name says nothing
Without an id in the file name the same name rules run over every reference
(`name_only`, `name_variant`, `token_set`, `fuzzy_name`). No rule: `unmatched`, with what to do.
"""

from __future__ import annotations

import ast
import os
from dataclasses import asdict, dataclass
from difflib import SequenceMatcher
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

FUZZY_MIN = 0.6  # `rms_norm`~`tp_rms_norm` 0.84, `gemm_allscatter`~`gemm_allgather` 0.83
FUZZY_MIN_ANYWHERE = 0.8  # without an id the whole catalogue competes: a stricter bar

RULES = (
    "exact_stem", "shifted_name", "name_elsewhere", "name_variant", "token_set", "fuzzy_name",
    "params", "id_only", "name_only", "given", "unmatched",
)


@dataclass(frozen=True)
class Reference:
    """What matching needs of one reference: id, name and its solution()'s parameter names."""

    id: int
    name: str
    params: tuple[str, ...] | None = None  # None: not known

    @property
    def stem(self) -> str:
        return f"{self.id}_{self.name}"


@dataclass(frozen=True)
class ProblemMatch:
    rule: str  # one of RULES
    id: int | None  # the matched problem (None: unmatched)
    name: str  # the matched reference's name ('' when unmatched)
    file_id: int | None  # what the file name said
    file_name: str
    params: tuple[str, ...] | None  # the file's solution() parameters (None: not read)
    params_agree: bool | None  # the file's parameters are exactly the reference's (None: unknown)
    against: str  # catalog | checkout | registry | given
    detail: str = ""

    @property
    def stem(self) -> str:
        return f"{self.id}_{self.name}" if self.id is not None and self.name else ""

    @property
    def matched(self) -> bool:
        return self.rule != "unmatched"

    def to_data(self) -> dict[str, Any]:
        out = asdict(self)
        out["params"] = list(self.params) if self.params is not None else None
        out["stem"] = self.stem
        return out

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ProblemMatch:
        params = data.get("params")
        return cls(
            rule=data.get("rule", "unmatched"), id=data.get("id"), name=data.get("name", ""),
            file_id=data.get("file_id"), file_name=data.get("file_name", ""),
            params=tuple(params) if params is not None else None, params_agree=data.get("params_agree"),
            against=data.get("against", ""), detail=data.get("detail", ""),
        )


# ---- parameters ---------------------------------------------------------------------------------


def solution_params(tree: ast.Module | None) -> tuple[str, ...] | None:
    """Names of a module-level `def solution(...)`'s positional parameters; None when there is no
    such function or it takes `*args` (its names then say nothing)."""
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "solution":
            a = node.args
            if a.vararg is not None:
                return None
            return tuple(x.arg for x in [*a.posonlyargs, *a.args])
    return None


def params_score(file_params: tuple[str, ...] | None, ref_params: tuple[str, ...] | None) -> float | None:
    """Share of positions whose parameter names agree (1.0: the same list); None when unknown."""
    if file_params is None or ref_params is None:
        return None
    if tuple(file_params) == tuple(ref_params):
        return 1.0
    longest = max(len(file_params), len(ref_params))
    if longest == 0:
        return 1.0
    same = sum(1 for a, b in zip(file_params, ref_params) if a == b)
    return same / longest


# ---- references -----------------------------------------------------------------------------------


def catalog_references() -> dict[int, Reference]:
    """PKB's 87 problems as committed in problems/pkb_catalog.json (no checkout needed)."""
    from problems import catalog

    return {e.id: Reference(e.id, e.name, tuple(e.params)) for e in catalog.entries().values()}


def checkout_references(root: str | Path) -> dict[int, Reference]:
    """The references of a PKB checkout: `<root>/reference/<id>_<name>.py`, parameters read with
    `ast` (nothing is imported). Ids given twice keep the first file in name order. Read once per
    state of the folder (its files' names, sizes and times), not once per candidate.

    Raises LookupError when the folder holds no reference at all: every candidate would otherwise
    be "unmatched", blamed on its name."""
    ref_dir = Path(root).resolve() / "reference"
    try:
        # The folder's state: each file's name, size and time (a listing is cheap; parsing is not).
        stamp = tuple(sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(ref_dir) if e.name.endswith(".py")))
    except OSError as exc:
        raise LookupError(f"no reference/ folder readable under {Path(root).resolve()} ({exc.strerror})") from None
    refs = _read_references(str(ref_dir), stamp)
    if not refs:
        raise LookupError(f"no reference <id>_<name>.py under {ref_dir}: is the PKB checkout complete?")
    return dict(refs)


@lru_cache(maxsize=8)
def _read_references(ref_dir_name: str, stamp: tuple) -> dict[int, Reference]:
    out: dict[int, Reference] = {}
    ref_dir = Path(ref_dir_name)
    for path in sorted(ref_dir.glob("*.py")):
        head, _, name = path.stem.partition("_")
        if not head.isdigit() or not name:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
            tree = None
        out.setdefault(int(head), Reference(int(head), name, solution_params(tree)))
    return out


# ---- the rules ----------------------------------------------------------------------------------


def _tokens(name: str) -> frozenset[str]:
    return frozenset(t for t in name.lower().split("_") if t)


def _similarity(a: str, b: str) -> float:
    return SequenceMatcher(None, a.lower(), b.lower()).ratio()


def match_problem(
    file_id: int | None,
    file_name: str,
    params: Iterable[str] | None,
    references: Mapping[int, Reference],
    against: str = "catalog",
) -> ProblemMatch:
    """The reference a file answers, by the rules of this module's docstring, in order."""
    params = tuple(params) if params is not None else None
    refs = dict(references)

    def found(rule: str, ref: Reference, detail: str = "") -> ProblemMatch:
        score = params_score(params, ref.params)
        return ProblemMatch(rule, ref.id, ref.name, file_id, file_name, params, None if score is None else score == 1.0, against, detail)

    def score(ref: Reference) -> float:
        s = params_score(params, ref.params)
        return -1.0 if s is None else s  # unknown parameters rank below any known agreement

    by_name = [r for r in refs.values() if r.name == file_name]
    if file_id is not None:
        here = refs.get(file_id)
        near = [r for r in (here, refs.get(file_id - 1)) if r is not None]
        if here is not None and here.name == file_name:
            return found("exact_stem", here)
        prev = refs.get(file_id - 1)
        if prev is not None and prev.name == file_name:
            return found("shifted_name", prev, f"file id {file_id} is the reference's id + 1")
        for ref in by_name:
            if here is None or score(ref) > score(here):
                why = "no reference at the file's id" if here is None else f"its parameters agree better than {here.stem}'s"
                return found("name_elsewhere", ref, why)
        pool = near
    else:
        if by_name:
            return found("name_only", by_name[0])
        pool = list(refs.values())

    variants = [r for r in pool if file_name.startswith(r.name + "_")]
    if variants:
        best = max(variants, key=lambda r: (len(r.name), r.id == file_id))
        return found("name_variant", best, f"'{file_name}' is '{best.name}' plus a suffix")

    toks = _tokens(file_name)
    same_words = [r for r in pool if toks and _tokens(r.name) == toks]
    if same_words:
        best = max(same_words, key=lambda r: (score(r), r.id == file_id))
        if file_id is not None or len(same_words) == 1 or score(best) > max(score(r) for r in same_words if r is not best):
            return found("token_set", best, "the same words in another order")

    bar = FUZZY_MIN if file_id is not None else FUZZY_MIN_ANYWHERE
    close = [(r, _similarity(file_name, r.name)) for r in pool]
    close = [(r, s) for r, s in close if s >= bar]
    if close:
        ranked = sorted(close, key=lambda rs: (score(rs[0]), rs[1], rs[0].id == file_id), reverse=True)
        best, sim = ranked[0]
        tie = len(ranked) > 1 and (score(ranked[1][0]), ranked[1][1]) == (score(best), sim)
        if not tie:
            return found("fuzzy_name", best, f"name similarity {sim:.2f} to '{best.name}'")

    if file_id is not None:
        exact = [r for r in near if params is not None and r.params == params]
        if len(exact) == 1:
            return found("params", exact[0], "its solution() parameters are exactly this reference's")
        if here is not None:
            return found("id_only", here, f"the name '{file_name}' matches no reference; taken by id")

    what = f"'{file_id}_{file_name}'" if file_id is not None else f"'{file_name}'"
    return ProblemMatch(
        "unmatched", file_id, "", file_id, file_name, params, None, against,
        f"no reference matches {what} by name or id; name the problem with --problem ID" if params is not None else
        f"no reference matches {what} by name or id, and it has no solution() whose parameters could tell: "
        "if it is a candidate, name the problem with --problem ID (a helper module is no candidate)",
    )


def given(problem_id: int, references: Mapping[int, Reference], file_id: int | None, file_name: str, params: Iterable[str] | None) -> ProblemMatch:
    """The problem the user named (--problem ID), whatever the file name says."""
    params = tuple(params) if params is not None else None
    ref = references.get(problem_id)
    score = params_score(params, ref.params if ref else None)
    return ProblemMatch("given", problem_id, ref.name if ref else "", file_id, file_name, params, None if score is None else score == 1.0, "given")
