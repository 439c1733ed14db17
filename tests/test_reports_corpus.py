"""The corpus report and the per-candidate pages: static-only and evaluated data, checked as
files and in a real headless browser (Debian's chromium).

Without chromium the browser tests skip, or fail where CI is set (.ci/run installs it).
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pkb.cli import main
from profiling.analyze import profile_summary
from profiling.synthetic import KinetoBuilder
from profiling.trace import trace_from_chrome
from reports import corpus_report

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
HEADINGS = ("pkb-analyze corpus report", "At a glance", "Transfer mechanisms", "Synchronization and overlap", "Most common findings",
            "Fastest kernel per problem", "Candidates", "pass@k and fast_p@k")


@pytest.fixture(scope="module")
def static_records(tmp_path_factory):
    from analyzer.pipeline import StaticOptions
    from pkb.cli import run_static

    tmp = tmp_path_factory.mktemp("report_static")
    os.environ["PKB_CACHE_DIR"] = str(tmp / "cache")
    return run_static(ROOT / "corpus", tmp / "static", StaticOptions(ptx=False), quiet=True)


def _trace_file(path: Path) -> Path:
    import json

    b = KinetoBuilder()
    for i, t0 in enumerate((0.0, 300.0)):
        b.cpu_range(f"pkb:candidate_call[{i}]", t0, 250)
        b.kernel("void pkb_sm_load_gather<float>(float**, float*, int)", t0 + 5, t0 + 20, 60, stream=7)
        b.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", t0 + 10, t0 + 90, 120, stream=7)
        b.host_sync("cudaStreamSynchronize", t0 + 215, 20)
    path.write_text(json.dumps(b.to_dict()))
    return path


def _evaluation(outcome: str, subtype: str = "", speedup: float | None = None, reason: str = "", **details) -> dict:
    """An evaluation dict in pkb.eval's shape (what finish() writes and the store keeps)."""
    correct = outcome in ("faster", "slower")
    trials = [{"trial": t, "matched": outcome != "wrong_result", "ranks": [
        {"rank": r, "matched": outcome != "wrong_result", "shape_ok": True, "dtype_ok": True, "numel": 6144,
         "mismatches": 0 if outcome != "wrong_result" else 6144, "max_abs_err": 0.0 if outcome != "wrong_result" else 2.5,
         "max_rel_err": 0.0, "max_violation": 0.0 if outcome != "wrong_result" else 1e5, "nan_inf": 0,
         "sentinel": 0 if subtype != "unwritten" else 3072, "mutates_inputs": False, "aliases_input": False,
         **({"repeat": {"equal": True, "differing": 0, "max_abs_diff": 0.0}} if t == 0 else {}),
         **({"first_mismatches": [{"flat": 0, "coords": [0, 0], "expected": 1.5, "got": 0.25}]} if outcome == "wrong_result" else {})}
        for r in range(2)]} for t in range(3)] if outcome in ("faster", "slower", "wrong_result") else []
    return {"status": "ran", "outcome": outcome, "subtype": subtype, "speedup": speedup, "correct": correct, "world_size": 2,
            "backend": "nccl", "device": "cuda", "dtype": "bfloat16", "trials": trials, "ranks": [], "reason": reason, "wall_s": 12.5,
            "config_key": "0123456789abcdef", "details": {"reference_ms": 1.0 if speedup else None, "candidate_ms": (1.0 / speedup) if speedup else None, **details}}


