"""Linter conventions of the static command: output formats on stdout, several paths, noqa
suppression, [tool.pkb-analyze] configuration, --statistics, --select ALL, -h, --version,
`python -m pkb`, and paths relative to the corpus root."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pkb.config import ConfigError, load_config, rule_choice
from pkb.suppress import noqa_codes
from reports.console import elide_middle
from cli_runner import run_cli

ROOT = Path(__file__).resolve().parents[1]
BROADCAST = ROOT / "corpus" / "solutions_cuda_bf16_h100_8_pkb_sample-b" / "3_broadcast_cuda.py"
FLAG_LINE = 31  # `flags[blockIdx.x] = 1;` in the CUDA string: PKB001 and PKB002 point here

HOST_SYNC = (
    "import torch\nimport torch.distributed as dist\n\n"
    "def solution(tensor):\n"
    "    out = tensor.clone()\n"
    "    dist.all_reduce(out)\n"
    "    torch.cuda.synchronize()\n"
    "    return out\n"
)


def broadcast_copy(folder: Path, noqa: str | None) -> Path:
    """The bundled broadcast candidate, with a noqa comment appended to the flag store's line."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = BROADCAST.read_text().splitlines()
    assert "flags[blockIdx.x] = 1;" in lines[FLAG_LINE - 1]
    if noqa:
        lines[FLAG_LINE - 1] += f" {noqa}"
    path = folder / "3_broadcast_cuda.py"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_noqa_comment_forms():
    assert noqa_codes("x = 1  # noqa: PKB004") == {"PKB004"}
    assert noqa_codes("flag = 1; // NOQA: PKB001, pkb002") == {"PKB001", "PKB002"}
    assert noqa_codes("x = 1  # noqa") == {"*"}
    assert noqa_codes("x = 1  # no qa here") is None
    assert noqa_codes("noqa without a comment marker") is None


def test_cuda_noqa_suppresses_only_its_code_and_is_counted(tmp_path, capsys):
    plain = broadcast_copy(tmp_path / "plain", None)
    code, cap = run_cli([str(plain), "--no-ptx", "-o", str(tmp_path / "o1"), "--output-format", "json"], tmp_path, capsys)
    assert code == 0, cap.err
    before = json.loads(cap.out)[0]
    assert {"PKB001", "PKB002"} <= {f["rule"] for f in before["findings"] if f["line"] == FLAG_LINE}
    assert before["suppressed"] == []

    silenced = broadcast_copy(tmp_path / "silenced", "// noqa: PKB001")
    code, cap = run_cli([str(silenced), "--no-ptx", "-o", str(tmp_path / "o2"), "--output-format", "json"], tmp_path, capsys)
    assert code == 0, cap.err
    after = json.loads(cap.out)[0]
    assert [f["rule"] for f in after["suppressed"]] == ["PKB001"]
    assert "PKB001" not in {f["rule"] for f in after["findings"] if f["line"] == FLAG_LINE}
    assert "PKB002" in {f["rule"] for f in after["findings"] if f["line"] == FLAG_LINE}  # another code stays
    # the text output says what was suppressed; --statistics counts it; SARIF marks it in source
    code, cap = run_cli([str(silenced), "--no-ptx", "-o", str(tmp_path / "o3")], tmp_path, capsys)
    assert "suppressed by noqa: PKB001 1" in cap.out
    code, cap = run_cli([str(silenced), "--no-ptx", "-o", str(tmp_path / "o4"), "--statistics", "--output-format", "json"], tmp_path, capsys)
    stats = {row["code"]: row for row in json.loads(cap.out)}
    assert stats["PKB001"]["count"] == 0 and stats["PKB001"]["suppressed"] == 1  # the pusher's, the file's only one
    sarif = json.loads((tmp_path / "o4" / "findings.sarif").read_text())
    marked = [r for r in sarif["runs"][0]["results"] if r.get("suppressions")]
    assert [r["ruleId"] for r in marked] == ["PKB001"]


def test_python_noqa_and_fail_on_error_ignores_suppressed(tmp_path, capsys):
    d = tmp_path / "c"
    d.mkdir()
    (d / "1_allreduce_sync.py").write_text(HOST_SYNC)
    code, cap = run_cli([str(d), "--no-ptx", "-o", str(tmp_path / "o"), "--output-format", "jsonl"], tmp_path, capsys)
    rec = json.loads(cap.out.splitlines()[0])
    assert [(f["rule"], f["line"]) for f in rec["findings"]] == [("PKB008", 7)]
    (d / "1_allreduce_sync.py").write_text(HOST_SYNC.replace("synchronize()", "synchronize()  # noqa: PKB008"))
    code, cap = run_cli([str(d), "--no-ptx", "-o", str(tmp_path / "o"), "--output-format", "jsonl"], tmp_path, capsys)
    rec = json.loads(cap.out.splitlines()[0])
    assert rec["findings"] == [] and [f["rule"] for f in rec["suppressed"]] == ["PKB008"]


