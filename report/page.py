"""A report as a list of blocks, written as Markdown (images beside it) and as one self-contained HTML
page (images embedded as base64, styles inline, no network needed to open it).

The page carries a small inline script that marks, once the page has loaded, how many images decoded
(`data-images-loaded`) and how many did not (`data-images-broken`) on <html>, so a headless browser can
check that every image is there, and writes where each element with an id starts and ends on the page
(`data-top-<id>`, `data-bottom-<id>`, CSS pixels from the top of the page), so a test can check that the
verdict and the forest plot are within the first screen.

Headings, paragraphs and list items are Markdown (report.md writes them as they are): the page renders their inline
Markdown (`**bold**`, `code`) with markdown-it (CommonMark, raw HTML off, so `<stamp>` stays text). Wide tables wrap
their headers and cells at spaces (never inside a number) and scroll inside their box, and estimator cards (pre) wrap their lines, so a 1280 px window shows
every column at first view.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from markdown_it import MarkdownIt


@dataclass(frozen=True)
class Block:
    kind: str  # h1, h2, p, table, img, pre, list (items), details (text: the summary line; table folded away)
    text: str = ""
    table: pd.DataFrame | None = None
    image: Path | None = None
    items: tuple[str, ...] = ()
    id: str = ""  # the HTML element's id (the page's script reports where it sits)


def fmt(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _md_cell(value) -> str:
    return fmt(value).replace("|", "\\|").replace("\n", "\\n")


def to_markdown(blocks: list[Block], rel_to: Path) -> str:
    out = []
    for b in blocks:
        if b.kind in ("h1", "h2"):
            out.append(("# " if b.kind == "h1" else "## ") + b.text)
        elif b.kind == "p":
            out.append(b.text)
        elif b.kind == "pre":
            out.append(f"```\n{b.text}\n```")
        elif b.kind == "img":
            out.append(f"![{b.text}]({b.image.relative_to(rel_to).as_posix()})")
        elif b.kind == "list":
            out.append("\n".join(f"- {item}" for item in b.items))
        elif b.kind == "table":
            out.append(md_table(b.table))
        elif b.kind == "details":
            out.append(f"<details><summary>{html.escape(b.text)}</summary>\n\n{md_table(b.table)}\n\n</details>")
    return "\n\n".join(out) + "\n"


def md_table(table: pd.DataFrame) -> str:
    cols = list(table.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


STYLE = ("body{font-family:sans-serif;max-width:1180px;margin:1em auto;padding:0 1em;color:#222}"
         "h1{margin:.2em 0;font-size:1.6em}#verdict{margin:.3em 0 .5em;padding-left:1.2em;line-height:1.35}"
         "#verdict li{margin:.1em 0}figure{margin:.3em 0}details{margin:.5em 0}summary{cursor:pointer}"
         "table{border-collapse:collapse;margin:.5em 0;display:block;max-width:100%;overflow-x:auto;font-size:.82em}"
         "td,th{border:1px solid #ccc;padding:2px 4px;text-align:right}th{max-width:8em;overflow-wrap:break-word}"
         "pre{white-space:pre-wrap;overflow-wrap:anywhere}"
         "th{background:#f3f3f3}td:first-child{text-align:left}img{max-width:100%}pre{background:#f6f6f6;padding:.5em}"
         "code{background:#f3f3f3;padding:0 .2em}")
SCRIPT = ("window.addEventListener('load',function(){var i=[].slice.call(document.images);"
          "var ok=i.filter(function(x){return x.complete&&x.naturalWidth>0}).length;"
          "document.documentElement.setAttribute('data-images-loaded',ok);"
          "document.documentElement.setAttribute('data-images-broken',i.length-ok);"
          "[].slice.call(document.querySelectorAll('[id]')).forEach(function(e){var r=e.getBoundingClientRect();"
          "document.documentElement.setAttribute('data-top-'+e.id,Math.round(r.top+window.scrollY));"
          "document.documentElement.setAttribute('data-bottom-'+e.id,Math.round(r.bottom+window.scrollY));});});")


_MD = MarkdownIt("commonmark", {"html": False})


def inline(text: str) -> str:
    """One line of Markdown as HTML (emphasis, code spans, links), everything else escaped."""
    return _MD.renderInline(text)


def _html_block(b: Block) -> str:
    ident = f' id="{html.escape(b.id)}"' if b.id else ""
    if b.kind in ("h1", "h2", "p"):
        return f"<{b.kind}{ident}>{inline(b.text)}</{b.kind}>"
    if b.kind == "pre":
        return f"<pre{ident}>{html.escape(b.text)}</pre>"
    if b.kind == "list":
        return f"<ul{ident}>" + "".join(f"<li>{inline(item)}</li>" for item in b.items) + "</ul>"
    if b.kind == "img":
        data = base64.b64encode(b.image.read_bytes()).decode("ascii")
        return f'<figure{ident}><img alt="{html.escape(b.text)}" src="data:image/png;base64,{data}"></figure>'
    if b.kind == "details":
        return f"<details{ident}><summary>{html.escape(b.text)}</summary>{_html_table(b.table)}</details>"
    return _html_table(b.table, ident)


def _html_table(table: pd.DataFrame, ident: str = "") -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(v))}</td>" for v in row) + "</tr>"
                   for row in table.itertuples(index=False))
    return f"<table{ident}><tr>{head}</tr>{rows}</table>"


def to_html(blocks: list[Block], title: str) -> str:
    body = "\n".join(_html_block(b) for b in blocks)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style><script>{SCRIPT}</script></head>\n<body>\n{body}\n</body></html>\n")
