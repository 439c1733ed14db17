"""After a timeout on one GPU: could the ranks' grids have been resident at the same time?

On real hardware every rank owns a GPU. Under emulation all ranks' kernels share one device, so a
kernel that spins until a peer's kernel sets a flag only finishes if that peer's blocks get SMs
while it spins. If the spinning grids fill the device, the peer's blocks never start: the hang is
an artefact of emulation and the honest verdict is status `inconclusive` (no outcome), not `hang`.

What can be known after the fact:
- the device's limits (SMs, threads and shared memory per SM) from torch;
- launches the emulation saw with their configuration (`record_launch`: cupy RawKernel launches are
  recorded by the patch when cupy is present; an extension's `<<<...>>>` launches are not
  visible to Python), with occupancy from cudaOccupancyMaxActiveBlocksPerMultiprocessor where a
  function handle is known;
- a probe: a one-element kernel on a fresh stream while the ranks are stuck. If it completes, the
  device had room, so the stuck grids were resident and the deadlock is the candidate's (`hang`);
  if it does not complete in time, the device is saturated by the spinning grids, so a peer's
  blocks can have been starved (`inconclusive`); if its launch does not even return in that
  time, nothing is known (`unknown`).
"""

from __future__ import annotations

import threading
import time
from typing import Any

PROBE_WAIT_S = 3.0
# Hopper, Ada, Ampere: at most 32 resident blocks per SM (Ampere GA10x 16); used only as a bound.
MAX_BLOCKS_PER_SM = 32


class Probe:
    """Allocated before the run so that probing needs no allocation (cudaMalloc may sync)."""

    def __init__(self, device: Any) -> None:
        import torch

        self.device = device
        self.stream = torch.cuda.Stream(device=device)
        with torch.cuda.stream(self.stream):
            self.buf = torch.zeros(1, device=device)
            # Launch the probe's kernel once now: under lazy module loading (CUDA's default) a
            # kernel's first launch loads its module, which waits for the device to go idle, and
            # it never does while the ranks spin (seen on an H100: the probe's launch hung the
            # analysis until the child was killed).
            self.buf.add_(1.0)
            self.event = torch.cuda.Event()
            self.event.record(self.stream)
        self.stream.synchronize()

    def run(self, wait_s: float = PROBE_WAIT_S) -> dict[str, Any]:
        import torch

        t0 = time.monotonic()
        launched: dict[str, Any] = {}

        def launch() -> None:
            try:
                with torch.cuda.stream(self.stream):
                    self.buf.add_(1.0)
                    self.event.record(self.stream)
                launched["ok"] = True
            except Exception as exc:  # a sticky CUDA error from the candidate, for instance
                launched["error"] = f"{type(exc).__name__}: {exc}"[:300]

        # The launch itself may block in the driver; a thread keeps the wait bounded.
        thread = threading.Thread(target=launch, name="coresidency-probe", daemon=True)
        thread.start()
        thread.join(wait_s)
        if "error" in launched:
            return {"probe": "error", "probe_error": launched["error"]}
        if not launched:
            return {"probe": "blocked", "probe_s": round(time.monotonic() - t0, 3)}
        try:
            while time.monotonic() - t0 < wait_s:
                if self.event.query():
                    return {"probe": "completed", "probe_s": round(time.monotonic() - t0, 3)}
                time.sleep(0.01)
        except Exception as exc:
            return {"probe": "error", "probe_error": f"{type(exc).__name__}: {exc}"[:300]}
        return {"probe": "starved", "probe_s": round(time.monotonic() - t0, 3)}


def device_limits(device: Any) -> dict[str, Any]:
    import torch

    p = torch.cuda.get_device_properties(device)
    out = {
        "name": p.name,
        "sms": p.multi_processor_count,
        "max_threads_per_sm": getattr(p, "max_threads_per_multi_processor", None),
        "shared_memory_per_sm": getattr(p, "shared_memory_per_multiprocessor", None),
        "regs_per_sm": getattr(p, "regs_per_multiprocessor", None),
        "max_blocks_per_sm_bound": MAX_BLOCKS_PER_SM,
    }
    return out


def record_launch(world: Any, rank: int, name: str, blocks: int, threads_per_block: int, max_active_per_sm: int | None = None) -> None:
    """Note one kernel launch of a rank (for the co-residency arithmetic after a timeout)."""
    with world.lock:
        world.shared.setdefault("launches", []).append(
            {"rank": rank, "name": name, "blocks": int(blocks), "threads": int(threads_per_block), "max_active_per_sm": max_active_per_sm}
        )


def occupancy_bound(limits: dict[str, Any], launches: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum of the blocks launched vs what the device holds at once (where known)."""
    if not launches:
        return {"determinable": False, "why": "no launch configuration visible to the emulation (extension <<<>>> launches are not)"}
    sms = limits["sms"]
    total = sum(l["blocks"] for l in launches)
    known = [l for l in launches if l.get("max_active_per_sm")]
    if len(known) < len(launches):
        # Only a thread bound: blocks of `threads` threads per SM at most max_threads_per_sm / threads.
        cap = sum(
            min(MAX_BLOCKS_PER_SM, (limits.get("max_threads_per_sm") or 2048) // max(1, l["threads"])) * sms
            for l in launches
        ) / max(1, len(launches))
        return {"determinable": False, "blocks_launched": total, "thread_bound_capacity": int(cap), "why": "occupancy unknown for some kernels; thread-count bound only"}
    per_sm = min(l["max_active_per_sm"] for l in known)
    capacity = per_sm * sms
    return {"determinable": True, "blocks_launched": total, "capacity": capacity, "co_resident": total <= capacity}


def analyse(world: Any, probe: Probe | None) -> dict[str, Any]:
    """The co-residency evidence and a verdict: 'not_co_resident', 'co_resident' or 'unknown'."""
    out: dict[str, Any] = {}
    try:
        out["device"] = device_limits(world.device)
    except Exception as exc:
        out["device"] = {"error": str(exc)[:200]}
    launches = list(world.shared.get("launches", []))
    out["occupancy"] = occupancy_bound(out["device"], launches) if "sms" in out["device"] else {"determinable": False}
    out.update(probe.run() if probe is not None else {"probe": "not_run"})
    occ = out["occupancy"]
    if occ.get("determinable"):
        out["verdict"] = "co_resident" if occ["co_resident"] else "not_co_resident"
    elif out.get("probe") == "starved":
        out["verdict"] = "not_co_resident"
        out["why"] = "a one-block probe kernel could not start while the ranks were stuck: the spinning grids fill the device"
    elif out.get("probe") == "completed":
        out["verdict"] = "co_resident"
        out["why"] = "the device had room for a probe kernel while the ranks were stuck: their grids were resident"
    elif out.get("probe") == "blocked":
        out["verdict"] = "unknown"
        out["why"] = "a one-block probe kernel's launch did not return while the ranks were stuck"
    else:
        out["verdict"] = "unknown"
        out["why"] = "co-residency could not be determined"
    return out
