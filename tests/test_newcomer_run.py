"""A newcomer's first hour with the installed command, on a CPU machine (issue 18's expectations,
each a test below, in the order the issue gives them).

Every test drives `pkb-analyze` (the console script `pip install -e .` put beside this Python) or
`python -m pkb` as a process of its own, its output piped, as a person or a script would: exit
codes, what reaches standard output and standard error, what is written. The same expectations
checked in process, with the evaluation faked, are in test_cli_exit_codes.py,
test_cli_progress.py, test_cli_conventions.py, test_data_contracts.py, test_evidence_verbatim.py
and test_reports_corpus.py; here nothing is faked: candidates run on CPU ranks (gloo) and Ctrl-C is
a real SIGINT to the command's process group, as a terminal sends it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "pkb-analyze"
BROADCAST = ROOT / "corpus" / "solutions_cuda_bf16_h100_8_pkb_sample-b" / "3_broadcast_cuda.py"
FLAG_LINE = 31  # `flags[blockIdx.x] = 1;`: PKB001 points here
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)

ALLREDUCE = (
    "import torch\nimport torch.distributed as dist\n\n"
    "@torch.no_grad()\ndef solution(tensor):\n    out = tensor.clone()\n    dist.all_reduce(out)\n    return out\n"
)
# quick evaluation settings: the expectations are about the command, not about the figures
QUICK = ["--trials", "1", "--warmup", "1", "--iters", "0", "--jobs", "1"]


def slow_import(marker: Path) -> str:
    """A correct candidate whose import sleeps while `marker` exists (a stand-in for a hang)."""
    return f"import os, time\nif os.path.exists({str(marker)!r}):\n    time.sleep(120)\n" + ALLREDUCE


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    if not SCRIPT.exists():
        pytest.fail(f"{SCRIPT} is missing: install the project first (pip install -e '.[eval,test]')")
    e = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR")}
    e["PYTHONPATH"] = str(ROOT)
    e["PKB_CACHE_DIR"] = str(tmp_path_factory.mktemp("newcomer_cache"))
    return e


def pkb(env, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """`pkb-analyze ARGS` in `cwd`, output piped."""
    return subprocess.run([str(SCRIPT), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def static_run(env, tmp_path_factory):
    """The static command over a copy of a bundled run tree, once, as a newcomer's first command."""
    work = tmp_path_factory.mktemp("newcomer_static")
    tree = work / "solutions_cuda_bf16_h100_8_pkb_mine"
    shutil.copytree(BROADCAST.parent, tree)
    res = pkb(env, str(tree), "--no-ptx", "-o", "out", cwd=work)
    assert res.returncode == 0, res.stderr
    return work, tree, res


# ---- exit codes and validation ------------------------------------------------------------------


@pytest.mark.parametrize("args, named", [
    (["eval", "c", "--backend", "foo"], "--backend"),
    (["eval", "c", "--scale", "huge"], "--scale"),
    (["eval", "c", "--dtype", "int3"], "--dtype"),
    (["eval", "c", "--import-timeout", "0"], "--import-timeout"),
    (["eval", "c", "--timing", "sometimes"], "--timing"),
    (["analyze", "c", "--output-format", "xml"], "--output-format"),
    (["c", "--select", "PKB999"], "PKB999"),
    (["c", "--frobnicate"], "--frobnicate"),
])
def test_choices_are_validated_before_anything_starts_usage_error_exit_2(env, tmp_path, args, named):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "1_allreduce_mine.py").write_text(ALLREDUCE)
    res = pkb(env, *args, "-o", "out", cwd=tmp_path)
    assert res.returncode == 2, res
    assert named in res.stderr and res.stdout == ""
    assert not (tmp_path / "out").exists()  # nothing written, nothing launched


@pytest.mark.parametrize("command", [[], ["analyze"], ["eval"], ["report"], ["explain"], ["export", "--format", "pkb"]])
def test_a_missing_path_is_a_usage_error_and_nothing_is_written(env, tmp_path, command):
    args = [*command, "no/such/place.py"] + ([] if command[:1] in (["explain"], ["export"]) else ["-o", "out"])
    res = pkb(env, *args, cwd=tmp_path)
    assert res.returncode == 2, res
    assert "no/such/place.py" in res.stderr and ("no such file" in res.stderr or "not a" in res.stderr)
    assert list(tmp_path.iterdir()) == []  # analyze made OUT/pkb_eval.sqlite before it looked at the path


