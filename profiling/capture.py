"""Capturing profiles of candidate calls: Kineto (torch.profiler), CUPTI (cupti-python), ncu.

    path = capture_kineto(lambda: solution(*inputs), calls=3, warmup=2, out_path=job_dir, rank=r)
    path = capture_cupti(lambda: solution(*inputs), calls=3, warmup=2, out_path=job_dir, rank=r)
    argv = run_ncu_command(["python", "-m", "pkb.eval.worker", "job.json"], ["my_kernel"], "rep").argv
    df = read_ncu_csv(text)  /  load_ncu_report("rep.ncu-rep")

One CUPTI subscriber per process: torch.profiler (Kineto) and cupti-python both subscribe to
CUPTI, and CUPTI (before CUDA 13.3 / r610 drivers) serves one subscriber only. So the two backends
never run in one process: whichever runs first claims the process (`_claim`), and the other then
raises BackendConflict. Run the CUPTI capture in a separate worker launch
(for example with PKB_PROFILE_BACKEND=cupti in the rank's environment).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from profiling import ranges

# ---- one CUPTI subscriber per process -------------------------------------------------------------

_OWNER: str | None = None


class BackendConflict(RuntimeError):
    """A second CUPTI client asked for in a process where the other one already ran."""


def _claim(backend: str) -> None:
    global _OWNER
    if _OWNER is not None and _OWNER != backend:
        raise BackendConflict(
            f"{backend} capture refused: this process already used {_OWNER}, and CUPTI takes one subscriber "
            "per process; run the other backend in its own process"
        )
    if backend == "cupti":
        try:
            import torch

            if torch.autograd._profiler_enabled():
                raise BackendConflict("cupti capture refused: a torch profiler is running in this process")
        except BackendConflict:
            raise
        except Exception:
            pass
    _OWNER = backend


def cupti_owner() -> str | None:
    """'kineto', 'cupti' or None: which CUPTI client this process has used."""
    return _OWNER


# ---- Kineto ----------------------------------------------------------------------------------------


def _experimental_config() -> Any:
    """_ExperimentalConfig(enable_cuda_sync_events=True) where this torch has it, else None."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(enable_cuda_sync_events=True)
    except Exception:
        return None


def _out_file(out_path: str | Path, rank: int, suffix: str) -> Path:
    p = Path(out_path)
    if p.suffix in (".json", ".gz", ".jsonl") or p.name.endswith(".json.gz"):
        p.parent.mkdir(parents=True, exist_ok=True)
        return p
    p.mkdir(parents=True, exist_ok=True)
    return p / f"rank{rank}{suffix}"


def _sync() -> None:
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:
        pass


def warm_up(fn: Callable[[], Any], warmup: int, sync: bool = True) -> None:
    """The un-profiled calls before a capture (first-call effects stay out of it)."""
    for _ in range(max(0, warmup)):
        fn()
    if sync:
        _sync()


def ranged_calls(fn: Callable[[], Any], calls: int, sync: bool = True) -> None:
    """`calls` calls of fn, each inside its pkb:candidate_call[i] range (ranges must be enabled)."""
    for i in range(calls):
        with ranges.phase(ranges.candidate_call(i)):
            fn()
        if sync:
            _sync()