def test_output_formats_own_stdout(tmp_path, capsys):
    path = broadcast_copy(tmp_path / "c", None)
    for fmt in ("json", "jsonl", "sarif", "github"):
        code, cap = run_cli([str(path), "--no-ptx", "-o", str(tmp_path / fmt), "--output-format", fmt], tmp_path, capsys)
        assert code == 0, cap.err
        assert "wrote" not in cap.out and "wrote" in cap.err  # chatter goes to stderr
        if fmt == "json":
            assert json.loads(cap.out)[0]["path"] == "3_broadcast_cuda.py"
        elif fmt == "jsonl":
            assert all(json.loads(line)["schema_version"] >= 1 for line in cap.out.splitlines())
        elif fmt == "sarif":
            run = json.loads(cap.out)["runs"][0]
            assert run["originalUriBaseIds"]["CORPUSROOT"]["uri"] == (tmp_path / "c").resolve().as_uri() + "/"
            assert run["invocations"][0]["exitCode"] == 0 and run["invocations"][0]["executionSuccessful"]
            flag = [r for r in run["results"] if r["ruleId"] == "PKB001"][0]
            loc = flag["locations"][0]["physicalLocation"]
            assert loc["artifactLocation"] == {"uri": "3_broadcast_cuda.py", "index": 0, "uriBaseId": "CORPUSROOT"}
            line = BROADCAST.read_text().splitlines()[FLAG_LINE - 1]
            assert loc["region"]["startLine"] == FLAG_LINE and loc["region"]["startColumn"] == line.index("flags") + 1
        else:
            lines = cap.out.splitlines()
            assert lines and all(l.startswith(("::error ", "::warning ")) for l in lines)
            assert any(f"line={FLAG_LINE}," in l and "title=PKB001 flag-without-ordering" in l for l in lines)


def test_sarif_gives_a_findings_related_lines_as_related_locations():
    from analyzer.rules.base import all_rules
    from pkb.record import CandidateRecord, Finding
    from reports.sarif import to_sarif

    rec = CandidateRecord(path="1_allreduce_cuda.py")
    rec.findings = [Finding("PKB004", "peer-buffer-reuse-without-barrier", "error", "m", rec.path, 80, related_lines=[40]),
                    Finding("PKB008", "host-sync-in-timed-path", "warning", "m", rec.path, 9)]
    with_related, plain = to_sarif([rec], list(all_rules()), "0")["runs"][0]["results"]
    (loc,) = with_related["relatedLocations"]
    assert loc["physicalLocation"]["region"] == {"startLine": 40}
    assert loc["physicalLocation"]["artifactLocation"]["uri"] == "1_allreduce_cuda.py"
    assert "relatedLocations" not in plain


def test_unknown_output_format_is_a_usage_error(tmp_path, capsys):
    code, cap = run_cli([str(BROADCAST), "--output-format", "xml", "-o", str(tmp_path / "o")], tmp_path, capsys)
    assert code == 2 and not (tmp_path / "o").exists()


def test_several_paths_in_one_run_relative_to_their_common_folder(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "1_allreduce_x.py").write_text(HOST_SYNC)
    (b / "1_allreduce_x.py").write_text(HOST_SYNC)
    code, cap = run_cli([str(a), str(b / "1_allreduce_x.py"), str(a), "--no-ptx", "-o", str(tmp_path / "o"),
                         "--output-format", "json"], tmp_path, capsys)
    assert code == 0, cap.err
    assert sorted(r["path"] for r in json.loads(cap.out)) == ["a/1_allreduce_x.py", "b/1_allreduce_x.py"]
    code, cap = run_cli([str(a), str(tmp_path / "missing1"), str(tmp_path / "missing2"), "-o", str(tmp_path / "o")], tmp_path, capsys)
    assert code == 2 and "missing1" in cap.err and "missing2" in cap.err


def test_paths_in_a_run_tree_do_not_depend_on_the_argument(tmp_path, capsys):
    tree = tmp_path / "pkb" / "solutions_cuda_bf16_h100_8_pkb_m"
    tree.mkdir(parents=True)
    (tree / "1_allreduce_cuda.py").write_text(HOST_SYNC)
    seen = set()
    for arg in (tmp_path / "pkb", tree, tree / "1_allreduce_cuda.py"):
        code, cap = run_cli([str(arg), "--no-ptx", "-o", str(tmp_path / "o"), "--output-format", "json"], tmp_path, capsys)
        seen.add(json.loads(cap.out)[0]["path"])
    assert seen == {"solutions_cuda_bf16_h100_8_pkb_m/1_allreduce_cuda.py"}


