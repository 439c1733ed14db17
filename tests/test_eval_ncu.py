"""The ncu pass through the real launcher on CPU: the rank spawner starts each rank under a stand-in `ncu`
that refuses one metric the way the one-GPU H200's ncu does, then runs the rank and writes a report
its `--import` reads back."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from pkb.record import CandidateRecord

FAKE_NCU = r'''#!PYTHON
import json, os, sys
argv = sys.argv[1:]
log = os.environ["FAKE_NCU_LOG"]
with open(log, "a") as f:
    f.write(json.dumps(argv) + "\n")
if "--import" in argv:
    rep = argv[argv.index("--import") + 1]
    body = open(rep).read()
    print('"ID","Process ID","Process Name","Kernel Name","gpu__time_duration.sum","lts__t_sectors_srcunit_tex_aperture_peer.sum","dram__bytes.sum"')
    print('"","","","","nsecond","sector","byte"')
    print(body.strip())
    sys.exit(0)
metrics = argv[argv.index("--metrics") + 1].split(",") if "--metrics" in argv else []
if "nvltx__bytes.sum" in metrics:
    print("==ERROR== Unable to access the following 1 metrics: nvltx__bytes.", file=sys.stderr)
    sys.exit(1)
rep = argv[argv.index("-o") + 1].replace("%q{RANK}", os.environ.get("RANK", "0")) + ".ncu-rep"
target = argv[argv.index("-o") + 2:]
if not os.path.isdir(os.path.dirname(rep)):  # as the real one: checked before the target starts
    print("==ERROR== Unable to write to file %s. Please verify this file is not locked, and writable." % os.path.basename(rep))
    sys.exit(1)
with open(rep, "w") as f:
    f.write('"0","%d","python3","pkb_push","%d","128","4,096"\n' % (os.getpid(), 1000 + int(os.environ.get("RANK", "0"))))
os.execvp(target[0], target)
'''


@pytest.fixture()
def fake_ncu(tmp_path, monkeypatch):
    exe = tmp_path / "bin" / "ncu"
    exe.parent.mkdir()
    exe.write_text(FAKE_NCU.replace("PYTHON", sys.executable, 1))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "ncu_calls.jsonl"
    monkeypatch.setenv("FAKE_NCU_LOG", str(log))
    # The stand-in logs its argv to a file outside the job folder, which a sandboxed launch cannot
    # write (its /tmp is private): these tests are about the ncu pass, the sandbox has its own.
    monkeypatch.setenv("PKB_SANDBOX", "none")
    return exe, log


def test_ncu_pass_runs_every_rank_under_ncu_and_drops_refused_metrics(tmp_path, fake_ncu):
    from pkb.eval import EvalOptions, environment, prepare
    from pkb.eval.ncu import ncu_pass
    from pkb.store import Store

    exe, log = fake_ncu
    cand = tmp_path / "1_allreduce_good.py"
    cand.write_text("import torch\nimport torch.distributed as dist\n\n"
                    "@torch.no_grad()\ndef solution(tensor):\n    out = tensor.clone()\n    dist.all_reduce(out)\n    return out\n")
    rec = CandidateRecord(path=str(cand), problem_id=1, problem_name="allreduce")
    opts = EvalOptions(world_size=2, trials=1, warmup=1, iters=2, timeout_s=240, store_path=str(tmp_path / "s.sqlite"), work_dir=str(tmp_path / "w"))
    store = Store(opts.store_path)
    try:
        pending = prepare(rec, opts, environment(opts), store)
    finally:
        store.close()
    out = ncu_pass(pending.job, ["void pkb_push<float>(float*)"], ncu=str(exe))
    assert out["status"] == "ok", out
    assert out["unavailable_metrics"] == ["nvltx__bytes"] and "nvltx__bytes.sum" not in out["metrics"]
    assert sorted(k["rank"] for k in out["kernels"]) == [0, 1]
    k0 = next(k for k in out["kernels"] if k["rank"] == 0)
    assert k0["kernel"] == "pkb_push" and k0["duration_ns"] == 1000.0 and k0["peer_l2_bytes"] == 128 * 32 and k0["dram_bytes"] == 4096
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    imports = [c for c in calls if "--import" in c]
    assert len(imports) == 2 and all(c[c.index("--print-units") + 1] == "base" for c in imports)
    runs = [c for c in calls if "--import" not in c]
    refused = [c for c in runs if "nvltx__bytes.sum" in c[c.index("--metrics") + 1]]
    # the first rank to refuse ends the launch, and its peer may be stopped before its ncu starts
    assert 1 <= len(refused) <= 2 and len(runs) == len(refused) + 2  # then both ranks ran without it
    assert all("nvltx__bytes.sum" not in c[c.index("--metrics") + 1] for c in runs[-2:])
    last = runs[-1]
    assert last[last.index("-k") + 1] == "regex:^(pkb_push)$"
    assert last[last.index("--nvtx-include") + 1] == "regex:pkb:candidate_call\\[1\\]/"
    assert "--communicator" in last and last[last.index("--communicator-num-peers") + 1] == "2"
    assert last[-3:-1] == ["-m", "pkb.eval.worker"]  # the rank itself, under ncu
    results = [json.loads(p.read_text()) for p in sorted(Path(out["job_dir"]).glob("result_rank*.json"))]
    assert len(results) == 2
    for res in results:
        body = res.get("result", res)
        assert body.get("timing") in (None, {}), "no timing under ncu"
        assert (body.get("profile") or {}).get("backend") == "nvtx" and body["profile"]["status"] == "ok"


def test_ncu_pass_without_ncu_says_so(tmp_path):
    from pkb.eval.job import JobSpec
    from pkb.eval.ncu import ncu_pass

    job = JobSpec(job_dir=str(tmp_path / "j"), candidate_path="x.py", candidate_sha256="0" * 64, problem={"kind": "registry", "id": 1},
                  world_size=1, backend="gloo", device="cpu", dtype="float32", trials=1)
    out = ncu_pass(job, [], ncu=str(tmp_path / "no_such_ncu"))
    assert out["status"] == "skipped" and "not found" in out["error"]


def test_refused_metrics_are_read_from_access_and_error_lines():
    from profiling.capture import unavailable_metrics

    text = ("==PROF== Connected to process 1\n==ERROR== Unable to access the following 2 metrics: nvlrx__bytes, nvltx__bytes.\n"
            "==ERROR== Failed to find metric pkb_no_such__metric.sum\n")
    assert unavailable_metrics(text) == ["nvlrx__bytes", "nvltx__bytes"]
    assert unavailable_metrics(text, ["pkb_no_such__metric.sum", "dram__bytes.sum"]) == ["nvlrx__bytes", "nvltx__bytes", "pkb_no_such__metric"]
    assert unavailable_metrics("dram__bytes.sum is fine", ["dram__bytes.sum"]) == []
