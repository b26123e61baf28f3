"""Range checks for every numeric setting, at compose time (before torch loads or a file is written).

Each rule is (low, high, low_open[, high_open]): the value must be finite, >= low (> low when low_open) and
<= high (< high when high_open; no upper bound when None). This is the one place a single setting's range is
stated; rules across settings are conf/compose.validate_config's. `WHY` adds the reason a user needs to a bound. Every integer must also fit 64 bits (seed=2**64 would pass a rule of >= 0 and
then fail inside torch after the model loads). A value of None passes where the schema allows None (e.g. eval.limit).
"""

from __future__ import annotations

import math
import numbers
import os

from omegaconf import DictConfig, ListConfig, OmegaConf

from gspo.conf.errors import GspoError

_POS, _NONNEG, _ONE = (0, None, True), (0, None, False), (1, None, False)
MAX_SEEDS = 200  # verdict.max_seeds: a comparison of hundreds of seeds per arm is another study than rounds of looks
MAX_EVAL_SIZE = 100_000  # task.eval_size: each is generated and graded at every eval (the task also checks its pool)
FLOAT32_MAX = 3.4028234663852886e38  # learning rates reach torch's optimizers as float32 (1e300 overflowed inside AdamW)
MAX_WIDTH = 65_536  # a layer's width or an adapter's rank: 4x Llama-3-405B's 16,384; checked before any allocation
MAX_TOKENS = 131_072  # new tokens per completion: Qwen3's context with YaRN (the KV cache is allocated for all of them)
MAX_DIGITS = 18  # arith operands: the task counts its problems in 64-bit integers (10**18 fits, 10**19 does not)
MAX_ENTROPY = 20.0  # nats per token: at most ln(vocabulary), 11.9 for Qwen3's 151,936 tokens, ~3 for the embedded model
MAX_LORA_ALPHA = 10_000.0  # alpha / r scales each adapter update: 16 to 512 are usual; 1e308 was inf, NaN at once
MIN_TEMPERATURE = 0.01  # logits are divided by it: below, sampling is greedy in all but name and overflows fp16
_WIDTH, _TOKENS = (1, MAX_WIDTH, False), (1, MAX_TOKENS, False)
INT64 = (-(2**63), 2**63 - 1)  # every integer setting; torch.manual_seed, for one, fails past 2**64 - 1
RULES: dict[str, tuple] = {
    "seed": _NONNEG,
    "algo.clip_low": (0, 1, True), "algo.clip_high": _POS, "algo.kl_beta": _NONNEG, "algo.adv_eps": _NONNEG,
    "algo.entropy_coef": _NONNEG,
    "algo.correction.cap": _POS, "algo.correction.low": (0, 1, False), "algo.correction.high": _ONE,
    "train.steps": _NONNEG, "train.prompts_per_step": _ONE, "train.group_size": (2, None, False),
    "train.minibatches": _ONE, "train.epochs": _ONE, "train.micro_batch_size": _ONE, "train.lr": (0, FLOAT32_MAX, True),
    "train.warmup_steps": _NONNEG, "train.weight_decay": _NONNEG, "train.adam_betas": (0, 1, False, True),
    "train.max_grad_norm": _POS, "train.eval_every": _NONNEG, "train.save_every": _NONNEG,
    "train.keep_checkpoints": _NONNEG, "train.logprob_chunk": _ONE, "train.eval_k": _ONE,
    "train.final_eval_k": _ONE,
    "rollout.temperature": (MIN_TEMPERATURE, None, False), "rollout.top_p": (0, 1, True), "rollout.max_new_tokens": _TOKENS,
    "rollout.batch_size": _ONE, "rollout.gpu_memory_utilization": (0, 1, True),
    "rollout.tensor_parallel_size": _ONE, "rollout.max_draws": _ONE, "rollout.overlong_buffer": (0, 1, False),
    "rollout.lag": _NONNEG,
    "task.min_digits": (1, MAX_DIGITS, False), "task.max_digits": (1, MAX_DIGITS, False), "task.timeout_s": _POS,
    "task.workers": _ONE,
    "eval.k": _ONE, "eval.limit": _ONE, "eval.max_new_tokens": _TOKENS, "eval.step": _NONNEG,
    "eval.workers": _ONE, "logger.samples_per_step": _NONNEG,
    "model.tiny.hidden_size": _WIDTH, "model.tiny.num_layers": _ONE, "model.tiny.intermediate_size": _WIDTH,
    "model.tiny.num_heads": _ONE, "model.tiny.num_kv_heads": _ONE, "model.tiny.sft_lr": (0, FLOAT32_MAX, True),
    "model.tiny.sft_batch_size": _ONE, "model.tiny.sft_max_steps": _ONE, "model.tiny.sft_eval_every": _ONE,
    "model.tiny.sft_eval_max_loss": _POS, "model.tiny.sft_target_accuracy": (0, 1, False),
    "model.lora.r": (0, MAX_WIDTH, False), "model.lora.dropout": (0, 1, False, True),
    "model.lora.alpha": (0, MAX_LORA_ALPHA, True),
    "model.tiny.num_experts": _NONNEG, "model.tiny.experts_per_token": _ONE, "model.tiny.moe_intermediate_size": _WIDTH,
    "model.tiny.sft_seed": _NONNEG,
    "train.collapse.window": _ONE, "train.collapse.patience": _ONE, "train.collapse.reward_drop": (0, 1, True),
    "train.collapse.eval_drop": (0, 1, True), "train.collapse.min_best": _NONNEG, "train.collapse.entropy_min": (0, MAX_ENTROPY, False),
    "train.collapse.entropy_max_factor": (1, None, True), "train.collapse.truncated_max": (0, 1, True),
    "task.eval_size": (1, MAX_EVAL_SIZE, False),
    "verdict.effect": _POS, "verdict.max_seeds": (2, MAX_SEEDS, False), "verdict.round_seeds": (1, MAX_SEEDS, False),
    "verdict.max_minutes": _POS,  # None: no time budget
}
LENGTHS = {"train.adam_betas": (2, 2), "model.lora.target_modules": (1, None), "eval.benches": (0, None),
           "logger.tags": (0, None)}  # items a list setting holds
