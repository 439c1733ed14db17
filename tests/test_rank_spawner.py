"""The rank spawner (pkb/eval/rank_spawner.py) that starts a launch's ranks in place of torchrun:
torch's environment per rank, a session per rank, peers stopped when one fails, failures in the
table the launcher reads, signals passed on; each of these with the ranks started by exec and
forked after a preload. A forked rank must be what exec would have started: its own argv,
`__main__`, signal dispositions and descriptors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pkb.eval.launcher import RANK_SPAWNER, rank_command, torchrun_exits

RANK = textwrap.dedent("""
    import json, os, signal, sys, time
    out = sys.argv[1]
    keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCH_NCCL_ASYNC_ERROR_HANDLING")
    info = {k: os.environ.get(k) for k in keys}
    info.update(pid=os.getpid(), sid=os.getsid(0), preloaded="wave" in sys.modules, argv=sys.argv[1:], main=__name__,
                sigterm=signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
                sigint=signal.getsignal(signal.SIGINT) is signal.default_int_handler,
                fds=sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
                path0=sys.path[0], cmdline=open("/proc/self/cmdline", "rb").read().decode().split(chr(0)))
    name = os.path.join(out, "rank" + os.environ["RANK"] + ".json")
    with open(name + ".tmp", "w") as fh:
        fh.write(json.dumps(info))
    os.replace(name + ".tmp", name)  # whole when seen: a peer's failure may stop this rank at once
    behaviour = sys.argv[2] if len(sys.argv) > 2 else "ok"
    if behaviour == "rank1_fails" and os.environ["RANK"] == "1":
        deadline = time.time() + 30  # rank 0 must be up (its file written) before the failure stops it
        while not os.path.exists(os.path.join(out, "rank0.json")) and time.time() < deadline:
            time.sleep(0.01)
        sys.exit(3)
    if behaviour == "rank0_segfaults" and os.environ["RANK"] == "0":
        import ctypes
        ctypes.string_at(0)
    if behaviour != "ok":
        time.sleep(60)
