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
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

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


@dataclass
class ProblemSource:
    """What a rank uses: the reference, an input factory and the tolerance for the dtype."""

    id: int
    reference: Callable[..., Any]
    make_inputs: Callable[[int, int, int, Any, Any], tuple]  # (rank, ws, trial, device, dtype)
    tolerance: tuple[float, float]
    module: ModuleType | None = None


def resolve(problem_id: int | None, problem_name: str, options: EvalOptions) -> ProblemRef:
    """Raises LookupError (with a sentence) when the problem cannot be found."""
    if problem_id is None:
        raise LookupError("no problem id (the file name does not start with '<id>_')")
    if options.pkb_root:
        root = Path(options.pkb_root).resolve()
        ref = _pkb_reference(root, problem_id, problem_name)
        return ProblemRef(
            id=problem_id,
            stem=ref.stem,
            job_problem={
                "kind": "pkb",
                "id": problem_id,
                "root": str(root),
                "stem": ref.stem,
                "shape": list(options.pkb_shape or PKB_SHAPE),
            },
            dtypes=(DEFAULT_DTYPE,),
        )
    if problem_id in options.problem_files:
        path = str(Path(options.problem_files[problem_id]).resolve())
        mod = _import_file(path, f"pkb_problem_{problem_id}")
        spec = mod.PROBLEM
        return ProblemRef(problem_id, spec.stem, {"kind": "file", "id": problem_id, "path": path}, tuple(spec.dtypes), spec.category)
    import problems

    try:
        spec = problems.spec(problem_id)
    except Exception:
        spec = None
    if spec is None:
        raise LookupError(f"problem {problem_id} is not in problems/ (and no PKB checkout was given)")
    return ProblemRef(problem_id, spec.stem, {"kind": "registry", "id": problem_id}, tuple(spec.dtypes), spec.category)


def load(job_problem: dict[str, Any], dtype_name: str, scale: str, tolerance: tuple[float, float] | None) -> ProblemSource:
    kind = job_problem["kind"]
    pid = int(job_problem["id"])
    if kind == "pkb":
        root = job_problem["root"]
        if root not in sys.path:
            sys.path.insert(0, root)
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


def _pkb_reference(root: Path, problem_id: int, problem_name: str) -> Path:
    ref_dir = root / "reference"
    exact = ref_dir / f"{problem_id}_{problem_name}.py"
    if problem_name and exact.is_file():
        return exact
    matches = sorted(ref_dir.glob(f"{problem_id}_*.py"))  # PKB's resolve_problem takes the first
    if not matches:
        raise LookupError(f"no reference {problem_id}_*.py under {ref_dir}")
    return matches[0]


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