@pytest.fixture(scope="module")
def evaluated_records(static_records, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report_eval")
    trace = _trace_file(tmp / "rank0.trace.json")
    by_problem: dict = {}
    for rec in static_records:
        if rec.problem_id is not None:
            by_problem.setdefault(rec.problem_id, []).append(rec)
    picks = [copy.deepcopy(r) for pid in (1, 2, 12) for r in by_problem[pid][:3]]
    plans = [
        _evaluation("faster", speedup=1.8), _evaluation("slower", speedup=0.6),
        _evaluation("wrong_result", "unwritten", reason="trial 0: 3072 of 6144 elements outside tolerance"),
        _evaluation("compile_error", "cuda_syntax", reason="rank 0 in load: RuntimeError: kernel.cu(12): error: expected a ';'"),
        _evaluation("faster", speedup=2.4), _evaluation("hang", "timeout", reason="killed after the 600 s limit; rank 1 in trial 0 candidate",
                                                        stuck_ranks=[{"rank": 1, "phase": "trial 0 candidate"}]),
        _evaluation("slower", speedup=0.3), _evaluation("faster", speedup=1.1), _evaluation("runtime_error", "illegal_address", reason="rank 1 in trial 0 candidate: an illegal memory access"),
    ]
    for rec, ev in zip(picks, plans):
        rec.evaluation = ev
    summary = profile_summary(trace_from_chrome(__import__("json").loads(trace.read_text()), path=str(trace), rank=0), ["pkb_sm_load_gather"], 1 << 20)
    picks[1].profile = {"ranks": [summary], "merged_trace": None, "timeline_png": None, "errors": []}
    return picks


@pytest.fixture(scope="module")
def built(static_records, evaluated_records, tmp_path_factory):
    from pkb.diagnose.explain import diagnose

    tmp = tmp_path_factory.mktemp("reports")
    static = copy.deepcopy(static_records)
    for rec in (*static, *evaluated_records):  # the diagnosis is a stage's (stored with the record), not the report's
        diagnose(rec)
    return {
        "static": corpus_report.build(static, tmp / "static", {"input": "corpus/"}),
        "eval": corpus_report.build(evaluated_records, tmp / "eval", {"input": "synthetic evaluation"}),
    }


def _hrefs(html: str) -> list[str]:
    return re.findall(r'href="([^"]+)"', html)


@pytest.mark.parametrize("which", ["static", "eval"])
def test_every_link_resolves(built, which):
    res = built[which]
    index = Path(res["html"])
    html = index.read_text()
    links = [h for h in _hrefs(html) if not h.startswith("#")]
    assert len(links) >= res["candidates"]
    for h in links:
        assert (index.parent / h.split("#")[0]).is_file(), h
    for page in res["pages"]:
        text = Path(page).read_text()
        assert 'href="../index.html"' in text
        for h in _hrefs(text):
            if not h.startswith("#"):
                assert (Path(page).parent / h.split("#")[0]).is_file(), (page, h)
    for h in re.findall(r"\]\(([^)]+)\)", Path(res["markdown"]).read_text()):
        assert (index.parent / h.split("#")[0]).is_file(), h


def test_self_contained(built):
    for res in built.values():
        for path in [res["html"], *res["pages"]]:
            html = Path(path).read_text()
            assert not re.search(r'(src|href)="(https?:)?//', html), path  # nothing fetched from a network
            assert not re.search(r'<link\b', html)
            assert html.count("<img") == html.count('src="data:image/png;base64,')


def test_static_report_says_it_is_static(built):
    html = Path(built["static"]["html"]).read_text()
    assert "Static data only" in html
    # said plainly, with what gives them: no failed problem or fastest kernel is claimed or implied
    assert "names no failed problem and no fastest kernel" in html and "Not known: no candidate was run" in html
    assert "<code>pkb-analyze eval CORPUS -o RUN</code>, then <code>pkb-analyze report RUN</code>" in html
    # every section that needs an evaluation says the same, pointing at that note
    assert html.count("not known: no candidate was run (see the note at the top)") == 5 and ">no evaluation" not in html
    md = Path(built["static"]["markdown"]).read_text()
    assert "names no failed problem and no fastest kernel" in md and "`pkb-analyze eval CORPUS -o RUN`, then `pkb-analyze report RUN`" in md
    # "which mechanisms were used": the card lists them most used first
    card = html[html.index("<h3>Mechanisms used</h3>"):]
    card = card[:card.index("</div>")]
    counts = [int(n) for n in re.findall(r"<li>[^<]* (\d+) \(\d+%\)</li>", card)]
    assert len(counts) >= 3 and counts == sorted(counts, reverse=True), card
    for heading in ("# pkb-analyze corpus report", "## Transfer mechanisms", "## Most common findings", "## Candidates"):
        assert heading in md
    assert built["static"]["plots"] == 3  # mechanisms, sync/overlap, findings


def test_evaluated_report_answers_the_three_questions(built, evaluated_records):
    html = Path(built["eval"]["html"]).read_text()
    assert "Failed problems and why" in html and "Fastest kernel per problem" in html
    failed = _table_rows(html, "failed-table")
    assert failed[0][:1] == ["problem"] and failed[0][-2:] == ["most common subtype", "what it means"]
    by_problem = {row[0]: dict(zip(failed[0], row)) for row in failed[1:]}
    evaluated = [r for r in evaluated_records if r.evaluation["outcome"] not in ("faster", "slower")]
    assert sum(int(v) for row in by_problem.values() for k, v in row.items() if k in ("compile_error", "wrong_result", "hang", "runtime_error")) == len(evaluated)
    cuda = next(row for row in by_problem.values() if row.get("compile_error") == "1")
    n_failed = sum(int(v) for k, v in cuda.items() if k in ("compile_error", "wrong_result", "hang", "runtime_error"))
    assert cuda["most common subtype"] == f"cuda_syntax (1 of {n_failed})" and "does not compile" in cuda["what it means"]
    fastest = max((r for r in evaluated_records if r.problem_id == 1 and r.evaluation["outcome"] == "faster"), key=lambda r: r.evaluation["speedup"])
    assert fastest.path in html
    assert "pass@1" in html and "fast_1@5" in html
    assert built["eval"]["plots"] == 5  # + outcomes by category, speedups
    assert built["eval"]["page_plots"] == 1  # the profiled candidate's timeline


def _table_rows(html: str, table_id: str) -> list[list[str]]:
    """Header and body cells of one table, as text."""
    m = re.search(rf'<table id="{table_id}".*?</table>', html, re.S)
    assert m, table_id
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", m.group(0), re.S)
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r, re.S)] for r in rows]