""")


MODES = {"exec": [], "forked": ["--preload", "wave"]}


@pytest.fixture(params=sorted(MODES))
def mode(request):
    return request.param


def _spawn(tmp_path: Path, world_size: int, behaviour: str, mode: str = "exec") -> subprocess.Popen:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    cmd = [sys.executable, str(RANK_SPAWNER), str(world_size), "127.0.0.1", "29555", *MODES[mode], "--",
           sys.executable, str(script), str(tmp_path), behaviour]
    # a descriptor the spawner inherits, as a launch's may: no rank may inherit it in turn
    with open(tmp_path / "inherited.txt", "w") as extra:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                                pass_fds=(extra.fileno(),))


def _ranks(tmp_path: Path, world_size: int) -> list[dict]:
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world_size)]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_each_rank_gets_torchs_environment_in_a_session_of_its_own(tmp_path, mode):
    proc = _spawn(tmp_path, 3, "ok", mode)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    ranks = _ranks(tmp_path, 3)
    assert [r["RANK"] for r in ranks] == ["0", "1", "2"] and [r["LOCAL_RANK"] for r in ranks] == ["0", "1", "2"]
    assert {r["WORLD_SIZE"] for r in ranks} == {"3"} and {r["LOCAL_WORLD_SIZE"] for r in ranks} == {"3"}
    assert {(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in ranks} == {("127.0.0.1", "29555")}
    assert {r["TORCH_NCCL_ASYNC_ERROR_HANDLING"] for r in ranks} == {"1"}  # torchrun's default for NCCL errors
    assert all(r["sid"] == r["pid"] for r in ranks)  # each rank leads its own session
    assert torchrun_exits(err) == {}
    # as `python rank.py ...` would start it, forked or not
    assert all(r["argv"] == [str(tmp_path), "ok"] and r["main"] == "__main__" for r in ranks)
    assert all(r["sigterm"] and r["sigint"] and r["fds"] == [0, 1, 2, 3] for r in ranks)  # 3: listdir's own
    assert all(r["path0"] == str(tmp_path) for r in ranks)
    forked = mode == "forked"
    assert all(r["preloaded"] == forked for r in ranks)
    assert all((r["cmdline"][1] == str(RANK_SPAWNER)) == forked for r in ranks)


def test_a_module_rank_is_forked_and_run_as_main_with_its_argv_and_a_bad_preload_falls_back_to_exec(tmp_path):
    package = tmp_path / "pkg_ranks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "probe.py").write_text(textwrap.dedent("""
        import json, os, sys
        if __name__ == "__main__":
            info = {"argv": sys.argv[1:], "preloaded": "wave" in sys.modules, "path0": sys.path[0],
                    "spawner": os.path.basename(open("/proc/self/cmdline", "rb").read().split(chr(0).encode())[1].decode())}
            open(os.path.join(sys.argv[1], "rank" + os.environ["RANK"] + ".json"), "w").write(json.dumps(info))
            sys.exit(0)
    """))
    for preload, forked in (("wave", True), ("wave,no_such_module_here", False)):
        for r in range(2):
            (tmp_path / f"rank{r}.json").unlink(missing_ok=True)
        cmd = [sys.executable, str(RANK_SPAWNER), "2", "127.0.0.1", "29556", "--preload", preload, "--",
               sys.executable, "-m", "pkg_ranks.probe", str(tmp_path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        ranks = _ranks(tmp_path, 2)
        assert all(r["argv"] == [str(tmp_path)] and r["path0"] == str(tmp_path) for r in ranks)
        assert all(r["preloaded"] == forked and (r["spawner"] == RANK_SPAWNER.name) == forked for r in ranks)
        assert ("preload failed (ModuleNotFoundError" in proc.stderr) == (not forked)


def test_a_failed_rank_stops_its_peers_and_is_reported_in_torchruns_table(tmp_path, mode):
    t0 = time.monotonic()
    proc = _spawn(tmp_path, 2, "rank1_fails", mode)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert time.monotonic() - t0 < 30  # rank 0 would have slept 60 s
    assert torchrun_exits(err) == {1: {"exit_code": 3, "pid": _ranks(tmp_path, 2)[1]["pid"]}}
    assert not _alive(_ranks(tmp_path, 2)[0]["pid"])


def test_a_rank_killed_by_a_signal_is_named_by_it(tmp_path, mode):
    proc = _spawn(tmp_path, 2, "rank0_segfaults", mode)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    exits = torchrun_exits(err)
    assert exits[0]["exit_code"] == -signal.SIGSEGV and exits[0]["signal"] == "SIGSEGV"


def test_sigterm_to_the_spawner_reaches_every_rank(tmp_path, mode):
    proc = _spawn(tmp_path, 2, "sleep", mode)
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"rank{r}.json").exists() for r in range(2)) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert not any(_alive(r["pid"]) for r in _ranks(tmp_path, 2))


def test_the_launch_command_runs_the_worker_under_the_spawner_and_a_wrapper_in_front_of_it(tmp_path):
    job = tmp_path / "job.json"
    cmd = rank_command(job, 4, 1234, python="/py")
    assert cmd[:5] == ["/py", str(RANK_SPAWNER), "4", "127.0.0.1", "1234"]
    assert cmd[5:7] == ["--preload", "torch,torch.distributed"]  # forked with torch imported
    assert cmd[7:] == ["--", "/py", "-m", "pkb.eval.worker", str(job)]
    wrapped = rank_command(job, 2, 1234, python="/py", wrapper=["ncu", "--target-processes", "all"])
    assert "--preload" not in wrapped  # ncu must start each rank itself
    assert wrapped[wrapped.index("--") + 1:] == ["ncu", "--target-processes", "all", "/py", "-m", "pkb.eval.worker", str(job)]
