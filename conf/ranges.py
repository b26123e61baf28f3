"""Range checks for every numeric setting, at compose time (before torch loads or a file is written).

Each rule is (low, high, low_open[, high_open]): the value must be finite, >= low (> low when low_open) and
<= high (< high when high_open; no upper bound when None). This is the one place a single setting's range is
stated; rules across settings are conf/compose.validate_config's. `WHY` adds the reason a user needs to a bound. Every integer must also fit 64 bits (seed=2**64 would pass a rule of >= 0 and
then fail inside torch after the model loads). A value of None passes where the schema allows None (e.g. eval.limit).
"""

from __future__ import annotations

import math
import numbers

from omegaconf import DictConfig, ListConfig

from gspo.conf.errors import GspoError

_POS, _NONNEG, _ONE = (0, None, True), (0, None, False), (1, None, False)
MAX_SEEDS = 200  # verdict.max_seeds: a comparison of hundreds of seeds per arm is another study than rounds of looks
MAX_EVAL_SIZE = 100_000  # task.eval_size: each is generated and graded at every eval (the task also checks its pool)
INT64 = (-(2**63), 2**63 - 1)  # every integer setting; torch.manual_seed, for one, fails past 2**64 - 1
RULES: dict[str, tuple] = {
    "seed": _NONNEG,
    "algo.clip_low": (0, 1, True), "algo.clip_high": _POS, "algo.kl_beta": _NONNEG, "algo.adv_eps": _NONNEG,
    "algo.correction.cap": _POS, "algo.correction.low": (0, 1, False), "algo.correction.high": _ONE,
    "train.steps": _NONNEG, "train.prompts_per_step": _ONE, "train.group_size": (2, None, False),
    "train.minibatches": _ONE, "train.epochs": _ONE, "train.micro_batch_size": _ONE, "train.lr": _POS,
    "train.warmup_steps": _NONNEG, "train.weight_decay": _NONNEG, "train.adam_betas": (0, 1, False),
    "train.max_grad_norm": _POS, "train.eval_every": _NONNEG, "train.save_every": _NONNEG,
    "train.keep_checkpoints": _NONNEG, "train.logprob_chunk": _ONE, "train.eval_k": _ONE,
    "train.final_eval_k": _ONE,
    "rollout.temperature": _POS, "rollout.top_p": (0, 1, True), "rollout.max_new_tokens": _ONE,
    "rollout.batch_size": _ONE, "rollout.gpu_memory_utilization": (0, 1, True),
    "rollout.tensor_parallel_size": _ONE, "rollout.max_draws": _ONE, "rollout.overlong_buffer": (0, 1, False),
    "rollout.lag": _NONNEG,
    "task.min_digits": _ONE, "task.max_digits": _ONE, "task.timeout_s": _POS,
    "task.workers": _ONE,
    "eval.k": _ONE, "eval.limit": _ONE, "eval.max_new_tokens": _ONE, "eval.step": _NONNEG,
    "eval.workers": _ONE, "logger.samples_per_step": _NONNEG,
    "model.tiny.hidden_size": _ONE, "model.tiny.num_layers": _ONE, "model.tiny.intermediate_size": _ONE,
    "model.tiny.num_heads": _ONE, "model.tiny.num_kv_heads": _ONE, "model.tiny.sft_lr": _POS,
    "model.tiny.sft_batch_size": _ONE, "model.tiny.sft_max_steps": _NONNEG, "model.tiny.sft_eval_every": _ONE,
    "model.tiny.sft_eval_max_loss": _POS, "model.tiny.sft_target_accuracy": (0, 1, False),
    "model.lora.r": _NONNEG, "model.lora.dropout": (0, 1, False, True), "model.lora.alpha": _POS,
    "model.tiny.num_experts": _NONNEG, "model.tiny.experts_per_token": _ONE, "model.tiny.moe_intermediate_size": _ONE,
    "model.tiny.sft_seed": _NONNEG,
    "train.collapse.window": _ONE, "train.collapse.patience": _ONE, "train.collapse.reward_drop": (0, 1, True),
    "train.collapse.eval_drop": (0, 1, True), "train.collapse.min_best": _NONNEG, "train.collapse.entropy_min": _NONNEG,
    "train.collapse.entropy_max_factor": (1, None, True), "train.collapse.truncated_max": (0, 1, True),
    "task.eval_size": (1, MAX_EVAL_SIZE, False),
    "verdict.effect": _POS, "verdict.max_seeds": (2, MAX_SEEDS, False), "verdict.round_seeds": (1, MAX_SEEDS, False),
    "verdict.max_minutes": _POS,  # None: no time budget
}
WHY = {
    "train.group_size": "group advantages need at least 2 completions per prompt",
    "model.lora.r": "0 is no LoRA",
    "train.collapse.window": "the moving average of the reward is over at least one step",
    "train.collapse.patience": "a collapse is a fall that lasts at least one step",
    "train.collapse.entropy_max_factor": "at or below 1x the first step's entropy, every run would count as exploding",
    "train.collapse.reward_drop": "0 would count any dip below the best as a collapse",
    "train.collapse.eval_drop": "0 would count any dip below the best as a collapse",
    "task.eval_size": "every held-out prompt is sampled at step 0 and at each eval",
    "verdict.effect": "the smallest difference of interest, in the score's units: 0.02 is 2 points of accuracy",
    "verdict.max_seeds": "each seed is one run per arm, and the looks' boundaries are planned over them",
    "verdict.round_seeds": "each seed is one run per arm",
}