def test_nothing_to_evaluate_under_a_folder_is_said_not_a_silent_exit_0(env, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no candidate here\n")
    res = pkb(env, "eval", "empty", "-o", "out", cwd=tmp_path)
    assert res.returncode == 2 and "nothing to evaluate" in res.stderr and "empty" in res.stderr, res
    assert not (tmp_path / "out").exists()
    # the static command goes on, as ruff does, with a warning
    res = pkb(env, "empty", "--no-ptx", "-o", "out", cwd=tmp_path)
    assert res.returncode == 0 and "warning: no candidate file" in res.stderr, res


def test_nothing_runnable_exits_non_zero_saying_how_many_were_not_run_and_why(env, tmp_path):
    """A loose file that names no problem and a CUDA candidate on a machine without a GPU: exit 1,
    the count, each reason whole, and what to do (`--problem ID`; a CUDA GPU)."""
    c = tmp_path / "c"
    c.mkdir()
    (c / "mine.py").write_text(ALLREDUCE)
    shutil.copy(BROADCAST, c / "3_broadcast_cuda.py")
    res = pkb(env, "eval", "c", "-o", "out", *QUICK, cwd=tmp_path)
    if "no CUDA device" not in res.stderr + res.stdout:
        pytest.skip("a CUDA device is present here: the CUDA candidate ran")
    assert res.returncode == 1, res
    assert "2 of 2 candidates could not be evaluated" in res.stderr
    assert "no reference matches 'mine' by name or id" in res.stderr and "--problem ID" in res.stderr
    assert "no CUDA device" in res.stderr and "CUDA GPU" in res.stderr
    # a line per candidate even though nothing ran, reasons whole
    assert "[1/2] 3_broadcast_cuda.py: not run: no CUDA device" in res.stdout
    assert "[2/2] mine.py: not run: no reference matches 'mine'" in res.stdout


def test_a_guessed_problem_is_named_with_what_to_do_and_jsonl_owns_stdout(env, tmp_path):
    """`myreduce.py` (no id) is matched to 4_reduce by spelling: its wrong result is the guess's,
    so the line says which problem it ran as and that `--problem ID` names it. With
    `--output-format jsonl` standard output is the records alone, the progress goes to stderr."""
    (tmp_path / "myreduce.py").write_text(ALLREDUCE)
    res = pkb(env, "eval", "myreduce.py", "-o", "out", *QUICK, "--output-format", "jsonl", cwd=tmp_path)
    lines = res.stdout.splitlines()
    assert len(lines) == 1, res
    rec = json.loads(lines[0])
    assert rec["path"] == "myreduce.py" and rec["problem_id"] == 4 and rec["schema_version"]
    assert "[1/1] myreduce.py:" in res.stderr
    assert "run as problem 4_reduce, a guess" in res.stderr and "--problem ID" in res.stderr
    res = pkb(env, "eval", "myreduce.py", "-o", "out2", *QUICK, "--problem", "1", cwd=tmp_path)
    assert res.returncode == 0 and "a guess" not in res.stdout, res
    assert json.loads((tmp_path / "out2" / "eval.jsonl").read_text())["problem_id"] == 1


# ---- progress and limits ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [[], ["--emulate", "2"]], ids=["real", "emulated"])
def test_progress_lines_when_piped_ctrl_c_says_what_was_saved_and_a_rerun_resumes(env, tmp_path, mode):
    """Each candidate's outcome is printed as it lands, though output is a pipe; a SIGINT to the
    process group (Ctrl-C) while the second candidate hangs in its import stops the run within
    seconds, says what was saved, leaves one line in the run's jsonl; the same command resumes
    (the first result comes from the store). The same under emulated ranks, whose runs are
    processes of their own. (--force: tests/test_cli_progress.py.)"""
    c = tmp_path / "c"
    c.mkdir()
    marker = marker_the_sandbox_sees(tmp_path)
    marker.touch()
    (c / "1_allreduce_a.py").write_text(ALLREDUCE)
    (c / "1_allreduce_b.py").write_text(slow_import(marker))
    cmd = [str(SCRIPT), "eval", "c", "-o", "out", *QUICK, *mode]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        first = proc.stdout.readline()  # arrives while the run goes on: progress on a pipe
        assert first.startswith("[1/2] 1_allreduce_a.py: "), (first, proc.stderr.read() if proc.poll() is not None else "")
        time.sleep(2.0)  # the second candidate is sleeping in its import now
        assert proc.poll() is None
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=90)
        stopped_after = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    # Before: the pool waited for the sleeping import to end (its 120 s), so Ctrl-C took minutes;
    # under --emulate, Ctrl-C was not seen at all and the run went on to its end.
    assert stopped_after < 30, f"Ctrl-C took {stopped_after:.1f} s"
    assert "interrupted: 1 of 2 candidates were evaluated and saved" in err and "resumes" in err and "--force" in err
    saved = (tmp_path / "out" / ("eval_emulated.jsonl" if mode else "eval.jsonl")).read_text().splitlines()
    assert [json.loads(line)["path"] for line in saved] == ["1_allreduce_a.py"]
    assert not _sleepers(tmp_path), "a candidate's process outlived the interrupted run"

    marker.unlink()
    marker.parent.rmdir()
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "[1/2] 1_allreduce_a.py: " in res.stdout and "(stored result)" in res.stdout.splitlines()[0]
    assert "1_allreduce_b.py: " in res.stdout and res.stdout.count("(stored result)") == 1


