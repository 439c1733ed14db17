"""Evidence verbatim: `explain` keeps `[blockIdx.x]` (rich markup is never parsed from record
text), each finding shows once, and kernel pages render the rules' Markdown documentation."""

import os
import re
from pathlib import Path

from pkb.cli import main
from pkb.record import CandidateRecord, Finding

ROOT = Path(__file__).resolve().parents[1]
BROADCAST = ROOT / "corpus" / "solutions_cuda_bf16_h100_8_pkb_sample-b" / "3_broadcast_cuda.py"


def explain_output(path: Path, tmp_path, capsys, monkeypatch) -> str:
    monkeypatch.setenv("PKB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "400")  # no wrapping: each table row on one line
    monkeypatch.chdir(tmp_path)  # no store picked up from the working folder
    try:
        main(["explain", str(path), "--no-ptx"])
    except SystemExit as exc:
        assert not exc.code
    return capsys.readouterr().out


def test_explain_prints_bracketed_evidence_verbatim(tmp_path, capsys, monkeypatch):
    out = explain_output(BROADCAST, tmp_path, capsys, monkeypatch)
    findings = out[out.index("Findings"):]
    assert "flags[blockIdx.x] = 1;" in findings  # the PKB001 snippet, brackets kept
    assert "flags = 1;" not in out.replace("flags[blockIdx.x] = 1;", "")


def test_explain_shows_each_finding_once(tmp_path, capsys, monkeypatch):
    out = explain_output(BROADCAST, tmp_path, capsys, monkeypatch)
    for name in ("flag-never-reset", "peer-buffer-reuse-without-barrier"):
        assert out.count(name) == 1, (name, out)
    # one PKB001, the pusher's unfenced flag store; the receiver's volatile poll is not one
    assert out.count("flag-without-ordering") == 1, out
    assert "Rests on the findings PKB001" in out


def test_markup_like_text_in_a_message_is_printed_as_is(capsys):
    from rich.console import Console

    from reports.terminal import render

    rec = CandidateRecord(path="x[bold].py")
    rec.findings = [Finding("PKB003", "unbounded-spin", "warning", "spin on [red]flag[/red]", "x[bold].py", 3, "while (f[i]) {}")] * 2
    render(rec, Console(width=400, soft_wrap=False))
    out = capsys.readouterr().out
    assert "x[bold].py" in out and "spin on [red]flag[/red]" in out and "while (f[i]) {}" in out
    assert out.count("spin on [red]flag[/red]") == 1  # an exact repeat of a finding is one row


def test_kernel_page_renders_rule_markdown_and_one_row_per_finding():
    from analyzer.rules import all_rules
    from reports.kernel_page import render

    rule = next(r for r in all_rules() if r.id == "PKB001")
    rec = CandidateRecord(path="a/3_b.py")
    f = Finding("PKB001", rule.name, "error", "device flag <b>unordered</b>", "a/3_b.py", 31, "flags[blockIdx.x] = 1;")
    rec.findings = [f, Finding(**{**f.__dict__})]
    rec.suppressed = [Finding("PKB002", "flag-never-reset", "warning", "m", "a/3_b.py", 31)]
    rec.diagnosis = {"explanation": {"headline": "h", "evidence": [
        {"kind": "finding", "rule": "PKB001", "file": "a/3_b.py", "line": 31, "snippet": "", "text": "PKB001 at a/3_b.py:31"},
        {"kind": "evaluation", "text": "evaluation: stale data on rank 1"}],
        "fixes": [{"rule": "PKB001", "name": rule.name, "fix": rule.fix, "why": "", "at": []}]}}
    html, _ = render(rec)
    findings = html[html.index('id="findings"'):html.index('id="evaluation"')]
    assert findings.count("<td><b>PKB001</b>") == 1
    assert "flags[blockIdx.x] = 1;" in findings
    assert "device flag &lt;b&gt;unordered&lt;/b&gt;" in findings  # escaped by the template
    assert "## Example" not in html and "```" not in html
    assert re.search(r"<h2>Example</h2>\s*<pre><code class=\"language-cuda\">", findings)
    assert "<code>volatile</code>" in findings  # inline Markdown of the rationale rendered
    assert "suppressed by a noqa comment" in findings and "PKB002" in findings
    explanation = html[html.index('id="explanation"'):html.index('id="labels"')]
    assert "stale data on rank 1" in explanation  # evidence only the explanation has stays
    assert "PKB001 at a/3_b.py:31" not in explanation and rule.fix not in explanation  # the finding row has them


def test_a_findings_related_lines_show_on_the_kernel_page_and_in_explain(capsys):
    from rich.console import Console

    from reports.kernel_page import render
    from reports.terminal import render as render_terminal

    rec = CandidateRecord(path="a/1_b.py")
    rec.findings = [Finding("PKB004", "peer-buffer-reuse-without-barrier", "error", "m", rec.path, 80, related_lines=[40, 52])]
    html, _ = render(rec)
    assert "related: line 40, line 52" in html[html.index('id="findings"'):html.index('id="evaluation"')]
    render_terminal(rec, Console(width=200, soft_wrap=False))
    assert "(and 40)" in capsys.readouterr().out


def test_label_evidence_at_one_place_is_one_line_with_its_notes(capsys):
    # the clang pass gives one item per fact at an `asm volatile(` line: shown without their
    # notes they printed as the same line twice
    from rich.console import Console

    from pkb.record import Evidence, Label
    from reports.kernel_page import _evidence_cell
    from reports.terminal import render

    asm = [Evidence("k.py", 140, "asm volatile(", "clang", "multimem.ld_reduce.relaxed.sys.global.add.v4.bf16x2"),
           Evidence("k.py", 140, "asm volatile(", "clang", "multicast_ptr"),
           Evidence("k.py", 154, "asm volatile(", "clang", "multimem.st.relaxed.sys.global.v4.f32")]
    rec = CandidateRecord(path="k.py")
    rec.labels = {"mechanism": [Label("mechanism", "nvls", asm)]}
    render(rec, Console(width=400, soft_wrap=False))
    out = capsys.readouterr().out
    assert out.count("k.py:140 [clang]") == 1 and out.count("k.py:154 [clang]") == 1
    assert "multimem.ld_reduce.relaxed.sys.global.add.v4.bf16x2; multicast_ptr" in out
    cell = _evidence_cell(Label("mechanism", "nvls", asm))
    assert cell.count("k.py:140") == 1 and "multicast_ptr" in cell


def test_a_finding_behind_a_slowness_cause_shows_once_and_a_fix_is_given_once(capsys):
    from rich.console import Console

    from pkb.diagnose.explain import diagnose
    from reports.kernel_page import render
    from reports.terminal import render as render_terminal

    message = "host synchronisation on the timed path: torch.distributed.barrier"
    rec = CandidateRecord(path="a/1_allreduce_b.py")
    rec.findings = [Finding("PKB008", "host-sync-in-timed-path", "warning", message, rec.path, 237, "dist.barrier()")]
    rec.diagnosis = diagnose(rec)
    assert rec.diagnosis["slow"], "the finding is a (static) slowness cause"
    render_terminal(rec, Console(width=400, soft_wrap=False))
    out = capsys.readouterr().out
    assert out.count(message) == 1, out  # the findings row; the cause cites it by rule and line
    assert "PKB008 at line 237 (Findings)" in out
    html, _ = render(rec)
    assert html.count(message) == 1
    # a slower candidate whose costliest cause has no finding: its advice is given once, named
    from pkb.record import Evidence, Label

    slow = CandidateRecord(path="a/1_allreduce_c.py")
    slow.add_label(Label("mechanism", "nccl", [Evidence(slow.path, 8, "dist.all_reduce(out)", "python")]))
    slow.evaluation = {"status": "ran", "outcome": "slower", "speedup": 0.9, "correct": True}
    slow.diagnosis = diagnose(slow)
    assert [c["cause"] for c in slow.diagnosis["slow"]] == ["nccl_fallback"]
    fixes = slow.diagnosis["explanation"]["fixes"]
    assert len(fixes) == 1 and fixes[0]["name"] == "nccl_fallback", fixes
