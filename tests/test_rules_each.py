"""Every rule has its own small positive and negative test: a candidate file of our own showing the
bug the rule names, and one with the correct idiom the rule must leave alone.

The rules tested here had none of their own (they were only seen through the sample corpus); the
others keep theirs in tests/test_rules_cuda_real.py and tests/test_rules_python_side.py, and
`test_every_rule_has_its_own_cases` fails when a rule has no case anywhere."""

from __future__ import annotations

import importlib
import textwrap

import pytest

from analyzer.pipeline import StaticAnalyzer, StaticOptions
from analyzer.rules import all_rules
from pkb.corpus import read_candidate
from static_helpers import edit

TREE = "solutions_cuda_bf16_h100_8_openai_test-model"  # a bf16 run: PKB013 knows the problem's dtype

# A pull all-reduce done right: set-up cached, the extension built once at import, a device
# barrier before the peers are read and after, a fresh result. No rule fires on it.
PULL = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
__global__ void pull_sum(float* const* peers, float* out, int world, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float s = 0.f;
        for (int p = 0; p < world; ++p) s += peers[p][i];
        out[i] = s;
    }
}
void run(int64_t peers, torch::Tensor out, int64_t world) {
    pull_sum<<<8, 256>>>(reinterpret_cast<float* const*>(peers), out.data_ptr<float>(), world, out.numel());
}
"""
_ext = load_inline(name="pull", cpp_sources="", cuda_sources=SRC, functions=["run"])
_state = {}


def _setup(x):
    key = (x.numel(), x.dtype)
    if key not in _state:
        buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
        _state[key] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
    return _state[key]


def solution(x):
    buf, hdl = _setup(x)
    buf.copy_(x)
    hdl.barrier(channel=0)
    out = torch.empty_like(x)
    _ext.run(hdl.buffer_ptrs_dev, out, hdl.world_size)
    hdl.barrier(channel=0)
    return out
'''

BUILD_AT_IMPORT = '_ext = load_inline(name="pull", cpp_sources="", cuda_sources=SRC, functions=["run"])\n'

# A push with per-peer ready flags: plain flag stores and a volatile spin with no way out.
FLAGS_BUG = r'''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
__global__ void push(float* const* peers, int* const* flags, const float* x, int rank, int world, int n) {
    for (int p = 0; p < world; ++p) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) peers[p][rank * n + i] = x[i];
        __syncthreads();
        if (threadIdx.x == 0) flags[p][rank] = 1;
    }
    if (threadIdx.x < world) {
        while (*(volatile int*)&flags[rank][threadIdx.x] == 0) {}
    }
}
void run(int64_t peers, int64_t flags, torch::Tensor x, int64_t rank, int64_t world) {
    push<<<1, 256>>>(reinterpret_cast<float* const*>(peers), reinterpret_cast<int* const*>(flags), x.data_ptr<float>(), rank, world, x.numel());
}
"""
_ext = load_inline(name="push", cpp_sources="", cuda_sources=SRC, functions=["run"])
_state = {}


def solution(x):
    key = (x.numel(), x.dtype)
    if key not in _state:
        buf = symm_mem.empty(x.numel() * 8, device=x.device, dtype=x.dtype)
        _state[key] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
    buf, hdl = _state[key]
    hdl.barrier(channel=0)
    _ext.run(hdl.buffer_ptrs_dev, hdl.signal_pad_ptrs_dev, x, hdl.rank, hdl.world_size)
    hdl.barrier(channel=0)
    return buf.clone()
