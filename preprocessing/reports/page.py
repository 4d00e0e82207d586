"""A self-contained HTML page: headings, tables and matplotlib figures inlined as PNG, no
network access. Values are HTML-escaped; figures are drawn by matplotlib (Agg), never by
hand."""
from __future__ import annotations

import base64
import html
import io
from typing import Iterable, Optional, Sequence

from preprocessing.reference.evaluation import figure_text

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;
max-width:60rem;padding:0.8rem;color:#1b1f24;line-height:1.4}
h1{font-size:1.35rem}h2{font-size:1.1rem;margin-top:1.6rem;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;margin:0.4rem 0;display:block;overflow-x:auto;max-width:100%}
td,th{border:1px solid #d0d7de;padding:0.2rem 0.5rem;text-align:left;white-space:nowrap}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.bad{color:#b42318;font-weight:600}.ok{color:#067647;font-weight:600}
.note{color:#57606a;font-size:0.9rem}img{max-width:100%;height:auto}
"""


class Page:
    def __init__(self, title: str):
        self.title = title
        self.parts = [f"<h1>{html.escape(title)}</h1>"]

    def heading(self, text: str) -> "Page":
        self.parts.append(f"<h2>{html.escape(text)}</h2>")
        return self

    def text(self, text: str, css: Optional[str] = None) -> "Page":
        cls = f' class="{css}"' if css else ""
        self.parts.append(f"<p{cls}>{html.escape(text)}</p>")
        return self

    def table(self, rows: Iterable[Sequence], header: Optional[Sequence[str]] = None,
              css: Optional[Sequence[Optional[str]]] = None) -> "Page":
        """`rows` of cells (numbers right-aligned); `css`: a class per row (or None)."""
        out = ["<table>"]
        if header:
            out.append("<tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
                       + "</tr>")
        for i, row in enumerate(rows):
            cls = f' class="{css[i]}"' if css and css[i] else ""
            cells = "".join(
                f'<td class="n">{figure_text(c)}</td>' if isinstance(c, (int, float))
                and not isinstance(c, bool) else f"<td>{html.escape(figure_text(c))}</td>"
                for c in row)
            out.append(f"<tr{cls}>{cells}</tr>")
        out.append("</table>")
        self.parts.append("".join(out))
        return self

    def figure(self, fig, alt: str) -> "Page":
        """A matplotlib figure as an inline PNG (closed afterwards)."""
        import matplotlib.pyplot as plt
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        data = base64.b64encode(buf.getvalue()).decode("ascii")
        self.parts.append(f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">')
        return self

    def html(self) -> str:
        return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
                "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
                f"<title>{html.escape(self.title)}</title><style>{CSS}</style></head><body>"
                + "\n".join(self.parts) + "</body></html>")


def bar_chart(labels: Sequence[str], values: Sequence[float], title: str,
              threshold: Optional[float] = None, flagged: Sequence[bool] = ()):
    """A horizontal bar chart (a matplotlib figure); bars past `threshold` or `flagged` red."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 0.3 * len(labels) + 1.0))
    flags = list(flagged) or [threshold is not None and v > threshold for v in values]
    ax.barh(list(labels)[::-1], list(values)[::-1],
            color=["#b42318" if f else "#4472c4" for f in flags][::-1])
    if threshold is not None:
        ax.axvline(threshold, color="#b42318", linestyle="--", linewidth=1)
    ax.set_title(title, fontsize=10)
    ax.tick_params(labelsize=8)
    return fig


MAX_BARS = 40  # slices drawn; the tables list them all


def slice_sections(page: Page, by_slice: dict, figure: str, overall) -> None:
    """Per sliced column: each slice's rows and `figure` (slices under the minimum count
    marked `small`, not hidden), and its bars beside the overall figure."""
    for column, slices in by_slice.items():
        page.heading(f"Metrics by slice: {column}")
        rows = [(k, m.get("examples"), m.get(figure), "small" if m.get("small") else "")
                for k, m in slices.items()]
        page.table(rows, ["slice", "rows", figure, ""])
        shown = [r for r in rows if r[2] is not None][:MAX_BARS]
        if shown:
            title = f"{figure} by {column}" + (f" (overall {overall:.4g})"
                                               if overall is not None else "")
            page.figure(bar_chart([r[0] for r in shown], [r[2] for r in shown], title,
                                  flagged=[False] * len(shown)), f"{figure} by {column}")
