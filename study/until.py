"""The record of a `gspo compare verdict.until=resolved` experiment: <dir>/sequential.json.

    {"design": {...},        arms, each arm's composed config, rounds, max_seeds, round_seeds, spending, effect,
                             metric: recorded at the first look, checked on every later attempt (a change is
                             refused in one line: the looks' boundaries were planned for that design)
     "looks": [...],         every look ever made, appended (round, seeds per arm, level, settled, time)
     "rounds", "seeds", "levels", "stop", "verdict"   the last attempt's outcome (as before)
     "page": {"lines", "sequential"}}                 what the report page says of the rounds, for `gspo report <dir>`

The experiment's folder is resolved once (`${now:...}` filled in, a default with a random part, so two started in
the same second never share one) and every round's sweep lives under it as round-<i>.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from omegaconf import OmegaConf

from gspo.conf.compose import compose_config
from gspo.conf.errors import GspoError
from gspo.conf.overrides import first_job, planned_jobs
from gspo.conf.resume import trajectory_neutral
from gspo.conf.schema import VerdictConfig
from gspo.trainer.run.records import read_record
from gspo.trainer.run.rundir import atomic_write_text
from gspo.trainer.run.sweepdir import damaged_job_records

RECORD = "sequential.json"
DESIGN_VERDICT = ("max_seeds", "round_seeds", "spending", "effect", "primary")  # not max_minutes: a budget, not a plan
_RUN_KEYS = ("seed", "run_id", "output_dir", "resume")  # each run's own, not the arm's


def design_of(preset: str, params: dict[str, str], base: list[str], verdict: VerdictConfig,
              rounds: list[list[int]]) -> dict:
    """The experiment's design: its arms (the preset's jobs without their seed), each arm's composed config
    (what it trains: trajectory-neutral keys and the run's own left out), the seeds of each round and the
    verdict settings the looks are planned with."""
    jobs = planned_jobs([*base, f"seed={rounds[0][0]}"], params) or []
    arms = sorted({" ".join(t for t in job.split() if not t.startswith("seed=")) for job in jobs})
    config = {}
    for arm in arms:
        cfg = compose_config(first_job([f"+sweep={preset}", *base, *arm.split(), f"seed={rounds[0][0]}"]))
        config[arm] = {k: v for k, v in _flat(OmegaConf.to_container(cfg, resolve=True)).items()
                       if k not in _RUN_KEYS and not trajectory_neutral(k)}
    return json.loads(json.dumps({"arms": arms, "config": config, "rounds": rounds,
                                  **{f"verdict.{k}": getattr(verdict, k) for k in DESIGN_VERDICT}}))


def _flat(node, prefix: str = "") -> dict:
    if isinstance(node, dict) and node:
        return {k: v for key, value in node.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: node}


def read(outer: Path) -> dict | None:
    """<outer>/sequential.json (None: none yet); a damaged one is one line."""
    path = outer / RECORD
    if not path.is_file():
        return None
    return read_record(path, {"design": dict, "looks": list, "rounds": list}, (),
                       "it records the experiment's design and looks: restore it, or start another hydra.sweep.dir=")


def check_design(outer: Path, design: dict) -> None:
    """Refuse, in one line, a command whose design differs from the one recorded at the experiment's first look."""
    was = _design(read(outer))
    if was is None or was == design:
        return
    said = _difference(was, design)
    raise GspoError(f"{outer} is an until=resolved experiment whose design was fixed at its first look; this command "
                    f"changes it ({said}): its looks' boundaries were planned for that design, so rerun it as it was, "
                    "or start another hydra.sweep.dir=")


def _design(record: dict | None) -> dict | None:
    """The record's design, a record written before the key was named verdict.primary read as today's."""
    design = (record or {}).get("design")
    if design is None:
        return None
    return {("verdict.primary" if k == "verdict.metric" else k): v for k, v in design.items()}


def _difference(was: dict, now: dict) -> str:
    """The first difference of two designs, in words: the arms, a verdict setting, an arm's config, the rounds."""
    if was.get("arms") != now.get("arms"):
        return f"arms {', '.join(was.get('arms') or [])} -> {', '.join(now.get('arms') or [])}"
    for key in sorted(k for k in was.keys() | now.keys() if k.startswith("verdict.")):
        if was.get(key) != now.get(key):
            return f"{key}={json.dumps(was.get(key))} -> {json.dumps(now.get(key))}"
    for arm, config in (was.get("config") or {}).items():
        other = (now.get("config") or {}).get(arm, {})
        for key in sorted(config.keys() | other.keys()):
            if config.get(key) != other.get(key):
                return f"{key}={config.get(key)} -> {other.get(key)}" + (f" in arm {arm}" if arm else "")
    return f"rounds {json.dumps(was.get('rounds'))} -> {json.dumps(now.get('rounds'))}"


def add_look(outer: Path, design: dict, entry: dict) -> None:
    """Append one look to <outer>/sequential.json (written with the design at the first look); never overwrites
    an earlier look."""
    record = read(outer) or {}
    record.setdefault("design", design)
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
    return dirs, list(said.get("lines") or []), said.get("sequential"), (_design(record) or {}).get("verdict.primary")
