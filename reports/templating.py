"""HTML from jinja2 templates (reports/templates/), escaped by default, and Markdown (the rules'
documentation) rendered by markdown-it-py rather than pasted as text.

Python hands the templates plain data (dicts, lists, strings, numbers); autoescape escapes every
value. The one input marked safe is markdown-it-py's output (`markdown`, `markdown_inline`).

Raw HTML inside Markdown is not passed through (`html: False`): a rule's example such as
`template <typename T>` shows as text, never as a tag.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from reports.report_parts import OUTCOME_PALETTE


@lru_cache(maxsize=1)
def _markdown():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False})


# Rule documentation is the Markdown here: a few dozen texts, repeated on every page whose
# candidate has the rule's finding, so each is rendered once per process.
@lru_cache(maxsize=512)
def markdown(text: str) -> Markup:
    """Markdown as HTML (block level: headings, fenced code, lists)."""
    return Markup(_markdown().render(text or ""))


@lru_cache(maxsize=512)
def markdown_inline(text: str) -> Markup:
    """Markdown of one paragraph as inline HTML (`code`, *emphasis*), for table cells."""
    return Markup(_markdown().renderInline(text or ""))


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=PackageLoader("reports", "templates"), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["markdown"] = markdown
    env.filters["markdown_inline"] = markdown_inline
    env.globals["outcome_palette"] = OUTCOME_PALETTE  # page.html.j2's badge colours
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)


def macro(template: str, name: str) -> Any:
    """A template's macro as a function of plain data that returns its HTML (a page's section
    rendered alone, as the pages' own templates render it)."""
    return getattr(environment().get_template(template).module, name)