def marker_the_sandbox_sees(tmp_path: Path) -> Path:
    """A path for a marker file that a candidate's ranks can see. The sandbox gives them a
    private /tmp, where a file under the test's folder (pytest's tmp_path) is absent: the
    "sleeping" candidate then ran at once and finished before the Ctrl-C on an idle machine."""
    base = Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else tmp_path
    return Path(tempfile.mkdtemp(prefix="pkb-newcomer-", dir=base)) / "SLOW"


def _sleepers(folder: Path) -> list[int]:
    """Processes working in or naming the test's folder (a candidate's rank or emulation process:
    their job files and scratch live under it), other than this test's own."""
    here = str(folder)
    left = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cwd = os.readlink(proc / "cwd")
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if int(proc.name) != os.getpid() and (cwd.startswith(here) or here in cmdline):
            left.append(int(proc.name))
    return left


def test_limits_are_exposed_and_reach_the_launch(env, tmp_path):
    """The import, build and call limits are options of `eval` (and in its help); a 2 s import
    limit ends a hanging import in seconds, as a `hang` naming the limit."""
    res = pkb(env, "eval", "-h", cwd=tmp_path)
    assert res.returncode == 0
    for option in ("--import-timeout", "--compile-timeout", "--call-timeout", "--timeout", "--force"):
        assert option in res.stdout, option
    (tmp_path / "c").mkdir()
    # Slow whatever the sandbox shows it: under bubblewrap the ranks see a private /tmp, so a marker
    # file under the test's folder would not be there.
    (tmp_path / "c" / "1_allreduce_slow.py").write_text("import time\ntime.sleep(120)\n" + ALLREDUCE)
    t0 = time.monotonic()
    res = pkb(env, "eval", "c", "-o", "out", *QUICK, "--import-timeout", "2", cwd=tmp_path, timeout=120)
    assert time.monotonic() - t0 < 90 and res.returncode == 0, res
    rec = json.loads((tmp_path / "out" / "eval.jsonl").read_text())
    assert rec["evaluation"]["outcome"] == "hang" and "2 s limit of load" in rec["evaluation"]["reason"], rec["evaluation"]


# ---- evidence verbatim --------------------------------------------------------------------------


