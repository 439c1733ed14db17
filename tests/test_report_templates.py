"""The HTML report comes from jinja2 templates: no module under reports/ writes markup in a Python
string, nothing but markdown-it-py's output is marked safe, record text (paths, messages, reasons)
comes out escaped on the corpus page and on a candidate's page, and the templates ship with the
package."""

from __future__ import annotations

import ast
import fnmatch
import re
import tomllib
from html.parser import HTMLParser
from pathlib import Path

from pkb.record import CandidateRecord, Finding
from reports import corpus_report, kernel_page

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"
TEMPLATES = REPORTS / "templates"
# an HTML tag (<td>, </a>, <a href=..., <!DOCTYPE) or a named/numeric character reference
MARKUP = re.compile(r"<\s*/?[A-Za-z][A-Za-z0-9]*(?=[\s>/])|<!doctype|&[A-Za-z]+;|&#x?[0-9A-Fa-f]+;", re.I)
HOSTILE = "<script>alert(1)</script>"


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


def test_no_module_under_reports_writes_markup_in_a_string():
    found = []
    for path in sorted(REPORTS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        for node in ast.walk(tree):  # f-strings' literal parts are Constant nodes too
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                m = MARKUP.search(node.value)
                if m:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {m.group(0)!r} in {node.value[:60]!r}")
    assert not found, "markup belongs in reports/templates/:\n" + "\n".join(found)


def _called(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")


def test_only_markdown_is_marked_safe_and_nothing_escapes_by_hand():
    """Markup() appears in templating.py's two Markdown functions alone; no module escapes by
    hand (autoescape does); no template turns escaping off."""
    marked, escapes = set(), []
    for path in sorted(REPORTS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _called(node) in ("escape", "esc"):
                escapes.append(f"{path.name}:{node.lineno}")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                marked |= {f"{path.name}:{node.name}" for call in ast.walk(node) if isinstance(call, ast.Call) and _called(call) == "Markup"}
    assert sorted(marked) == ["templating.py:markdown", "templating.py:markdown_inline"]
    assert not escapes
    for template in TEMPLATES.glob("*.j2"):
        text = template.read_text(encoding="utf-8")
        assert not re.search(r"\|\s*safe\b|autoescape\s+false|Markup", text), template.name


def test_templates_ship_with_the_package():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    globs = data["tool"]["setuptools"]["package-data"]["reports"]
    files = [p.relative_to(REPORTS).as_posix() for p in TEMPLATES.iterdir() if p.is_file()]
    assert files and all(any(fnmatch.fnmatch(f, g) for g in globs) for f in files), (files, globs)


class _Text(HTMLParser):
    """The text a browser shows (entities decoded), outside style and script."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag, attrs):
        self.hidden += tag in ("style", "script")

    def handle_endtag(self, tag):
        self.hidden -= tag in ("style", "script")

    def handle_data(self, data):
        if not self.hidden:
            self.parts.append(data)


def _text(html_text: str) -> str:
    parser = _Text()
    parser.feed(html_text)
    return "".join(parser.parts)


def _hostile_record() -> CandidateRecord:
    path = f"evil/{HOSTILE}.py"
    rec = CandidateRecord(path=path, problem_id=1, problem_name="allreduce", model=f"m{HOSTILE}")
    rec.findings = [Finding("PKB003", "unbounded-spin", "warning", f"spin on {HOSTILE}", path, 3, f"while ({HOSTILE}) {{}}")]
    rec.evaluation = {"status": "ran", "outcome": "wrong_result", "subtype": "scaled", "correct": False, "speedup": None,
                      "reason": f"rank 0: {HOSTILE}", "details": {"errors": f"Traceback: {HOSTILE}"}}
    rec.diagnosis = {"subtype": "scaled", "explanation": {"headline": f"wrong: {HOSTILE}", "evidence": [], "fixes": []}}
    return rec


def test_record_text_comes_out_escaped_on_the_corpus_page_and_a_kernel_page(tmp_path):
    res = corpus_report.build([_hostile_record()], tmp_path, {"input": f"run/{HOSTILE}"})
    pages = {"corpus": Path(res["html"]).read_text(encoding="utf-8"), "kernel": Path(res["pages"][0]).read_text(encoding="utf-8")}
    for name, html_text in pages.items():
        assert "alert(1)</script>" not in html_text, name  # never a live script
        assert html_text.count("<script>") == 1, name  # the page's own
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html_text, name
        shown = _text(html_text)
        assert f"evil/{HOSTILE}.py" in shown and "&lt;" not in shown, name  # escaped once, read back verbatim
        assert not re.search(r"\{[{%#]|[}%#]\}", shown), name  # no template syntax leaks into the page
    assert f"m{HOSTILE}" in _text(pages["corpus"]) and f"wrong: {HOSTILE}" in _text(pages["corpus"])
    for text in (f"spin on {HOSTILE}", f"rank 0: {HOSTILE}", f"Traceback: {HOSTILE}", f"wrong: {HOSTILE}"):
        assert text in _text(pages["kernel"]), text


def test_a_long_error_dump_is_cut_as_text_not_inside_an_escape(tmp_path):
    """The evaluation's error dump shows its first 3000 characters; cut after escaping, a `<`
    near the end showed as `&l` on the page."""
    rec = _hostile_record()
    dump = "x" * 2997 + "<abc>" + "y" * 50
    rec.evaluation["details"]["errors"] = dump
    html_text, _ = kernel_page.render(rec)
    pre = re.search(r"<h3>errors</h3><pre>(.*?)</pre>", html_text, re.S)
    assert pre and _text(pre.group(1)) == dump[:3000]
