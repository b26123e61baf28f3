"""The records a run and a sweep leave, read and checked in one place.

    <run>/run.json              the run's status (rundir.read_status): RUN_STATUS
    <run>/metrics.jsonl         one row per step (rundir.read_jsonl_lines): a row's step is a whole number >= 0
    <sweep>/...                 the sweep folder's records: trainer/run/sweepdir.py, with their writers

A record that is not UTF-8, not JSON, not an object, lacks a field it needs or has a field of the wrong type
is a RecordError: one line naming the file, the field and what to do. A reader that can go on without the
record (a report) says that line in a note; one that cannot (a sweep resuming) stops with it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from gspo.conf.errors import GspoError

NUMBER = (int, float)
RUN_STATUS = {"status": str, "step": int, "pid": int, "host": str, "collapsed": dict, "stopped": str, "past_stops": list,
              "unreadable_steps": list, "wall_s": NUMBER, "started_unix": NUMBER, "versions": dict, "start": dict,
              "dead_s": NUMBER, "dead_attempts": int, "attempt_started_unix": NUMBER, "updated_unix": NUMBER}


class RecordError(GspoError):
    """A run's or a sweep's record that cannot be used: its message names the file and the field, then what to
    do; `what` is the first part alone (for a reader that says its own consequence)."""

    def __init__(self, what: str, fix: str):
        super().__init__(f"{what}; {fix}")
        self.what = what


def record_problem(data, fields: dict, required: tuple[str, ...] = ()) -> str | None:
    """What is wrong with the parsed record `data` (None: nothing): not an object, a required field missing,
    or a field of another type than `fields` gives (a JSON null counts as absent)."""
    if not isinstance(data, dict):
        return f"holds a JSON {_kind(data)}, not an object"
    for name in required:
        if data.get(name) is None:
            return f"has no {name}"
    for name, kind in fields.items():
        value = data.get(name)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool) and bool not in _tuple(kind)):
            return f"{name} is {json.dumps(value)[:40]}, not {_names(kind)}"
    return None


def read_record(path: Path, fields: dict, required: tuple[str, ...], fix: str) -> dict:
    """The JSON object in `path`, checked against `fields`; a RecordError naming the file and field, and `fix`."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecordError(f"{path}: not UTF-8 text (byte {e.start})", fix) from None
    except OSError as e:
        raise RecordError(f"{path}: cannot be read ({e.strerror or e})", fix) from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise RecordError(f"{path}: not whole JSON ({str(e).splitlines()[0]})", fix) from None
    problem = record_problem(data, fields, required)
    if problem is not None:
        raise RecordError(f"{path}: {problem}", fix)
    return data


def metrics_row_problem(row: dict) -> str | None:
    """What makes a metrics row unusable (None: nothing): its step must be a whole number >= 0."""
    step = row.get("step")
    if "step" in row and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        return f"step is {json.dumps(step)[:40]}, not a whole number >= 0"
    return None


def finite_or_none(value):
    """A metric value as a report uses it: a finite number, else None (missing): NaN, Infinity, text, lists."""
    if isinstance(value, bool) or not isinstance(value, NUMBER):
        return None
    return value if math.isfinite(value) else None


def _tuple(kind) -> tuple:
    return kind if isinstance(kind, tuple) else (kind,)


def _names(kind) -> str:
    words = {str: "text", int: "a whole number", float: "a number", dict: "an object", list: "a list"}
    return " or ".join(dict.fromkeys(words[k] for k in _tuple(kind)))


def _kind(data) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}.get(
        type(data), type(data).__name__)
