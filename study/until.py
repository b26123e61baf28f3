"""The record of a `gspo compare verdict.until=resolved` experiment: <dir>/sequential.json.

    {"looks": [...],         every look ever made, appended (round, seeds per arm, level, settled, time)
     "rounds", "seeds", "levels", "stop"   the last attempt's outcome (its verdict settings: the plan's, plan.json)
     "page": {"lines", "sequential"}}                 what the report page says of the rounds, for `gspo report <dir>`

The experiment's folder is resolved once (`${now:...}` filled in, a default with a random part, so two started in
the same second never share one) and every round's sweep lives under it as round-<i>. Its design is the plan
registered in <dir>/plan.json (study/plan.py); an older gspo's sequential.json held it as "design" (`legacy_plan`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from gspo.conf.errors import GspoError
from gspo.trainer.run.records import read_record
from gspo.trainer.run.rundir import atomic_write_text
from gspo.trainer.run.sweepdir import damaged_job_records, read_plan
from gspo.vocab.choices import Until

RECORD = "sequential.json"


def read(outer: Path) -> dict | None:
    """<outer>/sequential.json (None: none yet); a damaged one is one line."""
    path = outer / RECORD
    if not path.is_file():
        return None
    return read_record(path, {"design": dict, "looks": list, "rounds": list}, (),
                       "it records the experiment's design and looks: restore it, or start another hydra.sweep.dir=")


def legacy_plan(outer: Path) -> dict | None:
    """The plan an experiment of an older gspo (no plan.json) was run with, from its sequential.json design (one
    written before the key was named verdict.primary read as today's)."""
    design = (read(outer) or {}).get("design")
    if design is None:
        return None
    design = {("verdict.primary" if k == "verdict.metric" else k): v for k, v in design.items()}
    rounds = design.get("rounds") or [[]]
    return {"gspo": "before plan.json", "arms": design.get("config") or {}, "seeds": [str(s) for s in rounds[0]],
            "primary": design.get("verdict.primary"), "effect": design.get("verdict.effect"), "launcher": [],
            "stop": {"until": Until.RESOLVED, **{k: design.get(k) for k in ("verdict.max_seeds", "verdict.round_seeds",
                                                                          "verdict.spending")}},
            "rounds": rounds, "ended": None}


def add_look(outer: Path, entry: dict) -> None:
    """Append one look to <outer>/sequential.json; never overwrites an earlier look."""
    record = read(outer) or {}
    record["looks"] = [*record.get("looks", []), {**entry, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}]
    atomic_write_text(outer / RECORD, json.dumps(record, indent=1) + "\n")


def finish(outer: Path, outcome: dict) -> None:
    """The attempt's outcome (rounds, seeds, levels, stop, verdict, page) into the record, its looks kept."""
    record = read(outer) or {}
    atomic_write_text(outer / RECORD, json.dumps(record | outcome, indent=1) + "\n")


def check_round_records(sweep_dir: Path) -> None:
    """Every job record of a round is whole: a damaged one (torn by a kill) would drop its seed from the look, and
    the look would read the arms as unpaired. One line naming the file."""
    damaged = damaged_job_records(sweep_dir)
    if damaged:
        raise GspoError(f"{damaged[0].what}: the look would leave its seed out; rerun the same command (a finished "
                        "job's record is written again)")


def page(outer: Path) -> tuple[list[Path], list[str], dict[str, float] | None, str | None]:
    """For `gspo report <until folder>`: (its round folders, the page's lines on the rounds, metric -> the last
    look's level, the primary score the rounds answered: None for held-out accuracy), as the experiment's last
    attempt wrote them."""
    record = read(outer)
    said = (record or {}).get("page")
    if not isinstance(said, dict):
        raise GspoError(f"{outer / RECORD} holds no page (an experiment not finished, or an older gspo's): run its "
                        f"gspo compare again with hydra.sweep.dir={outer} (finished runs are skipped) to write it")
    dirs = [outer / f"round-{i}" for i in range(1, len(record.get("rounds") or []) + 1)]
    registered = read_plan(outer) or legacy_plan(outer) or {}
    return dirs, list(said.get("lines") or []), said.get("sequential"), registered.get("primary")
