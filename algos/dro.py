"""DRO: the policy gradient with a quadratic pull to the old policy instead of a ratio and a clip (verl's policy loss
"dro", registered in verl/trainer/ppo/core_algos.py; the form as ModelScope twinkle's port of it states it, "matches
verl's", and as SkyRL's teacher-distillation example registers it; after Direct Reward Optimization, Richemond et al.
2024, arXiv 2405.19107, whose regulariser is the squared log-ratio).

    J_it = A_it log pi(y_it | x, y_i<t) - beta / 2 (log pi(y_it | x, y_i<t) - log pi_old(y_it | x, y_i<t))^2
    J    = 1/sum_i |y_i| sum_i sum_t J_it                                 (verl's default loss_agg_mode, token-mean)

Its gradient per token is (A_it - beta log(pi / pi_old)) d log pi: on-policy the plain policy gradient, and a token
that moved by l = log(pi / pi_old) is pulled back by beta l, however far it moved (no hard clip, no importance
weight). The loss is -J. Departures and choices:
- pi_old is the trainer's old policy (LossInputs.old_logp), verl's old_log_prob; the log-ratio is unbounded, as verl's.
- `beta` 0.1: twinkle's default and SkyRL's example (dro_beta); `aggregation` as GRPO's, default token_mean.
- No token is clipped: clip/token_frac, low_frac, high_frac and seq_frac are 0, and clip_low / clip_high only set
  the band of clip/ratio_out_of_band_frac (as SAPO's). The value of -J holds log pi: only its gradient is
  meaningful, as CISPO's. Optional k3 KL to a reference, reduced with the same aggregation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gspo.vocab.choices import Aggregation
from gspo.vocab.lazy import lazy_module

from .common import (
    MAX_LOG_RATIO,
    STANDARD_METRICS,
    LossInputs,
    check_aggregation,
    clip_metrics,
    out_of_band,
    ratio_metrics,
    valid_tokens,
)
from .registry import register

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")


@dataclass(frozen=True)
class DroOptions:
    beta: float = 0.1  # the quadratic term's weight (verl's dro_beta; twinkle's and SkyRL's example 0.1)
    aggregation: str = Aggregation.TOKEN_MEAN  # verl's default loss_agg_mode

    def __post_init__(self) -> None:
        if not self.beta > 0.0:
            raise ValueError(f"beta must be > 0, got {self.beta}")
        check_aggregation(self.aggregation)


@register("dro", options=DroOptions, metrics=STANDARD_METRICS, token_advantages=True, card=(
    "ratio      none in the objective: l_it = logp_it - old_logp_it enters only squared ([{lo}, {hi}] is only the\n"
    "           reported band)\n"
    "objective  J_it = A_it log pi_it - {beta}/2 l_it^2: the policy gradient pulled back to pi_old by {beta} l_it\n"
    "           per token, no clip (verl's dro)"))
def dro_loss(x: LossInputs, *, beta: float, aggregation: str) -> tuple[Tensor, dict[str, Tensor]]:
    """DRO loss and metrics. logp, old_logp, mask, ref_logp: [N, T]; advantages: [N] or [N, T]."""
    reduce_tokens = x.reducer(aggregation)
    log_ratio = x.log_ratio()  # [N, T] l_it = logp - old_logp, 0 on padding
    # J_it = A_it log pi_it - beta/2 l_it^2  (padding's log-probs, whatever they hold, replaced by 0 first)
    logp = torch.where(valid_tokens(x.mask), x.logp, torch.zeros_like(x.logp))
    objective = x.token_advantages() * logp - 0.5 * beta * log_ratio.square()
    policy_loss = -reduce_tokens(objective)

    ratio = torch.exp(log_ratio.detach().clamp(max=MAX_LOG_RATIO))
    never = torch.zeros_like(x.mask, dtype=torch.bool)
    metrics = clip_metrics(low=never, high=never, band=out_of_band(ratio, x.clip_low, x.clip_high), mask=x.mask)
    metrics.update(ratio_metrics(log_ratio=log_ratio, mask=x.mask))
    return x.finish(policy_loss, metrics, reduce_tokens)
