"""`from utils.cuda_helpers import compile_cuda_extension` (what 380 of PKB's 383 generated files
do) loads on CPU: our helper without a checkout, PKB's own with one, the build mocked."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CANDIDATE = '''
import torch
from utils.cuda_helpers import compile_cuda_extension

CUDA_SRC = "/* kernels and PYBIND11_MODULE */"
_ext = compile_cuda_extension("pkb_test_ext", CUDA_SRC, extra_cuda_cflags=["--use_fast_math"])


def solution(x):
    return _ext.double(x)
'''

# Runs in a fresh interpreter: provide the helper as the rank does, then mock torch's build
# *after* the helper module is importable (it must look load_inline up at call time), import the
# candidate, call it.
DRIVER = '''
import importlib.util, json, os, sys, types
sys.path.insert(0, {repo!r})
for p in {extra_path!r}:
    sys.path.insert(0, p)
if {import_pkb_utils!r}:
    import utils  # what load_problem does with --pkb-root (PKB's input factory lives there)
from pkb.eval.shims import provide_for_candidate
whose = provide_for_candidate()
import torch, torch.utils.cpp_extension as cpp_extension
calls = []
def fake_load_inline(**kw):
    calls.append(kw)
    return types.SimpleNamespace(double=lambda x: 2 * x)
cpp_extension.load_inline = fake_load_inline
spec = importlib.util.spec_from_file_location("cand", {cand!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
out = mod.solution(torch.ones(3))
import utils.cuda_helpers as helpers
print(json.dumps({{"whose": whose, "helper_file": helpers.__file__, "out": out.tolist(), "calls": calls,
                  "arch": os.environ.get("TORCH_CUDA_ARCH_LIST")}}))
'''


def _run(tmp_path: Path, extra_path: list[str] = (), import_pkb_utils: bool = False, env_arch: str | None = None) -> dict:
    import json
    import os

    cand = tmp_path / "1_allreduce_cuda.py"
    cand.write_text(textwrap.dedent(CANDIDATE))
    code = DRIVER.format(repo=str(REPO), extra_path=list(extra_path), import_pkb_utils=import_pkb_utils, cand=str(cand))
    env = {k: v for k, v in os.environ.items() if k != "TORCH_CUDA_ARCH_LIST"}
    if env_arch:
        env["TORCH_CUDA_ARCH_LIST"] = env_arch
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_our_helper_loads_a_pkb_style_candidate_and_builds_through_load_inline_at_call_time(tmp_path):
    res = _run(tmp_path)
    assert res["whose"] == "pkb-analyze" and "pkb/eval/shims/candidate_path/utils/cuda_helpers.py" in res["helper_file"]
    assert res["out"] == [2.0, 2.0, 2.0]
    (kw,) = res["calls"]
    assert kw["name"] == "pkb_test_ext" and kw["cpp_sources"] == "" and kw["cuda_sources"] == "/* kernels and PYBIND11_MODULE */"
    assert kw["with_cuda"] is True and kw["extra_cuda_cflags"] == ["-O3", "--use_fast_math"]
    assert res["arch"] == "9.0"  # Hopper unless the user says otherwise


def test_a_users_arch_list_wins(tmp_path):
    assert _run(tmp_path, env_arch="8.0")["arch"] == "8.0"


def test_with_a_checkout_pkbs_own_helper_is_used_and_ours_fills_a_gap(tmp_path):
    root = tmp_path / "pkb"
    (root / "utils").mkdir(parents=True)
    (root / "utils" / "__init__.py").write_text("")
    (root / "utils" / "input_output_tensors.py").write_text("")
    # A checkout without cuda_helpers.py: ours fills in under PKB's package.
    res = _run(tmp_path, [str(root)], import_pkb_utils=True)
    assert res["whose"] == "pkb-analyze" and res["out"] == [2.0, 2.0, 2.0] and "candidate_path/utils" in res["helper_file"]
    # A checkout with its own: that one is used.
    (root / "utils" / "cuda_helpers.py").write_text(
        "import torch.utils.cpp_extension as c\n"
        "def compile_cuda_extension(name, cuda_src, **kw):\n"
        "    return c.load_inline(name=name, cpp_sources='', cuda_sources=cuda_src, marker='pkb')\n"
    )
    res = _run(tmp_path, [str(root)], import_pkb_utils=True)
    assert res["whose"] == "pkb" and res["helper_file"] == str(root / "utils" / "cuda_helpers.py")
    assert res["calls"][0]["marker"] == "pkb"