def check_numbers(cfg: DictConfig, prefix: str = "") -> None:
    """Every number in the config is finite; those with a rule are in range. Raises a GspoError naming the key.
    `prefix`: where `cfg` sits in the rules' keys ("verdict." for the verdict settings)."""
    for key, value in _numbers(cfg, prefix.rstrip(".")):
        check_number(key, value)
    tiny = cfg.get("model", {}).get("tiny") if not prefix else None
    if tiny is not None and tiny.num_experts and tiny.experts_per_token > tiny.num_experts:
        raise GspoError(f"model.tiny.experts_per_token={tiny.experts_per_token}: must be at most model.tiny.num_experts="
                        f"{tiny.num_experts} (each token is routed to that many of the experts)")


def check_number(key: str, value: float) -> None:
    """One setting's number against its rule (RULES); a GspoError naming the key and the rule."""
    if not math.isfinite(value):
        raise GspoError(f"{key}={value}: must be a finite number")
    if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:  # torch, numpy and W&B pack it in 64 bits
        raise GspoError(f"{key}={value}: must fit a 64-bit integer ({INT64[0]} to {INT64[1]})")
    rule = RULES.get(key.split("[")[0])
    if rule is not None and not _in_range(value, *rule):
        why = WHY.get(key.split("[")[0])
        raise GspoError(f"{key}={value}: must be {_describe(*rule)}" + (f" ({why})" if why else ""))


def _numbers(node, prefix: str):
    """(dotted key, value) of every int or float leaf; list items as key[i]."""
    items = node.items_ex(resolve=True) if isinstance(node, DictConfig) else enumerate(node)
    for key, value in items:
        name = f"{prefix}.{key}".lstrip(".") if isinstance(node, DictConfig) else f"{prefix}[{key}]"
        if isinstance(value, DictConfig | ListConfig):
            yield from _numbers(value, name)
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            yield name, value


def _in_range(value: float, low: float, high: float | None, low_open: bool, high_open: bool = False) -> bool:
    above = value > low if low_open else value >= low
    return above and (high is None or (value < high if high_open else value <= high))


def _describe(low: float, high: float | None, low_open: bool, high_open: bool = False) -> str:
    lower = f"{'>' if low_open else '>='} {low}"
    return lower if high is None else f"{lower} and {'<' if high_open else '<='} {high}"