'''

# The same push with the flag idiom: an epoch stored with release and read with acquire at system
# scope, and a bounded spin that traps when a peer never signals.
FLAGS_OK = (
    FLAGS_BUG.replace(
        """        if (threadIdx.x == 0) flags[p][rank] = 1;
    }
    if (threadIdx.x < world) {
        while (*(volatile int*)&flags[rank][threadIdx.x] == 0) {}
    }""",
        """        if (threadIdx.x == 0) asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(&flags[p][rank]), "r"(epoch) : "memory");
    }
    if (threadIdx.x < world) {
        unsigned long long spins = 0;
        unsigned int seen = 0;
        do {
            asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(&flags[rank][threadIdx.x]) : "memory");
            if (++spins > (1ull << 32)) __trap();
        } while (seen < (unsigned int)epoch);
    }""",
    )
    .replace("int rank, int world, int n)", "int rank, int world, int n, int epoch)")
    .replace("rank, world, x.numel());", "rank, world, x.numel(), epoch);")
    .replace("int64_t rank, int64_t world)", "int64_t rank, int64_t world, int64_t epoch)")
    .replace("hdl.rank, hdl.world_size)", "hdl.rank, hdl.world_size, _next_epoch())")
    .replace("_state = {}\n", "_state = {}\n_epoch = [0]\n\n\ndef _next_epoch():\n    _epoch[0] += 1\n    return _epoch[0]\n")
)

NCCL_BASELINE = """
import torch
import torch.distributed as dist


def solution(x):
    out = x.clone()
    dist.all_reduce(out)
    return out
"""


# rule: (the bug, the text of the line the finding must point at, the correct idiom)
CASES = {
    "PKB001": (FLAGS_BUG, "while (*(volatile int*)&flags[rank][threadIdx.x] == 0) {}", FLAGS_OK),
    "PKB003": (
        edit(FLAGS_BUG, "while (*(volatile int*)&flags[rank][threadIdx.x] == 0) {}", "while (flags[rank][threadIdx.x] == 0) {}"),
        "while (flags[rank][threadIdx.x] == 0) {}",  # a plain load: nvcc may hoist it out of the loop
        FLAGS_OK,
    ),
    "PKB008": (
        edit(PULL, "    hdl.barrier(channel=0)\n    return out", "    torch.cuda.synchronize()\n    return out"),
        "torch.cuda.synchronize()",
        PULL,  # the device barrier orders the calls
    ),
    "PKB009": (
        edit(PULL, "    out = torch.empty_like(x)\n", "    out = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)\n"),
        "out = symm_mem.empty(",
        PULL,  # the symmetric buffer allocated once behind the cache
    ),
    "PKB010": (
        edit(PULL, "    buf, hdl = _setup(x)\n", "    buf, _ = _setup(x)\n    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)\n"),
        "hdl = symm_mem.rendezvous(buf, dist.group.WORLD)",
        PULL,  # the handle kept beside the cached buffer
    ),
    "PKB011": (
        edit(edit(PULL, BUILD_AT_IMPORT, ""), "    _ext.run(", "    " + BUILD_AT_IMPORT + "    _ext.run("),
        '    _ext = load_inline(name="pull"',
        edit(
            edit(PULL, BUILD_AT_IMPORT, "_ext = None\n"),
            "    _ext.run(",
            "    global _ext\n    if _ext is None:\n        " + BUILD_AT_IMPORT + "    _ext.run(",
        ),  # built on the first call only, behind a module-level cache
    ),
    "PKB012": (
        edit(PULL, "    hdl.barrier(channel=0)\n    return out", "    hdl.barrier(channel=0)\n    dist.all_reduce(out)\n    return out"),
        "dist.all_reduce(out)",
        NCCL_BASELINE,  # a plain NCCL candidate claims no kernel of its own
    ),
    "PKB013": (
        edit(PULL, "    buf, hdl = _setup(x)\n", "    assert x.dtype == torch.float32\n    buf, hdl = _setup(x)\n"),
        "assert x.dtype == torch.float32",
        edit(PULL, "    buf, hdl = _setup(x)\n", "    assert x.dtype == torch.bfloat16\n    buf, hdl = _setup(x)\n"),  # the run's dtype
    ),
    "PKB014": (
        edit(PULL, "    hdl.barrier(channel=0)\n", ""),  # both barriers gone
        "for (int p = 0; p < world; ++p) s += peers[p][i];",
        PULL,  # barriers around the peer reads
    ),
    "PKB016": (
        edit(PULL, "    return out", "    return out.cpu().to(x.device)"),
        "return out.cpu().to(x.device)",
        PULL,  # the result stays on the device
    ),
}

# Rules whose own positive and negative tests live in another file (module: test-name prefix).
CASES_ELSEWHERE = {
    "PKB002": "test_rules_cuda_real",
    "PKB004": "test_rules_cuda_real",
    "PKB005": "test_rules_python_side",
    "PKB006": "test_rules_cuda_real",
    "PKB007": "test_rules_cuda_real",
    "PKB015": "test_rules_python_side",
    "PKB017": "test_rules_cuda_real",
    "PKB018": "test_rules_python_side",
    "PKB019": "test_rules_python_side",
    "PKB020": "test_rules_cuda_real",
    "PKB021": "test_rules_python_side",
    "PKB022": "test_rules_python_side",
}


@pytest.fixture(scope="module")
def analyzer():
    a = StaticAnalyzer(StaticOptions(ptx=False, use_cache=False))
    yield a
    a.close()


def analyzed(analyzer, tmp_path, src: str):
    """The record of `src` as a candidate of the run tree."""
    folder = tmp_path / TREE
    folder.mkdir(exist_ok=True)
    path = folder / "1_allreduce_cuda.py"
    path.write_text(textwrap.dedent(src).lstrip("\n"))
    return analyzer.analyze(read_candidate(path, tmp_path))


def findings(analyzer, tmp_path, src: str) -> dict[str, list[int]]:
    rec = analyzed(analyzer, tmp_path, src)
    out: dict[str, list[int]] = {}
    for f in rec.findings:
        out.setdefault(f.rule, []).append(f.line)
    return out


def line_of(src: str, needle: str) -> int:
    lines = textwrap.dedent(src).lstrip("\n").splitlines()
    return next(i + 1 for i, ln in enumerate(lines) if needle in ln)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_fires_on_the_bug(analyzer, tmp_path, rule):
    bug, needle, _ = CASES[rule]
    assert findings(analyzer, tmp_path, bug).get(rule) == [line_of(bug, needle)]


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_is_quiet_on_the_correct_idiom(analyzer, tmp_path, rule):
    _, _, correct = CASES[rule]
    assert rule not in findings(analyzer, tmp_path, correct)


def test_the_correct_pull_fires_no_rule(analyzer, tmp_path):
    assert findings(analyzer, tmp_path, PULL) == {}


def test_pkb003_volatile_spin_ends_on_a_known_run_and_is_reported_elsewhere(analyzer, tmp_path):
    """A volatile poll reads memory on every test, so on a PKB run (every rank signals) it ends: no
    PKB003 there. With no run tree the peers' behaviour is unknown and the missing bound is reported."""
    spin = "while (*(volatile int*)&flags[rank][threadIdx.x] == 0) {}"
    assert "PKB003" not in findings(analyzer, tmp_path, FLAGS_BUG)
    loose = tmp_path / "loose_push.py"
    loose.write_text(textwrap.dedent(FLAGS_BUG).lstrip("\n"))
    rec = analyzer.analyze(read_candidate(loose, tmp_path))
    assert [f.line for f in rec.findings if f.rule == "PKB003"] == [line_of(FLAGS_BUG, spin)]


# The push's flag stored after a system fence in one kernel; a second kernel only polls the flags
# with a volatile load before its block goes on.
FLAGS_POLL_KERNEL = edit(
    edit(
        FLAGS_BUG,
        """        if (threadIdx.x == 0) flags[p][rank] = 1;
    }
    if (threadIdx.x < world) {
        while (*(volatile int*)&flags[rank][threadIdx.x] == 0) {}
    }
}""",
        """        if (threadIdx.x == 0) { __threadfence_system(); flags[p][rank] = 1; }
    }
}
__global__ void wait_peers(int* const* flags, int rank, int world) {
    if (threadIdx.x < world) {
        while (*(volatile int*)&flags[rank][threadIdx.x] == 0) {}
    }
    __syncthreads();
}""",
    ),
    "x.data_ptr<float>(), rank, world, x.numel());",
    "x.data_ptr<float>(), rank, world, x.numel());\n    wait_peers<<<1, 32>>>(reinterpret_cast<int* const*>(flags), rank, world);",
)


def test_pkb001_a_kernel_that_only_polls_with_volatile_loads_is_not_reported(analyzer, tmp_path):
    """The reader's volatile poll acquires in practice; the release is the writer's, and it is fenced."""
    assert "PKB001" not in findings(analyzer, tmp_path, FLAGS_POLL_KERNEL)
    unfenced = edit(FLAGS_POLL_KERNEL, "{ __threadfence_system(); flags[p][rank] = 1; }", "flags[p][rank] = 1;")
    assert findings(analyzer, tmp_path, unfenced).get("PKB001") == [line_of(unfenced, "flags[p][rank] = 1;")]  # the writer's


def test_pkb008_a_burst_of_host_syncs_is_one_finding(analyzer, tmp_path):
    """Syncs within five lines of the first of a burst wait for one drain: one finding there; a
    sync further on is another."""
    burst = edit(PULL, "    hdl.barrier(channel=0)\n    return out",
                  "    torch.cuda.synchronize()\n    total = out.sum().item()\n    sizes = out[:4].tolist()\n"
                  "    hdl.barrier(channel=0)\n    x.add_(1)\n    x.mul_(2)\n    x.sub_(1)\n    x.div_(2)\n"
                  "    later = x.max().item()\n    return out")
    assert findings(analyzer, tmp_path, burst).get("PKB008") == [line_of(burst, "torch.cuda.synchronize()"),
                                                                  line_of(burst, "later = x.max().item()")]


def test_pkb008_a_wait_in_an_extensions_host_code_is_reported_at_each_timed_call(analyzer, tmp_path):
    """`cudaStreamSynchronize` in the extension's `run`: the timed path waits wherever it calls
    `_ext.run`, so each call far enough apart is a finding there, naming the CUDA line."""
    waits = edit(PULL, "    pull_sum<<<8, 256>>>(", "    cudaStreamSynchronize(0);\n    pull_sum<<<8, 256>>>(")
    twice = edit(waits, "    hdl.barrier(channel=0)\n    return out",
                 "    hdl.barrier(channel=0)\n    x.add_(1)\n    x.mul_(2)\n    x.sub_(1)\n    x.div_(2)\n"
                 "    _ext.run(hdl.buffer_ptrs_dev, x, hdl.world_size)\n    return out")
    calls = [i + 1 for i, ln in enumerate(textwrap.dedent(twice).lstrip("\n").splitlines()) if "_ext.run(hdl.buffer_ptrs_dev" in ln]
    assert findings(analyzer, tmp_path, twice).get("PKB008") == calls
    assert "PKB008" not in findings(analyzer, tmp_path, PULL)


def test_pkb008_a_tensor_read_back_in_a_helper_of_the_extension_names_its_line(analyzer, tmp_path):
    """`sizes.cpu()` in a host helper `run` calls: the call waits for the stream; the finding sits at
    the Python call and names the C++ line as its related line."""
    helper = edit(PULL, "void run(int64_t peers, torch::Tensor out, int64_t world) {\n",
                  "int64_t grid_for(torch::Tensor sizes) {\n    auto host = sizes.cpu();\n    return 8;\n}\n"
                  "void run(int64_t peers, torch::Tensor out, int64_t world) {\n    int64_t g = grid_for(out);\n")
    (found,) = [f for f in analyzed(analyzer, tmp_path, helper).findings if f.rule == "PKB008"]
    assert found.line == line_of(helper, "_ext.run(hdl.buffer_ptrs_dev, out")
    assert found.related_lines == [line_of(helper, "auto host = sizes.cpu();")]
    assert "Tensor::cpu" in found.message


def test_every_rule_has_its_own_cases():
    ids = {r.id for r in all_rules()}
    assert ids == set(CASES) | set(CASES_ELSEWHERE), "a rule needs a bug file and a correct file here, or in CASES_ELSEWHERE"
    assert not set(CASES) & set(CASES_ELSEWHERE)
    for rule, module in CASES_ELSEWHERE.items():
        mod = importlib.import_module(module)
        named = [n for n in vars(mod) if n.startswith(f"test_{rule.lower()}_")]
        assert named, f"{module} has no test_{rule.lower()}_* test"


def test_pkb013_a_tile_check_of_the_problems_own_block_size_is_not_narrow(analyzer, tmp_path):
    checked = edit(PULL, "void run(int64_t peers, torch::Tensor out, int64_t world) {\n",
                    "void run(int64_t peers, torch::Tensor out, int64_t world) {\n"
                    "    TORCH_CHECK(out.numel() % 128 == 0, \"multiple of 128\");\n")
    assert findings(analyzer, tmp_path, checked).get("PKB013") == [line_of(checked, "TORCH_CHECK(out.numel() % 128")]
    # solution(x, block_size=128): the problem's inputs are built in blocks of 128
    own = edit(checked, "def solution(x):", "def solution(x, block_size: int = 128):")
    assert "PKB013" not in findings(analyzer, tmp_path, own)


FLAGS_SIGNAL_KERNEL = edit(
    edit(
        FLAGS_POLL_KERNEL,
        """        if (threadIdx.x == 0) { __threadfence_system(); flags[p][rank] = 1; }
    }
}""",
        """    }
}
__global__ void signal_peers(int* const* flags, int rank, int world) {
    int p = threadIdx.x;
    if (p < world) {
        volatile int* peer_flag = flags[p];
        peer_flag[rank] = 1;
    }
}""",
    ),
    "x.data_ptr<float>(), rank, world, x.numel());\n",
    "x.data_ptr<float>(), rank, world, x.numel());\n    signal_peers<<<1, 32>>>(reinterpret_cast<int* const*>(flags), rank, world);\n",
)


def test_pkb001_a_kernel_that_only_raises_its_peers_flags_is_not_reported(analyzer, tmp_path):
    """Gemini's 40_ulysses_attention: the push, then a kernel that only stores volatile flags into
    the peers, then one that polls: the launch boundary orders the push before the flags."""
    assert "PKB001" not in findings(analyzer, tmp_path, FLAGS_SIGNAL_KERNEL)
    # the same volatile flag stores at the end of the pushing kernel itself are reported
    fused = edit(edit(FLAGS_SIGNAL_KERNEL, "peers[p][rank * n + i] = x[i];", "peers[p][rank * n + i] = x[i];\n        volatile int* peer_flag = flags[p];\n        if (threadIdx.x == 0) peer_flag[rank] = 1;"),
                  "    signal_peers<<<1, 32>>>(reinterpret_cast<int* const*>(flags), rank, world);\n", "")
    assert findings(analyzer, tmp_path, fused).get("PKB001") == [line_of(fused, "if (threadIdx.x == 0) peer_flag[rank] = 1;")]
    # plain flag words are reported even in a kernel of their own: no launch boundary keeps the
    # compiler from holding a plain flag in a register (our corpus's 33_ulysses hangs so)
    plain = edit(FLAGS_SIGNAL_KERNEL, "volatile int* peer_flag = flags[p];", "int* peer_flag = flags[p];")
    assert findings(analyzer, tmp_path, plain).get("PKB001") == [line_of(plain, "peer_flag[rank] = 1;")]
