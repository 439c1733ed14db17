"""One emulated evaluation in a process of its own: `python -m pkb.emulate.child JOB.json`.

The parent (pkb.emulate.isolate) writes the job, starts this process in a session of its own
and waits with a wall limit. Here: the candidate's path (PKB's root or our helpers), builds
routed to our build directory (pkb.eval.build.route_builds), a scratch working directory, then
emulated_evaluate; the record goes to the job's result file. Whatever the candidate does
(os._exit, a segfault, a kernel that never ends) costs this process only. SIGUSR1 dumps every
thread's Python stack to the job's stacks file (faulthandler), so the parent can say where
the ranks were before it kills a process that stopped answering.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from pkb.eval.rank_process import die_with_parent


def run(job: dict[str, Any]) -> dict[str, Any]:
    from pkb.emulate.evaluate import emulated_evaluate

    for p in reversed(job.get("extra_sys_path") or []):
        if p not in sys.path:
            sys.path.insert(0, p)
    build_root = job.get("build_root")
    if build_root:
        route = _route_builds()
        if route is not None:
            route(Path(build_root))
    scratch = job.get("scratch")
    if scratch:
        os.makedirs(scratch, exist_ok=True)
        os.chdir(scratch)  # files a candidate writes land here
    return emulated_evaluate(
        job["candidate_path"],
        job["problem"],
        int(job["world_size"]),
        int(job.get("trials", 3)),
        job.get("device"),
        dtype=job.get("dtype"),
        scale=job.get("scale", "small"),
        call_timeout_s=job.get("call_timeout_s"),
        load_timeout_s=float(job.get("load_timeout_s", 900.0)),
        build_timeout_s=float(job.get("compile_timeout_s", 900.0)),
        run_cuda_candidates_on_cpu=bool(job.get("run_cuda_candidates_on_cpu")),
        progress_path=job.get("progress_path"),
        keep_rank_results=True,
    )


def _route_builds() -> Any:
    try:
        from pkb.eval.build import route_builds
    except ImportError:  # the shared build module is not there: torch's own cache
        return None
    return route_builds


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    job = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    die_with_parent()  # no orphan holding the GPU
    stacks = open(job["stacks_path"], "w", encoding="utf-8")  # noqa: SIM115 - open until os._exit
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    faulthandler.enable(file=stacks, all_threads=True)  # a segfault's stacks too
    try:
        record = run(job)
    except BaseException as exc:  # noqa: BLE001 - the harness failed, not the candidate
        import traceback

        record = {"emulated": True, "status": "not_run", "outcome": "", "subtype": "",
                  "reason": f"emulation harness failed: {type(exc).__name__}: {exc}"[:2000],
                  "details": {"harness_traceback": traceback.format_exc()[-8000:]}}
    tmp = job["result_path"] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, default=str)
    os.replace(tmp, job["result_path"])
    sys.stdout.flush()
    sys.stderr.flush()
    # Rank threads stuck in native code (a kernel that never ends) would hang the interpreter's
    # shutdown; the record is written, so leave at once.
    os._exit(0)


if __name__ == "__main__":
    main()
