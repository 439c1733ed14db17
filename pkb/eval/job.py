"""One launch's instructions and the names of the files its ranks write in the job directory.

The launcher writes `job.json`; every rank reads it. Ranks report only through files here
(status, result, verdict), never through collectives, so a broken rank cannot take the
others' results down.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class JobSpec:
    job_dir: str
    candidate_path: str  # the file imported by every rank (a copy of the evaluated bytes)
    candidate_sha256: str
    # {"kind": "registry", "id": 1} | {"kind": "file", "id": 1, "path": ...}
    # | {"kind": "pkb", "id": 1, "root": ..., "stem": "1_allreduce", "shape": [1024, 1024]}
    problem: dict[str, Any]
    world_size: int
    backend: str  # nccl | gloo
    device: str  # cuda | cpu
    dtype: str
    trials: int
    tolerance: tuple[float, float] | None = None  # None: the problem's own for the dtype
    scale: str = "small"
    warmup: int = 500
    iters: int = 100
    groups: int | None = None
    timeout_s: float = 600.0
    extensions_dir: str = ""
    save_cap_bytes: int = 8 * 1024 * 1024
    repo_root: str = ""
    extra_sys_path: list[str] = field(default_factory=list)
    visible_devices: str = ""  # CUDA_VISIBLE_DEVICES for this launch ('' leaves it alone)

    @property
    def timing(self) -> bool:
        return self.iters > 0

    def write(self) -> Path:
        path = Path(self.job_dir) / "job.json"
        write_json_atomic(path, asdict(self))
        return path

    @classmethod
    def read(cls, path: str | Path) -> JobSpec:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if data.get("tolerance") is not None:
            data["tolerance"] = tuple(data["tolerance"])
        return cls(**data)


def status_path(job_dir: str | Path, rank: int) -> Path:
    return Path(job_dir) / f"status_rank{rank}.json"


def result_path(job_dir: str | Path, rank: int) -> Path:
    return Path(job_dir) / f"result_rank{rank}.json"


def verdict_path(job_dir: str | Path, rank: int) -> Path:
    return Path(job_dir) / f"verdict_rank{rank}.json"


def log_paths(job_dir: str | Path, rank: int) -> tuple[Path, Path]:
    return Path(job_dir) / f"rank{rank}.stdout", Path(job_dir) / f"rank{rank}.stderr"


def launcher_log_path(job_dir: str | Path) -> Path:
    return Path(job_dir) / "torchrun.log"


def tensors_dir(job_dir: str | Path) -> Path:
    return Path(job_dir) / "tensors"


def write_json_atomic(path: Path, data: Any) -> None:
    """Readers never see half a file: write beside it, then rename over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, default=_json_default), encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _json_default(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    return repr(obj)
