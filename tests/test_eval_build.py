"""pkb.eval.build: our own build directories, a lock that knows a dead owner, prebuilds on CPU.

The real builds here are C++-only extensions over pybind11 (no torch headers, no CUDA), so a
build takes seconds, not torch's minute; one module-scoped root is shared so each compiles once.
"""

from __future__ import annotations

import hashlib

import inspect
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
cpp_extension = pytest.importorskip("torch.utils.cpp_extension")

from pkb.eval import build  # noqa: E402
from pkb.eval.build import BuildLock, BuildOptions, build_key, build_root, candidate_build_root, pool_size, prebuild, prebuild_many  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NEEDS_CXX = pytest.mark.skipif(not (os.environ.get("CXX") or any((Path(p) / "c++").exists() for p in os.environ.get("PATH", "").split(":"))), reason="no C++ compiler")

PY11 = '''"""#include <pybind11/pybind11.h>
int {fn}(int x) {{ return {body}; }}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{ m.def("{fn}", &{fn}); }}
"""'''


def candidate(tmp: Path, name: str, ext: str, fn: str, body: str, lazy: bool) -> Path:
    call = f'load_inline("{ext}", cpp_sources=SRC, with_cuda=False, no_implicit_headers=True)'
    if lazy:
        lines = [
            "from torch.utils.cpp_extension import load_inline",
            f"SRC = {PY11.format(fn=fn, body=body)}",
            "_ext = None",
            "def _get_ext():",
            "    global _ext",
            "    if _ext is None:",
            f"        _ext = {call}",
            "    return _ext",
            "def solution(x):",
            f"    return _get_ext().{fn}(x)",
        ]
    else:
        lines = [
            "from torch.utils.cpp_extension import load_inline",
            f"SRC = {PY11.format(fn=fn, body=body)}",
            f"ext = {call}",
            "def solution(x):",
            f"    return ext.{fn}(x)",
        ]
    path = tmp / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("builds")


def run_py(code: str, env_extra: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env_extra or {})}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)


# ---- the lock ---------------------------------------------------------------------------------