def capture_kineto(
    fn: Callable[[], Any],
    calls: int = 3,
    warmup: int = 2,
    out_path: str | Path = "pkb_profile",
    rank: int = 0,
    *,
    sync: bool = True,
    meta: dict[str, Any] | None = None,
    trim: bool = False,
) -> Path:
    """Run fn `warmup` times, then `calls` times under the Kineto profiler; write a gzip chrome trace.

    Each profiled call runs inside phase("pkb:candidate_call[i]"); the device-wide synchronize
    after a call (sync=True) lies outside the range, so it is not charged to the candidate. The
    trace gets a top-level "pkb" block (rank, calls, warmup, torch version, sync events on or off,
    plus `meta`). out_path is a folder (the file is rank<r>.trace.json.gz in it) or a file name.
    trim=True keeps only the events of the profiled calls (trim_chrome_trace).
    """
    import torch
    from torch.autograd.profiler import profile

    _claim("kineto")
    out = _out_file(out_path, rank, ".trace.json.gz")
    warm_up(fn, warmup, sync)
    cfg = _experimental_config()
    # torch.autograd.profiler.profile is the Kineto profiler that torch.profiler.profile wraps; the
    # wrapper's start imports torch._inductor (2.2 s on a CPU rank, measured), which a capture of
    # three calls does not need.
    kwargs: dict[str, Any] = dict(use_kineto=True, use_cpu=True, record_shapes=False, with_stack=False, profile_memory=False)
    if torch.cuda.is_available():
        kwargs["use_device"] = "cuda"
    if cfg is not None:
        kwargs["experimental_config"] = cfg
    t0 = time.perf_counter()
    with ranges.enabled():
        with profile(**kwargs) as prof:
            ranged_calls(fn, calls, sync)
    wall = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        data = json.loads(raw.read_text(encoding="utf-8", errors="replace"))
    data["pkb"] = {
        "rank": rank,
        "calls": calls,
        "warmup": warmup,
        "profiled_wall_s": wall,
        "torch": torch.__version__,
        "cuda_sync_events": cfg is not None,
        "nvtx_backend": ranges.nvtx_backend(),
        **(meta or {}),
    }
    if trim:
        data = trim_chrome_trace(data)
    write_chrome_trace(data, out)
    return out


def write_chrome_trace(data: dict[str, Any], path: str | Path) -> Path:
    p = Path(path)
    blob = json.dumps(data, separators=(",", ":")).encode("utf-8")
    if p.name.endswith(".gz"):
        p.write_bytes(gzip.compress(blob, compresslevel=9))
    else:
        p.write_bytes(blob)
    return p


def trim_chrome_trace(data: dict[str, Any], prefix: str = ranges.CALL_PREFIX, pad_us: float = 0.0) -> dict[str, Any]:
    """Keep metadata events, the ranges starting with `prefix`, the events inside them (CPU side),
    the GPU events their launches correlate to, and the flows of those launches. Args of dropped
    kinds are untouched; the result is a valid chrome trace."""
    evs = [e for e in data.get("traceEvents", []) if isinstance(e, dict)]
    windows = [
        (float(e["ts"]) - pad_us, float(e["ts"]) + float(e.get("dur", 0)) + pad_us)
        for e in evs
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith(prefix)
    ]

    def inside(ts: float) -> bool:
        return any(s <= ts <= t for s, t in windows)

    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation"}
    keep_corr: set[Any] = set()
    cpu_keep = []
    for e in evs:
        if e.get("ph") == "X" and e.get("cat") not in gpu_cats and inside(float(e.get("ts", 0))):
            cpu_keep.append(e)
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                keep_corr.add(c)
    out = []
    for e in evs:
        ph, cat = e.get("ph"), e.get("cat")
        if ph == "M":
            out.append(e)
        elif ph == "X" and cat in gpu_cats:
            c = (e.get("args") or {}).get("correlation")
            name = str(e.get("name", ""))
            if (c is not None and c in keep_corr) or (cat == "gpu_user_annotation" and name.startswith(prefix)):
                out.append(e)
        elif ph in ("s", "f", "t"):
            if e.get("id") in keep_corr:
                out.append(e)
    out.extend(cpu_keep)
    trimmed = {k: v for k, v in data.items() if k != "traceEvents"}
    trimmed["traceEvents"] = out
    return trimmed


# ---- CUPTI (cupti-python) -------------------------------------------------------------------------

# CUpti_ChannelType: the channel a memcpy was submitted on (CUPTI 12.x+): ASYNC_MEMCPY, an
# asynchronous copy engine's own channel; COMPUTE, the stream's compute channel (on the H200 a
# same-device cudaMemcpyAsync came this way, and a 4-byte device-to-host copy the async way).
CHANNEL_TYPES = {0: "invalid", 1: "compute", 2: "async_memcpy"}
MEMCPY_PTOP = 10


