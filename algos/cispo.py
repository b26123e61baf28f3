"""CISPO: clipped, detached importance weights on a REINFORCE-style term (MiniMax-M1, arXiv 2506.13585, eq. 4).

    r_it  = pi(y_it | x, y_i<t) / pi_old(y_it | x, y_i<t)
    ^r_it = clip(r_it, 1 - eps_lo, 1 + eps_hi)
    J     = 1/sum_i |y_i| sum_i sum_t sg(^r_it) A_i log pi(y_it | x, y_i<t)

The bounds act on the weight, which carries no gradient: every token keeps its gradient ^r_it A_i
(PPO's min() gives a clipped token none). The loss is -J. Departures and choices:
- `clip_low` may be 1.0: no lower bound (the paper sets eps_lo "to a large value" and tunes only eps_hi).
- `aggregation` as GRPO's, default token_mean (the paper's 1/sum|y_i|).
- The log-ratio is bounded above by MAX_LOG_RATIO (10) before exp(), as in GRPO; the weight is clipped to
  1 + eps_hi anyway, so the bound changes nothing but keeps exp() finite.
- The value of -J is not the surrogate's (it holds log pi): only its gradient is meaningful, as in every
  REINFORCE-style loss. Optional k3 KL to a reference, reduced with the same aggregation.
- Clip metrics count the tokens whose weight was truncated, whatever the advantage's sign (the weight is
  clipped for both signs).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from .common import (
    MAX_LOG_RATIO,
    STANDARD_METRICS,
    TOKEN_MEAN,
    aggregate,
    check_aggregation,
    clip_metrics,
    finish,
    ratio_metrics,
    token_log_ratio,
    valid_tokens,
)
from .registry import register


@dataclass(frozen=True)
class CispoOptions:
    aggregation: str = TOKEN_MEAN  # token_mean (the paper's), seq_mean_token_mean, seq_mean_token_sum_norm

    def __post_init__(self) -> None:
        check_aggregation(self.aggregation)


@register("cispo", options=CispoOptions, metrics=STANDARD_METRICS, token_advantages=True, no_lower_bound=True)
def cispo_loss(
    *,
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float,
    clip_high: float,
    aggregation: str,  # the default: the options dataclass above
    max_len: float | None = None,
    ref_logp: Tensor | None = None,
    kl_beta: float = 0.0,
    seq_denominator: float | None = None,
    token_denominator: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO loss and metrics. logp, old_logp, mask, ref_logp: [N, T]; advantages: [N] or [N, T]."""
    reduce_tokens = partial(aggregate, mask=mask, aggregation=aggregation, max_len=max_len,
                            seq_denominator=seq_denominator, token_denominator=token_denominator)
    log_ratio = token_log_ratio(logp, old_logp, mask)  # [N, T], 0 on padding
    # r_it = exp(logp_it - old_logp_it), detached: sg(.)
    ratio = torch.exp(log_ratio.detach().clamp(max=MAX_LOG_RATIO))
    # ^r_it = clip(r_it, 1 - eps_lo, 1 + eps_hi)
    weight = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    # J_it = sg(^r_it) A_i log pi_it  (padding's log-probs, whatever they hold, replaced by 0 first)
    adv = advantages if advantages.dim() == 2 else advantages.unsqueeze(-1)  # [N, T] or [N, 1]
    objective = weight * adv * torch.where(valid_tokens(mask), logp, torch.zeros_like(logp))
    policy_loss = -reduce_tokens(objective)

    low, high = ratio < 1.0 - clip_low, ratio > 1.0 + clip_high
    metrics = clip_metrics(low=low, high=high, band=low | high, mask=mask)
    metrics.update(ratio_metrics(log_ratio=log_ratio, mask=mask))
    return finish(policy_loss, metrics, reduce_tokens, logp=logp, ref_logp=ref_logp, mask=mask,
                  kl_beta=kl_beta)

