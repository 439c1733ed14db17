"""Python-side rules on small candidates of our own: each rule fires on the bug and stays quiet on
the correct idiom. Files sit in a PKB-style run tree, so the run (bf16, 8 ranks, multicast) is known."""

import textwrap
from pathlib import Path

import pytest

from analyzer.pipeline import StaticAnalyzer, StaticOptions
from analyzer.rules import all_rules
from pkb.corpus import read_candidate

TREE = "solutions_cuda_bf16_h100_8_openai_test-model"


@pytest.fixture(scope="module")
def analyzer(tmp_path_factory):
    a = StaticAnalyzer(StaticOptions(ptx=False, use_cache=False))
    yield a
    a.close()


def analyzed(analyzer, tmp_path, src: str, name: str = "1_allreduce_cuda.py", tree: str = TREE):
    """The record of `src` written as `name` in a run tree."""
    folder = tmp_path / tree
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(textwrap.dedent(src).lstrip("\n"))
    return analyzer.analyze(read_candidate(folder / name, tmp_path))


def findings(analyzer, tmp_path, src: str, name: str = "1_allreduce_cuda.py", tree: str = TREE) -> dict[str, list[int]]:
    rec = analyzed(analyzer, tmp_path, src, name, tree)
    out: dict[str, list[int]] = {}
    for f in rec.findings:
        out.setdefault(f.rule, []).append(f.line)
    return out