def find_libcupti() -> str | None:
    """The libcupti shared library to use as NVTX_INJECTION64_PATH (None where none is found)."""
    roots: list[Path] = []
    try:
        import cupti as _c  # type: ignore[import-not-found]

        roots.append(Path(_c.__file__).resolve().parent)
    except Exception:
        pass
    for p in sys.path:
        q = Path(p) / "nvidia"
        if q.is_dir():
            roots.append(q)
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    roots += [Path(cuda_home) / "extras" / "CUPTI" / "lib64", Path(cuda_home) / "lib64"]
    for r in roots:
        if not r.is_dir():
            continue
        hits = sorted(r.rglob("libcupti.so*"))
        if hits:
            return str(hits[0])
    return None


def cupti_environment() -> dict[str, str]:
    """Environment for a process that will run capture_cupti with NVTX ranges as MARKER records.

    NVTX reads NVTX_INJECTION64_PATH at its first call, so it must be in the process's environment
    before any range is pushed: set it in the rank's environment at launch.
    """
    lib = find_libcupti()
    env = {"PKB_PROFILE_RANGES": "1"}
    if lib:
        env["NVTX_INJECTION64_PATH"] = lib
    return env


def api_names(cupti: Any) -> dict[str, dict[int, str]]:
    """cbid -> API function name ("cudaLaunchKernel_v7000") for RUNTIME and DRIVER records, which
    carry only the cbid (H200, cupti-python 13.0.1)."""
    out: dict[str, dict[int, str]] = {}
    for kind, enum_name in (("RUNTIME", "runtime_api_trace_cbid"), ("DRIVER", "driver_api_trace_cbid")):
        enum = getattr(cupti, enum_name, None)
        out[kind] = {int(m): m.name for m in enum} if enum is not None else {}
    return out


