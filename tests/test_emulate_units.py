"""Pure pieces of pkb.emulate: subtype choice, co-residency arithmetic, and (opt-in, slow) one
shared JIT build for all virtual ranks."""

from __future__ import annotations

import os
import textwrap
import threading
import time
import types

import pytest

from pkb.emulate import coresidency
from pkb.emulate.evaluate import case_subtype, hard_coded_hint, overall_subtype


def test_case_subtype_precedence():
    ok = {"structure_ok": True, "shape_ok": True, "dtype_ok": True, "nan_inf": 0, "sentinel": 0, "max_violation": 50.0}
    assert case_subtype({**ok, "shape_ok": False}, [{"name": "local_only"}]) == "shape_mismatch"
    assert case_subtype({**ok, "nan_inf": 2}, []) == "nan_inf"
    assert case_subtype(ok, [{"name": "stale", "peers": [1]}, {"name": "missing_peer", "peers": [1, 2]}]) == "missing_peer"
    assert case_subtype({**ok, "sentinel": 3}, []) == "unwritten"
    assert case_subtype({**ok, "max_violation": 3.0}, []) == "tolerance"
    assert case_subtype(ok, []) == ""


def test_overall_subtype_majority_then_priority():
    assert overall_subtype(["unwritten", "stale", "stale"]) == "stale"
    assert overall_subtype(["unwritten", "stale"]) == "unwritten"  # tie: the more telling one (pkb.taxonomy)
    assert overall_subtype(["stale", "stale", "shape_mismatch"]) == "shape_mismatch"
    assert overall_subtype(["", ""]) == ""


def test_hard_coded_hint_needs_every_case():
    d = [{"rank": 0, "matched_hypotheses": [{"name": "missing_peer", "peers": [2, 3]}]},
         {"rank": 1, "matched_hypotheses": [{"name": "missing_peer", "peers": [2, 3]}]}]
    assert "hard-coded as 2" in hard_coded_hint(d, 4)
    d.append({"rank": 2, "matched_hypotheses": [{"name": "stale", "peers": [3]}]})
    assert hard_coded_hint(d, 4) == ""


def test_occupancy_bound():
    limits = {"sms": 132, "max_threads_per_sm": 2048}
    fits = [{"rank": r, "name": "k", "blocks": 64, "threads": 256, "max_active_per_sm": 8} for r in range(8)]
    assert coresidency.occupancy_bound(limits, fits) == {"determinable": True, "blocks_launched": 512, "capacity": 1056, "co_resident": True}
    big = [{**l, "blocks": 200} for l in fits]
    assert coresidency.occupancy_bound(limits, big)["co_resident"] is False
    assert coresidency.occupancy_bound(limits, [])["determinable"] is False
    unknown = [{**l, "max_active_per_sm": None} for l in fits]
    assert coresidency.occupancy_bound(limits, unknown)["determinable"] is False


class _StuckLaunch:
    """A tensor whose add_ never returns: a launch blocked in the driver."""

    def __init__(self):
        self.release = threading.Event()

    def add_(self, value):
        self.release.wait(5.0)
        return self


class _Event:
    def __init__(self, done: bool):
        self.done = done

    def record(self, stream=None):
        pass

    def query(self):
        return self.done


def _probe(buf, done: bool):
    probe = object.__new__(coresidency.Probe)  # no GPU here: the stream is None, a no-op context
    probe.device, probe.stream, probe.buf, probe.event = None, None, buf, _Event(done)
    return probe


def test_a_probe_whose_launch_blocks_returns_in_its_wait_and_decides_nothing():
    stuck = _StuckLaunch()
    t0 = time.monotonic()
    got = _probe(stuck, done=True).run(wait_s=0.3)
    stuck.release.set()
    assert got["probe"] == "blocked" and time.monotonic() - t0 < 2.0
    world = types.SimpleNamespace(device="cpu", shared={})
    probe = _probe(stuck, done=True)
    probe.run = lambda: got
    assert coresidency.analyse(world, probe)["verdict"] == "unknown"


def test_a_probe_that_launches_reports_completed_or_starved():
    class Quick:
        def add_(self, value):
            return self

    assert _probe(Quick(), done=True).run(wait_s=0.5)["probe"] == "completed"
    assert _probe(Quick(), done=False).run(wait_s=0.2)["probe"] == "starved"


@pytest.mark.skipif(not os.environ.get("PKB_SLOW_TESTS"), reason="builds a C++ extension (about a minute); set PKB_SLOW_TESTS=1")
def test_one_jit_build_serves_every_rank(tmp_path):
    from pkb.emulate import emulated_evaluate

    cand = tmp_path / "1_allreduce_ext.py"
    cand.write_text(textwrap.dedent('''
        import torch
        import torch.distributed as dist
        from torch.utils.cpp_extension import load_inline

        _ext = load_inline(name="pkb_emulate_ext_share_test", cpp_sources="torch::Tensor twice(torch::Tensor x) { return x * 2; }",
                           functions=["twice"], verbose=False)
        _RANK = dist.get_rank()

        def solution(x):
            assert dist.get_rank() == _RANK
            out = _ext.twice(x) / 2
            dist.all_reduce(out)
            return out
    '''))
    rec = emulated_evaluate(cand, 1, 4, trials=1, device="cpu", dtype="float32")
    assert rec["correct"], rec["reason"]
    builds = sorted(rec["emulation"]["builds"], key=lambda b: b["seconds"])
    assert len(builds) == 4 and all(b["seconds"] < 2.0 for b in builds[:3])  # three cache hits