_FLOAT32 = "AdamW takes it as a float32"
_KV = "the KV cache is allocated for every new token; 131,072 is Qwen3's context with YaRN"
_INT64_DIGITS = "the task counts its problems in 64-bit integers: 10**18 fits, 10**19 does not"
_LAYER = "a layer's width, allocated when the model is built"
_DIP = "0 would count any dip below the best as a collapse"
WHY = {
    "train.adam_betas": "AdamW's beta1 and beta2: a moment's decay, 1 would never forget and never correct its bias",
    "train.lr": _FLOAT32, "model.tiny.sft_lr": _FLOAT32,
    "rollout.temperature": "logits are divided by it: below 0.01 sampling is greedy in all but name and a logit of "
                           "1,000 passes half precision's range; greedy evals are train.eval_greedy, eval.greedy",
    "rollout.max_new_tokens": _KV, "eval.max_new_tokens": _KV,
    "task.min_digits": _INT64_DIGITS, "task.max_digits": _INT64_DIGITS,
    "model.tiny.hidden_size": _LAYER, "model.tiny.intermediate_size": _LAYER, "model.tiny.moe_intermediate_size": _LAYER,
    "model.tiny.sft_max_steps": "the cold start fine-tunes for at least one step before it is checked",
    "model.lora.alpha": "alpha / r scales every adapter update: 16 to 512 are usual, and an inf scale is NaN at once",
    "train.collapse.entropy_min": "a token's entropy is at most ln(vocabulary size): 11.9 nats for Qwen3's 151,936 "
                                  "tokens, about 3 for the embedded model's; above it every step counts as collapsed",
    "train.group_size": "group advantages need at least 2 completions per prompt",
    "model.lora.r": "0 is no LoRA; the rank is at most the width of the layers it adapts",
    "train.collapse.window": "the moving average of the reward is over at least one step",
    "train.collapse.patience": "a collapse is a fall that lasts at least one step",
    "train.collapse.entropy_max_factor": "at or below 1x the first step's entropy, every run would count as exploding",
    "train.collapse.reward_drop": _DIP, "train.collapse.eval_drop": _DIP,
    "task.eval_size": "every held-out prompt is sampled at step 0 and at each eval",
    "verdict.effect": "the smallest difference of interest, in the score's units: 0.02 is 2 points of accuracy",
    "verdict.max_seeds": "each seed is one run per arm, and the looks' boundaries are planned over them",
    "verdict.round_seeds": "each seed is one run per arm",
}