def test_outcome_colours_are_distinct_and_every_badge_has_its_word(built):
    from reports.report_parts import OUTCOME_PALETTE

    failures = [o for o in OUTCOME_PALETTE if o not in ("correct", "")]
    assert len({OUTCOME_PALETTE[o][0] for o in failures}) == len(failures)
    html = Path(built["eval"]["html"]).read_text()
    for word in re.findall(r'<span class="badge o-([a-z_]+)">([^<]*)</span>', html):
        assert word[1] == (word[0] if word[0] != "none" else "not evaluated")


# ---- in a real browser ---------------------------------------------------------------------------


def _browser(tmp_path: Path, url: str, *extra: str) -> str:
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing (CI installs it in .ci/run: apt-get install -y chromium)")
        pytest.skip("chromium not installed")
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'chromium-profile'}", "--virtual-time-budget=5000", *extra, url]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.mark.parametrize("which", ["static", "eval"])
def test_corpus_page_renders_in_chromium(built, which, tmp_path):
    res = built[which]
    dom = _browser(tmp_path, Path(res["html"]).resolve().as_uri(), "--dump-dom")
    for heading in HEADINGS:
        assert heading in dom, heading
    loaded = re.search(r'data-imgs-loaded="(\d+)"', dom)
    total = re.search(r'data-imgs-total="(\d+)"', dom)
    assert loaded and total, "the page's load script did not run"
    assert int(loaded.group(1)) == int(total.group(1)) == res["plots"]
    assert dom.count('class="badge') >= (res["evaluated"] or 0)


def test_kernel_page_renders_with_its_timeline(built, evaluated_records, tmp_path):
    res = built["eval"]
    page = Path(res["pages"][1])  # the profiled one
    dom = _browser(tmp_path, page.resolve().as_uri(), "--dump-dom")
    for heading in ("Explanation", "Labels of the candidate", "Kernels", "Findings", "Evaluation", "Diagnosis", "Timeline of one call"):
        assert f">{heading}</h2>" in dom, heading
    assert 'data-imgs-loaded="1"' in dom and 'data-imgs-total="1"' in dom
    assert evaluated_records[1].path in dom and "speedup 0.6x" in dom


def test_screenshot(built, tmp_path):
    shot = tmp_path / "corpus.png"
    _browser(tmp_path, Path(built["eval"]["html"]).resolve().as_uri(), f"--screenshot={shot}", "--window-size=1280,2000")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


# ---- the commands --------------------------------------------------------------------------------


