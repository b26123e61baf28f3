"""Compose a run's config from overrides, and check what a schema cannot express.

Hydra's own error texts are long and multi-line; each is folded into one `GspoError` line that names
the offending group, key or value.
"""

from __future__ import annotations

import dataclasses
import os
import re
from importlib import resources
from pathlib import Path

from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException, HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from gspo.conf.choice_check import check_choice, check_choices, near_hint
from gspo.conf.environment import check_wandb_online
from gspo.conf.errors import GspoError
from gspo.conf.keys import bare_lists, check_flags, sweep_hint, unknown_key
from gspo.conf.ranges import check_numbers
from gspo.conf.resume import eval_run_config, expand_resume_dir, resume_config
from gspo.conf.schema import Config, register_configs
from gspo.vocab.choices import AdvScale


def compose_config(overrides: list[str] | None = None, *, command: str = "train") -> DictConfig:
    """The resolved config for `overrides` (Hydra syntax: `algo=grpo train.steps=5`); with `resume=true`
    (or `resume=<run dir>`), the run's own saved config with the overrides a resume may make. `command`
    "eval": with `eval.run=<run dir>`, that run's saved config with the eval's overrides (run_config)."""
    check_flags(list(overrides or []), command)
    overrides = bare_lists(expand_resume_dir(list(overrides or [])))
    for value in [o.partition("=")[2] for o in overrides if o.startswith(("run_id=", "+run_id="))]:
        check_run_id(value)  # before Hydra's grammar meets a name it cannot lex (unicode, spaces)
    register_configs()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="gspo.conf", version_base="1.3"):
            cfg = compose(config_name="config", overrides=list(overrides or []), return_hydra_config=True)
        names = declared(cfg.hydra.runtime.config_sources)
        with open_dict(cfg):
            del cfg["hydra"]
        OmegaConf.resolve(cfg)
        _check_missing(cfg)
        _check_schema(cfg)
        if cfg.resume:
            cfg = resume_config(cfg, overrides)
        cfg = run_config(cfg, overrides, command)
    except (MissingConfigException, ConfigCompositionException, HydraException, OmegaConfBaseException) as e:
        raise GspoError(_one_line(e, overrides, command)) from None
    finally:
        GlobalHydra.instance().clear()
    validate_config(cfg, names)
    return cfg


def run_config(cfg: DictConfig, overrides: list[str], command: str) -> DictConfig:
    """`eval.run` belongs to `gspo eval`, where it swaps in the run's own config (conf/resume.py)."""
    if cfg.eval.run is None:
        return cfg
    if command != "eval":
        raise GspoError(f"eval.run={cfg.eval.run} names a run for gspo eval; gspo {command} does not read it")
    return eval_run_config(cfg, overrides)


# group -> the key each of its presets declares: the values a config may name (one yaml per algorithm; the task
# kinds gspo.trainer.tasks.registry builds; the engines gspo.trainer.engines.registry builds)
DECLARED = {"algo": "name", "task": "kind", "rollout": "engine"}


def declared(sources=None) -> dict[str, list[str]]:
    """DECLARED's values of every preset in Hydra's config sources (the package's, and any added with
    hydra.searchpath). `sources`: hydra.runtime.config_sources; None: the running Hydra job's (a sweep job), else
    the package's own."""
    if sources is None:
        sources = HydraConfig.get().runtime.config_sources if HydraConfig.initialized() else [
            {"schema": "pkg", "path": "gspo.conf"}]
    return {group: _preset_values(group, key, sources) for group, key in DECLARED.items()}


def _preset_values(group_name: str, key: str, sources) -> list[str]:
    values = []
    for source in sources:
        if source["schema"] not in ("pkg", "file"):
            continue
        root = resources.files(source["path"]) if source["schema"] == "pkg" else Path(source["path"])
        group = root / group_name
        if group.is_dir():
            presets = [OmegaConf.create(f.read_text()) for f in group.iterdir() if f.name.endswith(".yaml")]
            # a preset in the global package (algo/dapo.yaml) names it under algo:; one building on another names none
            presets = [p[group_name] if group_name in p and key not in p else p for p in presets]
            values += [str(p[key]) for p in presets if p.get(key)]
    return values


def _check_missing(cfg: DictConfig) -> None:
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise GspoError(f"config value required but not set: {', '.join(missing)} (e.g. {missing[0]}=...)")


