"""Reference pages name no path of the machine that made them (the standard: results/ is committed for others to
read and rerun): every text file under results/ is scanned for an absolute home, temp or work folder."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MACHINE_PATH = re.compile(r"(?<![\w.<>-])/(?:work|tmp|root|home|Users|mnt|scratch)/[\w.-]")


def test_no_committed_page_names_a_path_of_the_machine():
    found = []
    for f in sorted((ROOT / "results").rglob("*")):
        if f.is_file() and f.suffix in (".md", ".html", ".csv", ".txt", ".json", ".yaml"):
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                if MACHINE_PATH.search(line):
                    found.append(f"{f.relative_to(ROOT)}:{n}: {line[:120]}")
    assert not found, "\n".join(found[:20])
