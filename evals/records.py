"""Reading datasets: local JSON/JSONL records with their row numbers, rows of a Hugging Face hub dataset
(each failure one GspoError line), and the cell helpers loaders share. Used by the benchmarks
(gspo.evals.benchmarks) and the training tasks (gspo.trainer.tasks.registry) alike."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gspo.conf.errors import GspoError


def read_records(path: str | Path) -> list[tuple[int, dict]]:
    """(row number, record) from a .jsonl file (one object a line) or a .json list of objects."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise GspoError(f"file not found: {p}" if not p.exists() else f"not a file: {p}")
    try:
        text = p.read_text(encoding="utf-8-sig")  # a byte-order mark (Windows editors, Excel) is not data
    except UnicodeDecodeError as e:
        raise GspoError(f"{p}: not UTF-8 text (byte {e.start}); convert it, e.g. iconv -f latin1 -t utf-8") from None
    if p.suffix == ".json" or text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise GspoError(f"{p}: not valid JSON ({e.msg} at line {e.lineno})") from None
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            data = data["data"]
        if not isinstance(data, list):
            raise GspoError(f"{p}: expected a JSON list of records")
        rows = list(enumerate(data, start=1))
    else:
        rows = []
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append((i, json.loads(line)))
            except json.JSONDecodeError as e:
                raise GspoError(f"{p}: row {i} is not valid JSON ({e.msg}){_csv_hint(p, line)}") from None
    for i, rec in rows:
        if not isinstance(rec, dict):
            raise GspoError(f"{p}: row {i} is not a JSON object")
    return rows


def _csv_hint(path: Path, line: str) -> str:
    """A hint when the file is plainly CSV or TSV rather than JSON lines."""
    if path.suffix.lower() in (".csv", ".tsv") or (not line.lstrip().startswith(("{", "[")) and ("," in line or "\t" in line)):
        return ("; it looks like CSV/TSV: convert it to JSON lines, one object a row, e.g. "
                "python -c \"import pandas as pd; pd.read_csv('F.csv').to_json('F.jsonl', orient='records', lines=True)\"")
    return ""


def load_hub_rows(
    hub_id: str,
    *,
    split: str = "train",
    subsets: Iterable[str | None] = (None,),
    data_files: list[str] | None = None,
) -> list[dict]:
    """All rows of a hub dataset split (concatenated over subsets), or of JSON files in a hub dataset
    repo (data_files, for repos whose loading script `datasets` no longer runs). Any failure is one
    GspoError line."""
    try:
        import datasets

        if data_files is not None:
            urls = [f"hf://datasets/{hub_id}/{name}" for name in data_files]
            return list(datasets.load_dataset("json", data_files=urls, split="train"))
        rows: list[dict] = []
        for subset in subsets:
            rows.extend(datasets.load_dataset(hub_id, subset, split=split))
        return rows
    except Exception as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise GspoError(
            f"cannot load {hub_id!r} from the Hugging Face hub ({type(e).__name__}: {reason}); "
            "check the network or use a local file instead"
        ) from None


def pick_key(record: dict, wanted: str | None, candidates: tuple[str, ...]) -> str | None:
    """The column to read: the one asked for, else the first candidate present."""
    if wanted is not None:
        return wanted if wanted in record else None
    return next((c for c in candidates if c in record), None)


def is_missing(value: Any) -> bool:
    """None, NaN or a blank string: a cell a loader cannot use."""
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and not value.strip()