BINDING = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
void pull_sum(PTRS_TYPE ptrs, torch::Tensor out, int64_t world) {}
"""
_ext = load_inline(name="pull", cpp_sources="", cuda_sources=SRC, functions=["pull_sum"])
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
    _ext.pull_sum(hdl.buffer_ptrs_dev, out, hdl.world_size)
    hdl.barrier(channel=0)
    return out
'''


def test_pkb018_integer_address_where_the_binding_takes_a_tensor(analyzer, tmp_path):
    got = findings(analyzer, tmp_path, BINDING.replace("PTRS_TYPE", "torch::Tensor"))
    assert got.get("PKB018") == [25]


def test_pkb018_quiet_when_the_binding_takes_an_address(analyzer, tmp_path):
    got = findings(analyzer, tmp_path, BINDING.replace("PTRS_TYPE", "uint64_t"))
    assert "PKB018" not in got


def test_pkb018_integer_address_read_back_from_a_state_dict(analyzer, tmp_path):
    src = (BINDING.replace("PTRS_TYPE", "torch::Tensor")
           .replace("        _state[key] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))",
                    "        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)\n"
                    "        _state[key] = (buf, hdl, {'ptrs': hdl.buffer_ptrs_dev, 'n': hdl.world_size})")
           .replace("    buf, hdl = _setup(x)", "    buf, hdl, res = _setup(x)")
           .replace("_ext.pull_sum(hdl.buffer_ptrs_dev, out, hdl.world_size)", "_ext.pull_sum(res['ptrs'], out, res['n'])"))
    got = findings(analyzer, tmp_path, src)
    line = next(i + 1 for i, ln in enumerate(textwrap.dedent(src).lstrip("\n").splitlines()) if "_ext.pull_sum(res" in ln)
    assert got.get("PKB018") == [line]
    # the same dict read where the binding takes an address is fine
    assert "PKB018" not in findings(analyzer, tmp_path, src.replace("void pull_sum(torch::Tensor ptrs", "void pull_sum(uint64_t ptrs"))


def test_pkb018_integer_address_cached_in_a_tuple_and_unpacked_or_indexed_later(analyzer, tmp_path):
    src = (BINDING.replace("PTRS_TYPE", "torch::Tensor")
           .replace("        _state[key] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))",
                    "        hdl = symm_mem.rendezvous(buf, dist.group.WORLD)\n"
                    "        ptrs = hdl.buffer_ptrs_dev\n"
                    "        entry = (buf, hdl, ptrs)\n"
                    "        _state[key] = entry")
           .replace("    buf, hdl = _setup(x)", "    buf, hdl, ptrs = _setup(x)")
           .replace("_ext.pull_sum(hdl.buffer_ptrs_dev, out, hdl.world_size)",
                    "_ext.pull_sum(ptrs, out, hdl.world_size)\n"
                    "    _ext.pull_sum(_state[(x.numel(), x.dtype)][2], out, hdl.world_size)"))
    lines = textwrap.dedent(src).lstrip("\n").splitlines()
    want = [i + 1 for i, ln in enumerate(lines) if "_ext.pull_sum(" in ln]
    assert len(want) == 2 and findings(analyzer, tmp_path, src).get("PKB018") == want
    # the same cached tuple holding a tensor of the addresses is what the binding takes
    tensor = src.replace("ptrs = hdl.buffer_ptrs_dev", "ptrs = torch.tensor(hdl.buffer_ptrs, device=x.device)")
    assert "PKB018" not in findings(analyzer, tmp_path, tensor)


RETURNS = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_cache = {}

def _resources(x):
    res = _cache.get((x.numel(), x.dtype))
    if res is not None:
        return res
    buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
    hdl = symm_mem.rendezvous(buf, dist.group.WORLD)
    res = (buf, hdl)
    _cache[(x.numel(), x.dtype)] = res
    return res

def solution(x):
    buf, hdl = _resources(x)
    buf.copy_(x)
    hdl.barrier(channel=0)
    for p in range(hdl.world_size):
        if p != hdl.rank:
            buf.add_(hdl.get_buffer(p, x.shape, x.dtype))
    hdl.barrier(channel=0)
    return RESULT
'''


def test_pkb019_returning_the_symmetric_buffer(analyzer, tmp_path):
    got = findings(analyzer, tmp_path, RETURNS.replace("RESULT", "buf.view_as(x)"))
    assert got.get("PKB019") == [25]
    # set-up behind the cache read is not per call
    assert "PKB009" not in got and "PKB010" not in got


def test_pkb019_views_of_a_torch_split_through_a_list_comprehension(analyzer, tmp_path):
    views = RETURNS.replace("    return RESULT", "    parts = torch.split(buf, 4)\n    out = [t.view(-1, 1) for t in parts]\n    return out")
    assert findings(analyzer, tmp_path, views).get("PKB019") == [line_with(views, "return out")]
    # a route that returns an empty list holds no buffer; the other still returns views
    maybe = views.replace("    out = [t.view(-1, 1) for t in parts]\n",
                          "    if len(parts) > 1:\n        out = [t.view(-1, 1) for t in parts]\n    else:\n        out = []\n")
    assert findings(analyzer, tmp_path, maybe).get("PKB019") == [line_with(maybe, "return out")]
    copies = views.replace("t.view(-1, 1) for t", "t.view(-1, 1).clone() for t")
    assert "PKB019" not in findings(analyzer, tmp_path, copies)


def test_pkb019_one_finding_per_buffer_at_its_first_return(analyzer, tmp_path):
    # the small-input branch and the general one return the same kept buffer: one defect
    src = RETURNS.replace("    return RESULT", "    if x.numel() < 1024:\n        return buf.view_as(x)\n    return buf.view_as(x)")
    lines = textwrap.dedent(src).lstrip("\n").splitlines()
    got = findings(analyzer, tmp_path, src)
    assert got.get("PKB019") == [next(i + 1 for i, ln in enumerate(lines) if "return buf.view_as(x)" in ln)]


def test_pkb019_a_cached_entry_bound_only_where_used_after_a_none_default(analyzer, tmp_path):
    # `res = None` on the other route: the return inside `if res is not None:` still hands back the cache's buffer
    src = (RETURNS.replace("    buf, hdl = _resources(x)\n", "    res = None\n    if x.numel() > 0:\n        res = _resources(x)\n    buf, hdl = _resources(x)\n")
           .replace("    return RESULT", "    if res is not None:\n        return RESULT\n    return x.clone()"))
    lines = textwrap.dedent(src).lstrip("\n").splitlines()
    got = findings(analyzer, tmp_path, src.replace("RESULT", "res[0]"))
    assert got.get("PKB019") == [next(i + 1 for i, ln in enumerate(lines) if "return RESULT" in ln)]
    # a fresh tensor on the other route is still a fresh result there: not reported
    fresh = src.replace("    res = None\n", "    res = (x.clone(), None)\n").replace("RESULT", "res[0]")
    assert "PKB019" not in findings(analyzer, tmp_path, fresh)


def test_pkb019_quiet_on_a_fresh_result(analyzer, tmp_path):
    got = findings(analyzer, tmp_path, RETURNS.replace("RESULT", "buf.view_as(x).clone()"))
    assert "PKB019" not in got
    # a permuted view made contiguous is a copy; a contiguous view of the buffer itself is not
    permuted = findings(analyzer, tmp_path, RETURNS.replace("RESULT", "buf.view(2, -1).t().contiguous().reshape(-1)"))
    assert "PKB019" not in permuted
    same = findings(analyzer, tmp_path, RETURNS.replace("RESULT", "buf.contiguous().view_as(x)"))
    assert same.get("PKB019") == [25]


def test_pkb005_quiet_on_divisibility_and_double_buffers(analyzer, tmp_path):
    src = RETURNS.replace("RESULT", "buf.clone()").replace(
        "    buf.copy_(x)\n",
        "    assert x.numel() % hdl.world_size == 0\n    for s in range(2):\n        buf.copy_(x)\n",
    )
    assert "PKB005" not in findings(analyzer, tmp_path, src)
    two = src.replace("assert x.numel() % hdl.world_size == 0", "assert hdl.world_size == 2")
    assert findings(analyzer, tmp_path, two).get("PKB005") == [19]
    # eight ranks is what PKB's run has: the assert holds there
    eight = src.replace("assert x.numel() % hdl.world_size == 0", "assert hdl.world_size == 8")
    assert "PKB005" not in findings(analyzer, tmp_path, eight)
    assert findings(analyzer, tmp_path, eight, tree="plain").get("PKB005") == [19]


MULTICAST = '''
import torch
from torch.utils.cpp_extension import load_inline
SRC = r"""
#include <torch/extension.h>
void mc_sum(int64_t mc, torch::Tensor out) {}
void uva_sum(int64_t ptrs, torch::Tensor out) {}
"""
_ext = load_inline(name="mc", cpp_sources="", cuda_sources=SRC, functions=["mc_sum", "uva_sum"])

def solution(x, hdl):
    out = torch.empty_like(x)
CHECK
    return out
'''


def test_pkb015_sees_a_check_written_around_an_int(analyzer, tmp_path):
    checked = MULTICAST.replace("CHECK", "    if int(hdl.multicast_ptr) != 0:\n"
                                         "        _ext.mc_sum(hdl.multicast_ptr, out)\n"
                                         "    else:\n"
                                         "        _ext.uva_sum(hdl.buffer_ptrs_dev, out)")
    assert "PKB015" not in findings(analyzer, tmp_path, checked, tree="plain")
    unchecked = MULTICAST.replace("CHECK", "    _ext.mc_sum(hdl.multicast_ptr, out)")
    assert findings(analyzer, tmp_path, unchecked, tree="plain").get("PKB015") == [12]
    # on an NVSwitch node's run tree multicast exists: the hazard cannot happen on that run
    assert "PKB015" not in findings(analyzer, tmp_path, unchecked)


def test_pkb015_prose_about_the_multicast_address_is_no_check(analyzer, tmp_path):
    unchecked = MULTICAST.replace("CHECK", "    _ext.mc_sum(hdl.multicast_ptr, out)")
    described = unchecked.replace("def solution(x, hdl):\n",
                                  'def solution(x, hdl):\n    """Never checks it: without multicast, multicast_ptr is 0."""\n'
                                  "    # if not hdl.multicast_ptr: nothing here handles it\n")
    assert findings(analyzer, tmp_path, described, tree="plain").get("PKB015") == [14]


def test_every_rule_has_ruff_style_documentation():
    for rule in all_rules():
        lines = rule.doc().splitlines()
        # each section a heading at the start of its line (a stray newline in the docstring, such
        # as an unescaped "\n", breaks the dedent and turns the whole page into a code block)
        for section in ("## What it does", "## Why is this bad?", "## Example", "## Use instead"):
            assert section in lines, (rule.id, section)
        assert rule.name and rule.message and rule.fix and rule.severity in ("error", "warning", "info")


GROUPS = '''
import torch
import torch.distributed as dist

def solution(hidden_states, w_qkv, w_o, num_heads, softmax_scale=None, causal=True, GROUP_A=None, GROUP_B=None):
    out = hidden_states @ w_o
    if GROUP_B is not None:
        dist.barrier(group=GROUP_B)
    return out
'''


def test_group_parameters_the_run_passes_are_not_none(analyzer, tmp_path):
    # problem 56 (ring_attention_pp, file 57_...): PKB's input factory passes cp_group and pp_group
    src = GROUPS.replace("GROUP_A", "cp_group").replace("GROUP_B", "pp_group")
    assert findings(analyzer, tmp_path, src, name="57_ring_attention_pp_cuda.py").get("PKB008") == [7]
    # a problem whose factory passes no group: `group` stays None, the branch never runs
    src = GROUPS.replace("GROUP_A", "other").replace("GROUP_B", "group")
    assert "PKB008" not in findings(analyzer, tmp_path, src, name="55_ring_attention_cuda.py")


GROW_ON_DEMAND = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

_state = {}


def _alloc(key, n, device):
    buf = symm_mem.empty(n, device=device)
    st = {"cap": n, "buf": buf, "hdl": symm_mem.rendezvous(buf, dist.group.WORLD)}
    STORE
    return st


def _ensure(st, key, need, device):
    if st is None or st["cap"] < need:
        st = _alloc(key, max(need, 1024), device)
    return st


def solution(x):
    key = (x.dtype, x.device)
    st = _ensure(_state.get(key), key, x.numel(), x.device)
    st["buf"][: x.numel()].copy_(x)
    st["hdl"].barrier(channel=0)
    return x + 1
'''


def test_a_miss_of_a_cache_a_helper_fills_at_module_level_is_set_up(analyzer, tmp_path):
    # `if st is None or st["cap"] < need:` on a helper's parameter: the body refills `_state`
    found = findings(analyzer, tmp_path, GROW_ON_DEMAND.replace("STORE", "_state[key] = st"))
    assert "PKB009" not in found and "PKB010" not in found


def test_the_same_branch_filling_nothing_that_outlives_the_call_is_timed(analyzer, tmp_path):
    found = findings(analyzer, tmp_path, GROW_ON_DEMAND.replace("STORE", "pass"))
    assert "PKB009" in found and "PKB010" in found


def test_an_early_return_on_none_is_no_cache_hit(analyzer, tmp_path):
    # `if x is None: return None` on an input, then a helper that allocates and fills a module
    # cache on every call: the rest of the function is not a cache miss, its allocations are timed
    src = GROW_ON_DEMAND.replace("STORE", "_state[key] = st").replace(
        "def solution(x):\n", "def solution(x):\n    if x is None:\n        return None\n").replace(
        "    st = _ensure(", "    st = _alloc(key, x.numel(), x.device)\n    st = _ensure(")
    assert "PKB009" in findings(analyzer, tmp_path, src)


CACHED_OUTPUT = '''
import torch

_work = {}


def _get_work(x):
    w = _work.get(x.shape)
    if w is None:
        w = {"out": torch.empty_like(x)}
        _work[x.shape] = w
    return w


def solution(x):
    work = _get_work(x)
    out = work["out"]
    GUARD
    torch.mul(x, 2, out=out)
    return out
'''


def test_pkb019_a_fresh_tensor_only_when_the_caller_passes_the_cached_one_back_is_still_reuse(analyzer, tmp_path):
    guard = "if out.data_ptr() == x.data_ptr():\n        out = torch.empty_like(x)"
    assert "PKB019" in findings(analyzer, tmp_path, CACHED_OUTPUT.replace("GUARD", guard))


def test_pkb019_quiet_when_a_fresh_tensor_is_made_on_an_ordinary_branch(analyzer, tmp_path):
    guard = "if x.numel() > 4096:\n        out = torch.empty_like(x)"
    assert "PKB019" not in findings(analyzer, tmp_path, CACHED_OUTPUT.replace("GUARD", guard))


MASKED_LOSS = '''
import torch
import torch.distributed as dist


def solution(gate_logits, num_experts, top_k, attention_mask=None):
    probs = torch.softmax(gate_logits.float(), dim=-1)
    if attention_mask is None:
        denom = float(gate_logits.shape[0])
    else:
        denom = float(attention_mask.sum().item())
    loss = probs.sum() / denom
    dist.all_reduce(loss)
    return loss
'''


def test_a_parameter_the_input_factory_passes_as_none_takes_its_none_branch(analyzer, tmp_path):
    # PKB's factory for problem 24 passes attention_mask=None: the `.item()` of the else branch never runs
    found = findings(analyzer, tmp_path, MASKED_LOSS, name="24_load_balancing_loss_fn_cuda.py")
    assert "PKB008" not in found
    # a problem whose factory passes no such None: the branch may run, its host sync counts
    found = findings(analyzer, tmp_path, MASKED_LOSS, name="9_layernorm_backward_cuda.py")
    assert "PKB008" in found



PINNED_SHAPES = '''
import torch
import torch.distributed as dist


class Cache:
    def __init__(self, world_size):
        self.sizes_dev = torch.zeros(world_size, dtype=torch.int64, device="cuda")
        self.sizes_host = torch.empty(world_size, dtype=torch.int64, pin_memory=True)


_cache = None


def solution(x):
    global _cache
    if _cache is None:
        _cache = Cache(dist.get_world_size())
    cache = _cache
    dist.all_gather_into_tensor(cache.sizes_dev, torch.tensor([x.shape[0]], device=x.device))
    cache.sizes_host.copy_(cache.sizes_dev, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    scale = x.float().mean()
    scale = scale * 2
    scale = scale + 1
    scale = scale - 1
    scale = scale / 2
    rows = [cache.SOURCE[i].item() for i in range(dist.get_world_size())]
    return x * sum(rows) * scale
'''


def test_item_on_a_pinned_attribute_reached_through_another_name_is_no_host_sync(analyzer, tmp_path):
    # `cache.sizes_host` is the class's `self.sizes_host`, a pinned host tensor: its .item() reads
    # host memory, after the stream synchronize (line 21) that already waited for the copy
    assert findings(analyzer, tmp_path, PINNED_SHAPES.replace("SOURCE", "sizes_host")).get("PKB008") == [21]
    # the device tensor's .item() (line 27) is a host sync of its own
    assert findings(analyzer, tmp_path, PINNED_SHAPES.replace("SOURCE", "sizes_dev")).get("PKB008") == [21, 27]


EMPTY_SHARE = '''
import torch
import torch.distributed as dist


def solution(x_local, w):
    world_size = dist.get_world_size()
    M, H = SOURCE
    M_local = M // world_size
    out = torch.empty((M_local, H), dtype=x_local.dtype, device=x_local.device)
    if M_local == 0:
        dist.barrier()
        return out
    staged = torch.zeros((world_size, M_local, H), dtype=x_local.dtype, device=x_local.device)
    staged[:, :M_local, :] = x_local.view(world_size, M_local, H)
    dist.all_reduce(staged)
    return staged.sum(0) @ w
'''


def test_a_rank_share_of_an_input_extent_is_never_empty_on_the_run(analyzer, tmp_path):
    # M // world_size of the input's rows: PKB's sizes are multiples of the world size, so the
    # empty-share branch (and its barrier) never runs; the slice assignment to `staged[:, :M_local]`
    # does not rebind M_local
    assert "PKB008" not in findings(analyzer, tmp_path, EMPTY_SHARE.replace("SOURCE", "x_local.shape"))
    # rows that are not an input's extent: the run does not decide the branch
    assert findings(analyzer, tmp_path, EMPTY_SHARE.replace("SOURCE", "(w.shape[1] - 4, 4)")).get("PKB008") == [11]


SIDE_STREAM = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
void pull(torch::Tensor ptrs, torch::Tensor out, int64_t world) {}
"""
_ext = load_inline(name="pull", cpp_sources="", cuda_sources=SRC, functions=["pull"])
_state = {}

