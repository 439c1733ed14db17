"""The rank's snapshot of what the harness goes through (pkb.eval.guard.HarnessSnapshot) sees a
harness module's imported names rebound, a harness module swapped in sys.modules and an import
hook; restore() puts each back."""

import builtins
import sys
import time as real_time
import types

import pkb.eval.timing  # noqa: F401 - a harness module the snapshot watches
from pkb.eval import guard


def test_a_harness_modules_imported_clock_rebound_is_seen_and_restored():
    timing = sys.modules["pkb.eval.timing"]
    assert timing.time is real_time
    snapshot = guard.HarnessSnapshot()
    assert snapshot.changed() == []
    timing.time = types.SimpleNamespace(perf_counter_ns=lambda: 0)  # a clock of the candidate's
    assert "pkb.eval.timing.time" in snapshot.changed()
    snapshot.restore()
    assert timing.time is real_time and snapshot.changed() == []


def test_a_swapped_harness_module_and_an_import_hook_are_seen_and_restored():
    snapshot = guard.HarnessSnapshot()
    real_import, real_module = builtins.__import__, sys.modules["pkb.eval.timing"]
    try:
        sys.modules["pkb.eval.timing"] = types.ModuleType("pkb.eval.timing")  # what a later import would get
        builtins.__import__ = lambda *a, **k: real_import(*a, **k)
        changed = snapshot.changed()
        assert "sys.modules['pkb.eval.timing']" in changed and "builtins.__import__" in changed
        snapshot.restore()
        assert sys.modules["pkb.eval.timing"] is real_module and builtins.__import__ is real_import
    finally:
        builtins.__import__ = real_import
        sys.modules["pkb.eval.timing"] = real_module


def test_an_output_tensor_with_its_own_methods_is_foreign():
    import torch

    plain = torch.ones(3)
    assert guard.foreign_tensor_types([plain, {"a": torch.zeros(2)}]) == []
    lazy = torch.ones(3)
    lazy.clone = lambda *a, **k: torch.zeros(3)  # the candidate's code where the harness copies it
    lazy.note = "an attribute of its own that shadows nothing"
    assert guard.foreign_tensor_types((plain, lazy)) == ["torch.Tensor with its own clone"]


def test_a_torch_function_mode_left_pushed_is_seen():
    from torch.overrides import TorchFunctionMode

    class AgreeWithEverything(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    snapshot = guard.HarnessSnapshot()
    mode = AgreeWithEverything()
    with mode:  # pushed inside a call and popped before it returns: nothing to see afterwards
        pass
    assert snapshot.changed() == []
    mode.__enter__()
    assert "a torch function mode left pushed" in snapshot.changed()
    snapshot.restore()  # pops it
    assert snapshot.changed() == []


def test_a_harness_write_in_the_job_folder_fails_on_a_replaced_path_not_on_a_full_disk(tmp_path):
    import errno
    import os

    from pkb.eval.worker import Rank

    rank = Rank.__new__(Rank)
    rank.job = types.SimpleNamespace(job_dir=str(tmp_path))
    verdict = str(tmp_path / "verdict_rank0.json")
    assert rank._job_file_replaced(IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), verdict))
    assert not rank._job_file_replaced(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), verdict))  # the machine's
    assert not rank._job_file_replaced(IsADirectoryError(errno.EISDIR, "x", "/elsewhere/verdict_rank0.json"))
    assert not rank._job_file_replaced(ValueError("not a path"))


def test_the_ranks_report_replaced_by_another_dict_is_seen():
    report = types.SimpleNamespace(result={"trials": []})
    snapshot = guard.HarnessSnapshot()
    snapshot.watch("the rank's report", report, "result")
    assert snapshot.changed() == []
    report.result = type("Lying", (dict,), {})(report.result)  # turns whatever is recorded into a match
    assert "the rank's report" in snapshot.changed()


def test_group_references_go_for_the_first_groups_and_the_last_timed_calls_only():
    from pkb.eval.rank_timing import GROUP_TRIAL_BASE, RECHECKED_GROUPS, RankTiming

    sent = []
    rank = RankTiming.__new__(RankTiming)
    rank.job = types.SimpleNamespace(iters=30, judge_cap_bytes=1 << 20)
    rank.reference_mutates = False
    rank._inputs = lambda trial: (trial,)
    rank.call_reference = lambda inputs: __import__("torch").zeros(1)
    rank.channel = types.SimpleNamespace(send_reference=lambda trial, out, cap: sent.append(trial))
    rank.send_group_references(20)  # small inputs can make many groups
    last = (30 - 1) % 20
    assert rank.sent_groups == {*range(RECHECKED_GROUPS), last}
    assert sent == [GROUP_TRIAL_BASE + g for g in sorted(rank.sent_groups)]