def test_lock_of_a_killed_owner_never_makes_a_later_build_wait(tmp_path):
    code = f"""
import sys, time
from pathlib import Path
from pkb.eval.build import BuildLock
lock = BuildLock(Path({str(tmp_path)!r}))
lock.acquire()
print("held", flush=True)
time.sleep(600)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        waiter = BuildLock(tmp_path, poll_s=0.05)
        with pytest.raises(TimeoutError) as info:  # a live owner holds it, and is named
            waiter.acquire(timeout_s=0.3)
        assert f"'pid': {proc.pid}" in str(info.value)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        waiter.acquire(timeout_s=0)  # free at once: with no time to wait, a held lock raises
        assert waiter.read_owner()["pid"] == os.getpid()
        waiter.release()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_exclusive_file_fallback_breaks_a_dead_owner(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    owner = tmp_path / "pkb.owner"
    owner.write_text(json.dumps({"pid": int(dead), "host": build.socket.gethostname(), "start_ticks": "1"}))
    lock = BuildLock(tmp_path, poll_s=0.05)
    lock._acquire_exclusive_file(time.monotonic(), timeout_s=2)
    assert lock.broken and lock.broken["pid"] == int(dead)
    assert json.loads(owner.read_text())["pid"] == os.getpid()
    lock.release()
    assert not owner.exists()


def test_exclusive_file_fallback_waits_for_a_live_owner(tmp_path):
    (tmp_path / "pkb.owner").write_text(json.dumps(BuildLock(tmp_path).owner_record()))  # this process: alive
    with pytest.raises(TimeoutError):
        BuildLock(tmp_path, poll_s=0.05)._acquire_exclusive_file(time.monotonic(), timeout_s=0.3)


# ---- keys and routing --------------------------------------------------------------------------


def bound(fn, *args, **kwargs) -> dict:
    return dict(inspect.signature(fn).bind(*args, **kwargs).arguments)


def test_key_changes_with_sources_and_flags_not_with_verbosity():
    li = cpp_extension.load_inline
    base = build_key("load_inline", bound(li, "e", cpp_sources="int f();", with_cuda=False))
    assert base.startswith("e-")
    assert base == build_key("load_inline", bound(li, "e", cpp_sources="int f();", with_cuda=False, verbose=True, build_directory="/x"))
    assert base != build_key("load_inline", bound(li, "e", cpp_sources="int g();", with_cuda=False))
    assert base != build_key("load_inline", bound(li, "e", cpp_sources="int f();", with_cuda=False, extra_cflags=["-O3"]))
    assert base != build_key("load_inline", bound(li, "e2", cpp_sources="int f();", with_cuda=False))


def test_routed_build_goes_to_its_own_directory_and_clears_a_stale_baton(tmp_path):
    seen = []

    def fake_load_inline(name, cpp_sources, cuda_sources=None, functions=None, build_directory=None, verbose=False, with_cuda=None):
        seen.append((build_directory, (Path(build_directory) / "lock").exists()))
        (Path(build_directory) / f"{name}.so").write_text("")
        return name

    routed = build._routed("load_inline", fake_load_inline, tmp_path)
    key = build_key("load_inline", bound(fake_load_inline, "e", "int f();", with_cuda=False))
    (tmp_path / key).mkdir()
    (tmp_path / key / "lock").write_text("")  # what a killed torch build leaves
    n = len(build.BUILD_LOG)
    assert routed("e", "int f();", with_cuda=False) == "e"
    assert seen == [(str(tmp_path / key), False)]
    event = build.BUILD_LOG[n]
    assert event["stale_baton"] and event["ok"] and not event["cached"]
    routed("e", "int f();", with_cuda=False)
    assert build.BUILD_LOG[n + 1]["cached"]


def test_compile_failure_is_remembered_and_reraised_without_building(tmp_path):
    calls = []

    def failing(name, cpp_sources, build_directory=None, with_cuda=None):
        calls.append(name)
        raise RuntimeError(f"Error building extension '{name}': main.cpp:1: error: expected ';'")

    routed = build._routed("load_inline", failing, tmp_path)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="Error building extension 'bad'.*expected ';'"):
            routed("bad", "int f()")
    assert calls == ["bad"]


def test_a_machine_failure_is_not_remembered(tmp_path):
    calls = []

    def killed(name, cpp_sources, build_directory=None, with_cuda=None):
        calls.append(name)
        raise RuntimeError(f"Error building extension '{name}': nvcc: Killed")

    routed = build._routed("load_inline", killed, tmp_path)
    for _ in range(2):
        with pytest.raises(RuntimeError):
            routed("oom", "int f();")
    assert calls == ["oom", "oom"]


def test_route_builds_is_idempotent_and_rebinds_earlier_imports(tmp_path):
    code = f"""
