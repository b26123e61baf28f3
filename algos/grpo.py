"""GRPO: token-level importance ratios with PPO clipping (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300).

Objective, in the form the GSPO paper (arXiv 2507.18071, eq. 2) writes it:

    w_it = pi(y_it | x, y_i<t) / pi_old(y_it | x, y_i<t)
    J    = 1/G sum_i 1/|y_i| sum_t min(w_it A_i, clip(w_it, 1 - eps_lo, 1 + eps_hi) A_i)

A_i may be given per token, A_it (process supervision, or advantages scaled by a mismatch correction).

The loss is -J. Departures and choices:
- Asymmetric clip bounds (DAPO's clip-higher); the GSPO paper's GRPO baseline uses 0.2 / 0.27.
- `aggregation` picks the token reduction: "seq_mean_token_mean" (the formula above, default),
  "token_mean" (DAPO: 1/sum|y_i| sum_i sum_t) or "seq_mean_token_sum_norm" (Dr. GRPO:
  1/G sum_i 1/max_len sum_t, max_len a constant, default the padded width T).
- The log-ratio is bounded above by MAX_LOG_RATIO (10) before exp(), as verl bounds it; beyond it
  the token has no gradient. Only pathological ratios (> 2.2e4) are affected.
- Optional k3 KL to a reference policy, beta * KL reduced with the same aggregation (beta = 0, off,
  by default as in the GSPO paper; DeepSeekMath used it).
- For gradient accumulation, `seq_denominator` / `token_denominator` replace the local counts of
  sequences / valid tokens with those of the whole minibatch, so micro-batch losses sum to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from .common import (
    MAX_LOG_RATIO,
    SEQ_MEAN_TOKEN_MEAN,
    STANDARD_METRICS,
    aggregate,
    check_aggregation,
    clip_metrics,
    clipped_objective,
    finish,
    out_of_band,
    ratio_metrics,
    sign_aware_clip,
    token_log_ratio,
)
from .registry import register


@dataclass(frozen=True)
class GrpoOptions:
    aggregation: str = SEQ_MEAN_TOKEN_MEAN  # seq_mean_token_mean (GRPO paper), token_mean (DAPO), seq_mean_token_sum_norm (Dr. GRPO)

    def __post_init__(self) -> None:
        check_aggregation(self.aggregation)


@register("grpo", options=GrpoOptions, metrics=STANDARD_METRICS, token_advantages=True)
def grpo_loss(
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
    """GRPO loss and metrics. logp, old_logp, mask, ref_logp: [N, T]; advantages: [N] or [N, T]."""
    reduce_tokens = partial(aggregate, mask=mask, aggregation=aggregation, max_len=max_len,
                            seq_denominator=seq_denominator, token_denominator=token_denominator)
    log_ratio = token_log_ratio(logp, old_logp, mask)  # [N, T], 0 on padding
    # w_it = exp(logp_it - old_logp_it)
    ratio = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))
    adv = advantages if advantages.dim() == 2 else advantages.unsqueeze(-1)  # [N, T] or [N, 1]
    # J_it = min(w_it A_i, clip(w_it, 1 - eps_lo, 1 + eps_hi) A_i)
    objective = clipped_objective(ratio, adv, clip_low, clip_high)
    policy_loss = -reduce_tokens(objective)

    low, high = sign_aware_clip(ratio, adv, clip_low, clip_high)
    metrics = clip_metrics(low=low, high=high, band=out_of_band(ratio, clip_low, clip_high), mask=mask)
    metrics.update(ratio_metrics(log_ratio=log_ratio, mask=mask))
    return finish(policy_loss, metrics, reduce_tokens, logp=logp, ref_logp=ref_logp, mask=mask,
                  kl_beta=kl_beta)
