"""HTML from jinja2 templates (reports/templates/), escaped by default, and Markdown (the rules'
documentation) rendered by markdown-it-py rather than pasted as text.

Raw HTML inside Markdown is not passed through (`html: False`): a rule's example such as
`template <typename T>` shows as text, never as a tag.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup


@lru_cache(maxsize=1)
def _markdown():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False})


def markdown(text: str) -> Markup:
    """Markdown as HTML (block level: headings, fenced code, lists)."""
    return Markup(_markdown().render(text or ""))


def markdown_inline(text: str) -> Markup:
    """Markdown of one paragraph as inline HTML (`code`, *emphasis*), for table cells."""
    return Markup(_markdown().renderInline(text or ""))


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=PackageLoader("reports", "templates"), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["markdown"] = markdown
    env.filters["markdown_inline"] = markdown_inline
    return env


def render(template: str, **context: Any) -> str:
    return environment().get_template(template).render(**context)