def _setup(x):
    key = (x.numel(), x.dtype)
    if key not in _state:
        buf = symm_mem.empty(x.numel(), device=x.device, dtype=x.dtype)
        _state[key] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD), torch.cuda.Stream())
    return _state[key]

def solution(x):
    buf, hdl, side = _setup(x)
    buf.copy_(x)
    hdl.barrier(channel=0)
    out = torch.empty_like(x)
    WAIT
    with torch.cuda.stream(side):
        INSIDE
        _ext.pull(hdl.buffer_ptrs_dev, out, hdl.world_size)
    torch.cuda.current_stream().wait_stream(side)
    hdl.barrier(channel=1)
    return out
'''


def side_stream(wait: str = "pass", inside: str = "pass") -> str:
    return SIDE_STREAM.replace("WAIT", wait).replace("INSIDE", inside)


def line_with(src: str, text: str) -> int:
    return next(i + 1 for i, ln in enumerate(textwrap.dedent(src).lstrip("\n").splitlines()) if text in ln)


def test_pkb021_a_pull_on_a_side_stream_that_never_waited(analyzer, tmp_path):
    src = side_stream()
    assert findings(analyzer, tmp_path, src).get("PKB021") == [line_with(src, "_ext.pull(")]


def pkb021_related(analyzer, tmp_path, src: str) -> list[list[int]]:
    return [f.related_lines for f in analyzed(analyzer, tmp_path, src).findings if f.rule == "PKB021"]


def test_pkb021_names_the_barrier_it_is_not_ordered_after(analyzer, tmp_path):
    src = side_stream()
    assert pkb021_related(analyzer, tmp_path, src) == [[line_with(src, "hdl.barrier(channel=0)")]]


@pytest.mark.parametrize("wait", [
    "side.wait_stream(torch.cuda.current_stream())",
    "ev = torch.cuda.Event(); ev.record(); side.wait_event(ev)",
    "torch.cuda.synchronize()",
    "for s in [side]: s.wait_stream(torch.cuda.current_stream())",
])
def test_pkb021_quiet_once_the_side_stream_waits(analyzer, tmp_path, wait):
    assert "PKB021" not in findings(analyzer, tmp_path, side_stream(wait=wait))


def test_pkb021_quiet_on_a_name_bound_to_the_current_stream_before_the_block(analyzer, tmp_path):
    # `main` is the stream that was current before the block, so this is a real wait
    src = side_stream(wait="main = torch.cuda.current_stream()", inside="side.wait_stream(main)")
    assert "PKB021" not in findings(analyzer, tmp_path, src)


def test_pkb021_a_wait_for_the_current_stream_inside_the_block_waits_for_itself(analyzer, tmp_path):
    src = side_stream(inside="side.wait_stream(torch.cuda.current_stream())")
    assert findings(analyzer, tmp_path, src).get("PKB021") == [line_with(src, "_ext.pull(")]


def test_pkb021_a_wait_the_first_iteration_skips_does_not_order_it(analyzer, tmp_path):
    looped = (SIDE_STREAM.replace("    WAIT\n    with torch.cuda.stream(side):\n        INSIDE\n        _ext.pull",
                                  "    for step in range(2):\n        if STEP:\n"
                                  "            side.wait_stream(torch.cuda.current_stream())\n"
                                  "        with torch.cuda.stream(side):\n            _ext.pull"))
    later = looped.replace("STEP", "step > 0")
    assert findings(analyzer, tmp_path, later).get("PKB021") == [line_with(later, "_ext.pull(")]
    first = looped.replace("STEP", "step >= 0")
    assert "PKB021" not in findings(analyzer, tmp_path, first)


def test_pkb021_a_launch_handed_the_side_streams_handle(analyzer, tmp_path):
    handed = (side_stream().replace("void pull(torch::Tensor ptrs, torch::Tensor out, int64_t world)",
                                    "void pull(torch::Tensor ptrs, torch::Tensor out, int64_t world, int64_t stream)")
              .replace("    with torch.cuda.stream(side):\n        pass\n        _ext.pull(hdl.buffer_ptrs_dev, out, hdl.world_size)",
                       "    _ext.pull(hdl.buffer_ptrs_dev, out, hdl.world_size, side.cuda_stream)"))
    assert findings(analyzer, tmp_path, handed).get("PKB021") == [line_with(handed, "_ext.pull(")]
    current = handed.replace("side.cuda_stream)", "torch.cuda.current_stream().cuda_stream)")
    assert "PKB021" not in findings(analyzer, tmp_path, current)


def test_pkb021_the_next_calls_write_before_the_closing_barrier(analyzer, tmp_path):
    # the staging copy runs on the side stream; the previous call's closing barrier (peers done
    # reading) is still pending on the current stream
    src = side_stream(wait="side.wait_stream(torch.cuda.current_stream())").replace(
        "    buf.copy_(x)\n    hdl.barrier(channel=0)\n",
        "    with torch.cuda.stream(side):\n        buf.copy_(x)\n"
        "    torch.cuda.current_stream().wait_stream(side)\n    hdl.barrier(channel=0)\n")
    assert findings(analyzer, tmp_path, src).get("PKB021") == [line_with(src, "buf.copy_(x)")]
    synced = src.replace("    buf, hdl, side = _setup(x)\n", "    buf, hdl, side = _setup(x)\n    torch.cuda.synchronize()\n")
    assert "PKB021" not in findings(analyzer, tmp_path, synced)


def test_pkb021_quiet_on_work_in_a_branch_that_returned(analyzer, tmp_path):
    src = side_stream(wait="if x.numel() < 16:\n        return torch.mm(x.view(4, -1), x.view(-1, 4))")
    # the pull is still unordered after the barrier, but never runs after the early branch's matmul
    assert pkb021_related(analyzer, tmp_path, src) == [[line_with(src, "hdl.barrier(channel=0)")]]


def test_pkb021_a_helper_called_in_the_block_runs_on_the_side_stream(analyzer, tmp_path):
    src = side_stream(wait="side.wait_stream(torch.cuda.current_stream())", inside="_stage(out, hdl)").replace(
        "def solution(x):", "def _stage(out, hdl):\n    _ext.pull(hdl.buffer_ptrs_dev, out, hdl.world_size)\n\ndef solution(x):")
    assert "PKB021" not in findings(analyzer, tmp_path, src)


def test_pkb021_quiet_on_a_write_of_the_own_buffer_after_a_barrier_in_the_call(analyzer, tmp_path):
    # within the call the barrier says "my data is ready"; writing the own buffer's other half reads nothing it guards
    src = side_stream(inside="_ext.pull(buf, out, 0)").replace("    buf.copy_(x)\n", "")
    # the peers' pull after it still is reported
    assert findings(analyzer, tmp_path, src).get("PKB021") == [line_with(src, "hdl.buffer_ptrs_dev")]
    local_only = src.replace("        _ext.pull(hdl.buffer_ptrs_dev, out, hdl.world_size)\n", "")
    # ... but not ordered after the previous call's closing barrier, it may overwrite what peers still read
    assert findings(analyzer, tmp_path, local_only).get("PKB021") == [line_with(src, "_ext.pull(buf, out, 0)")]
    synced = local_only.replace("    out = torch.empty_like(x)\n", "    out = torch.empty_like(x)\n    torch.cuda.synchronize()\n")
    assert "PKB021" not in findings(analyzer, tmp_path, synced)


DTYPE_LADDER = '''
import torch

