"""Checks the CUPTI and Nsight Compute backends on a real GPU, without building an extension.

    python -m profiling.gpu_check OUT_DIR

One workload stands in for a candidate call: a bf16 matmul, a 64 MiB device-to-device copy (a copy
engine) and an `.item()` (a host sync). It runs twice, each time in a fresh process:

1. under capture_cupti, with NVTX_INJECTION64_PATH set at process start so the pkb: ranges arrive
   as CUPTI MARKER records; the JSON lines are read back by load_cupti_jsonl and per_call, which
   must find each call's range, its kernels, the copy's bytes and channel, and the sync;
2. under ncu (run_ncu_command: clocks unlocked, NVTX include of the second call, the NVLink and
   peer-L2 metrics), read back through load_ncu_report.

Prints one table; writes the CUPTI capture, the ncu report and a JSON summary under OUT_DIR.
Exit 0 when both backends gave what they should, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CALLS = 3
COPY_BYTES = 64 << 20


def _workload() -> Any:
    import torch

    dev = torch.device("cuda", 0)
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    src = torch.randn(COPY_BYTES // 4, device=dev)
    dst = torch.empty_like(src)

    def call() -> Any:
        c = a @ a
        dst.copy_(src)
        return c.float().sum().item()

    return call


def _cupti_child(out: Path) -> int:
    from profiling.capture import capture_cupti

    path = capture_cupti(_workload(), calls=CALLS, warmup=2, out_path=out / "cupti", rank=0)
    print(json.dumps({"cupti_file": str(path) if path else None}))
    return 0 if path else 1


def _ncu_child() -> int:
    from profiling import ranges
    from profiling.capture import ranged_calls, warm_up

    fn = _workload()
    warm_up(fn, 2)
    with ranges.enabled(record_function=False):
        ranged_calls(fn, CALLS)
    return 0


def _check_cupti(out: Path, env: dict[str, str]) -> dict[str, Any]:
    from profiling.analyze import per_call
    from profiling.trace import load_cupti_jsonl, read_text

    p = subprocess.run([sys.executable, "-m", "profiling.gpu_check", str(out), "--cupti-child"], env={**os.environ, **env},
                       capture_output=True, text=True, timeout=240, cwd=REPO)
    (out / "cupti_child.log").write_text(p.stdout + p.stderr)
    files = sorted((out / "cupti").glob("*.jsonl"))
    res: dict[str, Any] = {"returncode": p.returncode, "nvtx_injection": env.get("NVTX_INJECTION64_PATH", "")}
    if p.returncode != 0 or not files:
        res["error"] = (p.stderr or p.stdout)[-1500:]
        return res
    # What CUPTI delivered, by record kind, and the first marker records as they came: when the
    # ranges do not show, this says whether the markers were missing or misread.
    kinds: dict[str, int] = {}
    markers: list[dict[str, Any]] = []
    for line in read_text(files[0]).splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        k = str(r.get("kind_name") or r.get("kind"))
        kinds[k] = kinds.get(k, 0) + 1
        if "MARKER" in k.upper() and len(markers) < 6:
            markers.append(r)
    res["record_kinds"], res["marker_samples"] = kinds, markers
    trace = load_cupti_jsonl(files[0])
    ev = trace.events
    mc = trace.memcpys
    res.update({
        "records": len(ev), "kernels": len(trace.kernels), "memcpys": len(mc),
        # CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY (2): submitted on an asynchronous copy engine's channel
        "async_channel_memcpys": int(sum(1 for a in mc["args"] if isinstance(a, dict) and a.get("channel_type") == 2)) if len(mc) and "args" in mc else 0,
        "ranges": sorted(set(trace.ranges["name"])) if len(trace.ranges) else [],
    })
    df = per_call(trace, [], None)
    res["per_call"] = df.to_dict("records")
    return res


def _check_ncu(out: Path) -> dict[str, Any]:
    from profiling.capture import load_ncu_report, run_ncu_command

    rep = out / "ncu_check"
    path = Path(str(rep) + ".ncu-rep")

    def profile(log: str, **over: Any) -> Any:
        run = run_ncu_command([sys.executable, "-m", "profiling.gpu_check", str(out), "--ncu-child"], kernels=[], report=rep,
                              launch_count=8, execute=True, timeout_s=150, **over)
        (out / log).write_text((run.stdout or "") + (run.stderr or ""))
        return run

    run = profile("ncu.log")
    res: dict[str, Any] = {"returncode": run.returncode, "argv": run.argv, "unavailable_metrics": run.unavailable_metrics}
    if run.returncode == 0 and not path.is_file():
        # Nothing matched the NVTX include: once more without it, to tell the filter from ncu.
        res["nvtx_filter_matched"] = False
        run = profile("ncu_unfiltered.log", nvtx_include=None)
    if run.returncode != 0 or not path.is_file():
        res["error"] = ((run.stderr or "") + (run.stdout or ""))[-1500:]
        return res
    df = load_ncu_report(path)
    res["kernels"] = len(df)
    res["columns"] = [c for c in df.columns if "__" in c]
    res["rows"] = df.head(8).astype(str).to_dict("records")
    return res


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if "--cupti-child" in argv:
        return _cupti_child(out)
    if "--ncu-child" in argv:
        return _ncu_child()
    import shutil

    import torch

    if not torch.cuda.is_available() or shutil.which("ncu") is None:
        print("profiling.gpu_check needs a CUDA GPU and ncu on PATH", file=sys.stderr)
        return 2
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        os.environ[k] = v
    from profiling.capture import NCU_METRICS, cupti_environment, metric_base

    cupti = _check_cupti(out, cupti_environment())
    ncu = _check_ncu(out)
    (out / "gpu_check.json").write_text(json.dumps({"cupti": cupti, "ncu": ncu}, indent=1, default=str))
    calls = cupti.get("per_call") or []
    ok_cupti = bool(calls) and bool(cupti.get("ranges")) and all(c.get("launches", 0) >= 1 for c in calls) and cupti.get("memcpys", 0) >= CALLS
    # NVLink counters where ncu can read them; where it says it cannot (the lent one-GPU H200), the
    # check needs the rest of the metrics and says which were missing.
    nvlink = any("nvltx__bytes" in c for c in ncu.get("columns", [])) or "nvltx__bytes" in ncu.get("unavailable_metrics", [])
    ok_ncu = ncu.get("kernels", 0) >= 1 and nvlink and ncu.get("nvtx_filter_matched", True)
    print(f"cupti: rc {cupti['returncode']}, {cupti.get('records', 0)} records, {cupti.get('kernels', 0)} kernels, "
          f"{cupti.get('memcpys', 0)} copies ({cupti.get('async_channel_memcpys', 0)} on an async-copy channel), ranges {cupti.get('ranges', [])}")
    for c in calls:
        print(f"  call {c.get('call')}: launches {c.get('launches')}, host_syncs {c.get('host_syncs')}, ce_bytes {c.get('ce_bytes')}, "
              f"gpu_span_us {c.get('gpu_span_us')}")
    if "error" in cupti:
        print("  error:", cupti["error"][-600:])
    print(f"cupti record kinds: {cupti.get('record_kinds', {})}")
    asked = {metric_base(m) for m in NCU_METRICS}
    got = sorted(c for c in ncu.get("columns", []) if metric_base(c) in asked)
    print(f"ncu: rc {ncu['returncode']}, {ncu.get('kernels', 0)} kernels profiled, requested metric columns {got}"
          f"{'; the NVTX include matched nothing (profiled without it)' if ncu.get('nvtx_filter_matched') is False else ''}")
    if ncu.get("unavailable_metrics"):
        print(f"  metrics ncu cannot access on this machine: {ncu['unavailable_metrics']}")
    for r in ncu.get("rows", [])[:4]:
        print("  ", {k: v for k, v in r.items() if k in ("Kernel Name", "gpu__time_duration.sum", "nvltx__bytes.sum", "dram__bytes.sum")})
    if "error" in ncu:
        print("  error:", ncu["error"][-600:])
    print(f"verdict: cupti {'ok' if ok_cupti else 'FAILED'}, ncu {'ok' if ok_ncu else 'FAILED'}")
    return 0 if ok_cupti and ok_ncu else 1


if __name__ == "__main__":
    sys.exit(main())