import sys, types
import torch.utils.cpp_extension as ce
from torch.utils.cpp_extension import load_inline
original = ce.load_inline
helper = types.ModuleType("helper_like_cuda_helpers"); helper.load_inline = load_inline; sys.modules[helper.__name__] = helper
from pathlib import Path
from pkb.eval.build import route_builds
route_builds(Path({str(tmp_path)!r})); first = ce.load_inline
route_builds(Path({str(tmp_path)!r}))
assert ce.load_inline is first and first._pkb_routed and first.__wrapped__ is original and load_inline is first
assert helper.load_inline is first and ce.load._pkb_routed
print("ok")
"""
    res = run_py(code)
    assert res.stdout.strip() == "ok", res.stderr


def test_pool_size_follows_cores_and_memory():
    gb = 1024**3
    assert pool_size(None, 1, cores=16, memory=128 * gb) == 16
    assert pool_size(None, 2, cores=16, memory=128 * gb) == 8  # two compiles each: one per core
    assert pool_size(None, 2, cores=40, memory=64 * gb) == 10  # 64 GB / (2 x 3 GB)
    assert pool_size(4, 1, cores=16, memory=128 * gb) == 4
    assert pool_size(32, 1, cores=2, memory=128 * gb) == 32  # asked for: more builds than cores share them
    assert pool_size(32, 1, cores=2, memory=30 * gb) == 10  # but no more than memory holds
    assert pool_size(None, 2, cores=16, memory=2 * gb) == 1


def test_build_root_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("PKB_BUILD_DIR", raising=False)
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path))
    assert build_root() == tmp_path / "builds"
    assert build_root(tmp_path / "out") == tmp_path / "out" / "builds"
    monkeypatch.setenv("PKB_BUILD_DIR", str(tmp_path / "b"))
    assert build_root() == tmp_path / "b"


# ---- real prebuilds (C++ only) -------------------------------------------------------------------


@NEEDS_CXX
def test_prebuild_import_time_and_lazy_builds_then_the_rank_finds_them_done(tmp_path, root):
    eager = candidate(tmp_path, "eager.py", "pb_eager", "add_one", "x + 1", lazy=False)
    lazy = candidate(tmp_path, "lazy.py", "pb_lazy", "twice", "2 * x", lazy=True)
    copy = tmp_path / "copy.py"
    copy.write_bytes(lazy.read_bytes())  # same content: one build for both paths
    results = prebuild_many([eager, lazy, copy], BuildOptions(root=root), jobs=2, timeout_s=300)
    for p, ext in ((eager, "pb_eager"), (lazy, "pb_lazy")):
        r = results[p]
        assert r.ok, r.error
        assert [b["name"] for b in r.builds] == [ext]
        assert not r.cached and r.builds[0]["ok"]
        assert list(Path(r.builds[0]["dir"]).glob("*.so"))
    assert results[copy] is results[lazy]
    # A rank's process: routed, imports, calls; the build is found done (no compile).
    code = f"""
import importlib.util, json
from pathlib import Path
from pkb.eval.build import route_builds, BUILD_LOG
route_builds(Path({str(candidate_build_root(root, hashlib.sha256(lazy.read_bytes()).hexdigest()))!r}))  # the file's own folder
spec = importlib.util.spec_from_file_location("cand", {str(lazy)!r}); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
print(json.dumps({{"value": m.solution(20), "log": BUILD_LOG}}))
"""
    res = run_py(code)
    data = json.loads(res.stdout.strip().splitlines()[-1])
    assert data["value"] == 40
    assert data["log"][0]["cached"] and data["log"][0]["key"] == results[lazy].builds[0]["key"]
    again = prebuild(eager, BuildOptions(root=root), timeout_s=120)
    assert again.ok and again.cached


@NEEDS_CXX
def test_prebuild_through_a_stale_torch_baton_and_a_compile_error(tmp_path, root):
    ok = candidate(tmp_path, "baton.py", "pb_baton", "minus", "x - 1", lazy=True)
    src = PY11.format(fn="minus", body="x - 1")
    key = build_key("load_inline", bound(cpp_extension.load_inline, "pb_baton", cpp_sources=eval(src), with_cuda=False, no_implicit_headers=True))
    own = candidate_build_root(root, hashlib.sha256(ok.read_bytes()).hexdigest())
    (own / key).mkdir(parents=True, exist_ok=True)
    (own / key / "lock").write_text("")  # torch would wait on this forever
    r = prebuild(ok, BuildOptions(root=root), timeout_s=120)
    assert r.ok, r.error
    assert r.builds[0]["key"] == key and r.builds[0]["stale_baton"]

    bad = tmp_path / "bad.py"
    bad.write_text(textwrap.dedent('''
        import torch.utils.cpp_extension as ce
        SRC = "int broken( { return 0; }"
        def solution(x):
            return ce.load_inline("pb_bad", cpp_sources=SRC, with_cuda=False, no_implicit_headers=True)
        '''))
    first = prebuild(bad, BuildOptions(root=root), timeout_s=120)
    assert not first.ok and "Error building extension 'pb_bad'" in first.error
    assert Path(first.log_path).is_file()
    second = prebuild(bad, BuildOptions(root=root), timeout_s=120)
    assert not second.ok and second.cached and "Error building extension 'pb_bad'" in second.error


def test_a_prebuild_writes_only_its_own_build_folder(tmp_path, monkeypatch):
    """A candidate that, at import, plants torch's failure marker and a stray file in every build
    folder it can reach (another candidate's builds are keyed by sources it can read) reaches
    only its own: the victim's builds stay as they were, and the shared root takes nothing."""
    from pkb.eval import sandbox as sandboxing

    if sandboxing.for_job(writable=[], readonly=[], hidden=[], name="probe").kind == "none":
        pytest.skip("no sandbox on this machine: builds share one writable tree (the record says so)")
    root = tmp_path / "builds"
    victim = tmp_path / "victim.py"
    victim.write_text("import time\ndef solution(x):\n    return x\n")
    (victim_root := candidate_build_root(root, hashlib.sha256(victim.read_bytes()).hexdigest())).mkdir(parents=True)
    (victim_root / "ext-0123").mkdir()  # a build of the victim's
    attacker = tmp_path / "attacker.py"
    attacker.write_text(textwrap.dedent('''
        import os
        root = os.environ["PKB_TEST_BUILD_ROOT"]
        for here, dirs, files in os.walk(root):
            for name in ("pkb-failed.json", "planted.txt"):
                try:
                    with open(os.path.join(here, name), "w") as f:
                        f.write('{"error": "planted"}')
                except OSError:
                    pass
        def solution(x):
            return x
        '''))
    monkeypatch.setenv("PKB_TEST_BUILD_ROOT", str(root))
    prebuild(attacker, BuildOptions(root=root), timeout_s=120)
    planted = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name in ("pkb-failed.json", "planted.txt"))
    own = str(candidate_build_root(root, hashlib.sha256(attacker.read_bytes()).hexdigest()).relative_to(root))
    assert planted and all(p.startswith(own + os.sep) for p in planted), planted