def _dtype_enum(dt):
    if dt == torch.bfloat16:
        return 0
    if dt == torch.float32:
        return 1
    raise TypeError("only bf16 and fp32")

def solution(x):
    code = _dtype_enum(x.dtype)
    return x * code
'''


def test_pkb013_a_dtype_dispatch_that_raises_for_the_problems_dtype(analyzer, tmp_path):
    # PKB's factory builds problem 63's inputs in float64 whatever the tree
    fixed = "64_deepmd_kalman_filter_optimizer_cuda.py"
    assert findings(analyzer, tmp_path, DTYPE_LADDER, name=fixed).get("PKB013") == [line_with(DTYPE_LADDER, "raise TypeError")]
    # the same dispatch where the run's inputs are bfloat16
    assert "PKB013" not in findings(analyzer, tmp_path, DTYPE_LADDER)
    chain = DTYPE_LADDER.replace("    if dt == torch.float32:\n        return 1\n    raise",
                                 "    elif dt in (torch.float32, torch.float16):\n        return 1\n    else:\n        raise")
    assert findings(analyzer, tmp_path, chain, name=fixed).get("PKB013") == [line_with(chain, "raise TypeError")]
    # a dispatch over index dtypes says nothing about the floating inputs
    index = DTYPE_LADDER.replace("torch.bfloat16", "torch.int32").replace("torch.float32", "torch.int64")
    assert "PKB013" not in findings(analyzer, tmp_path, index, name=fixed)
    # a function that does more than dispatch is not a ladder
    busy = DTYPE_LADDER.replace("    if dt == torch.bfloat16:", "    dt = dt if dt is not None else torch.float64\n    if dt == torch.bfloat16:")
    assert "PKB013" not in findings(analyzer, tmp_path, busy, name=fixed)


OFFSETS = '''
import torch
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
void push(torch::Tensor rows, torch::Tensor starts, int64_t n) {
    auto* s = starts.data_ptr<int>();
    auto* r = rows.data_ptr<float>();
}
"""
_ext = load_inline(name="push", cpp_sources="", cuda_sources=SRC, functions=["push"])

def solution(x):
    counts = torch.full((8,), 4, dtype=torch.int32, device=x.device)
    starts = STARTS
    _ext.push(x, starts, 8)
    return x.clone()
'''


def test_pkb022_an_int32_cumsum_is_int64_and_the_cpp_reads_int(analyzer, tmp_path):
    src = OFFSETS.replace("STARTS", "counts.cumsum(0) - counts")
    got = findings(analyzer, tmp_path, src, name="1_allreduce_cuda.py")
    assert got.get("PKB022") == [line_with(src, "_ext.push(x, starts, 8)")]


CACHED_OFFSETS = '''
_state = {}

def offsets_of(counts):
    if "starts" in _state:
        return _state["starts"]
    starts = torch.cat([torch.zeros(1, dtype=torch.int32, device=counts.device), counts[:-1].cumsum(0)])
    _state["starts"] = starts
    return starts
'''


LABELS = '''
import torch
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
void loss(torch::Tensor logits, torch::Tensor labels) {
    READ
}
void again(torch::Tensor logits, torch::Tensor labels) {
    auto* l = labels.data_ptr<int>();
}
"""
_ext = load_inline(name="loss", cpp_sources="", cuda_sources=SRC, functions=["loss", "again"])

