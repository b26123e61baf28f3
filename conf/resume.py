"""Resume = the run's own config: `resume=true run_id=X` (or `resume=<run dir>`) loads X/config.yaml.

A bare resume command therefore continues the run as it was configured. Overrides on the resume command
may only extend the run (more steps, evals, checkpoint cadence, logging): train.steps may grow, never
shrink, and grows only under a constant lr schedule (linear and cosine decay over the run's first
train.steps, so a longer horizon would change the remaining learning rates); an override that would change
what is trained (model, task, algorithm, batch shape, learning rate, seed, ...) is refused with one line
naming the key, unless it repeats the run's own value.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gspo.conf.errors import GspoError
from gspo.conf.schema import Config
from gspo.vocab.choices import LrSchedule

# Keys (or whole groups) a resume command may change: none of them changes the trajectory of the run.
EXTENDS = ("train.steps", "train.eval_every", "train.eval_greedy", "train.final_eval_k", "train.save_every",
           "train.keep_checkpoints", "train.past_stop", "eval", "logger", "resume", "run_id", "output_dir")
# What `gspo eval eval.run=<dir>` may set over the run's own config: how to evaluate, not what was trained.
EVAL_SETS = ("eval", "rollout", "logger", "seed", "device")
_FALSE = ("false", "no", "0", "off")
_TRUE = ("true", "yes", "1", "on")


def expand_resume_dir(overrides: list[str]) -> list[str]:
    """`resume=<run dir>` becomes `resume=true run_id=<name> output_dir=<parent>`."""
    values = [o.partition("=")[2] for o in overrides if o.startswith("resume=")]
    if not values or values[-1].lower() in _TRUE + _FALSE:
        return overrides
    if any(o.startswith(("run_id=", "output_dir=")) for o in overrides):
        raise GspoError("resume=<run dir> names the run already: drop run_id= and output_dir=")
    run = Path(values[-1]).expanduser()
    if run.name in ("", "..") or values[-1].rstrip("/").endswith("/."):  # resume=. or resume=..: the folder named
        run = Path(os.path.abspath(run))
    rest = [o for o in overrides if not o.startswith("resume=")]
    return [*rest, "resume=true", f"run_id={run.name}", f"output_dir={run.parent}"]


def resume_config(composed: DictConfig, overrides: list[str]) -> DictConfig:
    """The saved config of the run `composed` points at, with the allowed overrides of `overrides` applied."""
    if not composed.run_id:
        raise GspoError("resume=true needs the run: run_id=<id> (under output_dir) or resume=<run dir>")
    path = Path(composed.output_dir) / composed.run_id
    saved = saved_config(path, "resume=true")
    original = saved.copy()
    for key in _override_keys(overrides):
        new, old = OmegaConf.select(composed, key), OmegaConf.select(saved, key)
        if _extends(key):
            if key == "train.steps":
                _check_steps(saved, new, path)
            OmegaConf.update(saved, key, new, merge=False)
        elif _plain(new) != _plain(old):
            raise GspoError(
                f"{key}: a resumed run keeps its own config ({key}={_show(old)} in {path / 'config.yaml'}); "
                f"on resume only {', '.join(EXTENDS[:-3])} may change; start a new run_id to change {key}")
    _check_final_eval(saved, original, path)
    saved.resume, saved.run_id, saved.output_dir = True, composed.run_id, composed.output_dir
    return saved


def _check_final_eval(saved: DictConfig, original: DictConfig, path: Path) -> None:
    """A finished run's final eval is done: a resume that trains no further step would not run it again, so a
    changed train.final_eval_k is refused (config.yaml would claim a final eval the run never made)."""
    if saved.train.final_eval_k == original.train.final_eval_k:
        return
    try:
        info = json.loads((path / "run.json").read_text())
    except (OSError, ValueError):
        return  # no readable record: the run is rebuilt or restarted, and evaluates at its end
    if not isinstance(info, dict) or info.get("status") != "finished":
        return
    stays_stopped = bool(info.get("stopped")) and not saved.train.past_stop
    if saved.train.steps > original.train.steps and not stays_stopped:
        return  # it trains on, and its new last step is evaluated at the new k
    raise GspoError(f"train.final_eval_k={saved.train.final_eval_k}: run {path} is finished, and its final eval (step "
                    f"{info.get('step')}) used train.final_eval_k={original.train.final_eval_k}; a resume that trains no "
                    f"further step does not evaluate again: evaluate its last checkpoint with gspo eval "
                    f"eval.run={path}{' eval.benches=[arith]' if saved.task.kind == 'arith' else ''} "
                    f"eval.k={saved.train.final_eval_k}, or extend train.steps")


def continued_config(composed: DictConfig, path: Path) -> DictConfig:
    """A sweep job whose run exists (an interrupted or dead attempt): the run's saved config, as `gspo train
    resume=` gives it. The sweep's overrides are the run's (sweep.json); a key the sweep now composes
    differently (an edited preset, a default changed by an update) would mix two configs in one run: refused,
    naming the keys, unless resume may change it (EXTENDS: applied, as on `gspo train resume=`)."""
    saved = saved_config(path, f"the sweep's job for {path}")
    now, was = flat_config(composed), flat_config(saved)
    changed = [k for k in sorted(now.keys() | was.keys()) if now.get(k, _ABSENT) != was.get(k, _ABSENT)]
    mixed = [k for k in changed if not _extends(k)]
    if mixed:
        said = ", ".join(f"{k}={_show(was.get(k))} -> {_show(now.get(k))}" for k in mixed[:6])
        more = f" and {len(mixed) - 6} more" if len(mixed) > 6 else ""
        raise GspoError(f"{path}: the sweep now composes another config than this run started with ({said}{more}: a "
                        "preset or a default changed); resuming would mix the two in one run: restore them, or run "
                        "the sweep in a new hydra.sweep.dir=")
    for key in changed:
        if key == "train.steps":
            _check_steps(saved, composed.train.steps, path)
        if key in now:
            OmegaConf.update(saved, key, OmegaConf.select(composed, key), merge=False)
    saved.resume, saved.run_id, saved.output_dir = True, composed.run_id, composed.output_dir
    return saved


_ABSENT = object()


def flat_config(cfg: DictConfig) -> dict:
    """{"train.lr": 1e-4, ...}: every leaf of `cfg`, resolved (an empty node a leaf; lists kept as lists)."""
    return _leaves(OmegaConf.to_container(cfg, resolve=True), "")


def _leaves(node, prefix: str) -> dict:
    if isinstance(node, dict) and node:
        return {k: v for key, value in node.items() for k, v in _leaves(value, f"{prefix}{key}.").items()}
    return {prefix[:-1]: node}


def _check_steps(saved: DictConfig, steps, path: Path) -> None:
    """A resume may extend a run, never shrink it (a run of 8 steps saved as 3 would join another arm), and
    extends a decaying lr schedule never: linear and cosine decay over the first train.steps (the schedule's
    horizon, fixed when the run started), and a longer horizon would change every remaining learning rate."""
    old = saved.train.steps
    if steps < old:
        raise GspoError(f"train.steps={steps}: a resumed run may extend its train.steps={old} (in {path / 'config.yaml'}), "
                        "never shrink it; to stop earlier, interrupt it; for a shorter run start a new run_id")
    if steps != old and saved.train.lr_schedule in (LrSchedule.LINEAR, LrSchedule.COSINE):
        raise GspoError(f"train.steps={steps}: train.lr_schedule={saved.train.lr_schedule} decays over the run's "
                        f"train.steps={old}, so extending it would change the remaining learning rates; start a new "
                        "run_id with the longer train.steps (constant schedules extend)")


def eval_run_config(composed: DictConfig, overrides: list[str]) -> DictConfig:
    """`gspo eval eval.run=<run dir>`: the run's saved config (its model, task, rollout and seed, so the
    eval is the one its training ran), with the command's overrides of EVAL_SETS applied."""
    path = Path(composed.eval.run).expanduser()
    saved = saved_config(path, f"eval.run={composed.eval.run}")
    for key in _override_keys(overrides):
        if not any(key == k or key.startswith(k + ".") for k in EVAL_SETS):
            raise GspoError(f"{key}: eval.run= evaluates the run's checkpoint under the run's own config; only "
                            f"{', '.join(EVAL_SETS)} may be set with it (for another model: model=hf model.name=<path>)")
        OmegaConf.update(saved, key, OmegaConf.select(composed, key), merge=False)
    saved.eval.run = str(path)
    return saved


def saved_config(path: Path, given: str) -> DictConfig:
    """The config a run saved (path/config.yaml) over today's schema; `given` names the setting that pointed
    here, for the error."""
    if not (path / "config.yaml").is_file():
        raise GspoError(f"{given} but there is no run at {path} (no config.yaml): not a run directory")
    try:
        return OmegaConf.merge(OmegaConf.structured(Config), OmegaConf.load(path / "config.yaml"))
    except (OmegaConfBaseException, OSError, ValueError, yaml.YAMLError) as e:
        raise GspoError(f"cannot read {path / 'config.yaml'}: {str(e).splitlines()[0]}") from None


def _override_keys(overrides: list[str]) -> list[str]:
    return [o.key_or_group for o in OverridesParser.create().parse_overrides(overrides)]


def trajectory_neutral(key: str) -> bool:
    """A key a resume may change without changing what is trained (EXTENDS, but for train.steps, the run's
    length): runs that differ only in such keys are one arm of a report."""
    return key != "train.steps" and _extends(key)


def _extends(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in EXTENDS)


def _plain(value):
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _show(value) -> str:
    return "<group>" if isinstance(value, DictConfig) else str(_plain(value))