def _one_line(e: Exception, overrides: list[str], command: str) -> str:
    """Hydra's multi-line errors folded into one line that names the group, key or value, and the fix
    where there is one (conf/keys.py)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()] or [type(e).__name__]
    head = lines[0]
    unknown = re.match(r"Could not override '(.+)'", head)
    if unknown:
        key = unknown[1]
        value = next((o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == key), None)
        return unknown_key(key, value)
    hint = sweep_hint(head, command)
    if hint:
        return hint
    if any(ln.startswith("Available options") for ln in lines):
        start = next(i for i, ln in enumerate(lines) if ln.startswith("Available options")) + 1
        opts = [ln for ln in lines[start:] if not ln.startswith(("Config search path", "provider="))]
        missing = re.search(r"Could not find '[^/']+/([^']+)'", head)
        hint = near_hint(missing.group(1), opts) if missing else ""
        return f"{head} (available: {', '.join(opts)}){hint}"
    cause = e.__cause__ or e.__context__
    if cause is not None:
        first = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        return f"{head}: {first}"
    return head


def _check_schema(cfg: DictConfig) -> None:
    """Keys added with Hydra's `+key=value` bypass the struct check; nothing outside the schema is used.
    Free-form dict fields of the schema (e.g. eval.paths) take any key."""
    _check_keys(cfg, OmegaConf.structured(Config), "")


def _check_keys(node: DictConfig, schema: DictConfig, prefix: str) -> None:
    typed = dataclasses.is_dataclass(OmegaConf.get_type(schema))
    for key in node:
        if typed and key not in schema.keys():
            raise GspoError(unknown_key(f"{prefix}{key}"))
        child = node._get_node(key)
        sub = schema._get_node(key) if typed else None
        if isinstance(child, DictConfig) and isinstance(sub, DictConfig):
            _check_keys(child, sub, f"{prefix}{key}.")


def validate_config(cfg: DictConfig, names: dict[str, list[str]] | None = None) -> None:
    """Closed choices (`names`: what the algo, task and rollout presets declare, `declared`; read from Hydra when
    None), then every rule across fields: each raises a GspoError naming the key and the rule. What an engine can
    do is asked of the engine, before a run (trainer/engines/registry.py)."""
    names = names or declared()
    check_choices(cfg, names["algo"], names["task"])
    check_choice("rollout.engine", cfg.rollout.engine, sorted(set(names["rollout"])))
    _check_run_location(cfg)
    check_wandb_online(cfg.logger.wandb)
    t = cfg.train
    check_numbers(cfg)  # each setting's own range (conf/ranges.py); each error names the one key out of range
    if cfg.task.max_digits < cfg.task.min_digits:
        raise GspoError(f"task.max_digits={cfg.task.max_digits} is below task.min_digits={cfg.task.min_digits}")
    n = t.prompts_per_step * t.group_size
    if n % t.minibatches:
        raise GspoError(
            f"train.minibatches={t.minibatches} does not divide the rollout batch of "
            f"{t.prompts_per_step} prompts x {t.group_size} completions = {n} sequences"
        )
    mb = n // t.minibatches
    if t.micro_batch_size is not None and mb % t.micro_batch_size:
        raise GspoError(f"train.micro_batch_size={t.micro_batch_size} does not divide the minibatch of {mb} sequences")
    if cfg.model.name is None:
        raise GspoError("model.name is required: a Hugging Face id or a local path (model.name=...)")
    if cfg.algo.adv_scale == AdvScale.MEAN and cfg.rollout.overlong_buffer:
        raise GspoError("algo.adv_scale=mean (MaxRL) divides by the group's mean reward, which the overlong penalty "
                        "can make 0 or negative: set rollout.overlong_buffer=0")
    _check_paths(cfg)


_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


MAX_RUN_ID = 200  # bytes: a file name is at most 255, and W&B names its folder run-<time>-<run_id>


def check_run_id(run_id: str) -> None:
    """run_id is a plain folder name (never a path out of output_dir) short enough for every file system."""
    if not _PLAIN_NAME.fullmatch(run_id):
        raise GspoError(f"run_id={run_id!r}: use a plain name (ASCII letters, digits, '.', '_', '-', '+'; no '/' "
                        "or spaces)")
    if len(run_id) > MAX_RUN_ID:
        raise GspoError(f"run_id is {len(run_id)} characters: at most {MAX_RUN_ID} (a folder name is at most 255 bytes, "
                        "and W&B adds its own prefix to it)")


def _check_run_location(cfg: DictConfig) -> None:
    """run_id is a plain, short folder name; output_dir can be created and written."""
    if cfg.run_id is not None:
        check_run_id(str(cfg.run_id))
    deepest = Path(cfg.output_dir).expanduser().absolute() / (cfg.run_id or "x" * 40) / "checkpoints" / "step_000000"
    if len(os.fsencode(deepest)) + 80 > os.pathconf("/", "PC_PATH_MAX"):  # + the longest file a checkpoint holds
        raise GspoError(f"output_dir={cfg.output_dir}: its runs' paths would pass the system's limit of "
                        f"{os.pathconf('/', 'PC_PATH_MAX')} bytes; use a shorter output_dir")
    existing = Path(cfg.output_dir).expanduser().absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise GspoError(f"output_dir={cfg.output_dir}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise GspoError(f"output_dir={cfg.output_dir}: {existing} is not writable; set output_dir= to a writable folder")


def _check_paths(cfg: DictConfig) -> None:
    """Local files that are plainly missing fail here, in a second, not after the model libraries load."""
    name = cfg.model.name
    if name.startswith(("/", "./", "../", "~")) and not Path(name).expanduser().exists():
        raise GspoError(f"model path not found: {name}")
    data = cfg.task.dataset  # read by the tasks that take a dataset (trainer/tasks/registry.py)
    if data and (data.endswith((".jsonl", ".json")) or data.startswith(("/", "./", "../", "~"))):
        if not Path(data).expanduser().exists():
            raise GspoError(f"dataset file not found: {data}")


def config_to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg, resolve=True)