def test_report_and_explain_commands(tmp_path, capsys):
    os.environ["PKB_CACHE_DIR"] = str(tmp_path / "cache")
    out = tmp_path / "rep"
    with pytest.raises(SystemExit) as exc:
        main(["report", str(ROOT / "corpus"), "--out", str(out), "--no-ptx"])
    assert (exc.value.code or 0) == 0
    assert (out / "static.jsonl").is_file() and (out / "index.html").is_file() and (out / "report.md").is_file()
    assert "static only" in capsys.readouterr().out
    # a run folder (static.jsonl already there) is read, not re-analyzed
    again = tmp_path / "rep2"
    with pytest.raises(SystemExit) as exc:
        main(["report", str(out), "--out", str(again)])
    assert (exc.value.code or 0) == 0 and (again / "index.html").is_file()
    assert len(list((again / "kernels").glob("*.html"))) == len((out / "static.jsonl").read_text().splitlines())
    target = ROOT / "corpus" / "solutions_cuda_bf16_h100_8_pkb_sample-b" / "13_gemm_allreduce_cuda.py"
    with pytest.raises(SystemExit) as exc:
        main(["explain", str(target), "--no-ptx"])
    assert (exc.value.code or 0) == 0
    text = capsys.readouterr().out
    assert "PKB012" in text and "Labels of the candidate" in text and "not evaluated" in text


def test_kernel_page_shows_the_ncu_counters_and_what_was_unavailable():
    from pkb.record import CandidateRecord
    from reports.kernel_page import ncu_html

    rec = CandidateRecord(path="3_broadcast_cuda.py", problem_id=3, problem_name="broadcast")
    assert "eval --ncu" in ncu_html(rec)
    rec.profile = {"ncu": {"status": "ok", "unavailable_metrics": ["nvlrx__bytes", "nvltx__bytes"], "kernels": [
        {"rank": 1, "kernel": "tma_pull_kernel", "duration_ns": 9504.0, "tma_load_bytes": 16777216.0, "tma_store_bytes": 16777216.0}]}}
    html_text = ncu_html(rec)
    assert "tma_pull_kernel" in html_text and "nvlrx__bytes, nvltx__bytes" in html_text and "TMA load B" in html_text
    assert "1.68e+07" in html_text
    rec.profile["ncu"] = {"status": "failed", "error": "ncu wrote no report", "kernels": []}
    assert "ncu wrote no report" in ncu_html(rec)


def test_candidates_table_fits_at_1400_px_and_sorts(built, tmp_path):
    index = Path(built["eval"]["html"])
    dom = _browser(tmp_path, index.resolve().as_uri(), "--dump-dom", "--window-size=1400,900")
    width, visible = re.search(r'data-cand-width="(\d+)"', dom), re.search(r'data-cand-visible="(\d+)"', dom)
    assert width and visible, "the measuring script did not run"
    assert 0 < int(width.group(1)) <= int(visible.group(1)) <= 1400
    # click "speedup" twice (descending), as a user would; the first rows hold the largest speedups
    probe = index.with_name("sorted.html")
    probe.write_text(index.read_text().replace("</body>", """<script>window.addEventListener('load', function () {
      var th = Array.prototype.find.call(document.querySelectorAll('#cand-table th'), function (h) { return h.textContent === 'speedup'; });
      pkbSort(th); pkbSort(th);
      document.body.dataset.order = Array.prototype.map.call(document.getElementById('cand-table').tBodies[0].rows,
        function (r) { return r.cells[th.cellIndex].textContent; }).join('|');
    });</script></body>"""))
    dom = _browser(tmp_path, probe.resolve().as_uri(), "--dump-dom")
    order = re.search(r'data-order="([^"]*)"', dom).group(1).split("|")
    # a cell reads '2.4x', '1.02x (tie, 0.95-1.1x)' or with ' CPU (gloo)': the figure leads
    numbers = [float(x.split("x")[0]) for x in order if x]
    assert numbers == sorted(numbers, reverse=True) and len(numbers) >= 5
    assert order[: len(numbers)] == [x for x in order if x]  # empty cells (not timed) come last