def test_pyproject_configuration_found_upward(tmp_path, capsys):
    project = tmp_path / "proj"
    (project / "src").mkdir(parents=True)
    (project / "src" / "1_allreduce_sync.py").write_text(HOST_SYNC)
    (project / "pyproject.toml").write_text('[tool.pkb-analyze]\nignore = ["PKB008"]\n')
    code, cap = run_cli([str(project / "src"), "--no-ptx", "-o", str(tmp_path / "o"), "--output-format", "json"], tmp_path, capsys)
    assert code == 0 and json.loads(cap.out)[0]["findings"] == []
    assert "configuration: " in cap.err and "pyproject.toml" in cap.err
    # the command line wins: --select ALL brings every rule back, but ignore from the file still applies
    code, cap = run_cli([str(project / "src"), "--no-ptx", "-o", str(tmp_path / "o"), "--output-format", "json",
                         "--select", "ALL"], tmp_path, capsys)
    assert json.loads(cap.out)[0]["findings"] == []
    (project / "pyproject.toml").write_text('[tool.pkb-analyze]\nselect = ["PKB00"]\n')
    code, cap = run_cli([str(project / "src"), "--no-ptx", "-o", str(tmp_path / "o"), "--output-format", "json"], tmp_path, capsys)
    assert [f["rule"] for f in json.loads(cap.out)[0]["findings"]] == ["PKB008"]
    (project / "pyproject.toml").write_text('[tool.pkb-analyze]\nmax-file-size = 10\n')
    code, cap = run_cli([str(project / "src"), "--no-ptx", "-o", str(tmp_path / "o"), "--output-format", "json"], tmp_path, capsys)
    assert json.loads(cap.out)[0]["parse_status"] == "too_large"
    (project / "pyproject.toml").write_text('[tool.pkb-analyze]\nselct = ["PKB00"]\n')
    code, cap = run_cli([str(project / "src"), "--no-ptx", "-o", str(tmp_path / "o")], tmp_path, capsys)
    assert code == 2 and "unknown key 'selct'" in cap.err


def test_config_rules():
    from pkb.config import Config

    assert rule_choice(Config(select=["PKB001"]), ["all"], []) == ([], [])
    assert rule_choice(Config(select=["PKB001"], ignore=["PKB002"]), [], ["PKB003"]) == (["PKB001"], ["PKB002", "PKB003"])
    with pytest.raises(ConfigError):
        load_config(Path("/"), Path("/nonexistent/pyproject.toml"))


def test_select_all_runs_every_rule(tmp_path, capsys):
    code, cap = run_cli([str(BROADCAST), "--no-ptx", "-o", str(tmp_path / "o"), "--select", "ALL",
                         "--output-format", "sarif"], tmp_path, capsys)
    assert code == 0, cap.err
    rules = json.loads(cap.out)["runs"][0]["tool"]["driver"]["rules"]
    from analyzer.rules.base import all_rules

    assert len(rules) == len(all_rules())


def test_statistics_text(tmp_path, capsys):
    code, cap = run_cli([str(ROOT / "corpus" / "loose"), "--no-ptx", "-o", str(tmp_path / "o"), "--statistics"], tmp_path, capsys)
    assert code == 0
    line = next(l for l in cap.out.splitlines() if "PKB008" in l)
    assert line.split()[0].isdigit() and "host-sync-in-timed-path" in line


def test_fail_on_error_names_the_file_and_finding(tmp_path, capsys):
    d = tmp_path / "c"
    broadcast_copy(d, None)
    (d / "9_junk.py").write_bytes(b"\xff\xfe junk")
    code, cap = run_cli([str(d), "--no-ptx", "-o", str(tmp_path / "o"), "--fail-on-error", "-q"], tmp_path, capsys)
    assert code == 1
    assert "9_junk.py: not read (not_utf8" in cap.err
    assert f"3_broadcast_cuda.py:{FLAG_LINE}: PKB001 [error]" in cap.err
    sarif = json.loads((tmp_path / "o" / "findings.sarif").read_text())
    inv = sarif["runs"][0]["invocations"][0]
    assert inv["exitCode"] == 1
    assert any("9_junk.py" in n["message"]["text"] for n in inv["toolExecutionNotifications"])


def test_help_version_and_module_entry(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PKB_CACHE_DIR": str(tmp_path / "cache")}
    res = subprocess.run([sys.executable, "-m", "pkb", "-h"], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0 and "--version" in res.stdout and "analyze" in res.stdout
    res = subprocess.run([sys.executable, "-m", "pkb", "--version"], capture_output=True, text=True, env=env, timeout=120)
    from pkb import __version__

    assert res.returncode == 0 and res.stdout.strip() == f"pkb-analyze {__version__}"
    res = subprocess.run([sys.executable, "-m", "pkb", "analyze", "-h"], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0 and "--output-format" in res.stdout


def test_console_paths_elided_in_the_middle():
    long = "solutions_cuda_bf16_h100_8_google_gemini-3.1-pro-preview/12_allgather_gemm_cuda.py"
    short = elide_middle(long, 56)
    assert len(short) == 56 and short.count("…") == 1
    head, tail = short.split("…")
    assert long.startswith(head) and long.endswith(tail)
    assert tail.endswith("pro-preview/12_allgather_gemm_cuda.py")
    assert elide_middle("1_allreduce.py", 56) == "1_allreduce.py"