def _record_dict(rec: Any, kind_names: dict[int, str], apis: dict[str, dict[int, str]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attr in dir(rec):
        if attr.startswith("_"):
            continue
        try:
            v = getattr(rec, attr)
        except Exception:
            continue
        if callable(v):
            continue
        # cupti-python spells fields that clash with Python words with a trailing "_" (flags_, async_)
        key = attr[:-1] if attr.endswith("_") else attr
        if isinstance(v, (bool, int, float, str)) or v is None:
            out[key] = v
        elif isinstance(v, bytes):
            out[key] = v.decode("utf-8", errors="replace")
        elif hasattr(v, "value") and isinstance(getattr(v, "value"), int):  # enums
            out[key] = int(v.value)
        elif attr == "object_id":  # a marker's thread: ActivityObjectKindId.pt (process_id, thread_id)
            pt = getattr(v, "pt", None)
            for f in ("process_id", "thread_id"):
                x = getattr(pt, f, None)
                if isinstance(x, int):
                    out[f] = x
    k = out.get("kind")
    if isinstance(k, int):
        out["kind_name"] = kind_names.get(k, str(k))
    if apis and not out.get("name") and isinstance(out.get("cbid"), int):
        name = apis.get(out.get("kind_name", ""), {}).get(out["cbid"])
        if name:
            out["name"] = name
    if "channel_type" in out and isinstance(out["channel_type"], int):
        out["channel"] = CHANNEL_TYPES.get(out["channel_type"], str(out["channel_type"]))
    return out


def capture_cupti(
    fn: Callable[[], Any],
    calls: int = 3,
    warmup: int = 2,
    out_path: str | Path = "pkb_profile",
    rank: int = 0,
    *,
    sync: bool = True,
    buffer_bytes: int = 8 << 20,
) -> Path | None:
    """Like capture_kineto through cupti-python; writes JSON lines (profiling.trace.load_cupti_jsonl).

    Activity kinds: CONCURRENT_KERNEL (plain KERNEL would serialize kernels and hide overlap),
    MEMCPY and MEMCPY2 (copyKind: PTOP = 10; channel_type: ASYNC_MEMCPY = 2, COMPUTE = 1),
    MEMSET, SYNCHRONIZATION, RUNTIME, DRIVER, MARKER (NVTX ranges, when NVTX_INJECTION64_PATH points
    at libcupti: see cupti_environment). Returns None, with a warning, where cupti-python is not
    installed. Raises BackendConflict in a process that already used torch.profiler.
    """
    try:
        from cupti import cupti  # type: ignore[import-not-found]
    except Exception as exc:
        warnings.warn(f"capture_cupti: cupti-python is not importable ({exc}); no CUPTI capture")
        return None
    _claim("cupti")
    out = _out_file(out_path, rank, ".cupti.jsonl")
    if "NVTX_INJECTION64_PATH" not in os.environ:
        lib = find_libcupti()
        if lib:  # only works if NVTX was not used yet in this process
            os.environ["NVTX_INJECTION64_PATH"] = lib
    AK = cupti.ActivityKind
    kind_names = {int(k.value if hasattr(k, "value") else k): getattr(k, "name", str(k)) for k in AK}
    apis = api_names(cupti)
    records: list[dict[str, Any]] = []

    def requested() -> tuple[int, int]:
        return buffer_bytes, 0

    def completed(activities: list[Any]) -> None:
        for a in activities:
            try:
                records.append(_record_dict(a, kind_names, apis))
            except Exception as exc:  # one odd record must not lose the rest
                records.append({"kind": "pkb_error", "message": str(exc)})

    warm_up(fn, warmup, sync)
    cupti.activity_register_callbacks(requested, completed)
    wanted = ["CONCURRENT_KERNEL", "MEMCPY", "MEMCPY2", "MEMSET", "SYNCHRONIZATION", "RUNTIME", "DRIVER", "MARKER"]
    enabled_kinds = []
    for name in wanted:
        k = getattr(AK, name, None)
        if k is None:
            continue
        try:
            cupti.activity_enable(k)
            enabled_kinds.append(k)
        except Exception as exc:
            warnings.warn(f"capture_cupti: activity kind {name} not enabled: {exc}")
    t0 = time.perf_counter()
    try:
        with ranges.enabled(record_function=False):
            ranged_calls(fn, calls, sync)
    finally:
        wall = time.perf_counter() - t0
        try:
            cupti.activity_flush_all(1)  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
        except Exception:
            pass
        for k in enabled_kinds:
            try:
                cupti.activity_disable(k)
            except Exception:
                pass
    header = {
        "kind": "pkb_header", "rank": rank, "calls": calls, "warmup": warmup, "pid": os.getpid(),
        "profiled_wall_s": wall, "nvtx_backend": ranges.nvtx_backend(),
        "nvtx_injection": os.environ.get("NVTX_INJECTION64_PATH", ""),
    }
    with open(out, "w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for r in records:
            f.write(json.dumps(r, default=str) + "\n")
    return out


# ---- Nsight Compute --------------------------------------------------------------------------------

NCU_METRICS = (
    "gpu__time_duration.sum",
    "nvlrx__bytes.sum",
    "nvltx__bytes.sum",
    "lts__t_sectors_aperture_peer.sum",
    "lts__t_sectors_srcunit_tex_aperture_peer.sum",
    "lts__t_sectors_srcunit_tex_aperture_peer_op_read.sum",
    "lts__t_sectors_srcunit_tex_aperture_peer_op_write.sum",
    "dram__bytes.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    # TMA (cp.async.bulk, cp.async.bulk.tensor): bytes the unit read from / wrote to global memory
    # and its instructions. profiling.tma_check on the H200: exactly the 16 MiB a bulk-copy kernel
    # moved each way, 0 on a plain SM copy of the same bytes.
    "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld.sum",
    "l1tex__m_l1tex2xbar_write_bytes_mem_global_op_tma_st.sum",
    "sm__sass_inst_executed_op_tma.sum",
)


@dataclass
class NcuRun:
    argv: list[str]
    report: str
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    env: dict[str, str] = field(default_factory=dict)
    unavailable_metrics: list[str] = field(default_factory=list)  # what ncu could not collect here


_UNAVAILABLE = re.compile(r"Unable to access the following \d+ metrics?: ([^\n]+?)\.?\s*$", re.MULTILINE)


def metric_base(name: str) -> str:
    """'nvltx__bytes' for 'nvltx__bytes.sum': the name ncu reports access problems and columns by."""
    return name.split(".", 1)[0]


def unavailable_metrics(output: str, asked: Iterable[str] = ()) -> list[str]:
    """Base names of the metrics ncu refused ("nvltx__bytes" for nvltx__bytes.sum): the ones it
    said it could not access, and any of `asked` that an ==ERROR== line names otherwise. (A name
    ncu does not know is no refusal: ncu 2025.3 skips it, exits 0 and leaves its column out.)

    The lent one-GPU H200 answers "Unable to access" for nvlrx__bytes and nvltx__bytes and then
    profiles nothing.
    """
    names: set[str] = set()
    text = output or ""
    for m in _UNAVAILABLE.finditer(text):
        for part in m.group(1).split(","):
            part = part.strip()
            if part:
                names.add(metric_base(part))
    errors = [ln for ln in text.splitlines() if "==ERROR==" in ln]
    for base in {metric_base(a) for a in asked}:
        if any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(base)}(?![A-Za-z0-9_])", ln) for ln in errors):
            names.add(base)
    return sorted(names)


def refused_metrics(output: str, returncode: int | None, metrics: Sequence[str]) -> list[str]:
    """The metrics of `metrics` to drop for a rerun: those a failed ncu run refused, when that
    leaves at least one (so each rerun drops at least one metric and keeps one); else []."""
    if returncode == 0:
        return []
    missing = set(unavailable_metrics(output, metrics))
    refused = [m for m in metrics if metric_base(m) in missing]
    return refused if len(refused) < len(metrics) else []


def kernel_base_name(name: str) -> str:
    """'pkb_gather' from 'void ns::pkb_gather<float>(float const*, int)' (ncu's 'function' base)."""
    s = re.sub(r"^\s*void\s+", "", name or "")
    s = s.split("(", 1)[0]
    depth, out = 0, []
    for ch in s:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out).split("::")[-1].strip()


def run_ncu_command(
    target: Sequence[str],
    kernels: Iterable[str],
    report: str | Path,
    *,
    world_size: int = 1,
    nvtx_include: str | None = ranges.ncu_include(ranges.candidate_call(1)),
    metrics: Sequence[str] = NCU_METRICS,
    launch_count: int | None = None,
    ncu: str = "ncu",
    extra: Sequence[str] = (),
    execute: bool = False,
    timeout_s: float | None = None,
) -> NcuRun:
    """The ncu command line for `target` (argv of the program ncu runs) and chosen kernels.

    Profiles only kernels whose base name matches one of `kernels`, only inside the NVTX range
    `nvtx_include` (default: the second profiled call, past first-call effects), clocks unlocked.
    With several ranks each rank runs under its own ncu, which coordinate through
    `--communicator tcp --communicator-num-peers N`; the report name gets `%q{RANK}` so each rank
    writes its own. The program must open its ranges through NVTX (profiling.ranges with
    PKB_PROFILE_RANGES=1, which this puts in env). execute=True runs it; where ncu cannot access
    some of the metrics on this machine it runs once more without them and lists them in
    `unavailable_metrics`.
    """
    names = sorted({kernel_base_name(k) for k in kernels if k})
    rep = str(report)
    if world_size > 1 and "%q{RANK}" not in rep:
        rep = f"{rep}_rank%q{{RANK}}"
    argv = [ncu, "--clock-control", "none", "--target-processes", "all"]
    if nvtx_include:
        argv += ["--nvtx", "--nvtx-include", nvtx_include]
    if names:
        argv += ["-k", "regex:^(" + "|".join(re.escape(n) for n in names) + ")$"]
    if metrics:
        argv += ["--metrics", ",".join(metrics)]
    if launch_count:
        argv += ["-c", str(int(launch_count))]
    if world_size > 1:
        argv += ["--communicator", "tcp", "--communicator-num-peers", str(int(world_size))]
    argv += ["-f", "-o", rep, *extra, *target]
    env = {"PKB_PROFILE_RANGES": "1"}
    run = NcuRun(argv=argv, report=rep, env=env)
    if execute:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, **env})
        run.returncode, run.stdout, run.stderr = p.returncode, p.stdout, p.stderr
        refused = refused_metrics(p.stdout + "\n" + p.stderr, p.returncode, metrics)
        if refused:
            kept = [m for m in metrics if m not in refused]
            again = run_ncu_command(target, kernels, report, world_size=world_size, nvtx_include=nvtx_include, metrics=kept,
                                    launch_count=launch_count, ncu=ncu, extra=extra, execute=True, timeout_s=timeout_s)
            again.unavailable_metrics = sorted({metric_base(m) for m in refused} | set(again.unavailable_metrics))
            return again
    return run