def test_explain_keeps_bracketed_evidence_and_elides_nothing_when_piped(env, tmp_path):
    res = pkb(env, "explain", str(BROADCAST), "--no-ptx", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "flags[blockIdx.x]" in res.stdout  # rich markup would have eaten `[blockIdx.x]`
    # at the 80 columns of a pipe, long words fold rather than end in an ellipsis: rule names,
    # fixes and evidence stay whole (before: `flag-without-ord…`, `__threadfence_sy…`)
    assert "…" not in res.stdout
    findings = res.stdout[res.stdout.index("Findings"):]
    cells = [line.split("│") for line in findings.splitlines() if line.startswith("│")]
    rule_column = "".join(c[1].strip() for c in cells)
    fix_column = "".join(c[-2].strip() for c in cells)
    assert "PKB001flag-without-ordering" in rule_column and "__threadfence_system" in fix_column
    assert res.stdout.count("peer-buffer-reuse-without-barrier") <= 1  # each finding once


# ---- linter conventions -------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "jsonl", "sarif", "github"])
def test_output_format_to_stdout_parses_cleanly(env, static_run, fmt):
    work, tree, _ = static_run
    res = pkb(env, str(tree), "--no-ptx", "-o", f"out_{fmt}", "--output-format", fmt, cwd=work)
    assert res.returncode == 0, res.stderr
    assert "wrote " in res.stderr and "wrote " not in res.stdout  # all else is said on stderr
    n_files = len(list(tree.glob("*.py")))
    if fmt == "json":
        records = json.loads(res.stdout)
        assert len(records) == n_files and all(r["schema_version"] for r in records)
    elif fmt == "jsonl":
        records = [json.loads(line) for line in res.stdout.splitlines()]
        assert len(records) == n_files and {r["path"].split("/")[0] for r in records} == {tree.name}
    elif fmt == "sarif":
        sarif = json.loads(res.stdout)
        run = sarif["runs"][0]
        assert sarif["version"] == "2.1.0"
        assert run["originalUriBaseIds"]["CORPUSROOT"]["uri"] == work.resolve().as_uri() + "/"
        assert run["invocations"][0]["exitCode"] == 0 and run["invocations"][0]["executionSuccessful"] is True
        loc = run["results"][0]["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uriBaseId"] == "CORPUSROOT" and loc["artifactLocation"]["uri"].startswith(tree.name + "/")
        assert loc["region"]["startLine"] >= 1 and loc["region"]["startColumn"] >= 1
    else:
        lines = res.stdout.splitlines()
        assert lines and all(line.startswith(("::error ", "::warning ", "::notice ")) for line in lines)
        assert any(f"3_broadcast_cuda.py,line={FLAG_LINE}," in line and "PKB001" in line for line in lines)


def test_noqa_suppression_is_shown_counted_and_never_decides_the_exit(env, tmp_path):
    (tmp_path / "c").mkdir()
    lines = BROADCAST.read_text().splitlines()
    lines[FLAG_LINE - 1] += "  // noqa: PKB001"
    (tmp_path / "c" / "3_broadcast_cuda.py").write_text("\n".join(lines) + "\n")
    res = pkb(env, "c", "--no-ptx", "-o", "out", cwd=tmp_path)
    assert res.returncode == 0 and "suppressed by noqa: PKB001 1" in res.stdout, res
    res = pkb(env, "c", "--no-ptx", "-o", "out", "--statistics", cwd=tmp_path)
    assert any(line.split()[:2] == ["0", "PKB001"] and "(1 suppressed)" in line for line in res.stdout.splitlines()), res.stdout
    res = pkb(env, "c", "--no-ptx", "-o", "out", "--output-format", "sarif", cwd=tmp_path)
    results = json.loads(res.stdout)["runs"][0]["results"]
    assert [r["suppressions"][0]["kind"] for r in results if r["ruleId"] == "PKB001"] == ["inSource"]
    res = pkb(env, "c", "--no-ptx", "-o", "out", "--select", "PKB001", "--fail-on-error", cwd=tmp_path)
    assert res.returncode == 0, res.stderr  # the one error is suppressed


def test_pyproject_tool_table_selects_ignores_and_limits(env, tmp_path):
    (tmp_path / "src").mkdir()
    shutil.copy(BROADCAST, tmp_path / "src" / "3_broadcast_cuda.py")
    (tmp_path / "pyproject.toml").write_text('[tool.pkb-analyze]\nignore = ["PKB001", "PKB002"]\n')
    res = pkb(env, "src", "--no-ptx", "-o", "out", "--output-format", "json", cwd=tmp_path)
    rules = {f["rule"] for f in json.loads(res.stdout)[0]["findings"]}
    assert rules and not rules & {"PKB001", "PKB002"}, rules
    assert "configuration: " in res.stderr and "pyproject.toml" in res.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.pkb-analyze]\nmax-file-size = 100\n')
    res = pkb(env, "src", "--no-ptx", "-o", "out", "--output-format", "json", cwd=tmp_path)
    assert json.loads(res.stdout)[0]["parse_status"] == "too_large"
    (tmp_path / "pyproject.toml").write_text('[tool.pkb-analyze]\nselct = ["PKB00"]\n')
    res = pkb(env, "src", "--no-ptx", "-o", "out2", cwd=tmp_path)
    assert res.returncode == 2 and "selct" in res.stderr and not (tmp_path / "out2").exists()


