"""The self-contained report page: inline CSS, sections with headings, tables, figures.

Nothing on the page refers to anything outside it: figures are ``data:image/png;base64``
URIs (or inline SVG), links are in-page anchors only, except with ``--format svg`` /
``pdf``, where each figure links its vector file written beside the page. Every text is
escaped here.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from html import escape
from typing import Any

CSS = """
:root { --fg: #1b1f24; --muted: #59636e; --line: #d0d7de; --bg-alt: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff;
  font: 15px/1.5 -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; }
main { max-width: 1320px; margin: 0 auto; padding: 24px 32px 64px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 40px 0 8px; padding-bottom: 4px;
  border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 24px 0 6px; }
p, li { max-width: 90ch; }
.meta, .caption, .note { color: var(--muted); }
.note { background: var(--bg-alt); border-left: 3px solid var(--line); padding: 8px 12px; }
nav ol { columns: 2; margin: 8px 0 0; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 14px; }
th, td { border: 1px solid var(--line); padding: 3px 10px; text-align: left; }
th { background: var(--bg-alt); }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tbody tr:nth-child(even) td { background: #fbfcfd; }
figure { margin: 12px 0 24px; }
figure img, figure svg { max-width: 100%; height: auto; display: block;
  border: 1px solid var(--line); }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr));
  gap: 0 20px; align-items: start; }
figcaption { color: var(--muted); font-size: 14px; margin-top: 4px; }
code { font-size: 13px; background: var(--bg-alt); padding: 0 3px; }
"""


def _attrs(attrs: dict[str, Any] | None) -> str:
    if not attrs:
        return ""
    return "".join(f' {escape(k)}="{escape(str(v))}"' for k, v in attrs.items() if v is not None)


@dataclass
class Cell:
    """One table cell: the text shown, and optionally the exact value (``data-value``)."""

    text: str
    value: Any = None
    numeric: bool = False


def table(headers: list[str], body: list[list[Any]], row_attrs: list[dict] | None = None) -> str:
    """An HTML table; a :class:`Cell` keeps its exact value in ``data-value``."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    lines = []
    for k, row in enumerate(body):
        cells = []
        for c in row:
            if not isinstance(c, Cell):
                c = Cell("" if c is None else str(c), numeric=isinstance(c, int | float))
            cls = ' class="num"' if c.numeric else ""
            value = f' data-value="{escape(repr(c.value))}"' if c.value is not None else ""
            cells.append(f"<td{cls}{value}>{escape(c.text)}</td>")
        attrs = _attrs(row_attrs[k] if row_attrs else None)
        lines.append(f"<tr{attrs}>{''.join(cells)}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(lines)}</tbody></table>"


def paragraph(text: str, cls: str | None = None) -> str:
    return f"<p{_attrs({'class': cls})}>{escape(text)}</p>"


def note(text: str) -> str:
    return paragraph(text, "note")


def subheading(text: str) -> str:
    return f"<h3>{escape(text)}</h3>"


def figure(
    image: bytes | str, alt: str, caption: str | None = None, link: str | None = None
) -> str:
    """A PNG (bytes) as a data URI, or an SVG document (str) inline. ``link``: the
    figure's vector file beside the page (``--format svg`` / ``pdf``), linked under it."""
    if isinstance(image, bytes):
        data = base64.b64encode(image).decode("ascii")
        body = f'<img alt="{escape(alt)}" src="data:image/png;base64,{data}">'
    else:
        start = image.find("<svg")
        body = image[start:] if start >= 0 else image
    text = escape(caption) if caption else ""
    if link:
        kind = link.rsplit(".", 1)[-1].upper()
        text += f' <a class="vector" href="{escape(link)}">{kind}: {escape(link)}</a>'
    cap = f"<figcaption>{text.strip()}</figcaption>" if text else ""
    return f"<figure>{body}{cap}</figure>"


def grid(fragments: list[str]) -> str:
    """Figures side by side where the page is wide enough."""
    return f'<div class="grid">{"".join(fragments)}</div>'


@dataclass
class Section:
    id: str
    heading: str
    parts: list[str] = field(default_factory=list)  # HTML fragments from the helpers above

    def add(self, fragment: str) -> Section:
        self.parts.append(fragment)
        return self


def page(title: str, meta: str, sections: list[Section]) -> str:
    toc = "".join(f'<li><a href="#{escape(s.id)}">{escape(s.heading)}</a></li>' for s in sections)
    body = "\n".join(
        f'<section id="{escape(s.id)}"><h2>{escape(s.heading)}</h2>\n'
        + "\n".join(s.parts)
        + "</section>"
        for s in sections
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head>\n"
        f"<body><main><h1>{escape(title)}</h1>"
        f'<p class="meta">{escape(meta)}</p>'
        f"<nav><ol>{toc}</ol></nav>\n{body}\n</main></body></html>\n"
    )
