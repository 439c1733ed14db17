"""Where a launch gets its reference, inputs and tolerance: our registry, a problem file, or PKB.

`resolve` runs in the evaluating process and says which source a candidate's problem comes from;
`load` runs inside each rank and returns callables. With a PKB checkout the reference is
`<root>/reference/<stem>.py` and the inputs come from PKB's own `create_input_tensor`, so results
compare one to one with PKB's harness.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping

from pkb.eval.options import PKB_SHAPE, PKB_TOLERANCE, EvalOptions

DEFAULT_DTYPE = "bfloat16"  # PKB's default


@dataclass
class ProblemRef:
    """What the evaluating process knows about a problem before launching."""

    id: int
    stem: str
    job_problem: dict[str, Any]  # the JobSpec.problem entry
    dtypes: tuple[str, ...]
    category: str = ""
    match: dict[str, Any] = field(default_factory=dict)  # pkb.problem_match.ProblemMatch.to_data()
    # The fewest ranks the problem's reference runs at, where PKB's catalog says (and why).
    min_world_size: int = 1
    min_world_size_why: str = ""


@dataclass
class ProblemSource:
    """What a rank uses: the reference, an input factory and the tolerance for the dtype."""

    id: int
    reference: Callable[..., Any]
    make_inputs: Callable[[int, int, int, Any, Any], tuple]  # (rank, ws, trial, device, dtype)
    tolerance: tuple[float, float]
    module: ModuleType | None = None


def salted_inputs(make_inputs: Callable[[int, int, int, Any, Any], tuple], key: bytes | None) -> Callable[[int, int, int, Any, Any], tuple]:
    """`make_inputs` drawing under a launch's secret `key`: our problems' seeds
    (problems._common.salted) and every `torch.manual_seed` call made while it runs (PKB's own
    factory seeds the global generator) are hashed with the key. Ranks that share a seed (a
    replicated weight drawn from rank 0's) still share data, but a candidate cannot rebuild a
    peer's inputs from PKB's public seed formula, nor by calling the factory itself for another
    rank. The key comes from rank 0 before the candidate loads (pkb.eval.worker) and lives only in
    the ranks' memory until the rank's last draw; None: PKB's plain seeds."""
    if key is None:
        return make_inputs
    import torch

    from problems._common import salted, salted_seed

    def draw(rank: int, ws: int, trial: int, device: Any, dtype: Any) -> tuple:
        plain = torch.manual_seed

        def manual_seed(seed: int) -> Any:
            return plain(salted_seed(int(seed), key))

        torch.manual_seed = manual_seed  # restored below; no candidate code runs meanwhile
        try:
            with salted(key):
                return make_inputs(rank, ws, trial, device, dtype)
        finally:
            torch.manual_seed = plain

    return draw


def resolve(problem_id: int | None, problem_name: str, options: EvalOptions, match: Mapping[str, Any] | None = None) -> ProblemRef:
    """The problem a candidate answers and where its reference comes from.

    `match` is the record's `problem_match` (the file name's id and name and its solution()
    parameters, matched against PKB's catalog when the file was read). With --pkb-root the same
    rules run again against the checkout's own reference/ folder; --problem ID overrides both.
    Raises LookupError (with a sentence saying what to do) when the problem cannot be found.
    """
    from pkb.problem_match import ProblemMatch, catalog_references, checkout_references, given, match_problem

    file_id = match.get("file_id", problem_id) if match else problem_id
    file_name = match.get("file_name", problem_name) if match else problem_name
    params = match.get("params") if match else None
    root = Path(options.pkb_root).resolve() if options.pkb_root else None
    if root is not None:
        refs = checkout_references(root)
        found = given(options.problem, refs, file_id, file_name, params) if options.problem is not None else match_problem(file_id, file_name, params, refs, "checkout")
    elif options.problem is not None:
        found = given(options.problem, catalog_references(), file_id, file_name, params)
    elif match:
        found = ProblemMatch.from_data(match)
    else:
        found = match_problem(file_id, file_name, params, catalog_references(), "catalog")
    pid = found.id
    facts = found.to_data()
    min_ws, min_why = _catalog_min_world_size(found.stem)

    for key in (pid, file_id):  # a problem module from a file wins, by the matched id or the file's
        if key is not None and key in options.problem_files:
            path = str(Path(options.problem_files[key]).resolve())
            mod = _import_file(path, f"pkb_problem_{key}")
            spec = mod.PROBLEM
            return ProblemRef(key, spec.stem, {"kind": "file", "id": key, "path": path}, tuple(spec.dtypes), spec.category, facts)
    if not found.matched or pid is None:
        raise LookupError(found.detail or "no problem id (the file name does not start with '<id>_'); name the problem with --problem ID")
    if root is not None:
        ref = root / "reference" / f"{found.stem}.py"
        if not ref.is_file():
            raise LookupError(f"no reference {found.stem}.py under {root / 'reference'}")
        return ProblemRef(
            id=pid,
            stem=ref.stem,
            job_problem={
                "kind": "pkb",
                "id": pid,
                "root": str(root),
                "stem": ref.stem,
                "shape": list(options.pkb_shape or PKB_SHAPE),
            },
            dtypes=(DEFAULT_DTYPE,),
            match=facts,
            min_world_size=min_ws,
            min_world_size_why=min_why,
        )
    import problems

    try:
        spec = problems.spec(pid)
    except Exception:
        spec = None
    if spec is None:
        how = f" (matched by {found.rule})" if found.rule not in ("exact_stem", "given") else ""
        raise LookupError(
            f"problem {found.stem or pid}{how} is not in problems/; evaluate it against a PKB checkout with --pkb-root PATH"
        )
    return ProblemRef(pid, spec.stem, {"kind": "registry", "id": pid}, tuple(spec.dtypes), spec.category, facts, min_ws, min_why)


def _catalog_min_world_size(stem: str) -> tuple[int, str]:
    """(min world size, why) from PKB's catalog for the problem of that exact stem; (1, '') where
    the catalog says nothing (a checkout numbered otherwise, a catalog without the fact)."""
    if not stem:
        return 1, ""
    from problems import catalog

    entry = next((e for e in catalog.entries().values() if e.stem == stem), None)
    return int(getattr(entry, "min_world_size", 1) or 1), str(getattr(entry, "min_world_size_why", "") or "")


def load(job_problem: dict[str, Any], dtype_name: str, scale: str, tolerance: tuple[float, float] | None) -> ProblemSource:
    kind = job_problem["kind"]
    pid = int(job_problem["id"])
    if kind == "pkb":
        root = job_problem["root"]
        _put_checkout_utils_first(root)
        from utils.input_output_tensors import create_input_tensor  # PKB's own factory

        ref_mod = _import_file(str(Path(root) / "reference" / f"{job_problem['stem']}.py"), "pkb_reference")
        shape = tuple(job_problem.get("shape") or PKB_SHAPE)

        def make_inputs(rank: int, ws: int, trial: int, device: Any, dtype: Any) -> tuple:
            return create_input_tensor(rank, ws, pid, shape, dtype, trial=trial, device=device)

        return ProblemSource(pid, ref_mod.solution, make_inputs, tolerance or PKB_TOLERANCE, ref_mod)

    if kind == "file":
        mod = _import_file(job_problem["path"], f"pkb_problem_{pid}")
    else:
        import problems

        mod = problems.get(pid).module
    spec = getattr(mod, "PROBLEM", None)
    tol = tolerance or (spec.tolerances.get(dtype_name) if spec is not None else None) or PKB_TOLERANCE
    factory = mod.make_inputs
    takes_scale = _accepts(factory, "scale")

    def make_inputs(rank: int, ws: int, trial: int, device: Any, dtype: Any) -> tuple:
        if takes_scale:
            out = factory(rank, ws, trial, device, dtype, scale=scale)
        else:
            out = factory(rank, ws, trial, device, dtype)
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)

    return ProblemSource(pid, mod.solution, make_inputs, tuple(tol), mod)


def _put_checkout_utils_first(root: str) -> None:
    """Make `utils.*` resolve to this checkout's. PKB's `utils` has no __init__.py (a namespace
    package), so a regular `utils` package anywhere on the path wins over it: our stand-in
    (pkb.eval.shims, put there for an earlier candidate without a checkout in this process) or
    another checkout. Take ours off the path, put the root first and forget a cached `utils`
    from elsewhere; provide_for_candidate adds our cuda_helpers later if the checkout lacks it."""
    from pkb.eval.shims import CANDIDATE_PATH

    while CANDIDATE_PATH in sys.path:
        sys.path.remove(CANDIDATE_PATH)
    if sys.path[:1] != [root]:
        if root in sys.path:
            sys.path.remove(root)
        sys.path.insert(0, root)
    cached = sys.modules.get("utils")
    if cached is None:
        return
    wanted = str((Path(root) / "utils").resolve())
    if any(str(Path(p).resolve()) == wanted for p in getattr(cached, "__path__", ())):
        return
    for name in [n for n in sys.modules if n == "utils" or n.startswith("utils.")]:
        del sys.modules[name]


def _import_file(path: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _accepts(fn: Callable[..., Any], param: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return param in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