def _number(v: str) -> Any:
    s = (v or "").strip().replace(",", "")
    if s in ("", "n/a", "N/A"):
        return None
    try:
        return int(s)
    except ValueError:
        try:
            return float(s)
        except ValueError:
            return v


def read_ncu_csv(source: str | Path) -> "Any":
    """DataFrame of `ncu --import x.ncu-rep --csv --page raw` output (text or a file path).

    Row 1 is the header, row 2 the units (kept in df.attrs["units"]); numbers lose their thousands
    separators. Lines ncu prints before the table (==PROF== ...) are skipped.
    """
    import pandas as pd

    text = source if isinstance(source, str) and "\n" in source else Path(source).read_text(encoding="utf-8", errors="replace")
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows:
        return pd.DataFrame()
    header, body = rows[0], rows[1:]
    units: dict[str, str] = {}
    if body and all(c == "" for c in body[0][: min(3, len(body[0]))]):
        units = dict(zip(header, body[0]))
        body = body[1:]
    df = pd.DataFrame([[_number(c) for c in r] for r in body], columns=header)
    df.attrs["units"] = units
    return df


def load_ncu_report(report: str | Path, *, ncu: str = "ncu") -> "Any":
    """DataFrame of an .ncu-rep: through ncu's python `ncu_report` module when importable, else
    through `ncu --import <rep> --csv --page raw --print-units base`. Columns: 'Kernel Name', 'ID',
    metrics, in base units (bytes, nanoseconds)."""
    import pandas as pd

    try:
        import ncu_report  # type: ignore[import-not-found]
    except Exception:
        ncu_report = None
    if ncu_report is not None:
        try:
            ctx = ncu_report.load_report(str(report))
            rows = []
            for r in range(ctx.num_ranges()):
                rng = ctx.range_by_idx(r)
                for a in range(rng.num_actions()):
                    act = rng.action_by_idx(a)
                    row: dict[str, Any] = {"ID": len(rows), "Kernel Name": act.name()}
                    for m in act.metric_names():
                        try:
                            row[m] = act.metric_by_name(m).value()
                        except Exception:
                            pass
                    rows.append(row)
            return pd.DataFrame(rows)
        except Exception as exc:
            warnings.warn(f"ncu_report could not read {report} ({exc}); falling back to ncu --csv")
    exe = shutil.which(ncu) or ncu
    # base units (byte, nsecond): the default scales each column to its own (Mbyte, usecond)
    p = subprocess.run([exe, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"ncu --import failed ({p.returncode}): {p.stderr[-2000:]}")
    return read_ncu_csv(p.stdout if "\n" in p.stdout else p.stdout + "\n")
