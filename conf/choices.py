"""Closed choices of the config: each key and the values it may take, checked when a config is composed
(before torch loads or a file is written). A wrong value is one line naming the valid ones and, for a
near miss, the likely one: `algo.name='gpso': use one of grpo, gspo, gspo_token (did you mean gspo?)`.

The algorithm names are the `name:` of the presets in the `algo` config group, so a new algorithm's yaml
makes its name valid here; the algorithm registry (gspo.algos) is checked against these vocabularies by
a test (tests/test_layers.py keeps conf free of torch, which is why they are written out here).
"""

from __future__ import annotations

import difflib

from omegaconf import DictConfig, OmegaConf

from gspo.conf.errors import GspoError

AGGREGATIONS = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")  # GRPO's algo.options.aggregation
ADVANTAGES = ("group", "step", "gdpo")  # advantage estimators registered in gspo.algos.advantages
CORRECTIONS = ("none", "tis", "mis", "mask", "geo_rs")  # gspo.algos.corrections.KINDS
CORRECTION_LEVELS = ("auto", "token", "sequence", "geometric")  # auto: resolved by the trainer  # gspo.algos.corrections.LEVELS

CHOICES: dict[str, tuple[str, ...]] = {
    "algo.advantage": ADVANTAGES,
    "algo.adv_scale": ("std", "none", "mean"),
    "algo.old_logp_source": ("auto", "recompute", "engine"),
    "algo.routing_replay": ("none", "trainer", "rollout"),
    "algo.options.aggregation": AGGREGATIONS,
    "algo.correction.kind": CORRECTIONS,
    "algo.correction.level": CORRECTION_LEVELS,
    "model.dtype": ("float32", "bfloat16", "float16"),
    "rollout.dtype": ("auto", "bfloat16", "float16"),
    "rollout.sampler": ("lean", "generate"),
    "rollout.kv_cache": ("auto", "static", "dynamic"),
    "rollout.vllm_sync": ("auto", "load_weights", "reload"),
    "train.precision": ("auto", "fp32", "bf16", "fp16"),
    "train.lr_schedule": ("constant", "linear", "cosine"),
    "train.on_nonfinite": ("stop", "skip"),
    "logger.wandb": ("auto", "online", "offline", "disabled"),
    "task.benchmark": ("livecodebench", "codeforces"),
    "task.code_reward": ("all", "fraction"),
}


def choice_error(key: str, value: object, valid: tuple[str, ...] | list[str]) -> GspoError:
    """`key=value` is not one of `valid`: one line with the valid values and the nearest one, if close."""
    return GspoError(f"{key}={value!r}: use one of {', '.join(valid)}{near_hint(value, valid)}")


def near_hint(value: object, valid: tuple[str, ...] | list[str]) -> str:
    """" (did you mean X?)" for the closest of `valid` to a near miss, else ""."""
    near = difflib.get_close_matches(str(value), list(valid), n=1, cutoff=0.6)
    return f" (did you mean {near[0]}?)" if near else ""


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
