"""Candidates that need NVLink multicast: `not_run` "needs multicast" with the multimem.* lines,
only when the candidate has no fallback for multicast_ptr == 0 and its failure is one address 0
explains; a working fallback runs, a broken fallback is the candidate's own failure."""

from __future__ import annotations

import textwrap
from pathlib import Path

from emulate_helpers import EmulatedCandidate

from pkb.eval.multicast import multicast_need, needs_multicast_verdict, python_guards
from pkb.emulate.records import emulate_records
from pkb.eval.options import EvalOptions

HEADER = '''
import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

# the device code a real candidate would build (not built here: the CPU world runs the Python)
PTX = "multimem.ld_reduce.relaxed.sys.global.add.v4.bf16x2 {%0, %1, %2, %3}, [%4];"
_state = {}


def _handle(x):
    if "h" not in _state:
        buf = symm_mem.empty(x.shape, dtype=x.dtype, device=x.device)
        _state["h"] = (buf, symm_mem.rendezvous(buf, dist.group.WORLD))
    return _state["h"]


def _multimem_allreduce(mc_ptr, buf):
    # what a multimem kernel does with address 0
    if mc_ptr == 0:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    return buf.clone()


def _peer_allreduce(hdl, x):
    out = torch.zeros_like(x)
    for p in range(hdl.world_size):
        out += hdl.get_buffer(p, list(x.shape), x.dtype)
    return out
'''

CANDIDATES = {
    "no_fallback": '''
def solution(x):
    buf, hdl = _handle(x)
    buf.copy_(x)
    hdl.barrier(channel=0)
    return _multimem_allreduce(int(hdl.multicast_ptr), buf)
''',
    # hasattr is true on every handle: no guard for 0
    "hasattr_only": '''
def solution(x):
    buf, hdl = _handle(x)
    buf.copy_(x)
    hdl.barrier(channel=0)
    use_mc = x.dtype == torch.float32 and hasattr(hdl, "multicast_ptr")
    if use_mc:
        return _multimem_allreduce(int(hdl.multicast_ptr), buf)
    return _peer_allreduce(hdl, x)
''',
    "fallback": '''
def solution(x):
    buf, hdl = _handle(x)
    buf.copy_(x)
    hdl.barrier(channel=0)
    mc = getattr(hdl, "multicast_ptr", 0)
    if mc != 0:
        out = _multimem_allreduce(mc, buf)
    else:
        out = _peer_allreduce(hdl, x)
    hdl.barrier(channel=0)
    return out
''',
    "broken_fallback": '''
def solution(x):
    buf, hdl = _handle(x)
    buf.copy_(x)
    if hdl.multicast_ptr:
        return _multimem_allreduce(hdl.multicast_ptr, buf)
    return x.clone()  # the fallback forgets the peers
''',
    # fails before it ever asks for the multicast address: its own bug
    "fails_first": '''
def solution(x):
    buf, hdl = _handle(x)
    buf.copy_(x)
    hdl.barrier(channel=0)
    hdl.signal_pad_ptrs_dev.data_ptr()  # an int in torch, taken for a Tensor: AttributeError
    return _multimem_allreduce(int(hdl.multicast_ptr), buf)
''',
}


