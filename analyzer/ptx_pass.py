"""PTX pass: compile a candidate's device code to PTX with nvcc and read what was really emitted.

Templates, CUDA headers (`cuda::atomic_ref`, `cuda::ptx`) and inline asm hide the mechanism from a
source-level pass; the PTX shows it: `multimem.*` (NVLS), `cp.async.bulk*` (TMA), `ld.acquire.sys`
/ `st.release.sys` / `atom.*.sys` (system-scope ordering), `fence.sc.sys` / `membar.sys`, ...

This module is the pass's spine: whether to compile at all (`skip_reason`), the cache of results
(keyed by the TU, nvcc's version and flags), the order of attempts, and the summary for the
taxonomy. Its collaborators: the device-only translation unit (analyzer/device_tu.py, over the
C++ scanner analyzer/cpp_scan.py), running nvcc and reading its errors (analyzer/nvcc.py),
reading the PTX (analyzer/ptx_reader.py), and what each instruction means (analyzer/ptx_ops.py).
When the device-only TU does not compile, the full source is tried once with torch's include
paths. Reads the CudaSource, the clang pass's facts about it, and the cache folder.

Public API: `find_nvcc`, `analyze_ptx`, `ptx_summary`, `skip_reason` (and, from their modules,
`parse_ptx` for PTX text and `build_device_tu`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

from analyzer import ptx_ops
from analyzer.device_tu import TORCH_INCLUDE_RE, build_device_tu, full_tu, needs_rdc
from analyzer.nvcc import (
    NVCC_FLAGS,
    cuda_include_dirs,
    error_lines,
    find_nvcc,
    implicated_appended,
    missing_headers,
    nvcc_version,
    run_nvcc,
    torch_includes,
    torch_version,
)
from analyzer.ptx_reader import entries_from_raw, fix_asm_lines, map_lines, parse_ptx
from analyzer.cpp_scan import mask
from pkb.facts import CudaFacts, CudaSource, PtxFacts

__all__ = ["PASS_VERSION", "SKIPPED_MESSAGE", "SUMMARY_KEYS", "analyze_ptx", "build_device_tu", "find_nvcc",
           "parse_ptx", "ptx_summary", "skip_reason"]

# Bump when the TU construction or the PTX parser changes: old cache entries then miss.
PASS_VERSION = "ptx-pass-4"

SKIPPED_MESSAGE = "nvcc not found; PTX pass skipped (set PKB_NVCC or put nvcc on PATH)"


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pkb-analyze" / "ptx"


def _cache_load(cache_dir: Path | None, key: str) -> dict | None:
    if cache_dir is None:
        return None
    p = cache_dir / key[:2] / f"{key}.json"
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def _cache_store(cache_dir: Path | None, key: str, data: dict, ptx: str) -> None:
    if cache_dir is None:
        return
    try:
        d = cache_dir / key[:2]
        d.mkdir(parents=True, exist_ok=True)
        for name, content in ((f"{key}.ptx", ptx), (f"{key}.json", json.dumps(data, indent=1))):
            tmp = d / f".{name}.{os.getpid()}.tmp"
            tmp.write_text(content)
            os.replace(tmp, d / name)
    except OSError:
        pass


# --------------------------------------------------------------------------------------------
# the pass
# --------------------------------------------------------------------------------------------


def analyze_ptx(
    src: CudaSource,
    cuda: CudaFacts | None,
    file: str,
    nvcc: str | None,
    cache_dir: Path | None = None,
    timeout_s: float = 120,
    skip_decided: bool = False,
) -> PtxFacts:
    """Compile `src`'s device code to sm_90 PTX and record its entries' taxonomy-relevant
    instructions with file lines. Never raises. With `skip_decided`, a source whose labels the
    source passes already decide is not compiled (status skipped, with the reason)."""
    t0 = time.monotonic()
    index = getattr(src, "index", 0)
    if nvcc is None:
        return PtxFacts(source_index=index if isinstance(index, int) else 0, status="skipped", message=SKIPPED_MESSAGE)
    try:
        facts = _analyze(src, cuda, file, nvcc, cache_dir, timeout_s, t0, skip_decided)
    except Exception as e:  # noqa: BLE001 - this pass must never break the analysis
        facts = PtxFacts(source_index=index, status="failed", message=f"PTX pass error: {type(e).__name__}: {e}")
    facts.source_index = index
    facts.seconds = round(time.monotonic() - t0, 4)
    return facts


def _analyze(
    src: CudaSource,
    cuda: CudaFacts | None,
    file: str,
    nvcc: str | None,
    cache_dir: Path | None,
    timeout_s: float,
    t0: float,
    skip_decided: bool = True,
) -> PtxFacts:
    if nvcc is None:
        return PtxFacts(source_index=src.index, status="skipped", message=SKIPPED_MESSAGE)
    text = src.text or ""
    if not re.search(r"__global__|__device__", mask(text)):
        return PtxFacts(source_index=src.index, status="ok", message="no device code in this source; nothing to compile")
    reason = skip_reason(src, cuda, nvcc) if skip_decided else ""
    if reason:
        return PtxFacts(source_index=src.index, status="skipped", message="not compiled: " + reason)
    tu = build_device_tu(src, cuda)
    flags = list(NVCC_FLAGS) + (["-rdc=true"] if needs_rdc(text) else [])
    tu_text = tu.text()
    version = nvcc_version(nvcc)
    key = hashlib.sha256(
        "\0".join(
            [PASS_VERSION, tu_text, version, " ".join(flags), (full_tu(src) + torch_version()) if tu.changed else ""]
        ).encode()
    ).hexdigest()
    cache_dir = _default_cache_dir() if cache_dir is None else Path(cache_dir)
    hit = _cache_load(cache_dir, key)
    if hit is not None and isinstance(hit.get("facts"), dict):
        try:
            from pkb.serde import from_data

            facts = from_data(PtxFacts, hit["facts"])
            facts.message = (facts.message + " " if facts.message else "") + "(from cache)"
            return map_lines(facts, src)
        except Exception:  # noqa: BLE001 - a damaged cache entry is a miss
            pass

    def remaining() -> float:
        return timeout_s - (time.monotonic() - t0)

    max_line = tu.first_appended_line - 1
    notes = list(tu.notes)
    # 1. the device-only TU (and once more without the instantiations nvcc rejected)
    insts = list(tu.insts)
    run = run_nvcc(nvcc, tu.text(insts), flags, remaining())
    device_runs = [run]
    if not run.ok and not run.timed_out and insts:
        bad = implicated_appended(run.output, tu.first_appended_line)
        if bad:
            first = tu.first_appended_line
            dropped = [w for k, (w, _) in enumerate(insts) if first + k in bad]
            insts = [it for k, it in enumerate(insts) if first + k not in bad]
            notes.append("templates not instantiated (nvcc rejected the instantiation): " + ", ".join(dropped))
            if remaining() > 1:
                run = run_nvcc(nvcc, tu.text(insts), flags, remaining())
                device_runs.append(run)
    device_s = sum(r.seconds for r in device_runs)
    path = ""
    cacheable = True
    if run.ok:
        path = f"device-only TU compiled in {device_s:.2f} s"
    elif run.oserror:
        return PtxFacts(source_index=src.index, status="failed", message=f"nvcc could not be run: {run.oserror}")
    device_errors = error_lines(run.output, src, file, tu.first_appended_line) if not run.ok else []
    missing = missing_headers(run.output) if not run.ok else []
    if not run.ok and missing and not any(TORCH_INCLUDE_RE.match(f"#include <{h}>") for h in missing):
        # a header that is not torch's is missing: the full source cannot find it either
        msg = "nvcc failed (missing header " + ", ".join(missing) + "): " + " | ".join(device_errors)
        facts = PtxFacts(source_index=src.index, status="failed", message=msg)
        _cache_store(cache_dir, key, {"key": key, "facts": _data(facts)}, "")
        return facts
    if not run.ok:
        if run.timed_out:
            cacheable = False
            msg = f"nvcc timed out after {run.seconds:.1f} s on the device-only TU (limit {timeout_s:g} s)"
            return PtxFacts(source_index=src.index, status="failed", message=msg)
        if not tu.changed:
            msg = "nvcc failed on the source: " + " | ".join(device_errors)
            facts = PtxFacts(source_index=src.index, status="failed", message=msg)
            _cache_store(cache_dir, key, {"key": key, "facts": _data(facts)}, "")
            return facts
        # 2. the full source with torch's include paths
        incs, defs = torch_includes()
        full_flags = flags + [f"-I{d}" for d in incs] + defs
        left = remaining()
        if left <= 1:
            msg = "device-only TU failed: " + " | ".join(device_errors) + "; no time left for the full-source retry"
            return PtxFacts(source_index=src.index, status="failed", message=msg)
        full = run_nvcc(nvcc, full_tu(src), full_flags, left)
        if full.ok:
            run = full
            path = (
                f"full source compiled with torch headers in {full.seconds:.2f} s "
                f"(device-only TU failed after {device_s:.2f} s: {device_errors[0] if device_errors else '?'})"
            )
            max_line = src.text.count("\n") + 1
        else:
            if full.timed_out:
                cacheable = False
                full_msg = f"timed out after {full.seconds:.1f} s"
            else:
                full_msg = " | ".join(error_lines(full.output, src, file, None))
            torch_note = "" if incs else " (torch not importable: no torch include paths)"
            msg = (
                "nvcc failed. device-only TU: " + " | ".join(device_errors)
                + f" ; full source with torch headers{torch_note}: " + full_msg
            )
            facts = PtxFacts(source_index=src.index, status="failed", message=msg)
            if cacheable:
                _cache_store(cache_dir, key, {"key": key, "facts": _data(facts)}, "")
            return facts
    raw = parse_ptx(run.ptx)
    fix_asm_lines(raw, src.text)
    entries = entries_from_raw(raw, max_line)
    message = path + (f" (nvcc {version.split('|')[0].strip()})" if version else "")
    if "-rdc=true" in flags:
        message += "; compiled with -rdc=true (extern device functions)"
    if notes:
        message += "; " + "; ".join(notes)
    facts = PtxFacts(source_index=src.index, status="ok", message=message, entries=entries)
    if cacheable:
        _cache_store(cache_dir, key, {"key": key, "facts": _data(facts)}, run.ptx)
    return map_lines(facts, src)


def _data(facts: PtxFacts) -> dict:
    from pkb.serde import to_data

    return to_data(facts)


# --------------------------------------------------------------------------------------------
# summary for the taxonomy
# --------------------------------------------------------------------------------------------

SUMMARY_KEYS = ptx_ops.FEATURES


def ptx_summary(ptx: PtxFacts) -> dict[str, list[int]]:
    """Taxonomy features -> sorted file lines where the PTX shows them (empty lists when absent)."""
    out: dict[str, set[int]] = {k: set() for k in SUMMARY_KEYS}
    for e in ptx.entries if ptx is not None else []:
        for ins in e.instructions:
            for k in ptx_ops.decode(ins.mnemonic).features():
                out[k].update(ins.lines)
    return {k: sorted(v) for k, v in out.items()}


# --------------------------------------------------------------------------------------------
# when the PTX pass has nothing to add
# --------------------------------------------------------------------------------------------

# Headers whose device code the clang prelude does not stand in for: templates in them can emit
# multimem / bulk-copy / system-scope instructions the source pass cannot see.
_DEVICE_HEADER_RE = re.compile(r"^(cuda/ptx|cuda/(?!atomic|std/atomic|barrier|pipeline|std/cstdint)|cub/|cute/|cutlass/|cooperative_groups/|nvshmem|cuda_pipeline|cuda_awbarrier)")
_HOST_HEADER_RE = re.compile(r"^(torch|ATen|c10|caffe2|pybind11|Python\.h|THC|cublas|cublasLt|cusparse|cufft|curand|nccl|cuda_runtime|cuda\.h|std|[a-z_]+(\.h)?$)")


def skip_reason(src: CudaSource, cuda: CudaFacts | None, nvcc: str | None = None) -> str:
    """Why compiling `src` to PTX would add nothing, or '' when the PTX pass should run.

    It is skipped (1) where the source includes a header nvcc cannot find either (ThunderKittens'
    kittens.cuh: the compile would fail; the source pass reads those idioms), and (2) where the
    clang pass saw every line of device code: no parse error inside a kernel or device function,
    and no included header whose device templates the prelude does not model (cuda/ptx, cub,
    cute, ...). Then the PTX could only repeat what the source already decided."""
    if cuda is None or cuda.status == "failed":
        return ""
    unavailable = [h for h in cuda.missing_headers if not _HOST_HEADER_RE.match(h)
                   and not any(os.path.exists(os.path.join(d, h)) for d in cuda_include_dirs(nvcc))]
    if unavailable:
        return ("header " + ", ".join(unavailable[:3]) + " is not installed, so nvcc cannot compile this source;"
                " the source pass read its device code")
    if any(_DEVICE_HEADER_RE.match(h) for h in cuda.missing_headers):
        return ""
    device = [(f.line, f.end_line) for f in cuda.functions if f.kind != "host"]
    errors = [d for d in cuda.diagnostics if d.severity in ("error", "fatal")]
    if any(d.line == 0 or any(a <= d.line <= b for a, b in device) for d in errors):
        return ""
    return "the source pass saw all device code (no parse error in a kernel or device function, no unmodeled device header)"


if __name__ == "__main__":  # pragma: no cover - manual use: python -m analyzer.ptx_pass file.cu
    from pkb.serde import to_data

    for arg in sys.argv[1:]:
        t = Path(arg).read_text()
        s = CudaSource(index=0, origin="file", text=t, line_map=list(range(1, t.count("\n") + 2)))
        f = analyze_ptx(s, None, arg, find_nvcc())
        print(json.dumps(to_data(f), indent=1))
        print(json.dumps(ptx_summary(f)))
