"""Pieces shared by the HTML pages: escaping, tables, inline PNG plots, the page shell.

Pages are self-contained: CSS and script inline, plots as base64 PNG data URIs, no external
asset and no network. The script records on <body> how many images decoded
(`data-imgs-loaded`, `data-imgs-total`), so a headless browser can check the plots load.
"""

from __future__ import annotations

import base64
import html
import io
from typing import Any, Iterable

CSS = """
:root { --fg:#1d232a; --muted:#5b6470; --line:#d9dee4; --bg:#ffffff; --band:#f5f7f9; --accent:#2b5d9b; }
* { box-sizing: border-box; }
body { font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "DejaVu Sans", Arial, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; }
main { max-width: 1240px; margin: 0 auto; padding: 18px 28px 60px; }
h1 { font-size: 24px; margin: 8px 0 4px; } h2 { font-size: 19px; margin: 30px 0 8px; border-bottom: 2px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
p.sub, .muted { color: var(--muted); }
nav.toc { font-size: 13px; margin: 8px 0 14px; } nav.toc a { margin-right: 12px; }
a { color: var(--accent); text-decoration: none; } a:hover { text-decoration: underline; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; display: block; overflow-x: auto; max-width: 100%; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: var(--band); font-weight: 600; } tr:nth-child(even) td { background: #fafbfc; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12px; }
code { background: var(--band); padding: 1px 4px; border-radius: 3px; }
pre { background: var(--band); padding: 8px 10px; overflow-x: auto; border-radius: 4px; }
.badge { display: inline-block; padding: 1px 7px; border-radius: 10px; font-size: 12px; font-weight: 600; color: #fff; background: #7a8591; }
.sev-error { color: #b03a2e; font-weight: 600; } .sev-warning { color: #b9770e; } .sev-info { color: var(--muted); }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(270px, 1fr)); gap: 12px; margin: 10px 0; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; background: var(--band); }
.card h3 { margin: 0 0 6px; font-size: 14px; } .card ul { margin: 0; padding-left: 18px; }
.notice { border-left: 4px solid #c17d11; background: #fdf6e8; padding: 8px 12px; margin: 10px 0; }
.explain { border-left: 4px solid var(--accent); background: #eef3fa; padding: 8px 14px; margin: 10px 0; }
img.plot { max-width: 100%; border: 1px solid var(--line); border-radius: 4px; margin: 6px 0; display: block; }
details.rule-doc { margin: 6px 0; } details.rule-doc .doc { padding: 2px 14px; border-left: 3px solid var(--line); }
tr.cited td:first-child { border-left: 3px solid var(--accent); }
input.filter { padding: 4px 8px; width: 320px; margin: 4px 0; border: 1px solid var(--line); border-radius: 4px; }
"""

SCRIPT = """
function pkbCountImages() {
  var imgs = document.images, n = 0;
  for (var i = 0; i < imgs.length; i++) { if (imgs[i].complete && imgs[i].naturalWidth > 0) n++; }
  document.body.dataset.imgsLoaded = String(n);
  document.body.dataset.imgsTotal = String(imgs.length);
}
window.addEventListener('load', pkbCountImages);
function pkbFilter(input, tableId) {
  var q = input.value.toLowerCase(), rows = document.getElementById(tableId).tBodies[0].rows;
  for (var i = 0; i < rows.length; i++) { rows[i].style.display = rows[i].textContent.toLowerCase().indexOf(q) >= 0 ? '' : 'none'; }
}
"""


def _with_report_parts() -> None:
    """Outcome badge colours (colour-blind safe) and the sortable table's CSS and script."""
    global CSS, SCRIPT
    from reports.report_parts import SORT_CSS, SORT_SCRIPT, badge_css

    CSS += badge_css() + "\n" + SORT_CSS
    SCRIPT += SORT_SCRIPT


_with_report_parts()


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def badge(outcome: str) -> str:
    word = outcome or "not evaluated"
    return f'<span class="badge o-{esc(outcome or "none")}">{esc(word)}</span>'


def table(headers: list[str], rows: Iterable[list[Any]], *, raw: set[int] | None = None, num: set[int] | None = None, id: str = "") -> str:
    """An HTML table; cells are escaped unless their column is in `raw` (already HTML)."""
    raw, num = raw or set(), num or set()
    head = "".join(f'<th class="num">{esc(h)}</th>' if i in num else f"<th>{esc(h)}</th>" for i, h in enumerate(headers))
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            content = v if i in raw else esc(v)
            cells.append(f'<td class="num">{content}</td>' if i in num else f"<td>{content}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    ident = f' id="{esc(id)}"' if id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def fig_to_img(fig: Any, alt: str) -> str:
    """A matplotlib figure as an inline <img> (PNG, base64); the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return png_to_img(buf.getvalue(), alt)


def png_to_img(data: bytes, alt: str) -> str:
    b64 = base64.b64encode(data).decode("ascii")
    return f'<img class="plot" alt="{esc(alt)}" src="data:image/png;base64,{b64}">'


def page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{esc(title)}</title>"
        f"<style>{CSS}</style><script>{SCRIPT}</script></head>"
        f"<body><main>{body}</main></body></html>\n"
    )


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