def test_needs_multicast_only_without_a_fallback(tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    recs = {}
    for name, body in CANDIDATES.items():
        p = d / f"1_allreduce_{name}.py"
        p.write_text(textwrap.dedent(HEADER) + textwrap.dedent(body))
        recs[name] = EmulatedCandidate(p)
    options = EvalOptions(trials=1, dtype="float32", store_path=str(tmp_path / "s.sqlite"), work_dir=str(tmp_path / "w"))
    emulate_records(list(recs.values()), 2, options, device="cpu")
    ev = {k: r.evaluation for k, r in recs.items()}
    ptx_line = next(i for i, ln in enumerate(textwrap.dedent(HEADER).splitlines(), 1) if "multimem.ld_reduce" in ln)
    for name in ("no_fallback", "hasattr_only"):
        e = ev[name]
        assert (e["status"], e["subtype"]) == ("not_run", "needs_multicast"), (name, e)
        assert "needs multicast" in e["reason"] and f"line {ptx_line}" in e["reason"]
        mc = e["details"]["multicast"]
        assert mc["multimem"][0]["line"] == ptx_line and "multimem.ld_reduce" in mc["multimem"][0]["snippet"]
        assert mc["observed"]["outcome"] == "runtime_error"  # what the run gave is kept
    assert ev["fallback"]["correct"], ev["fallback"]
    assert ev["broken_fallback"]["outcome"] == "wrong_result", ev["broken_fallback"]
    assert ev["broken_fallback"]["details"]["multicast_evidence"]["fallback_guards"]
    assert ev["fails_first"]["outcome"] == "runtime_error", ev["fails_first"]
    assert ev["fails_first"]["details"]["multicast_reads"] == 0
    # a needs-multicast verdict is stored and not rerun
    again = EmulatedCandidate(Path(recs["no_fallback"].path))
    emulate_records([again], 2, options, device="cpu")
    assert again.evaluation["status"] == "skipped_cached" and again.evaluation["subtype"] == "needs_multicast"


def test_python_guards():
    def guards(src: str) -> list[int]:
        return [g["line"] for g in python_guards(textwrap.dedent(src))]

    assert guards("if hdl.multicast_ptr:\n    pass\n") == [1]
    assert guards("mc = int(hdl.multicast_ptr)\nif mc != 0 and n % 8 == 0:\n    pass\n") == [2]
    assert guards("use = hdl.multicast_ptr != 0 and ok\n") == [1]
    assert guards("if hdl.multicast_ptr == 0:\n    raise RuntimeError('x')\n") == [1]
    assert guards("use = hasattr(hdl, 'multicast_ptr') and ok\nif use:\n    f(hdl.multicast_ptr)\n") == []
    assert guards("assert hdl.multicast_ptr != 0\n") == []  # raising is no fallback
    assert guards("f(int(hdl.multicast_ptr))\n") == []


def test_cuda_side_guard_counts_and_a_check_that_raises_does_not():
    src = 'K = r"""\nbool use_mm = (multicast_ptr != 0) && ok;\nasm("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1};");\n"""\n'
    need = multicast_need(src)
    assert [g["line"] for g in need["fallback_guards"]] == [2] and need["multimem"][0]["line"] == 3
    src = 'K = r"""\nTORCH_CHECK(multicast_ptr != 0, "no multicast");\nasm("multimem.st.relaxed.sys.global.v4.f32 [%0], {%1};");\n"""\n'
    assert multicast_need(src)["fallback_guards"] == []


def test_verdict_keeps_failures_that_address_zero_does_not_explain():
    need = {"multimem": [{"line": 3, "snippet": "multimem.ld_reduce", "pass": "python"}], "fallback_guards": [], "reads_multicast_ptr": True}
    ran = {"status": "ran", "details": {"multicast_reads": 4}}
    assert needs_multicast_verdict({**ran, "outcome": "hang", "subtype": "timeout"}, need)["subtype"] == "needs_multicast"
    assert needs_multicast_verdict({**ran, "status": "inconclusive", "outcome": "", "subtype": "not_co_resident"}, need)
    assert needs_multicast_verdict({**ran, "outcome": "compile_error", "subtype": "cuda_syntax"}, need) is None
    assert needs_multicast_verdict({**ran, "outcome": "runtime_error", "subtype": "python_exception",
                                    "reason": "TypeError: incompatible function arguments"}, need) is None
    assert needs_multicast_verdict({**ran, "outcome": "faster", "correct": True}, need) is None
    # NCCL's watchdog ending the rank on the illegal address (SIGABRT, no report) is explained;
    # an NCCL error the rank reported is the candidate's own
    aborted = {**ran, "outcome": "runtime_error", "subtype": "nccl_error", "details": {"multicast_reads": 1, "signal": "SIGABRT"}}
    assert needs_multicast_verdict(aborted, need)["subtype"] == "needs_multicast"
    assert needs_multicast_verdict({**aborted, "details": {"multicast_reads": 1}}, need) is None
    assert needs_multicast_verdict({"status": "ran", "outcome": "hang", "details": {"multicast_reads": 0}}, need) is None
    assert needs_multicast_verdict({**ran, "outcome": "hang"}, {**need, "multimem": []}) is None


def test_multimem_named_in_a_docstring_or_comment_is_no_evidence():
    from pkb.eval.multicast import multicast_need

    source = (
        '"""Uses multimem.ld_reduce for the all-reduce."""\n'
        "# multimem.st would be faster here\n"
        'CUDA = r"""\n'
        "// multimem.red is not used\n"
        '__global__ void k(float* p) { asm volatile("multimem.ld_reduce.relaxed.sys.global.add.f32 %0, [%1];" :: "l"(p)); }\n'
        '"""\n'
    )
    assert [e["line"] for e in multicast_need(source)["multimem"]] == [5]


# ---- real ranks: the run's evidence is the handles' multicast address -----------------------------

MULTIMEM_SOURCE = textwrap.dedent('''
    SRC = "asm volatile(\\"multimem.ld_reduce.relaxed.sys.global.add.v4.bf16x2 {%0, %1, %2, %3}, [%4];\\");"
    def solution(x):
        hdl = _handle(x)
        _ext.reduce(int(hdl.multicast_ptr), x)
        return x
''')
FAILED = {"status": "ran", "outcome": "runtime_error", "subtype": "illegal_address", "correct": False,
          "reason": "rank 0 in trial 0 candidate: AcceleratorError: an illegal memory access", "details": {}}


class _Handle:
    def __init__(self, address):
        self.multicast_ptr = address


class _SymmMem:
    """Stands in for torch.distributed._symmetric_memory: rendezvous hands out one handle per call."""

    def __init__(self, addresses):
        self.addresses = list(addresses)

    def rendezvous(self, buf, group=None):
        return _Handle(self.addresses.pop(0))


def test_the_watch_counts_handles_without_a_multicast_address():
    from pkb.eval.multicast import MulticastAddressWatch

    counts, module = {}, _SymmMem([0, 0x7F0000000000, 0])
    MulticastAddressWatch(counts, module).install()
    MulticastAddressWatch(counts, module).install()  # installed once, not wrapped twice
    rendezvous = module.rendezvous  # a name bound after the install reaches the wrapper too
    handles = [rendezvous(None) for _ in range(3)]
    assert [h.multicast_ptr for h in handles] == [0, 0x7F0000000000, 0]  # the library's handles, untouched
    assert counts == {"handles": 3, "multicast_zero": 2}


def test_the_first_handle_without_a_multicast_address_is_reported_at_once():
    from pkb.eval.multicast import MulticastAddressWatch

    counts, module, saved = {}, _SymmMem([0x7F0000000000, 0, 0]), []
    MulticastAddressWatch(counts, module, on_first_zero=lambda: saved.append(dict(counts))).install()
    for _ in range(3):
        module.rendezvous(None)
    assert saved == [{"handles": 2, "multicast_zero": 1}]  # once, at the first zero


def test_a_rank_aborted_right_after_a_handle_without_multicast_still_reports_it(tmp_path):
    # NCCL's watchdog aborts a rank whose kernel read address 0, before the rank's next report: the
    # count must already be on disk. Here the candidate stands in a library whose handle has no
    # multicast address, then aborts as the watchdog would. (Its import is spelled so that the
    # harness, which reads the source, does not refuse it on CPU as a CUDA-only library user.)
    from test_eval_support import quick_options, run_eval, write_candidate

    body = (
        "import importlib, os\nsymm_mem = importlib.import_module('torch.distributed._symmetric_' + 'memory')\n\n"
        "class _NoMulticast:\n    @staticmethod\n    def rendezvous(tensor, group_name):\n"
        "        return type('Handle', (), {'multicast_ptr': 0})()\n\n"
        "def solution(x):\n    symm_mem._SymmetricMemory = _NoMulticast\n"
        "    symm_mem.rendezvous(x, dist.group.WORLD)\n    os.abort()\n"
    )
    path = write_candidate(tmp_path / "c", "1_allreduce_aborts.py", body)
    (rec,) = run_eval([path], quick_options(tmp_path, world_size=1, trials=1))
    assert rec.evaluation["outcome"] == "runtime_error", rec.evaluation["reason"]
    assert rec.evaluation["ranks"][0]["symm_mem"] == {"handles": 1, "multicast_zero": 1}, rec.evaluation["ranks"]


def test_real_ranks_given_no_multicast_address_make_a_multimem_failure_not_the_candidates():
    from pkb.eval.multicast import real_rank_multicast_verdict

    off = [{"symm_mem": {"handles": 1, "multicast_zero": 1}}, None]
    verdict = real_rank_multicast_verdict(FAILED, off, lambda: MULTIMEM_SOURCE)
    assert verdict is not None and (verdict["status"], verdict["outcome"], verdict["subtype"]) == ("not_run", "", "needs_multicast")
    assert verdict["reason"].startswith("needs multicast: the candidate runs multimem.* (line 2")
    assert verdict["details"]["multicast"]["observed"]["subtype"] == "illegal_address"
    assert verdict["details"]["multicast_reads"] == 1

    on = [{"symm_mem": {"handles": 1, "multicast_zero": 0}}]  # multicast was there: the failure is its own
    assert real_rank_multicast_verdict(FAILED, on, lambda: MULTIMEM_SOURCE) is None
    assert real_rank_multicast_verdict(FAILED, [{}], lambda: MULTIMEM_SOURCE) is None  # no evidence from the run
    guarded = MULTIMEM_SOURCE.replace("_ext.reduce(", "if int(hdl.multicast_ptr) != 0:\n        _ext.reduce(")
    assert real_rank_multicast_verdict(FAILED, off, lambda: guarded) is None  # a fallback it did not take
    assert real_rank_multicast_verdict(FAILED, off, lambda: "def solution(x):\n    return x\n") is None  # no multimem
    binding = {**FAILED, "subtype": "binding_mismatch"}  # a wrong signature is its own, multicast or not
    assert real_rank_multicast_verdict(binding, off, lambda: MULTIMEM_SOURCE) is None
    correct = {**FAILED, "outcome": "faster", "subtype": "", "correct": True}
    assert real_rank_multicast_verdict(correct, off, lambda: MULTIMEM_SOURCE) is None


def test_every_real_rank_reports_its_symmetric_memory_handles(tmp_path):
    from test_eval_support import quick_options, run_eval, write_candidate

    path = write_candidate(tmp_path / "c", "1_allreduce_plain.py", "def solution(x):\n    y = x.clone()\n    dist.all_reduce(y)\n    return y\n")
    (rec,) = run_eval([path], quick_options(tmp_path, world_size=2, trials=1))
    ranks = rec.evaluation["ranks"]
    assert len(ranks) == 2 and all(r["symm_mem"] == {"handles": 0, "multicast_zero": 0} for r in ranks), ranks
