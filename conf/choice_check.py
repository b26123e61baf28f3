"""Closed choices of the config: which key takes which vocabulary (gspo.vocab.choices, where every value is
named once), checked when a config is composed (before torch loads or a file is written). A wrong value is one
line naming the valid ones and, for a near miss, the likely one:
`algo.name='gpso': use one of grpo, gspo, gspo_token (did you mean gspo?)`.

The algorithm names are the `name:` of the presets in the `algo` config group, so a new algorithm's yaml
makes its name valid here; the registries of gspo.algos are tested against the vocabulary
(tests/algos/test_algos_registry.py).
"""

from __future__ import annotations

import difflib
from importlib import resources

from omegaconf import DictConfig, OmegaConf

from gspo.conf.errors import GspoError
from gspo.vocab.choices import (
    Advantage,
    AdvScale,
    Aggregation,
    CodeBenchmark,
    CodeReward,
    Correction,
    KvCache,
    Level,
    LrSchedule,
    ModelDtype,
    OldLogp,
    OnNonfinite,
    Replay,
    RolloutDtype,
    Sampler,
    TrainPrecision,
    VllmSync,
    Wandb,
)

CHOICES: dict[str, tuple[str, ...]] = {
    "algo.advantage": Advantage.values,
    "algo.adv_scale": AdvScale.values,
    "algo.old_logp_source": OldLogp.values,
    "algo.routing_replay": Replay.values,
    "algo.options.aggregation": Aggregation.values,
    "algo.correction.kind": Correction.values,
    "algo.correction.level": Level.values,
    "model.dtype": ModelDtype.values,
    "rollout.dtype": RolloutDtype.values,
    "rollout.sampler": Sampler.values,
    "rollout.kv_cache": KvCache.values,
    "rollout.vllm_sync": VllmSync.values,
    "train.precision": TrainPrecision.values,
    "train.lr_schedule": LrSchedule.values,
    "train.on_nonfinite": OnNonfinite.values,
    "logger.wandb": Wandb.values,
    "task.benchmark": CodeBenchmark.values,
    "task.code_reward": CodeReward.values,
}


def choice_error(key: str, value: object, valid: tuple[str, ...] | list[str]) -> GspoError:
    """`key=value` is not one of `valid`: one line with the valid values and the nearest one, if close."""
    return GspoError(f"{key}={value!r}: use one of {', '.join(valid)}{near_hint(value, valid)}")


def near_hint(value: object, valid: tuple[str, ...] | list[str]) -> str:
    """" (did you mean X?)" for the closest of `valid` to a near miss, else "". Case does not count as a miss:
    `GSPO` is near `gspo` (difflib alone scores them 0)."""
    folded = {str(v).lower(): str(v) for v in valid}
    near = difflib.get_close_matches(str(value).lower(), list(folded), n=1, cutoff=0.6)
    return f" (did you mean {folded[near[0]]}?)" if near else ""


def group_files(*group: str) -> dict[str, str]:
    """The package's config group conf/<group>/ (`sweep`; `hydra`, `launcher`): each yaml's name -> its text, the
    names being the group's choices."""
    root = resources.files("gspo.conf").joinpath(*group)
    return {p.name.removesuffix(".yaml"): p.read_text() for p in root.iterdir() if p.name.endswith(".yaml")}


def check_choice(key: str, value: object, valid: tuple[str, ...] | list[str]) -> None:
    if value not in valid:
        raise choice_error(key, value, valid)


def check_choices(cfg: DictConfig, algorithms: list[str], task_kinds: list[str]) -> None:
    """Every closed choice of `cfg`; `algorithms`, `task_kinds`: the names and kinds the `algo` and `task`
    presets declare."""
    check_choice("algo.name", cfg.algo.name, sorted(set(algorithms)))
    check_choice("task.kind", cfg.task.kind, sorted(set(task_kinds)))
    for key, valid in CHOICES.items():
        value = OmegaConf.select(cfg, key, default=None)
        if value is not None:  # None: an option of another algorithm (algo.options.*)
            check_choice(key, value, valid)