def test_prebuild_of_a_candidate_that_hangs_at_import_is_killed(tmp_path, root):
    hang = tmp_path / "hang.py"
    hang.write_text("import time\nwhile True:\n    time.sleep(1)\n")
    r = prebuild(hang, BuildOptions(root=root), timeout_s=8)
    assert not r.ok and "timed out" in r.error


def test_prebuild_of_a_broken_import_is_not_a_crash(tmp_path, root):
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_here\n")
    r = prebuild(broken, BuildOptions(root=root), timeout_s=60)
    assert r.ok and r.builds == [] and "no_such_module_here" in r.import_error


def test_a_prebuilds_import_runs_in_the_launch_sandbox_and_leaves_nothing_running(tmp_path, root, monkeypatch):
    from pkb.eval import sandbox

    store = tmp_path / "store.sqlite"
    store.write_bytes(b"SQLite format 3\0 the store")
    outside = tmp_path / "escaped.txt"
    hostile = tmp_path / "daemon.py"
    hostile.write_text(textwrap.dedent(f'''
        import os, time
        try:
            seen = open({str(store)!r}, "rb").read()[:15]
        except OSError:
            seen = b"unreadable"
        open(os.environ["PKB_TEST_SEEN"], "wb").write(seen)  # in its own build folder, the one it may write
        if os.fork() == 0:  # a detached daemon that would write outside after the build
            os.setsid()
            if os.fork() == 0:
                time.sleep(2)
                open({str(outside)!r}, "w").write("escaped")
                os._exit(0)
            os._exit(0)
        # the word cpp_extension is what makes a file prebuilt
        def solution(x):
            return x
        '''))
    seen_path = candidate_build_root(root, hashlib.sha256(hostile.read_bytes()).hexdigest()) / "seen.bin"
    monkeypatch.setenv("PKB_TEST_SEEN", str(seen_path))
    r = prebuild(hostile, BuildOptions(root=root, hidden=[str(store)]), timeout_s=60)
    assert r.ok and r.import_error == "", r
    kind = r.sandbox["kind"]
    assert kind == sandbox.choose()[0]
    time.sleep(3)
    assert not outside.exists(), "a process of the build's import outlived it"
    assert r.sandbox.get("strays"), "the daemon the import left running is named"
    if kind == "bwrap":
        seen = seen_path.read_bytes()
        assert seen in (b"", b"unreadable"), f"the store was readable from the build's import: {seen!r}"
