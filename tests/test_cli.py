"""The command line end to end: outputs, bad input, rule selection, the rule catalogue."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cli_runner import run_cli

ROOT = Path(__file__).resolve().parents[1]


def test_bundled_corpus_writes_every_output(tmp_path, capsys):
    out = tmp_path / "out"
    code, cap = run_cli([str(ROOT / "corpus"), "--out", str(out), "--no-ptx"], tmp_path, capsys)
    assert code == 0, cap.err
    lines = [json.loads(l) for l in (out / "static.jsonl").read_text().splitlines()]
    assert len(lines) >= 24
    for rec in lines:
        for axis in ("path", "mechanism", "sync", "overlap", "kernels", "findings"):
            assert axis in rec
        if rec["parse_status"] == "ok":
            assert rec["mechanism"] and rec["sync"] and rec["overlap"]
            for lab in rec["mechanism"]:
                for ev in lab["evidence"]:
                    assert ev["line"] > 0 and ev["file"] == rec["path"]
    cand = pd.read_parquet(out / "candidates.parquet")
    assert len(cand) == len(lines) and set(cand.path) == {l["path"] for l in lines}
    assert len(pd.read_csv(out / "findings.csv")) == sum(len(l["findings"]) for l in lines)
    sarif = json.loads((out / "findings.sarif").read_text())
    assert sarif["version"] == "2.1.0"
    run = sarif["runs"][0]
    assert {r["id"] for r in run["tool"]["driver"]["rules"]} >= {f"PKB{i:03d}" for i in range(1, 17)}
    assert len(run["results"]) == sum(len(l["findings"]) for l in lines)
    for res in run["results"]:
        region = res["locations"][0]["physicalLocation"]["region"]
        assert region["startLine"] >= 1
    assert "candidates" in cap.out and "mechanisms:" in cap.out


def test_findings_point_at_lines_that_exist(tmp_path, capsys):
    out = tmp_path / "out"
    run_cli([str(ROOT / "corpus"), "--out", str(out), "--no-ptx", "-q"], tmp_path, capsys)
    for line in (out / "static.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if not rec["findings"]:
            continue
        text = (ROOT / "corpus" / rec["path"]).read_text().splitlines()
        for f in rec["findings"]:
            assert 1 <= f["line"] <= len(text)
            assert f["snippet"] == text[f["line"] - 1].strip()[:200]


def test_bad_input_is_reported_and_the_run_goes_on(tmp_path, capsys):
    d = tmp_path / "c"
    d.mkdir()
    (d / "ok.py").write_text("import torch.distributed as dist\ndef solution(t):\n    dist.all_reduce(t)\n    return t\n")
    (d / "junk.py").write_bytes(os.urandom(4096))
    (d / "empty.py").write_text("")
    (d / "broken.py").write_text("def solution(:\n")
    out = tmp_path / "out"
    code, cap = run_cli([str(d), "--out", str(out), "--no-ptx"], tmp_path, capsys)
    assert code == 0
    recs = {json.loads(l)["path"]: json.loads(l) for l in (out / "static.jsonl").read_text().splitlines()}
    assert recs["ok.py"]["mechanism"][0]["label"] == "nccl"
    assert recs["empty.py"]["parse_status"] == "empty"
    assert recs["broken.py"]["parse_status"] == "syntax_error"
    assert recs["junk.py"]["parse_status"] in ("not_utf8", "not_python")
    code, _ = run_cli([str(d), "--out", str(out), "--no-ptx", "--fail-on-error"], tmp_path, capsys)
    assert code == 1


def test_select_and_ignore(tmp_path, capsys):
    out = tmp_path / "out"
    run_cli([str(ROOT / "corpus"), "--out", str(out), "--no-ptx", "--select", "PKB00", "--ignore", "PKB005"], tmp_path, capsys)
    rules = {f["rule"] for l in (out / "static.jsonl").read_text().splitlines() for f in json.loads(l)["findings"]}
    assert rules and all(r.startswith("PKB00") and r != "PKB005" for r in rules)
    code, cap = run_cli([str(ROOT / "corpus"), "--out", str(out), "--select", "PKB999"], tmp_path, capsys)
    assert code == 2 and "PKB999" in cap.err


def test_rules_command_prints_the_docstring(tmp_path, capsys):
    code, cap = run_cli(["rules"], tmp_path, capsys)
    assert code == 0 and "PKB001" in cap.out and "PKB016" in cap.out
    code, cap = run_cli(["rules", "PKB003"], tmp_path, capsys)
    assert code == 0
    for section in ("## What it does", "## Why is this bad?", "## Example", "## Use instead"):
        assert section in cap.out
    code, cap = run_cli(["rules", "PKB404"], tmp_path, capsys)
    assert code == 2


def test_rules_renders_the_markdown_on_a_terminal(tmp_path, capsys, monkeypatch):
    import pkb.cli

    monkeypatch.setattr(pkb.cli, "_stdout_is_terminal", lambda: True)
    code, cap = run_cli(["rules", "PKB003"], tmp_path, capsys)
    assert code == 0 and "What it does" in cap.out and "Example" in cap.out
    assert "## " not in cap.out and "```" not in cap.out  # headings and fences rendered, not pasted


def test_missing_path_is_a_clear_error(tmp_path, capsys):
    code, cap = run_cli([str(tmp_path / "nope"), "--out", str(tmp_path / "o")], tmp_path, capsys)
    assert code == 2 and "no such file" in cap.err


def test_console_script_installed():
    exe = Path(sys.executable).with_name("pkb-analyze")
    if not exe.exists():
        pytest.skip("console script not installed in this environment")
    res = subprocess.run([str(exe), "rules"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "PKB010" in res.stdout


def test_eval_command_runs_pure_pytorch_candidates_on_cpu_with_a_profile(tmp_path, capsys):
    """One `eval --profile` run (a launch per candidate) serves the command's and the profile's checks."""
    d = tmp_path / "c"
    d.mkdir()
    (d / "1_allreduce_good.py").write_text(
        "import torch\nimport torch.distributed as dist\n\n"
        "@torch.no_grad()\ndef solution(tensor):\n    out = tensor.clone()\n    dist.all_reduce(out)\n    return out\n")
    (d / "1_allreduce_local.py").write_text(
        "import torch\n\n@torch.no_grad()\ndef solution(tensor):\n    return tensor.clone()\n")
    out = tmp_path / "out"
    code, cap = run_cli(["eval", str(d), "--out", str(out), "--world-size", "2", "--trials", "2",
                         "--warmup", "2", "--iters", "3", "--timeout", "240", "--profile", "--ncu"], tmp_path, capsys)
    assert code == 0, cap.err
    recs = {json.loads(l)["path"]: json.loads(l) for l in (out / "eval.jsonl").read_text().splitlines()}
    good = recs["1_allreduce_good.py"]
    # the harness's own trace folder is not the candidate's tampering
    assert good["evaluation"]["outcome"] in ("faster", "slower"), good["evaluation"].get("reason")
    assert recs["1_allreduce_local.py"]["evaluation"]["outcome"] == "wrong_result"
    # the static labels travel with the evaluation in the same record
    assert good["mechanism"][0]["label"] == "nccl"
    assert (out / "pkb_eval.sqlite").exists()
    assert "wrong_result" in cap.out
    prof = good["profile"]
    assert len(prof["ranks"]) == 2, prof
    assert all(r and r.get("calls") for r in prof["ranks"]), prof
    check = good["evaluation"]["details"]["profile_check"]  # no GPU work on CPU: nothing the timing missed
    assert check["agrees"] is True and sorted(r["rank"] for r in check["ranks"]) == [0, 1], check
    # the profile and the diagnosis made when the evaluation landed reach `report OUT` through the store
    code, cap = run_cli(["report", str(out), "--out", str(tmp_path / "rep")], tmp_path, capsys)
    assert code == 0, cap.err
    assert "2 evaluated" in cap.out and "diagnosis: stored (2)" in cap.out
    page = next(p for p in (tmp_path / "rep" / "kernels").glob("*.html") if "good" in p.name).read_text()
    assert "no profile recorded" not in page and "no profile trace" not in page
    assert Path(prof["ranks"][0]["path"]).name in page and 'alt="timeline of rank 0' in page
    assert "ncu skipped: no GPU" in page  # --ncu on CPU: its stored verdict, not "no Nsight Compute pass"
    # and `explain` reads the same stored record: no stage runs again
    code, cap = run_cli(["explain", str(d / "1_allreduce_good.py"), "--store", str(out / "pkb_eval.sqlite")], tmp_path, capsys)
    assert code == 0, cap.err
    assert "static passes run now" not in cap.out and "made now" not in cap.out and good["evaluation"]["outcome"] in cap.out


def test_eval_emulated_labels_results_and_finds_local_only(tmp_path, capsys):
    d = tmp_path / "c"
    d.mkdir()
    (d / "1_allreduce_good.py").write_text(
        "import torch\nimport torch.distributed as dist\n\n"
        "@torch.no_grad()\ndef solution(tensor):\n    out = tensor.clone()\n    dist.all_reduce(out)\n    return out\n")
    (d / "1_allreduce_local.py").write_text("import torch\n\ndef solution(tensor):\n    return tensor.clone()\n")
    out = tmp_path / "out"
    code, cap = run_cli(["eval", str(d), "--out", str(out), "--emulate", "4"], tmp_path, capsys)
    assert code == 0, cap.err
    recs = {json.loads(l)["path"]: json.loads(l)["evaluation"] for l in (out / "eval_emulated.jsonl").read_text().splitlines()}
    assert all(ev["emulated"] and ev["speedup"] is None for ev in recs.values())
    assert recs["1_allreduce_good.py"]["correct"]
    assert (recs["1_allreduce_local.py"]["outcome"], recs["1_allreduce_local.py"]["subtype"]) == ("wrong_result", "local_only")
    assert "EMULATED" in cap.out
