"""What an evaluation run is asked to do, and the key that says two runs measured the same thing."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

# Bump when the measurement itself changes (comparison rules, timing protocol), so cached
# outcomes from an older protocol are not taken for current ones.
PROTOCOL_VERSION = 3  # 3: back-to-back pass, charged like PKB's loop

# PKB's run_local.py defaults (--atol/--rtol 1e-2, --m/--n 1024).
PKB_TOLERANCE = (1e-2, 1e-2)
PKB_SHAPE = (1024, 1024)


@dataclass
class EvalOptions:
    world_size: int | None = None  # None: every visible GPU, or 2 ranks on CPU
    trials: int = 5
    dtype: str | None = None  # None: the problem's first dtype (PKB: bfloat16)
    backend: str = "auto"  # auto | nccl | gloo
    timeout_s: float = 600.0  # wall-clock limit of one launch (all trials and timing)
    import_timeout_s: float = 300.0  # the candidate's import (a JIT build inside it has its own)
    compile_timeout_s: float = 900.0  # one JIT build (load_inline / load)
    call_timeout_s: float = 120.0  # one call of the candidate (or of the reference)
    warmup: int = 500  # PKB's default (power-steady state before timing)
    iters: int = 100  # timed calls per side; 0 turns timing off
    groups: int | None = None  # input groups; None: PKB's rule on CUDA (3x L2), 2 on CPU
    store_path: str = "pkb_eval.sqlite"
    work_dir: str = "pkb_eval_work"
    scale: str = "small"  # small | large, passed to the problem's make_inputs
    pkb_root: str | None = None  # a PKB checkout: its reference/ and input factory
    pkb_shape: tuple[int, int] = PKB_SHAPE  # PKB's --m/--n
    save_cap_bytes: int = 8 * 1024 * 1024  # per saved mismatch file
    # --problem ID: every candidate answers this problem, whatever its file name says.
    problem: int | None = None
    # Problem modules from files, ahead of the registry (tests, out-of-tree problems).
    problem_files: dict[int, str] = field(default_factory=dict)
    python: str | None = None  # interpreter for the ranks; None: this one
    # Launches at a time. On CUDA each gets its own world_size GPUs (CUDA_VISIBLE_DEVICES), so
    # jobs * world_size must fit the machine; timing is only clean with one job per GPU set.
    jobs: int = 1  # 0: as many as pkb.eval.plan_slots allows
    # Timed launches alone on the node after the builds (exclusive), alone on the GPUs while
    # builds run on other cores (beside-builds: sooner; on the H200 speedups 4-12% lower than a
    # quiet re-run), or side by side in every slot (shared: faster, less accurate; peers measured
    # 18% off), marked in each evaluation as `timing_mode`.
    timing_mode: str = "exclusive"
    pack: int = 0  # untimed/shared launches per GPU group; 0: 4 at world size 1, else 1
    # With exclusive timing: a correctness-only launch of every candidate first, packed; only the
    # correct ones get the timed launch alone on the node (pkb.eval.screen).
    screen: bool = True
    build_dir: str | None = None  # JIT builds (pkb.eval.build); None: $PKB_BUILD_DIR, $PKB_CACHE_DIR/builds or the user cache
    build_jobs: int = 0  # prebuilds at a time; 0: what cores and memory allow
    # Profile a few candidate calls per rank after timing (Kineto traces under the job dir,
    # summarized into record.profile).
    profile: bool = False
    # Nsight Compute after a correct evaluation (a second launch, pkb.eval.ncu): None off; a list
    # of kernel names, or [] for the static pass's peer-moving kernels (every kernel if none).
    ncu_kernels: list[str] | None = None
    ncu_metrics: list[str] = field(default_factory=list)  # asked for beside profiling.capture.NCU_METRICS
    force: bool = False  # run again what the store already holds for this configuration
    # The folder record paths are relative to (pkb.roots.corpus_root); a file whose text the record
    # does not carry (over the static reader's size limit) is read from there. None: the cwd.
    corpus_root: str | None = None

    def resolved_work_dir(self) -> Path:
        return Path(self.work_dir).resolve()


def config_key(
    *,
    problem_id: int,
    world_size: int,
    backend: str,
    dtype: str,
    options: EvalOptions,
) -> str:
    """Hash of everything that changes what a measurement means (not where files go)."""
    payload = {
        "protocol": PROTOCOL_VERSION,
        "problem_id": problem_id,
        "world_size": world_size,
        "backend": backend,
        "dtype": dtype,
        "trials": options.trials,
        "warmup": options.warmup,
        "iters": options.iters,
        "groups": options.groups,
        "scale": options.scale,
        "pkb": bool(options.pkb_root),
        "pkb_shape": list(options.pkb_shape) if options.pkb_root else None,
        "problem_file": options.problem_files.get(problem_id),
        "profile": options.profile,
    }
    if options.timing_mode == "shared" and options.iters > 0:
        payload["timing_shared"] = True  # a shared-node measurement is not an exclusive one
    if options.timing_mode == "beside-builds" and options.iters > 0:
        payload["timing_beside_builds"] = True  # nor one made while builds ran on other cores
    blob = json.dumps(payload, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