def check_numbers(cfg: DictConfig, prefix: str = "") -> None:
    """Every number in the config is finite; those with a rule are in range. Raises a GspoError naming the key.
    `prefix`: where `cfg` sits in the rules' keys ("verdict." for the verdict settings)."""
    check_lengths(cfg, prefix)
    for key, value in _numbers(cfg, prefix.rstrip(".")):
        check_number(key, value)
    tiny = cfg.get("model", {}).get("tiny") if not prefix else None
    if tiny is not None:
        check_tiny_shape(tiny)
        if cfg.model.name == "tiny":
            check_tiny_memory(tiny)


def check_lengths(cfg: DictConfig, prefix: str = "") -> None:
    """Each list setting holds as many items as LENGTHS says the code reads (AdamW takes two betas)."""
    for key, (low, high) in LENGTHS.items():
        if not key.startswith(prefix):
            continue
        value = OmegaConf.select(cfg, key[len(prefix):], default=None)
        if value is None:
            continue
        n = len(value) if isinstance(value, ListConfig | list) else -1
        if n < low or (high is not None and n > high):
            want = f"exactly {low}" if low == high else f"at least {low}" if high is None else f"{low} to {high}"
            why = WHY.get(key)
            raise GspoError(f"{key}={_show_list(value)}: must be a list of {want} item{'s' if (high or low) != 1 else ''}"
                            + (f" ({why})" if why else ""))


def _show_list(value) -> str:
    return "[" + ",".join(map(str, value)) + "]" if isinstance(value, ListConfig | list) else str(value)


def check_tiny_shape(tiny) -> None:
    """The embedded model's head counts divide its width, and its experts their routing (Qwen3's attention splits
    hidden_size into num_heads heads and repeats each key/value head for num_heads / num_kv_heads of them)."""
    if tiny.hidden_size % tiny.num_heads:
        raise GspoError(f"model.tiny.num_heads={tiny.num_heads}: must divide model.tiny.hidden_size={tiny.hidden_size} "
                        "(each attention head takes an equal share of the width)")
    if tiny.num_heads % tiny.num_kv_heads:
        raise GspoError(f"model.tiny.num_kv_heads={tiny.num_kv_heads}: must divide model.tiny.num_heads="
                        f"{tiny.num_heads} (each key/value head serves an equal group of query heads)")
    if tiny.num_experts and tiny.experts_per_token > tiny.num_experts:
        raise GspoError(f"model.tiny.experts_per_token={tiny.experts_per_token}: must be at most model.tiny.num_experts="
                        f"{tiny.num_experts} (each token is routed to that many of the experts)")


TINY_VOCAB = 64  # at least the embedded model's character vocabulary (its parameter count is dominated by the layers)
TRAIN_BYTES = 16  # per parameter when training in fp32 with AdamW: weights, gradients and two moments


def tiny_parameters(tiny) -> int:
    """About how many parameters the embedded model of `tiny` has (embeddings tied; norms left out)."""
    h, head_dim = tiny.hidden_size, tiny.hidden_size // tiny.num_heads
    attention = h * head_dim * (2 * tiny.num_heads + 2 * tiny.num_kv_heads)
    mlp = (tiny.num_experts * (3 * h * tiny.moe_intermediate_size + h) if tiny.num_experts
           else 3 * h * tiny.intermediate_size)
    return TINY_VOCAB * h + tiny.num_layers * (attention + mlp)


def check_tiny_memory(tiny) -> None:
    """The embedded model is built in this machine's memory before it moves to a device: settings whose training
    state cannot fit it are one line here, not an allocator's traceback after the cold start began."""
    need = tiny_parameters(tiny) * TRAIN_BYTES
    have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if need > have:
        raise GspoError(f"model.tiny (hidden_size={tiny.hidden_size}, num_layers={tiny.num_layers}, intermediate_size="
                        f"{tiny.intermediate_size}, num_experts={tiny.num_experts}) makes a model of about "
                        f"{tiny_parameters(tiny) / 1e9:.3g} billion parameters: training it takes at least "
                        f"{need / 2**30:,.0f} GiB ({TRAIN_BYTES} bytes a parameter: weights, gradients, AdamW's two "
                        f"moments), more than this machine's {have / 2**30:,.0f} GiB; use smaller model.tiny settings")


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
    lower = f"{'>' if low_open else '>='} {_bound(low)}"
    return lower if high is None else f"{lower} and {'<' if high_open else '<='} {_bound(high)}"


def _bound(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"
