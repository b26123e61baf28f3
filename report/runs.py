"""Read run directories for a report: offline, from the files a run leaves, whatever its state.

A path may be a run directory (it has config.yaml) or a sweep directory (it lists its runs in
runs/<job>.json, written by each job as it starts and again as it ends). A run still going, failed or killed is read as it
is: its metrics up to the last whole row and its status as run.json says, except that a run whose
run.json says "running" on this host while no process has its pid (SIGKILLed) reads as "dead", and an
unreadable run.json as "unreadable".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gspo.conf.errors import GspoError
from gspo.conf.schema import Config
from gspo.trainer.run.records import finite_or_none
from gspo.trainer.run.rundir import read_jsonl_lines, read_status
from gspo.trainer.run.sweepdir import SWEEP_RUNS, is_sweep, sweep_notes, sweep_runs

_STEP = re.compile(r'\{"step": (\d+)')  # how every metrics row begins (Loggers.metrics)


@dataclass
class Run:
    path: Path
    config: dict  # flattened resolved config: {"algo.name": "gspo", "seed": 0, ...}
    status: dict  # run.json
    metrics: pd.DataFrame  # one row per step, indexed by position, column "step" included
    torn_lines: int  # lines of metrics.jsonl that are not whole JSON rows (a run killed mid-write)
    torn_steps: tuple[int, ...] = ()  # the steps those lines begin to name, where they name one
    final_steps: dict[str, int] = field(default_factory=dict)  # each metric's last step that logged it (even as null)
    not_numbers: int = 0  # logged values that are no finite number (NaN, Infinity, text): read as missing
    duplicate_steps: tuple[int, ...] = ()  # steps metrics.jsonl logs more than once: the last row of each is read
    recorded: pd.DataFrame | None = None  # the metrics as recorded, where load.py blanked the times of a loaded run

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def last_step(self) -> int:
        return int(self.metrics["step"].max()) if len(self.metrics) else 0


def flatten(node, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists become their string form so they compare and print."""
    out = {}
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= flatten(value, f"{name}.")
        else:
            out[name] = str(value) if isinstance(value, list) else value
    return out


def _metrics(path: Path) -> tuple[pd.DataFrame, list[str], dict[str, int], int]:
    """(one row per step, the unreadable lines, each metric's last logged step, the values read as missing):
    a value that is no finite number (NaN, Infinity, text) is missing, never a number the tables would use."""
    rows, bad = read_jsonl_lines(path)
    final_steps: dict[str, int] = {}
    clean, not_numbers = [], 0
    for row in rows:
        kept = {k: v if k == "step" else finite_or_none(v) for k, v in row.items()}
        not_numbers += sum(v is not None and kept[k] is None for k, v in row.items())
        clean.append(kept)
        step = row.get("step")
        if isinstance(step, int | float) and not isinstance(step, bool):  # the latest step, not the last line: a
            final_steps |= {k: step for k in row if k != "step" and step >= final_steps.get(k, step)}  # copied row
    frame = pd.DataFrame(clean)
    if "step" not in frame:
        frame["step"] = pd.Series(dtype=int)
    return frame.sort_values("step", kind="stable").reset_index(drop=True), bad, final_steps, not_numbers


def _one_row_per_step(frame: pd.DataFrame) -> tuple[pd.DataFrame, tuple[int, ...]]:
    """(the rows, in step order, the last one written of each step; the steps logged more than once): a step
    appears twice only when the log was copied or edited by hand (a resume cuts its logs back first)."""
    twice = frame["step"].duplicated(keep="last")
    steps = tuple(sorted({int(s) for s in frame.loc[twice, "step"]}))
    return frame.loc[~twice].reset_index(drop=True), steps


def run_config_of(config: Path) -> dict:
    """The run's config.yaml over today's schema defaults (as a resume reads it), flattened: a run written
    before a key existed has the key's default, so it groups with the runs that have it."""
    try:
        saved = OmegaConf.to_container(OmegaConf.load(config), resolve=True)
    except (OmegaConfBaseException, ValueError, OSError, yaml.YAMLError) as e:
        raise GspoError(f"cannot read {config}: {str(e).splitlines()[0]}") from None
    if not isinstance(saved, dict):
        raise GspoError(f"cannot read {config}: it holds no settings (not a YAML mapping)")
    defaults = flatten(OmegaConf.to_container(OmegaConf.structured(Config), resolve=False))
    return {k: v for k, v in defaults.items() if v != "???"} | flatten(saved)


def load_run(path: Path) -> Run:
    config = path / "config.yaml"
    if not config.is_file():
        raise GspoError(f"not a run or sweep directory (no config.yaml, no {SWEEP_RUNS}/): {path}")
    status = read_status(path)  # an unreadable run.json reads as status "unreadable"; a vanished writer as "dead"
    metrics, bad, final_steps, not_numbers = _metrics(path / "metrics.jsonl")
    metrics, twice = _one_row_per_step(metrics)
    torn_steps = tuple(int(m.group(1)) for line in bad if (m := _STEP.match(line)))
    settings = run_config_of(config)
    if label := start_label(status.get("start")):
        settings[START_KEY] = label  # not a setting but part of the experiment: runs pool only with one start
    return Run(path, settings, status, metrics, len(bad), torn_steps, final_steps, not_numbers, twice)


START_KEY = "model.start"


def start_label(start) -> str | None:
    """run.json's `start` in words that differ exactly when the weights do: the embedded model's cold start by
    source, key and weights hash; another model by name and revision (None: not recorded, a run of an older gspo)."""
    if not isinstance(start, dict):
        return None
    if start.get("weights_sha256"):
        return f"{start.get('source')} cold start {start.get('key')} (weights sha256 {str(start['weights_sha256'])[:12]})"
    return f"{start.get('name')} at revision {start.get('revision') or 'unrecorded'}"


def unread_steps(run: Run) -> list[int]:
    """Steps up to the run's last logged one that have no readable metrics row (a torn or damaged line),
    with those a resume could not rebuild (run.json unreadable_steps)."""
    have = set(run.metrics["step"].dropna().astype(int)) if len(run.metrics) else set()
    gaps = [s for s in range(run.last_step + 1) if s not in have] if have else []
    return sorted(set(gaps) | set(run.torn_steps) - have | set(run.status.get("unreadable_steps") or []))


def load_runs(paths: list[str | Path]) -> tuple[list[Run], list[str]]:
    """Every run under `paths` (runs or sweeps), each once, and notes on what was skipped. A path that is
    neither a run nor a sweep is an error; a sweep job that never started its run is skipped and noted."""
    if not paths:
        raise GspoError("no runs given: pass run directories or sweep directories (results/sweeps/<stamp>)")
    found: list[tuple[Path, bool]] = []
    sweep_said: list[str] = []
    for p in map(Path, paths):
        if not p.exists():
            raise GspoError(f"no such run or sweep directory: {p}")
        if is_sweep(p):
            found.extend((r, True) for r in sweep_runs(p))
            sweep_said.extend(sweep_notes(p))
        else:
            found.append((p, False))
    runs, notes, seen = [], [], set()
    for p, from_sweep in found:
        if p.resolve() in seen:
            continue
        seen.add(p.resolve())
        if from_sweep and not (p / "config.yaml").is_file():
            notes.append(f"{p}: listed by its sweep but has no config.yaml (the job failed before it started)")
            continue
        runs.append(load_run(p))
    if not runs:
        raise GspoError(f"no runs found in {', '.join(map(str, paths))}" + (f" ({sweep_said[0]})" if sweep_said else ""))
    return runs, sweep_said + notes
