"""What the harness learns about its host before any launch: without a GPU driver, torch is not
imported for it (seconds of CPU in every `pkb-analyze eval`) and the facts match torch's own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pkb.eval.host import gpu_driver_present, torch_versions

ROOT = Path(__file__).resolve().parents[1]


def test_torch_versions_read_from_its_version_file_are_torchs_own():
    import torch

    assert torch_versions() == (torch.__version__, torch.version.cuda)


@pytest.mark.skipif(gpu_driver_present(), reason="a GPU driver is present: torch is imported to count the GPUs")
def test_without_a_driver_the_environment_is_cpu_and_torch_stays_unimported():
    probe = (
        "import json, sys\n"
        "from pkb.eval import EvalOptions, environment\n"
        "env = environment(EvalOptions(world_size=3))\n"
        "print(json.dumps([env.device, env.backend, env.device_count, env.world_size, env.build_tag, 'torch' in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    device, backend, count, world, tag, imported = json.loads(out)
    import torch

    assert (device, backend, count, world, imported) == ("cpu", "gloo", 0, 3, False)
    assert tag == f"torch{torch.__version__}-cu{torch.version.cuda or 'none'}".replace("+", "_")