def test_statistics_and_select_all(env, static_run):
    work, tree, _ = static_run
    res = pkb(env, str(tree), "--no-ptx", "-o", "out_stats", "--statistics", "--select", "ALL", cwd=work)
    assert res.returncode == 0, res.stderr
    rows = [line.split() for line in res.stdout.splitlines() if line[:1].isdigit()]
    assert rows and all(r[1].startswith("PKB") for r in rows)
    res = pkb(env, str(tree), "--no-ptx", "-o", "out_all", "--select", "ALL", "--output-format", "sarif", cwd=work)
    from analyzer.rules import all_rules

    assert len(json.loads(res.stdout)["runs"][0]["tool"]["driver"]["rules"]) == len(all_rules())


def test_version_help_and_python_m_pkb_are_the_same_command(env, tmp_path):
    from pkb import __version__

    res = pkb(env, "--version", cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == f"pkb-analyze {__version__}"
    res = pkb(env, "-h", cwd=tmp_path)
    assert res.returncode == 0 and "--version" in res.stdout and "eval" in res.stdout
    assert "pkb-analyze PATH... runs pkb-analyze analyze PATH..." in res.stdout  # the README's first command
    # a command's description is filled to the width, not broken where its docstring's lines end
    # (before: "... 1" / "when some could" / "not be (each reason ..." / "this run" / "cannot use")
    res = pkb(env, "eval", "-h", cwd=tmp_path)
    description = res.stdout[res.stdout.index("Exit status"):res.stdout.index("╭")].strip().splitlines()
    assert len(description) >= 2 and all(len(line.strip()) > 60 for line in description[:-1]), description
    res = subprocess.run([sys.executable, "-m", "pkb", "--version"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == f"pkb-analyze {__version__}"
    res = subprocess.run([sys.executable, "-m", "pkb", "eval", "nowhere"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "nowhere" in res.stderr


def test_console_table_paths_relative_to_the_root_given(env, static_run):
    work, tree, res = static_run
    assert f"{tree.name}/3_broadcast_cuda.py" in res.stdout
    assert str(work) not in res.stdout  # no absolute paths


# ---- data contracts -----------------------------------------------------------------------------


def test_parquet_and_csv_dtypes_are_fixed_in_a_static_run(static_run):
    import pandas as pd

    from reports.tables import read_csv_typed

    work, _, _ = static_run
    out = work / "out"
    for name in ("candidates", "findings"):
        frame = pd.read_parquet(out / f"{name}.parquet")
        again = read_csv_typed(out / f"{name}.csv")
        assert dict(frame.dtypes.astype(str)) == dict(again.dtypes.astype(str)), name
    candidates = pd.read_parquet(out / "candidates.parquet")
    assert str(candidates["problem_id"].dtype) == "Int64" and str(candidates["speedup"].dtype) == "float64"
    assert str(pd.read_parquet(out / "findings.parquet")["line"].dtype) == "Int64"
    dtypes = json.loads((out / "tables.dtypes.json").read_text())
    assert dtypes["candidates"]["problem_id"] == "Int64"


# ---- the report -----------------------------------------------------------------------------------


def test_report_of_a_static_run_says_what_gives_failures_and_the_fastest_kernel_in_chromium(env, static_run, tmp_path):
    """The report of static records alone: built, mechanisms shown, and no failed problems or
    fastest kernel claimed; it says plainly that these need `pkb-analyze eval`. Checked in a
    headless chromium where present (CI installs it; without it the skip says so)."""
    work, _, _ = static_run
    res = pkb(env, "report", "out", "-o", str(tmp_path / "rep"), cwd=work)
    assert res.returncode == 0, res.stderr
    html = (tmp_path / "rep" / "index.html").read_text()
    assert "Transfer mechanisms" in html and "sm_store" in html
    # with static records only there is no failed problem nor fastest kernel: said plainly, with
    # the commands that give them (the run folder the report was drawn from in them)
    assert "names no failed problem and no fastest kernel" in html
    assert "<code>pkb-analyze eval CORPUS -o out</code>, then <code>pkb-analyze report out</code>" in html
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing (CI installs it in .ci/run: apt-get install -y chromium)")
        pytest.skip("chromium not installed: the report was built and read as a file only")
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                          f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
                          (tmp_path / "rep" / "index.html").resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "Transfer mechanisms" in dom.stdout and "Not known: no candidate was run" in dom.stdout
    assert 'data-imgs-loaded="' in dom.stdout  # the page's script ran
