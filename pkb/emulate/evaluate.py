"""Evaluation under emulation: reference and candidate on N virtual ranks, compared per rank.

Correctness only. Nothing here is timed, and every record says `"emulated": True` with
`"timing": None` and `"speedup": None`. Comparison (`pkb.eval.compare`), error classification
(`pkb.eval.classify`), allocator poisoning (`pkb.eval.poison`) and the outcome decision
(`pkb.eval.outcome.decide`) are the evaluation core's own; this module adds the virtual world,
the diagnosis of wrong results (the problem's hypotheses plus generic ones built from
`global_reference`: stale peers, missing peers) and the co-residency verdict after a timeout.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import sys
import time
from pathlib import Path
from typing import Any

from pkb.emulate import coresidency, patch
from pkb.emulate.world import TAINTED, EmulationTimeout, NotEmulated, StepOutcome, World, WorldAborted
from pkb.taxonomy import DOMINANT_WRONG_RESULT, most_telling, overall_wrong_result, wrong_result_rank

CAVEATS = (
    "emulated: correctness only, never timed",
    "all ranks share one device (one L2, one memory): weak-ordering bugs of real NVLink/P2P may not show",
    "peer copies are device-local copies; multicast is absent (multicast_ptr = 0)",
    "symm_mem barrier/put_signal/wait_signal are host-side after a stream sync (stronger than the device-side originals)",
    "collectives complete synchronously (async_op works are already done); sends are buffered",
    "judged in the process the candidate runs in: its outputs are not rechecked by the harness (real launches are: details.judge)",
)

class _LoadFailure(Exception):
    def __init__(self, outcome: str, subtype: str, message: str) -> None:
        super().__init__(message)
        self.outcome, self.subtype = outcome, subtype


def _problem_source(problem: Any, dtype: str | None, scale: str, tolerance: tuple[float, float] | None) -> tuple[Any, Any, str]:
    """(ProblemSource, spec, dtype name) for an id, a name, a problems.Problem, a module file, or
    a job problem of pkb.eval.problem_source.resolve (a PKB checkout's reference and inputs)."""
    from pkb.eval import problem_source

    if isinstance(problem, dict) and "kind" in problem:
        spec = None
        if problem["kind"] == "registry":
            import problems

            spec = problems.get(problem["id"]).spec
        elif problem["kind"] == "file":
            spec = getattr(problem_source._import_file(problem["path"], f"pkb_problem_{problem['id']}"), "PROBLEM", None)
        dtype_name = dtype or (spec.dtypes[0] if spec is not None else problem_source.DEFAULT_DTYPE)
        return problem_source.load(problem, dtype_name, scale, tolerance), spec, dtype_name
    if hasattr(problem, "spec") and hasattr(problem, "module"):
        problem = problem.spec.id
    if isinstance(problem, (str, Path)) and str(problem).endswith(".py") and Path(problem).is_file():
        job_problem = {"kind": "file", "id": 0, "path": str(Path(problem).resolve())}
        mod = problem_source._import_file(job_problem["path"], "pkb_emulated_problem_file")
        spec = getattr(mod, "PROBLEM", None)
        job_problem["id"] = spec.id if spec is not None else 0
    else:
        import problems

        p = problems.get(problem)
        spec = p.spec
        job_problem = {"kind": "registry", "id": p.id}
    dtype_name = dtype or (spec.dtypes[0] if spec is not None else "float32")
    src = problem_source.load(job_problem, dtype_name, scale, tolerance)
    return src, spec, dtype_name


def rank_reference(src: Any, module_name: str) -> Any:
    """The reference as one virtual rank's own: its module imported again under `module_name`,
    so module-level state is per rank as it is on real ranks (one process each). PKB's
    moe_ep_narrow caches its subgroups per world size at module level, each rank's list holding
    its own group and NON_GROUP_MEMBER for the others: shared, the first rank's list served every
    rank. The shared reference where it is not its module's `solution`."""
    from pkb.eval.problem_source import _import_file

    mod = getattr(src, "module", None)
    path = getattr(mod, "__file__", None)
    if not path or getattr(mod, "solution", None) is not src.reference:
        return src.reference
    return _import_file(path, module_name).solution


def cpu_blockers(source: str) -> list[str]:
    """What keeps a candidate from running on the CPU world (symmetric memory does not: it is faked)."""
    from pkb.eval.device_needs import cuda_uses

    return [u for u in cuda_uses(source) if u != "symm_mem"]


def emulated_evaluate(
    candidate_path: str | Path,
    problem: Any,
    world_size: int,
    trials: int = 3,
    device: Any = None,
    *,
    dtype: str | None = None,
    scale: str = "small",
    tolerance: tuple[float, float] | None = None,
    call_timeout_s: float | None = None,
    load_timeout_s: float = 900.0,
    build_timeout_s: float = 900.0,
    per_thread_default_stream: bool = True,
    repeat_check: bool = True,
    diagnose: bool = True,
    run_cuda_candidates_on_cpu: bool = False,
    progress_path: str | None = None,
    keep_rank_results: bool = False,
) -> dict[str, Any]:
    """Run reference and candidate on `world_size` virtual ranks for `trials` fresh-input trials.

    problem: an id, a name, a problems.Problem, a problem file, or a job problem dict of
    pkb.eval.problem_source.resolve (then a PKB checkout's references and input factory).
    device: None (CUDA if available, else CPU), 'cpu', 'cuda' or 'cuda:i'. Returns an outcome
    record (the keys of pkb.eval's evaluation plus "emulated": True, "timing": None).
    run_cuda_candidates_on_cpu: run a candidate that needs CUDA on the CPU world anyway (to check
    that its Python path gets as far as its first CUDA use). progress_path: a file that gets
    each step's phase as it starts (the parent of an isolated run reads it after a crash).
    keep_rank_results: add each rank's raw results ("rank_results", for the store's trial rows)."""
    import torch

    t0 = time.monotonic()
    path = Path(candidate_path)
    dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    record: dict[str, Any] = {
        "emulated": True,
        "status": "not_run",
        "outcome": "",
        "subtype": "",
        "speedup": None,
        "timing": None,
        "correct": False,
        "reason": "",
        "details": {},
        "world_size": int(world_size),
        "backend": "emulated",
        "device": str(dev),
        "dtype": dtype or "",
        "trials": [],
        "ranks": [],
        "wall_s": 0.0,
        "candidate_path": str(path),
        "candidate_sha256": "",
        "emulation": {"virtual_ranks": int(world_size), "stream_per_rank": dev.type == "cuda", "caveats": list(CAVEATS)},
    }
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        record["reason"] = f"cannot read the candidate: {exc}"
        return record
    sha = hashlib.sha256(source.encode("utf-8")).hexdigest()
    record["candidate_sha256"] = sha
    try:
        src, spec, dtype_name = _problem_source(problem, dtype, scale, tolerance)
    except Exception as exc:
        record["reason"] = f"problem not found: {exc}"
        return record
    record.update(dtype=dtype_name, problem_id=src.id, problem_stem=getattr(spec, "stem", ""))
    # `from utils.cuda_helpers import compile_cuda_extension`: PKB's own once its `utils` was
    # imported with the problem (--pkb-root), else the evaluation core's, as the real ranks do
    try:
        from pkb.eval.shims import provide_for_candidate
    except ImportError:  # an evaluation core without the shim
        pass
    else:
        record["emulation"]["cuda_helpers"] = provide_for_candidate()
    if dev.type == "cpu" and not run_cuda_candidates_on_cpu:
        blockers = cpu_blockers(source)
        if blockers:
            record["reason"] = f"needs the GPU under emulation: the candidate uses {'/'.join(blockers)}"
            return record
    elif TAINTED:
        record["reason"] = f"CUDA emulation refused: an earlier run in this process left ranks stuck ({TAINTED[-1]})"
        return record
    timeout = call_timeout_s if call_timeout_s is not None else (30.0 if dev.type == "cpu" else 60.0)
    run = _Run(path, sha, src, spec, dtype_name, int(world_size), int(trials), dev, timeout, load_timeout_s,
               per_thread_default_stream, repeat_check, diagnose)
    run.progress_path = progress_path
    run.build_timeout_s = build_timeout_s
    # PKB's worker calls reference and candidate without torch.no_grad (references that take
    # gradients need it); our own problems keep the evaluation core's no_grad.
    run.no_grad = not (isinstance(problem, dict) and problem.get("kind") == "pkb")
    record.update(run.execute())
    # reads of hdl.multicast_ptr (always 0 here): the evidence that a run reached a multicast path
    record.setdefault("details", {})["multicast_reads"] = run.multicast_reads
    if run.not_emulated and record.get("status") == "ran":
        # the candidate caught what the emulation lacks (or asked hasattr) and went on: real ranks
        # would have taken the other path, which this run never tried
        record["details"]["not_emulated_caught"] = run.not_emulated
        record["emulation"]["caveats"] = [*record["emulation"]["caveats"],
                                          f"the candidate went on past what the emulation lacks ({', '.join(run.not_emulated)}): real ranks take another path"]
    if keep_rank_results:
        record["rank_results"] = run.rank_results  # the store's trial rows
    record["emulation"]["per_thread_default_stream"] = per_thread_default_stream and dev.type == "cuda"
    record["emulation"]["builds"] = run.build_log
    record["wall_s"] = round(time.monotonic() - t0, 3)
    if record.get("reason") and record.get("status") == "ran":
        record["reason"] = f"[emulated x{world_size}] {record['reason']}"
    return record


class _Run:
    def __init__(self, path: Path, sha: str, src: Any, spec: Any, dtype_name: str, ws: int, trials: int, dev: Any,
                 timeout: float, load_timeout: float, per_thread: bool, repeat_check: bool, diagnose: bool) -> None:
        import torch

        self.path, self.sha, self.src, self.spec = path, sha, src, spec
        self.dtype_name, self.dtype = dtype_name, getattr(torch, dtype_name)
        self.ws, self.trials, self.dev = ws, trials, dev
        self.timeout, self.load_timeout = timeout, load_timeout
        self.per_thread, self.repeat_check, self.diagnose = per_thread, repeat_check, diagnose
        self.build_log: list[dict[str, Any]] = []
        self.atol, self.rtol = src.tolerance
        self.module_names = [f"pkb_emulated_{sha[:12]}_{id(self):x}_r{r}" for r in range(ws)]
        self.rank_results: list[dict[str, Any]] = [
            {"rank": r, "world_size": ws, "trials": [], "timing": None, "timed_checks": [], "refresh_check": None,
             "error": None, "compile_s": 0.0, "finished": False}
            for r in range(ws)
        ]
        self.phases = [""] * ws
        self.details: dict[str, Any] = {}

    # ---- the run -------------------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        import torch

        # N rank threads each driving torch's intra-op thread pool oversubscribe the cores (and
        # OpenMP workers spin between regions): on CPU every op runs single-threaded for the run.
        threads = torch.get_num_threads()
        if self.dev.type == "cpu":
            torch.set_num_threads(1)
        world = World(self.ws, self.dev, name=f"emu{self.ws}")
        world.build_limit_s = self.build_timeout_s
        world.start()
        probe = coresidency.Probe(world.device) if world.device.type == "cuda" else None
        try:
            with patch.installed(world, per_thread_default_stream=self.per_thread, build_log=self.build_log):
                return self._execute(world, probe)
        finally:
            self.multicast_reads = int(world.shared.get("multicast_reads", 0))
            self.not_emulated = sorted(world.shared.get("not_emulated", ()))
            world.close()
            torch.set_num_threads(threads)
            for name in self.module_names:
                sys.modules.pop(name, None)
                sys.modules.pop(f"{name}_reference", None)

    progress_path: str | None = None
    build_timeout_s = 900.0
    no_grad = True
    multicast_reads = 0
    not_emulated: list[str] = []

    def _step(self, world: World, fn: Any, args: list[tuple] | None, phase: str, timeout: float | None = None) -> StepOutcome:
        self.phases = [phase] * self.ws
        if self.progress_path:
            import json

            threads = {hex(t.ident): r for r, t in enumerate(world._threads) if t.ident is not None}
            try:
                Path(self.progress_path).write_text(json.dumps({"phase": phase, "rank_threads": threads}), encoding="utf-8")
            except OSError:
                pass
        return world.step(fn, args, phase=phase, timeout_s=timeout or self.timeout)

    def _execute(self, world: World, probe: Any) -> dict[str, Any]:
        from pkb.eval.compare import compare_outputs
        from pkb.eval.tensors import bitwise_equal, storage_ptrs

        ws = self.ws
        # -- load one module per rank
        out = self._step(world, self._load, [(self.module_names[r],) for r in range(ws)], "load", self.load_timeout)
        if (bad := self._failure(world, out, "candidate", "load")) is not None:
            return bad
        prev_inputs: list[Any] | None = None
        prev_expected: list[Any] | None = None
        case_subtypes: dict[tuple[int, int], str] = {}
        diagnoses: list[dict[str, Any]] = []
        ref_mismatch: list[dict[str, Any]] = []
        for t in range(self.trials):
            out = self._step(world, self._make_inputs, [(t,)] * ws, f"trial {t} inputs")
            if (bad := self._failure(world, out, "reference", f"trial {t} inputs")) is not None:
                return bad
            inputs = [res.value for res in out.results]  # type: ignore[union-attr]
            out = self._step(world, self._reference, [(inp,) for inp in inputs], f"trial {t} reference")
            if (bad := self._failure(world, out, "reference", f"trial {t} reference")) is not None:
                return bad
            expected = [res.value for res in out.results]  # type: ignore[union-attr]
            ref_mismatch.extend(self._reference_check(inputs, expected, t))
            if self.dev.type == "cuda":
                from pkb.eval.timing import input_bytes

                nbytes = input_bytes(expected[0]) + input_bytes(inputs[0])
                out = self._step(world, self._poison, [(nbytes,)] * ws, f"trial {t} poison")
            out = self._step(world, self._candidate, [(inp, t == 0) for inp in inputs], f"trial {t} candidate")
            if (bad := self._failure(world, out, "candidate", f"trial {t} candidate", probe)) is not None:
                return bad
            gots = [res.value[0] for res in out.results]  # type: ignore[union-attr]
            cand_inputs = [res.value[1] for res in out.results]  # type: ignore[union-attr]
            wrong_unexplained = []
            for r in range(ws):
                cmp = compare_outputs(expected[r], gots[r], self.atol, self.rtol)
                cmp.update(trial=t, kind="trial", emulated=True)
                cmp["mutates_inputs"] = not bitwise_equal(cand_inputs[r], inputs[r])
                cmp["aliases_input"] = bool(storage_ptrs(gots[r]) & storage_ptrs(cand_inputs[r]))
                if not cmp["matched"] and expected[r] is not None:
                    hyps = self._hypotheses(inputs, expected, gots[r], r, prev_inputs, prev_expected) if self.diagnose else []
                    sub = case_subtype(cmp, hyps)
                    case_subtypes[(r, t)] = sub
                    diagnoses.append({"rank": r, "trial": t, "subtype": sub, "matched_hypotheses": [_hyp_summary(h) for h in hyps]})
                    cmp["emulated_subtype"] = sub
                    if not sub:
                        wrong_unexplained.append(r)
                elif not cmp["matched"]:
                    cmp["matched"] = True  # the problem leaves this rank's output unchecked
                self.rank_results[r]["trials"].append(cmp)
            if self.dev.type == "cuda":
                import torch

                torch.cuda.current_stream().synchronize()  # the main thread's reads are done before ranks reuse memory
            if wrong_unexplained and self.repeat_check:
                again = self._step(world, self._candidate, [(inp, False) for inp in inputs], f"trial {t} repeat")
                if (bad := self._failure(world, again, "candidate", f"trial {t} repeat", probe)) is not None:
                    return bad
                differs = [r for r in range(ws) if not bitwise_equal(gots[r], again.results[r].value[0])]  # type: ignore[union-attr]
                self.details.setdefault("repeat_check", []).append({"trial": t, "ranks_differing": differs})
                for r in differs:
                    if (r, t) in case_subtypes and not case_subtypes[(r, t)]:
                        case_subtypes[(r, t)] = "nondeterministic"
                        for d in diagnoses:
                            if d["rank"] == r and d["trial"] == t:
                                d["subtype"] = "nondeterministic"
            prev_inputs, prev_expected = inputs, expected
        for r in range(ws):
            self.rank_results[r]["finished"] = True
        self.details["reference_check"] = {"matched": not ref_mismatch, "mismatches": ref_mismatch[:16]}
        if diagnoses:
            self.details["diagnosis"] = diagnoses[:64]
        return self._decide(case_subtypes)

    # ---- rank steps (run in the rank threads) ---------------------------------------------

    def _load(self, ctx: Any, name: str) -> None:
        from pkb.eval.classify import classify_exception

        try:
            spec = importlib.util.spec_from_file_location(name, str(self.path))
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        except (WorldAborted, EmulationTimeout, NotEmulated):
            raise
        except BaseException as exc:
            outcome, subtype = classify_exception(exc, during_build=getattr(exc, "pkb_during_build", False))
            raise _LoadFailure(outcome, subtype, f"{type(exc).__name__}: {exc}") from exc
        fn = getattr(module, "solution", None)
        if fn is None or not callable(fn):
            raise _LoadFailure("load_error", "no_solution", f"no callable `solution` in {self.path}")
        ctx.module = module

    def _make_inputs(self, ctx: Any, trial: int) -> Any:
        return self.src.make_inputs(ctx.rank, self.ws, trial, self.dev, self.dtype)

    def _reference(self, ctx: Any, inputs: Any) -> Any:
        import torch

        from pkb.eval.tensors import clone_tree

        reference = ctx.state.get("reference")
        if reference is None:
            reference = ctx.state["reference"] = rank_reference(self.src, f"{self.module_names[ctx.rank]}_reference")
        with torch.no_grad() if self.no_grad else contextlib.nullcontext():
            return reference(*clone_tree(inputs))

    def _poison(self, ctx: Any, nbytes: int) -> int:
        from pkb.eval.poison import poison_allocator

        return poison_allocator(self.dev, nbytes)

    def _candidate(self, ctx: Any, inputs: Any, check_signature: bool) -> Any:
        import torch

        from pkb.eval.tensors import clone_tree

        fn = ctx.module.solution
        if check_signature:
            try:
                sig = inspect.signature(fn)
            except (TypeError, ValueError):
                sig = None
            if sig is not None:
                try:
                    sig.bind(*inputs)
                except TypeError as exc:
                    raise _LoadFailure("load_error", "signature_mismatch", f"solution{sig} cannot take the problem's {len(inputs)} inputs: {exc}") from exc
        cand_inputs = clone_tree(inputs)
        with torch.no_grad() if self.no_grad else contextlib.nullcontext():
            got = fn(*cand_inputs)
        return got, cand_inputs

    # ---- failures ---------------------------------------------------------------------------

    def _failure(self, world: World, out: StepOutcome, source: str, phase: str, probe: Any = None) -> dict[str, Any] | None:
        from pkb.eval.classify import classify_exception, error_extras

        errors, missing = [], []
        for res in out.results:
            if res is None or res.ok:
                continue
            exc = res.error
            if isinstance(exc, (WorldAborted, EmulationTimeout)):
                continue  # the echo of another rank's failure
            if isinstance(exc, _LoadFailure):
                outcome, subtype, src = exc.outcome, exc.subtype, "candidate"
            else:
                outcome, subtype = classify_exception(exc, during_build=getattr(exc, "pkb_during_build", False))  # type: ignore[arg-type]
                src = source
            errors.append((res.rank, {
                "outcome": outcome if src == "candidate" else "",
                "subtype": subtype if src == "candidate" else "",
                "source": src,
                "phase": phase,
                "type": type(exc).__name__,
                "message": str(exc)[:4000],
                "traceback": res.traceback[-8000:],
                **(error_extras(subtype, exc) if src == "candidate" else {}),
            }))
            if isinstance(exc, NotEmulated):
                missing.append(errors[-1])
        if not errors:
            return self._hang(world, out, phase, probe) if out.timed_out else None
        if missing:
            return self._not_emulated(missing, phase)
        if out.timed_out:  # a rank failed while others stayed stuck: the failure is the story
            self.details["stuck_ranks"] = out.stuck
            self.details["native_stuck_ranks"] = out.native_stuck
        for rank, err in errors:
            self.rank_results[rank]["error"] = err
        return self._decide({})

    def _not_emulated(self, missing: list[tuple[int, dict[str, Any]]], phase: str) -> dict[str, Any]:
        """A rank reached a part of torch.distributed the emulation lacks: the run says nothing
        about the candidate (status not_run, no outcome), and names what was missing."""
        rank, err = missing[0]
        details = dict(self.details)
        details["not_emulated"] = [{"rank": r, "phase": e["phase"], "source": e["source"], "message": e["message"][:500],
                                    "traceback": e["traceback"][-2000:]} for r, e in missing]
        return {"status": "not_run", "outcome": "", "subtype": "", "speedup": None, "correct": False, "details": details,
                "reason": f"{err['message'].splitlines()[0]} (rank {rank}, {phase}); evaluate it on real ranks",
                "trials": self._trial_summary(), "ranks": self._rank_summary()}

    def _hang(self, world: World, out: StepOutcome, phase: str, probe: Any) -> dict[str, Any]:
        details = dict(self.details)
        details["stuck_ranks"] = out.stuck
        details["native_stuck_ranks"] = out.native_stuck
        where = "; ".join(_stuck_text(s) for s in out.stuck)
        base = {
            "status": "ran", "speedup": None, "correct": False, "details": details,
            "trials": self._trial_summary(), "ranks": self._rank_summary(),
        }
        if world.device.type == "cuda" and out.native_stuck:
            co = coresidency.analyse(world, probe)
            details["co_residency"] = co
            if co["verdict"] == "co_resident":
                return {**base, "outcome": "hang", "subtype": "timeout",
                        "reason": f"{phase}: no progress in {self.timeout:.0f} s ({where}); the grids were co-resident ({co.get('why', '')})"}
            sub = "not_co_resident" if co["verdict"] == "not_co_resident" else "co_residency_unknown"
            # Not an outcome of TAXONOMY.md: the emulation cannot decide, and says so in status.
            return {**base, "status": "inconclusive", "outcome": "", "subtype": sub,
                    "reason": f"{phase}: no progress in {self.timeout:.0f} s ({where}); {co.get('why', '')}: "
                              "the ranks' grids may not fit on one GPU together, which real per-rank GPUs would not suffer"}
        note = ""
        if out.native_stuck:
            note = f"; ranks {out.native_stuck} could not be stopped (blocked in native code) and their threads leak"
        return {**base, "outcome": "hang", "subtype": "timeout",
                "reason": f"{phase}: no progress in {self.timeout:.0f} s ({where}){note}"}

    # ---- reference self-check and diagnosis ---------------------------------------------------

    def _reference_check(self, inputs: list[Any], expected: list[Any], trial: int) -> list[dict[str, Any]]:
        """The reference run on the virtual ranks against the problem's single-process math."""
        from pkb.eval.compare import compare_outputs

        module = self.src.module
        if module is None or not hasattr(module, "global_reference"):
            return []
        try:
            ref = module.global_reference(inputs, self.ws)
        except Exception as exc:
            return [{"trial": trial, "error": f"global_reference failed: {exc}"[:300]}]
        bad = []
        for r in range(self.ws):
            if ref[r] is None:
                continue
            cmp = compare_outputs(ref[r], expected[r], self.atol, self.rtol)
            if not cmp["matched"]:
                bad.append({"trial": trial, "rank": r, "max_abs_err": cmp["max_abs_err"], "mismatches": cmp["mismatches"]})
        return bad

    def _hypotheses(self, inputs: list[Any], expected: list[Any], got: Any, rank: int, prev_inputs: list[Any] | None, prev_expected: list[Any] | None) -> list[dict[str, Any]]:
        """The hypotheses (problem's and generic) whose prediction matches `got` and not the right answer."""
        from pkb.eval.compare import compare_outputs

        module = self.src.module
        exp = expected[rank]
        cands: list[dict[str, Any]] = []
        if module is not None and hasattr(module, "hypotheses"):
            try:
                cands.extend(module.hypotheses(inputs, exp, got, rank, self.ws))
            except Exception as exc:
                self.details.setdefault("hypothesis_errors", []).append(str(exc)[:200])
        cands.extend(generic_hypotheses(module, inputs, exp, rank, self.ws, prev_inputs, prev_expected, self._variant_cache(inputs)))
        matched = []
        seen = set()
        for h in cands:
            if "tensor" not in h:
                continue
            key = (h["name"], tuple(h.get("peers") or ()), h.get("factor"))
            if key in seen:
                continue
            seen.add(key)
            try:
                if not compare_outputs(h["tensor"], got, self.atol, self.rtol)["matched"]:
                    continue
                if compare_outputs(h["tensor"], exp, self.atol, self.rtol)["matched"]:
                    continue  # indistinguishable from the right answer
            except Exception:
                continue
            matched.append(h)
        return matched

    def _variant_cache(self, inputs: list[Any]) -> dict[Any, Any]:
        key = id(inputs)
        if getattr(self, "_cache_key", None) != key:
            self._cache_key, self._cache = key, {}
        return self._cache

    # ---- the record ----------------------------------------------------------------------------

    def _launch_result(self) -> Any:
        from pkb.eval.launcher import LaunchResult, RankReport

        ranks = [RankReport(rank=r, phase=self.phases[r], result=self.rank_results[r]) for r in range(self.ws)]
        return LaunchResult(returncode=0, timed_out=False, wall_s=0.0, ranks=ranks, launcher_tail="", command=["emulated"])

    def _trial_summary(self) -> list[dict[str, Any]]:
        from pkb.eval.outcome import trial_summary

        return trial_summary(self._launch_result())

    def _rank_summary(self) -> list[dict[str, Any]]:
        return [
            {"rank": r, "phase": self.phases[r], "finished": self.rank_results[r]["finished"], "error": self.rank_results[r]["error"]}
            for r in range(self.ws)
        ]

    def _decide(self, case_subtypes: dict[tuple[int, int], str]) -> dict[str, Any]:
        from pkb.eval.outcome import decide

        launch = self._launch_result()
        result = decide(launch)
        result["details"].update(self.details)
        if result["outcome"] == "wrong_result":
            sub = overall_subtype(list(case_subtypes.values()))
            base = result["subtype"]
            result["details"]["subtype_without_diagnosis"] = base
            result["details"]["subtypes_by_case"] = {f"rank{r}/trial{t}": s for (r, t), s in sorted(case_subtypes.items())}
            if base not in DOMINANT_WRONG_RESULT and sub:
                result["subtype"] = sub
            hint = hard_coded_hint(result["details"].get("diagnosis", []), self.ws)
            if hint:
                result["details"]["hint"] = hint
        if result.get("correct"):
            result["reason"] = "correct on every trial (emulated; not timed)"
        result.update(trials=self._trial_summary(), ranks=self._rank_summary(), speedup=None)
        return result


# ---- diagnosis helpers (pure functions) --------------------------------------------------------------


def case_subtype(cmp: dict[str, Any], hyps: list[dict[str, Any]]) -> str:
    """One wrong (rank, trial)'s subtype from its comparison and the hypotheses that matched,
    ranked by pkb.taxonomy.WRONG_RESULT_PRIORITY (the evaluation's and the diagnosis's order)."""
    from pkb.eval.compare import TOLERANCE_FACTOR

    held = []
    if not cmp.get("structure_ok", True) or not cmp.get("shape_ok", True):
        held.append("shape_mismatch")
    if not cmp.get("dtype_ok", True):
        held.append("dtype_mismatch")
    if cmp.get("nan_inf", 0) > 0:
        held.append("nan_inf")
    if hyps:
        held.append(best_hypothesis(hyps)["name"])
    if cmp.get("sentinel", 0) > 0:
        held.append("unwritten")
    if 1.0 < cmp.get("max_violation", float("inf")) <= TOLERANCE_FACTOR:
        held.append("tolerance")
    return most_telling(held)


def best_hypothesis(hyps: list[dict[str, Any]]) -> dict[str, Any]:
    """The most telling hypothesis; between two of one kind, the one naming fewer peers."""
    return min(hyps, key=lambda h: (wrong_result_rank(h["name"]), len(h.get("peers") or ()), h["name"]))


def overall_subtype(subtypes: list[str]) -> str:
    """The candidate's subtype from its cases' (pkb.taxonomy.overall_wrong_result)."""
    return overall_wrong_result(subtypes)


def hard_coded_hint(diagnoses: list[dict[str, Any]], ws: int) -> str:
    """'ranks >= k never contribute' on every wrong case: the signature of a hard-coded world size k."""
    common: set[int] | None = None
    for d in diagnoses:
        ks: set[int] = set()
        for h in d.get("matched_hypotheses", []):
            peers = h.get("peers")
            if h["name"] in ("missing_peer", "local_only") and peers:
                ks |= {k for k in range(1, ws) if set(peers) in (set(range(k, ws)), set(range(k, ws)) - {d["rank"]})}
        common = ks if common is None else common & ks
        if not common:
            return ""
    if common and len(common) == 1:
        k = common.pop()
        return f"ranks >= {k} never contribute on any wrong rank: a world size hard-coded as {k}?"
    return ""


def _stuck_text(s: dict[str, Any]) -> str:
    """'rank 1 in barrier at cand.py:12 in solution': the primitive it waited in and where."""
    text = f"rank {s['rank']} in {s['blocked_in']}"
    if s.get("where") and s["where"] != s["blocked_in"]:
        text += f" at {s['where']}"
    return text


def _hyp_summary(h: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in h.items() if k != "tensor" and not hasattr(v, "shape")}


def _map_tensors(x: Any, fn: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, tuple):
        return tuple(_map_tensors(v, fn) for v in x)
    if isinstance(x, list):
        return [_map_tensors(v, fn) for v in x]
    if isinstance(x, dict):
        return {k: _map_tensors(v, fn) for k, v in x.items()}
    return x


def _zeroed(inp: Any) -> Any:
    """A rank's inputs with its floating-point tensors zeroed (its contribution 'missing')."""
    import torch

    return _map_tensors(inp, lambda t: torch.zeros_like(t) if t.is_floating_point() else t)


def generic_hypotheses(module: Any, inputs: list[Any], expected: Any, rank: int, ws: int, prev_inputs: list[Any] | None,
                       prev_expected: list[Any] | None, cache: dict[Any, Any]) -> list[dict[str, Any]]:
    """Hypotheses any problem with `global_reference` supports, from its own math on altered inputs.

    stale: the previous trial's whole answer, or the answer with some peers' inputs taken from the
        previous trial (peers read before they wrote this trial's data);
    missing_peer: the answer with some peers' floating inputs zeroed (single peers, ranks >= k,
        ranks < k); local_only: all peers zeroed."""
    out: list[dict[str, Any]] = []
    if prev_expected is not None and prev_expected[rank] is not None:
        out.append({"name": "stale", "tensor": prev_expected[rank], "detail": "the previous trial's answer"})
    if module is None or not hasattr(module, "global_reference") or ws < 2:
        return out
    peers = [p for p in range(ws) if p != rank]

    def variant(kind: str, ranks: frozenset[int]) -> Any:
        key = (kind, ranks)
        if key not in cache:
            if kind == "zero":
                alt = [(_zeroed(inp) if i in ranks else inp) for i, inp in enumerate(inputs)]
            else:
                alt = [(prev_inputs[i] if i in ranks else inp) for i, inp in enumerate(inputs)]  # type: ignore[index]
            try:
                cache[key] = module.global_reference(alt, ws)
            except Exception:
                cache[key] = None
        res = cache[key]
        return None if res is None else res[rank]

    # Single peers and all peers exclude this rank; the blocks 'ranks >= k' and 'ranks < k' do
    # not (a loop bound hard-coded as k also drops this rank's own share when rank >= k).
    sets: list[frozenset[int]] = [frozenset([p]) for p in peers]
    for k in range(1, ws):
        sets.append(frozenset(range(k, ws)))
        sets.append(frozenset(range(0, k)))
    sets.append(frozenset(peers))
    uniq = [s for s in dict.fromkeys(sets) if s]
    for s in uniq:
        pred = variant("zero", s)
        if pred is not None:
            name = "local_only" if s == frozenset(peers) else ("missing_self" if s == frozenset([rank]) else "missing_peer")
            out.append({"name": name, "tensor": pred, "peers": sorted(s), "detail": "generic: those peers' inputs zeroed"})
    if prev_inputs is not None:
        for s in [frozenset([p]) for p in peers] + [frozenset(peers)]:
            pred = variant("stale", s)
            if pred is not None:
                out.append({"name": "stale", "tensor": pred, "peers": sorted(s), "detail": "generic: those peers' data from the previous trial"})
    return out


def emulated_sweep(candidate_path: str | Path, problem: Any, world_sizes: tuple[int, ...] = (2, 4, 8), **kwargs: Any) -> dict[str, Any]:
    """emulated_evaluate at several world sizes, with a cross-size conclusion (hard-coded sizes)."""
    results = {ws: emulated_evaluate(candidate_path, problem, ws, **kwargs) for ws in world_sizes}
    passing = [ws for ws, r in results.items() if r.get("correct")]
    failing = [ws for ws, r in results.items() if r.get("status") == "ran" and not r.get("correct")]
    summary = ""
    if passing and failing and max(passing) < min(failing):
        summary = f"correct at world size {passing}, wrong at {failing}: world size assumed <= {max(passing)}"
    return {"emulated": True, "results": results, "summary": summary}


__all__ = ["emulated_evaluate", "emulated_sweep", "generic_hypotheses", "case_subtype", "overall_subtype", "CAVEATS"]
