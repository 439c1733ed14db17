"""Small Kineto-shaped chrome traces built by hand, for tests and examples.

The categories and fields are the ones FACTS.md lists for a torch 2.11 trace: `kernel`,
`gpu_memcpy` (bytes, fromDevice/toDevice for peer copies), `gpu_memset`, `cuda_runtime`
(cudaLaunchKernel, ...), `cuda_driver`, `cuda_sync`, `user_annotation` / `gpu_user_annotation` for
record_function ranges, `cpu_op`, and `ac2g` flow pairs (s at the launch, f at the GPU event).
GPU events sit under pid = device, tid = stream, as Kineto writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CPU_PID = 4242
CPU_TID = 4243


@dataclass
class KinetoBuilder:
    base: float = 1_000_000.0  # us, like Kineto's absolute timestamps
    correlation_args: bool = True  # False: GPU events carry no correlation (flows only)
    flows: bool = True
    events: list[dict[str, Any]] = field(default_factory=list)
    _corr: int = 100

    def _t(self, t: float) -> float:
        return round(self.base + t, 3)

    def next_corr(self) -> int:
        self._corr += 1
        return self._corr

    def cpu_range(self, name: str, ts: float, dur: float) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": CPU_PID, "tid": CPU_TID, "ts": self._t(ts), "dur": dur, "args": {"External id": len(self.events)}})

    def gpu_range(self, name: str, ts: float, dur: float, stream: int = 7, device: int = 0) -> None:
        self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": device, "tid": stream, "ts": self._t(ts), "dur": dur, "args": {"device": device, "stream": stream}})

    def cpu_op(self, name: str, ts: float, dur: float) -> None:
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": CPU_PID, "tid": CPU_TID, "ts": self._t(ts), "dur": dur, "args": {}})

    def runtime(self, name: str, ts: float, dur: float = 2.0, cat: str = "cuda_runtime", corr: int | None = None) -> int:
        corr = corr if corr is not None else self.next_corr()
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": CPU_PID, "tid": CPU_TID, "ts": self._t(ts), "dur": dur, "args": {"correlation": corr, "cbid": 211}})
        return corr

    def _gpu(self, cat: str, name: str, ts: float, dur: float, stream: int, device: int, corr: int, args: dict[str, Any], launch_ts: float | None) -> None:
        a = {"device": device, "stream": stream, **args}
        if self.correlation_args:
            a["correlation"] = corr
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": self._t(ts), "dur": dur, "args": a})
        if self.flows and launch_ts is not None:
            self.events.append({"ph": "s", "id": corr, "pid": CPU_PID, "tid": CPU_TID, "ts": self._t(launch_ts), "cat": "ac2g", "name": "ac2g"})
            self.events.append({"ph": "f", "id": corr, "pid": device, "tid": stream, "ts": self._t(ts), "cat": "ac2g", "name": "ac2g", "bp": "e"})

    def kernel(self, name: str, launch_ts: float, ts: float, dur: float, stream: int = 7, device: int = 0, api: str = "cudaLaunchKernel") -> int:
        corr = self.runtime(api, launch_ts, cat="cuda_driver" if api.startswith("cu") and not api.startswith("cuda") else "cuda_runtime")
        self._gpu("kernel", name, ts, dur, stream, device, corr, {"grid": [1, 1, 1], "block": [128, 1, 1]}, launch_ts)
        return corr

    def memcpy(self, kind: str, launch_ts: float, ts: float, dur: float, nbytes: int, stream: int = 7, device: int = 0, src: int | None = None, dst: int | None = None, api: str = "cudaMemcpyAsync") -> int:
        corr = self.runtime(api, launch_ts)
        pretty = {"DtoD": "Device -> Device", "PtoP": "Device -> Device", "DtoH": "Device -> Pinned", "HtoD": "Pinned -> Device"}[kind]
        args: dict[str, Any] = {"bytes": nbytes, "memory bandwidth (GB/s)": nbytes / max(dur, 1e-9) / 1e3}
        if src is not None:
            args["fromDevice"] = src
        if dst is not None:
            args["toDevice"] = dst
        self._gpu("gpu_memcpy", f"Memcpy {kind} ({pretty})", ts, dur, stream, device, corr, args, launch_ts)
        return corr

    def host_sync(self, api: str, ts: float, dur: float, stream: int = 7, device: int = 0, kind: str = "Stream Sync") -> int:
        corr = self.runtime(api, ts, dur)
        a = {"device": device, "stream": stream, "cuda_sync_kind": kind}
        if self.correlation_args:
            a["correlation"] = corr
        self.events.append({"ph": "X", "cat": "cuda_sync", "name": kind, "pid": device, "tid": stream, "ts": self._t(ts + 0.5), "dur": max(0.0, dur - 1.0), "args": a})
        return corr

    def to_dict(self, **extra: Any) -> dict[str, Any]:
        meta = [
            {"ph": "M", "name": "process_name", "pid": CPU_PID, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        ]
        return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "traceEvents": meta + self.events, **extra}