def test_a_problem_without_a_fastest_kernel_says_why():
    def row(problem, correct, speedup=1.2, verdict="faster", unsuspected=True):
        return {"problem": problem, "evaluated": True, "correct": correct, "unsuspected": unsuspected, "speedup": speedup,
                "speed_verdict": verdict}

    rows = [row("1_allreduce", True, 0.66, "tie"), row("2_allgather", False, None, ""), row("3_broadcast", True, 1.5),
            row("8_alltoall", True, None, ""), row("8_alltoall", True, 2.0, "tie")]
    fastest = corpus_report.fastest_per_problem(rows)
    assert list(fastest) == ["3_broadcast"]
    assert corpus_report.no_fastest(rows, fastest) == {
        "1_allreduce": "none named: 1 correct, 1 a tie within its timing spread",
        "2_allgather": "no correct candidate",
        "8_alltoall": "none named: 2 correct, 1 not timed, 1 a tie within its timing spread",
    }


def test_the_static_findings_card_lists_ties_in_rule_order(tmp_path):
    from pkb.record import CandidateRecord, Finding

    records = [CandidateRecord(path=f"{i}_allreduce.py", problem_id=1, problem_name="allreduce") for i in range(2)]
    for rec, rule in zip(records, ("PKB018", "PKB017")):  # first seen: PKB018
        rec.findings = [Finding(rule, "r", "warning", "m", rec.path, 1)]
    html = Path(corpus_report.build(records, tmp_path)["html"]).read_text()
    card = html[html.index("<h3>Most common findings</h3>"):]
    assert re.findall(r"<li><b>(PKB\d+)</b>", card[:card.index("</ul>")]) == ["PKB017", "PKB018"]


def test_candidates_are_listed_in_problem_number_order(tmp_path):
    from pkb.record import CandidateRecord
    from reports.report_parts import problem_order

    names = {1: "allreduce", 2: "allgather", 10: "embedding_lookup", 19: "blocked_fp8_quantize"}
    records = [CandidateRecord(path=f"m/{i}_{n}_cuda.py", problem_id=i, problem_name=n) for i, n in sorted(names.items(), key=lambda kv: str(kv[0]))]
    records.append(CandidateRecord(path="m/loose.py"))  # no problem: last
    html = Path(corpus_report.build(records, tmp_path)["html"]).read_text()
    table = html[html.index('id="candidates"'):]
    shown = re.findall(r'title="m/([^"]+)"', table)
    assert shown == ["1_allreduce_cuda.py", "2_allgather_cuda.py", "10_embedding_lookup_cuda.py", "19_blocked_fp8_quantize_cuda.py", "loose.py"]
    assert sorted(["10_a", "2_b", "-", "1_c"], key=problem_order) == ["1_c", "2_b", "10_a", "-"]


def test_tables_built_on_cpu_timings_say_so_and_metric_headers_are_words():
    def row(device, speedup=1.3):
        return {"evaluated": True, "speedup": speedup, "device": device}

    assert corpus_report.timing_note([row(""), row("")]) == ""  # GPU timings: nothing to say
    note = corpus_report.timing_note([row("CPU (gloo)"), row(""), row("CPU (gloo)", None)])
    assert "1 of 2 timed candidates are from CPU (gloo)" in note


def test_a_report_of_cpu_timings_says_so_above_its_outcome_and_metric_tables(tmp_path):
    from pkb.record import CandidateRecord

    records = []
    for i, speed in enumerate((1.4, 0.8)):
        rec = CandidateRecord(path=f"m/{i}_allreduce.py", problem_id=1, problem_name="allreduce")
        rec.evaluation = {"status": "ran", "outcome": "faster" if speed > 1 else "slower", "speedup": speed, "correct": True,
                          "world_size": 2, "backend": "gloo", "device": "cpu"}
        records.append(rec)
    html = Path(corpus_report.build(records, tmp_path)["html"]).read_text()
    for section, end in (('id="outcomes"', 'id="metrics"'), ('id="metrics"', 'id="mechanisms"')):
        part = html[html.index(section):html.index(end)]
        assert "Timings of 2 of 2 timed candidates are from CPU (gloo)" in part, section
    assert "share correct and faster (fast_1)" in html and "<th>fast_1</th>" not in html


def test_a_kernel_pages_name_keeps_the_files_own_name():
    from pkb.record import CandidateRecord
    from reports.kernel_page import page_name

    rec = CandidateRecord(path="solutions_triton_bf16_h100_8_google_gemini-3-pro-preview/53_fp8_reduce_scatter_grads_triton.py")
    name = page_name(7, rec)
    assert name.startswith("007_") and name.endswith("53_fp8_reduce_scatter_grads_triton.py.html") and len(name) <= 100
