"""GPU check of the emulation: N = 2, 4, 8 virtual ranks on ONE GPU, references and CUDA fixtures.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \
        python -m pkb.emulate.gpu_check [--json results.json]

Runs emulated_evaluate over every problem's reference and over the symmetric-memory CUDA
fixtures of tests/fixtures/emulate/ (all built from one CUDA source, so one JIT build, about a
minute). Each job is a child process with a time limit, so a kernel that spins forever takes
only its own job down. Prints a table; the exit code is 0 when every row is as expected.
Everything printed is EMULATED: correctness only, no timing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import sys
import time
from pathlib import Path

ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
for _k, _v in ENV.items():
    os.environ.setdefault(_k, _v)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "emulate"
WORLD_SIZES = (2, 4, 8)
BUDGET_S = 230.0  # the whole check, under 4 minutes
MARK = "PKBRESULT "

# What each fixture must give at each world size ('correct' or the wrong_result subtype).
EXPECTED = {
    "1_allreduce_symm_correct.py": {2: "correct", 4: "correct", 8: "correct"},
    "1_allreduce_symm_no_barrier.py": {2: "stale", 4: "stale", 8: "stale"},
    "1_allreduce_symm_hardcoded_ws2.py": {2: "correct", 4: "missing_peer", 8: "missing_peer"},
    "1_allreduce_symm_stale_flags.py": {2: "stale", 4: "stale", 8: "stale"},
    "1_allreduce_symm_local_only.py": {2: "local_only", 4: "local_only", 8: "local_only"},
}


def _verdict(rec: dict) -> str:
    if rec.get("correct"):
        return "correct"
    if rec.get("status") != "ran":
        return "not_run"
    if rec.get("outcome") == "wrong_result":
        return rec.get("subtype") or "wrong_result"
    return f"{rec.get('outcome')}/{rec.get('subtype')}"


def _row(item: str, ws: int, rec: dict, expected: str) -> dict:
    got = _verdict(rec)
    return {
        "item": item,
        "world_size": ws,
        "emulated": True,
        "verdict": got,
        "expected": expected,
        "ok": got == expected,
        "outcome": rec.get("outcome", ""),
        "subtype": rec.get("subtype", ""),
        "reason": (rec.get("reason") or "")[:240],
        "reference_check": (rec.get("details", {}).get("reference_check") or {}).get("matched"),
        "hint": rec.get("details", {}).get("hint", ""),
        "wall_s": rec.get("wall_s"),
        "builds": rec.get("emulation", {}).get("builds", []),
        "co_residency": rec.get("details", {}).get("co_residency"),
    }


# ---- child: one job in this process ------------------------------------------------------------------


def child(job: dict) -> None:
    import torch

    from pkb.emulate import emulated_evaluate

    device = job.get("device", "cuda")
    where = torch.cuda.get_device_name(0) if device == "cuda" else device
    print(f"# child {job['kind']} on {where}", file=sys.stderr, flush=True)
    if job["kind"] == "references":
        import problems

        for ws in job["world_sizes"]:
            for pid in problems.ids():
                rec = emulated_evaluate(problems.get(pid).module.__file__, pid, ws, trials=job["trials"], device=device)
                row = _row(f"ref p{pid}", ws, rec, "correct")
                if row["reference_check"] is False:
                    row.update(ok=False, verdict=row["verdict"] + " (reference_check failed)")
                print(MARK + json.dumps(row, default=str), flush=True)
    else:
        path = FIXTURES / job["fixture"]
        for ws in job["world_sizes"]:
            rec = emulated_evaluate(path, 1, ws, trials=job["trials"], device=device, call_timeout_s=job["call_timeout_s"])
            print(MARK + json.dumps(_row(job["fixture"], ws, rec, EXPECTED[job["fixture"]][ws]), default=str), flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no teardown: a stuck rank thread must not hold the process


# ---- parent ------------------------------------------------------------------------------------------


def _spawn(job: dict, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pkb.emulate.gpu_check", "--child", json.dumps(job)],
        cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _collect(proc: subprocess.Popen, job: dict, deadline: float) -> list[dict]:
    try:
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        timed_out = True
    rows = [json.loads(line[len(MARK):]) for line in out.splitlines() if line.startswith(MARK)]
    done = {(r["item"], r["world_size"]) for r in rows}
    if job["kind"] == "fixture":
        for ws in job["world_sizes"]:
            if (job["fixture"], ws) not in done:
                why = "child killed at the time limit" if timed_out else f"child exited {proc.returncode}: {err.strip().splitlines()[-1:]}"
                rows.append({"item": job["fixture"], "world_size": ws, "emulated": True, "verdict": "not_run", "expected": EXPECTED[job["fixture"]][ws], "ok": False, "reason": why})
    elif timed_out or proc.returncode:
        rows.append({"item": "references", "world_size": 0, "emulated": True, "verdict": "not_run", "expected": "correct", "ok": False,
                     "reason": "child killed at the time limit" if timed_out else (err.strip().splitlines() or [""])[-1][:240]})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="write all rows here as JSON")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--world-sizes", default=",".join(map(str, WORLD_SIZES)))
    ap.add_argument("--call-timeout", type=float, default=30.0, help="seconds per emulated call before a timeout")
    ap.add_argument("--device", default="cuda", help="cuda (the check); cpu only tries the plumbing (fixtures are then not run)")
    args = ap.parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return 0
    t0 = time.monotonic()
    deadline = t0 + BUDGET_S
    world_sizes = [int(w) for w in args.world_sizes.split(",") if w]
    env = dict(os.environ)
    env.update(ENV)
    env.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(tempfile.gettempdir(), "pkb_emulate_extensions"))
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    fixtures = list(EXPECTED)
    print(f"pkb.emulate GPU check: EMULATED virtual ranks on one GPU (correctness only, no timing); world sizes {world_sizes}", flush=True)
    # The references (no build) run beside the first fixture, which does the one JIT build.
    refs = {"kind": "references", "world_sizes": world_sizes, "trials": 2, "device": args.device}
    jobs = [{"kind": "fixture", "fixture": f, "world_sizes": world_sizes, "trials": args.trials, "call_timeout_s": args.call_timeout, "device": args.device} for f in fixtures]
    rows: list[dict] = []
    ref_proc = _spawn(refs, env)
    first = _spawn(jobs[0], env)
    rows += _collect(first, jobs[0], deadline)
    for job in jobs[1:]:
        rows += _collect(_spawn(job, env), job, deadline)
    rows += _collect(ref_proc, refs, deadline)
    _print_table(rows)
    total = time.monotonic() - t0
    bad = [r for r in rows if not r.get("ok")]
    print(f"\n{len(rows) - len(bad)}/{len(rows)} rows as expected; {total:.0f} s total (EMULATED, not timed)")
    if args.json:
        Path(args.json).write_text(json.dumps({"emulated": True, "total_s": total, "env": ENV, "rows": rows}, indent=1, default=str))
    return 0 if not bad else 1


def _print_table(rows: list[dict]) -> None:
    head = f"{'item':38} {'N':>2}  {'verdict':26} {'expected':14} {'ok':3} {'wall_s':>6}"
    print("\n" + head + "\n" + "-" * len(head))
    refs = [r for r in rows if r["item"].startswith("ref p")]
    for ws in sorted({r["world_size"] for r in refs}):
        mine = [r for r in refs if r["world_size"] == ws]
        good = sum(1 for r in mine if r.get("ok"))
        wall = sum(r.get("wall_s") or 0 for r in mine)
        print(f"{'problem references (' + str(len(mine)) + ')':38} {ws:>2}  {str(good) + '/' + str(len(mine)) + ' correct':26} {'correct':14} {'yes' if good == len(mine) else 'NO':3} {wall:6.1f}")
        for r in mine:
            if not r.get("ok"):
                print(f"    {r['item']}: {r['verdict']}: {r.get('reason', '')[:160]}")
    for r in rows:
        if r["item"].startswith("ref p"):
            continue
        wall = f"{r['wall_s']:.1f}" if isinstance(r.get("wall_s"), (int, float)) else "-"
        print(f"{r['item'][:38]:38} {r['world_size']:>2}  {r['verdict'][:26]:26} {r['expected'][:14]:14} {'yes' if r.get('ok') else 'NO':3} {wall:>6}")
        if not r.get("ok") and r.get("reason"):
            print(f"    {r['reason'][:200]}")
        if r.get("hint"):
            print(f"    hint: {r['hint']}")
        for b in [b for b in r.get("builds") or [] if b.get("seconds", 0) > 1]:
            print(f"    built {b['name']} in {b['seconds']:.0f} s (rank {b['rank']})")


if __name__ == "__main__":
    sys.exit(main())
