"""Which Nsight Compute counters see Hopper's TMA unit, checked against kernels whose traffic is
known by construction.

    python -m profiling.tma_check OUT_DIR

Two kernels copy the same 16 MiB (CuPy, NVRTC: no extension build): `tma_bulk_copy` moves every
byte with cp.async.bulk (global -> shared through the TMA unit, then shared -> global), and
`sm_copy` with plain SM loads and stores. Every counter this ncu lists for the chip whose name
says tma (and the bulk-copy ones) is read on both. A counter that tells TMA traffic
from SM traffic reads about the copy's bytes (or its sectors) on tma_bulk_copy and about zero on
sm_copy; such counters are what profiling.capture's NCU_METRICS should carry.

Also records what ncu answers to a metric name it does not know (ncu 2025.3 on the H200: exit 0,
the column left out, so an unknown name costs a profile nothing).

Prints one table; writes ncu's outputs and a JSON summary under OUT_DIR. Exit 0 when at least one
counter told the two kernels apart.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

COPY_BYTES = 16 << 20
CHUNK = 16 << 10  # bytes per block: one bulk copy in, one out
KERNELS = ("tma_bulk_copy", "sm_copy")

SOURCE = r"""
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned long long a;
    asm volatile("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned)a;
}

extern "C" __global__ void tma_bulk_copy(const unsigned char* src, unsigned char* dst, int chunk) {
    extern __shared__ __align__(128) unsigned char buf[];
    __shared__ __align__(8) unsigned long long bar;
    const unsigned char* s = src + (size_t)blockIdx.x * chunk;
    unsigned char* d = dst + (size_t)blockIdx.x * chunk;
    unsigned b = smem_addr(&bar), sm = smem_addr(buf);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(chunk) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(sm), "l"(s), "r"(chunk), "r"(b) : "memory");
        unsigned done = 0;
        while (!done) {
            asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}"
                         : "=r"(done) : "r"(b) : "memory");
        }
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" :: "l"(d), "r"(sm), "r"(chunk) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}

extern "C" __global__ void sm_copy(const uint4* src, uint4* dst, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
"""


def _child() -> int:
    """Runs both kernels once and checks they copied right."""
    import cupy as cp

    mod = cp.RawModule(code=SOURCE, options=("--std=c++17",), backend="nvrtc")
    tma, sm = mod.get_function("tma_bulk_copy"), mod.get_function("sm_copy")
    src = cp.random.randint(0, 255, COPY_BYTES, dtype=cp.uint8)
    out = {}
    for name, fn, grid, block, args, smem in (
        ("tma_bulk_copy", tma, (COPY_BYTES // CHUNK,), (32,), (cp.int32(CHUNK),), CHUNK),
        ("sm_copy", sm, (1024,), (256,), (cp.int64(COPY_BYTES // 16),), 0),
    ):
        dst = cp.zeros_like(src)
        fn(grid, block, (src, dst, *args), shared_mem=smem)
        cp.cuda.Device().synchronize()
        out[name] = bool((dst == src).all())
    print(json.dumps({"copied_right": out}))
    return 0 if all(out.values()) else 1


def tma_metric_names(query_output: str) -> list[str]:
    """`<name>.sum` for every counter of `ncu --query-metrics` output (base names, one per line
    first) whose name says tma or bulk."""
    names = set()
    for line in query_output.splitlines():
        tok = line.strip().split(" ", 1)[0]
        if re.fullmatch(r"[a-z0-9]+__[A-Za-z0-9_]+", tok) and re.search(r"tma|bulk", tok, re.I):
            names.add(tok + ".sum")
    return sorted(names)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        return _child()
    out = Path(argv[0] if argv else "tma_check_out")
    out.mkdir(parents=True, exist_ok=True)
    from profiling.capture import load_ncu_report

    summary: dict[str, Any] = {}
    q = subprocess.run(["ncu", "--query-metrics", "--chip", "gh100"], capture_output=True, text=True, timeout=120)
    (out / "query_metrics.txt").write_text(q.stdout + q.stderr)
    names = tma_metric_names(q.stdout)
    summary["tma_metric_names"] = names
    read = names + ["dram__bytes.sum", "gpu__time_duration.sum"]  # the tma counters and two anchors
    env = dict(os.environ)
    target = [sys.executable, "-m", "profiling.tma_check", "--child"]
    kernels = "regex:^(" + "|".join(KERNELS) + ")$"
    rep = out / "tma"
    p = subprocess.run(["ncu", "--clock-control", "none", "-k", kernels, "--metrics", ",".join(read),
                        "-f", "-o", str(rep), *target], capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    (out / "ncu_tma.log").write_text(p.stdout + "\n" + p.stderr)
    summary["ncu_returncode"] = p.returncode
    rows: dict[str, dict[str, Any]] = {}
    try:
        df = load_ncu_report(f"{rep}.ncu-rep")
        for _, r in df.iterrows():
            kname = str(r.get("Kernel Name"))
            rows[kname] = {m: r.get(m) for m in read if m in df.columns}
    except Exception as exc:
        summary["report_error"] = f"{type(exc).__name__}: {exc}"
    summary["kernels"] = rows
    # What ncu says to a name it does not know.
    bogus = subprocess.run(["ncu", "--metrics", "pkb_no_such__metric.sum,gpu__time_duration.sum", "-k", kernels, "-c", "1", "-f", "-o", str(out / "bogus"), *target],
                           capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    summary["unknown_metric"] = {"returncode": bogus.returncode, "output": (bogus.stdout + "\n" + bogus.stderr)[-3000:]}
    (out / "ncu_bogus.log").write_text(bogus.stdout + "\n" + bogus.stderr)
    tma_row = next((v for k, v in rows.items() if "tma_bulk_copy" in k), {})
    sm_row = next((v for k, v in rows.items() if "sm_copy" in k), {})
    telling = []
    print(f"{'metric':70s} {'tma_bulk_copy':>16s} {'sm_copy':>16s}")
    for m in read:
        a, b = tma_row.get(m), sm_row.get(m)
        print(f"{m:70s} {a!s:>16s} {b!s:>16s}")
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b == 0 and m in names:
            telling.append(m)
    summary["telling_apart"] = telling
    (out / "tma_check.json").write_text(json.dumps(summary, indent=1, default=str))
    print(f"ncu rc {p.returncode}; {len(names)} tma/bulk counters listed; telling the kernels apart: {telling}")
    print(f"unknown metric: rc {bogus.returncode}; " + " | ".join(ln for ln in summary["unknown_metric"]["output"].splitlines() if "ERR" in ln or "rror" in ln)[:600])
    return 0 if telling else 1


if __name__ == "__main__":
    sys.exit(main())