def solution(hidden_states, weight, labels, old_logprobs):
    CALL
    _ext.again(hidden_states, labels)
    return hidden_states.clone()
'''


@pytest.mark.parametrize("read, call, found", [
    # problem 25's labels are int64 whatever the run's precision (the catalogue's tensor_dtypes)
    ("auto* l = labels.data_ptr<int>();", "_ext.loss(hidden_states, labels)", True),
    ("auto* l = labels.data_ptr<long long>();", "_ext.loss(hidden_states, labels)", False),
    # scalar_t of a floating dispatch is some floating type, never int64
    ('AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, logits.scalar_type(), "l", [&] { labels.data_ptr<scalar_t>(); });',
     "_ext.loss(hidden_states, labels)", True),
    ('AT_DISPATCH_ALL_TYPES(logits.scalar_type(), "l", [&] { labels.data_ptr<scalar_t>(); });', "_ext.loss(hidden_states, labels)", False),
    # the file dispatches on the dtype itself: the int32 branch does not run
    ("auto* l = labels.data_ptr<int>();", "if labels.dtype == torch.int32:\n        _ext.loss(hidden_states, labels)", False),
])
def test_pkb022_reads_the_problems_integer_inputs_and_a_floating_dispatch(analyzer, tmp_path, read, call, found):
    src = LABELS.replace("READ", read).replace("CALL", call)
    got = findings(analyzer, tmp_path, src, name="25_importance_sampling_loss_cuda.py").get("PKB022", [])
    first = line_with(src, "_ext.loss(hidden_states, labels)")
    again = line_with(src, "_ext.again(hidden_states, labels)")
    # the later read of the same function is never reached when the first raises: one finding
    assert got == ([first] if found else [again])


@pytest.mark.parametrize("guard, folded", [
    ("if hidden_states.numel() > 0:", True),    # both reads under the same branch: the first raises
    ("for _ in range(2):", True),
    ("if hidden_states.shape[0] > 4096:", False),  # only the first is under it: the second runs alone
])
def test_pkb022_a_later_read_is_folded_only_where_the_first_always_runs_before_it(analyzer, tmp_path, guard, folded):
    read = "auto* l = labels.data_ptr<int>();"
    if folded:
        call = f"{guard}\n        _ext.loss(hidden_states, labels)\n        _ext.again(hidden_states, labels)"
        src = LABELS.replace("READ", read).replace("CALL", call).replace("    _ext.again(hidden_states, labels)\n    return", "    return")
    else:
        src = LABELS.replace("READ", read).replace("CALL", f"{guard}\n        _ext.loss(hidden_states, labels)")
    got = findings(analyzer, tmp_path, src, name="25_importance_sampling_loss_cuda.py").get("PKB022", [])
    first = line_with(src, "_ext.loss(hidden_states, labels)")
    assert got == ([first] if folded else [first, line_with(src, "_ext.again(hidden_states, labels)")])


def test_pkb022_a_helper_called_from_a_nested_function_gets_that_functions_parameter(analyzer, tmp_path):
    # `labels` passed to push() inside run() is run()'s parameter, the int32 cast solution() passes,
    # not solution()'s int64 input of the same name
    call = ("def run(labels):\n        push(hidden_states, labels)\n"
            "    run(labels.to(torch.int32))")
    src = LABELS.replace("READ", "auto* l = labels.data_ptr<int>();").replace("CALL", call).replace(
        "    _ext.again(hidden_states, labels)\n    return", "    return").replace(
        "def solution(", "def push(h, labels):\n    _ext.loss(h, labels)\n\ndef solution(")
    assert "PKB022" not in findings(analyzer, tmp_path, src, name="25_importance_sampling_loss_cuda.py")
    # passed as it is, it is int64
    uncast = src.replace("run(labels.to(torch.int32))", "run(labels)")
    got = findings(analyzer, tmp_path, uncast, name="25_importance_sampling_loss_cuda.py").get("PKB022", [])
    assert got == [line_with(uncast, "_ext.loss(h, labels)")]


def test_pkb022_follows_a_cached_helpers_result_and_a_cat_that_widens(analyzer, tmp_path):
    src = OFFSETS.replace("def solution(x):", CACHED_OFFSETS + "\ndef solution(x):").replace("STARTS", "offsets_of(counts)")
    got = findings(analyzer, tmp_path, src, name="1_allreduce_cuda.py")
    assert got.get("PKB022") == [line_with(src, "_ext.push(x, starts, 8)")]
    # the same helper, its offsets cast back to int32: quiet
    cast = src.replace("counts[:-1].cumsum(0)])", "counts[:-1].cumsum(0)]).int()")
    assert "PKB022" not in findings(analyzer, tmp_path, cast, name="1_allreduce_cuda.py")


@pytest.mark.parametrize("starts", [
    "(counts.cumsum(0) - counts).to(torch.int32)",   # cast back
    "counts.cumsum(0, dtype=torch.int32) - counts",  # the reduction told its dtype
    "counts.clone()",                                  # int32 all along
    "torch.cumsum(counts, 0).int()",
    "some_helper(counts)",                             # not decided by the file: not reported
])
def test_pkb022_quiet_where_the_dtype_matches_or_is_unknown(analyzer, tmp_path, starts):
    assert "PKB022" not in findings(analyzer, tmp_path, OFFSETS.replace("STARTS", starts), name="1_allreduce_cuda.py")


def test_pkb022_the_related_lines_are_where_the_argument_got_its_dtype_and_the_cpp_read(analyzer, tmp_path):
    src = OFFSETS.replace("STARTS", "torch.cumsum(counts, 0)")
    (found,) = [f for f in analyzed(analyzer, tmp_path, src).findings if f.rule == "PKB022"]
    # where it got its dtype, and the C++ read
    assert found.related_lines == sorted([line_with(src, "starts = torch.cumsum(counts, 0)"),
                                          line_with(src, "auto* s = starts.data_ptr<int>();")])
    assert "int64" in found.message and "data_ptr<int>()" in found.message


def test_pkb022_a_parameter_read_as_several_types_accepts_each(analyzer, tmp_path):
    # a dispatch on the dtype in the bound function: int and int64_t both read
    both = OFFSETS.replace("    auto* s = starts.data_ptr<int>();\n",
                           "    if (starts.scalar_type() == at::kInt) { auto* s = starts.data_ptr<int>(); }\n"
                           "    else { auto* s = starts.data_ptr<int64_t>(); }\n").replace("STARTS", "counts.cumsum(0)")
    assert "PKB022" not in findings(analyzer, tmp_path, both, name="1_allreduce_cuda.py")


def test_pkb022_a_problem_whose_factory_fixes_float32_inputs_read_as_bf16(analyzer, tmp_path):
    # problem 62's inputs are float32 whatever the run tree: a bf16 read of solution()'s tensor fails
    src = OFFSETS.replace("STARTS", "counts").replace("rows.data_ptr<float>()", "rows.data_ptr<at::BFloat16>()")
    fixed = "63_torchharmonics_spherical_convolution_cuda.py"
    assert findings(analyzer, tmp_path, src, name=fixed).get("PKB022") == [line_with(src, "_ext.push(x, starts, 8)")]
    # where the tree's precision is the inputs' dtype, nothing is assumed about a parameter
    assert "PKB022" not in findings(analyzer, tmp_path, src)
    # an integer read of a parameter is not judged by the floating inputs' dtype
    ints = src.replace("rows.data_ptr<at::BFloat16>()", "rows.data_ptr<int64_t>()")
    assert "PKB022" not in findings(analyzer, tmp_path, ints, name=fixed)


def test_pkb022_follows_a_helpers_parameter_to_its_caller_and_forward_to_apply(analyzer, tmp_path):
    helper = OFFSETS.replace("STARTS", "counts.cumsum(0)").replace(
        "    _ext.push(x, starts, 8)\n", "    Push.apply(x, starts)\n").replace(
        "def solution(x):",
        "class Other(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, y, starts):\n"
        "        return y\n\n"
        "class Push(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, y, starts):\n"
        "        _ext.push(y, starts, 8)\n        return y\n\ndef solution(x):")
    (found,) = [f for f in analyzed(analyzer, tmp_path, helper).findings if f.rule == "PKB022"]
    assert found.line == line_with(helper, "_ext.push(y, starts, 8)")
    # where the caller made it: `starts = counts.cumsum(0)` in solution()
    assert line_with(helper, "starts = counts.cumsum(0)") in found.related_lines
