"""Plain data for the HTML pages: inline PNG plots and number formatting.

The markup is in reports/templates/ (page.html.j2 the shell with page.css and page.js inline,
macros.html.j2 the shared pieces); Python hands the templates plain values and autoescape
escapes them. Pages are self-contained: CSS and script inline, plots as base64 PNG data URIs,
no external asset and no network.
"""

from __future__ import annotations

import base64
import io
from typing import Any, NamedTuple


class Plot(NamedTuple):
    """An inline PNG image: its alt text and its data: URI (macros.html.j2 `plot` draws it)."""

    alt: str
    src: str


def fig_to_img(fig: Any, alt: str) -> Plot:
    """A matplotlib figure as an inline PNG (base64); the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return png_to_img(buf.getvalue(), alt)


def png_to_img(data: bytes, alt: str) -> Plot:
    return Plot(alt, "data:image/png;base64," + base64.b64encode(data).decode("ascii"))


def fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if v != v:
            return ""
        return f"{v:.{digits}g}"
    return str(v)


def pct(v: float | None) -> str:
    return "" if v is None or v != v else f"{100 * v:.0f}%"


def matplotlib_agg() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt
