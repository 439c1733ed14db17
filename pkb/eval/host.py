"""What this host offers the evaluation (GPUs, torch's version), found without importing torch
where no GPU driver is present: the import costs about 2 s of CPU in every `pkb-analyze eval`, and
on a machine without a driver torch cannot see a GPU anyway."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path


def gpu_driver_present() -> bool:
    """An NVIDIA driver (or ROCm's kernel driver, which torch's CUDA API also serves) is loaded."""
    return Path("/proc/driver/nvidia/gpus").exists() or Path("/dev/nvidia0").exists() \
        or Path("/dev/kfd").exists() or shutil.which("nvidia-smi") is not None


def torch_versions() -> tuple[str, str | None]:
    """(torch.__version__, torch.version.cuda), read from torch/version.py alone."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("torch is not installed: `pip install -e '.[eval]'` installs it")
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    version_spec = importlib.util.spec_from_file_location("_pkb_torch_version", path)
    module = importlib.util.module_from_spec(version_spec)
    version_spec.loader.exec_module(module)  # a generated file of assignments
    return module.__version__, module.cuda


def visible_gpus() -> int:
    """CUDA devices torch sees here; 0 without a driver (torch not imported) or without torch."""
    if not gpu_driver_present():
        return 0
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0
