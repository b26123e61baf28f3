"""One source for every figure the docs quote from a reference page (issue 60): a paragraph of README.md or docs/*.md
that links one committed page under results/ (its time page aside) quotes only figures that page holds (its
README, report and raw files), and a date it says the page was regenerated on is the page's own. docs/claims.md
once quoted the family page of 2026-11-27 (GSPO third of seven) after README and the page moved to 2026-11-28."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT = ("*.md", "*.txt", "*.json", "*.csv")
FIGURE = re.compile(r"(?<![\w.])[-+]?\d*\.\d{2,}(?!\w|\.\d)")  # 0.704, -0.131, 0.00055: not 1e-4, not 2026-11-28


def _page_text(page: str) -> str:
    folder = ROOT / "results" / page
    return " ".join(f.read_text(errors="replace") for pattern in TEXT for f in folder.glob(pattern))


def _holds(text: str, figure: str) -> bool:
    """Whether `text` has a number that `figure` quotes: as written, or rounded to its decimals (0.698 for 0.69812)."""
    figure = figure.lstrip("+-")
    decimals = len(figure.split(".")[1])
    return any(f"{abs(float(n)):.{decimals}f}" == figure for n in re.findall(r"\d*\.\d+", text))


def unsourced(text: str) -> list[tuple[str, list[str]]]:
    """(page, [figures and dates its paragraph quotes that the page does not hold]) for each paragraph of `text`
    that links one page."""
    found = []
    for para in text.split("\n\n"):
        pages = {p for p in re.findall(r"results/([\w.-]+)/", para) if (ROOT / "results" / p).is_dir()}
        pages = pages - {"time-to-answer"} if len(pages) > 1 else pages
        if len(pages) != 1:
            continue
        page = pages.pop()
        held = _page_text(page)
        quoted = [f for f in FIGURE.findall(para) if not _holds(held, f)]
        quoted += [d for d in re.findall(r"regenerated\s+(\d{4}-\d\d-\d\d)", para) if d not in held]
        if quoted:
            found.append((page, quoted))
    return found


def test_every_figure_the_docs_quote_from_a_page_is_on_that_page():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = {d.name: u for d in docs if (u := unsourced(d.read_text()))}
    assert not bad, bad


def test_the_check_finds_a_stale_quote():
    stale = ("The family ([results/family](../results/family/README.md), regenerated 2026-11-27): DAPO 0.721, "
             "GSPO 0.6981.\n\nDAPO 0.704 ([results/family](../results/family/README.md)).")
    assert unsourced(stale) == [("family", ["0.721", "0.6981", "2026-11-27"])]
