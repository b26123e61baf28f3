"""GRPO: token-level importance ratios with PPO clipping (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300).

Objective, in the form the GSPO paper (arXiv 2507.18071, eq. 2) writes it:

    w_it = pi(y_it | x, y_i<t) / pi_old(y_it | x, y_i<t)
    J    = 1/G sum_i 1/|y_i| sum_t min(w_it A_i, clip(w_it, 1 - eps_lo, 1 + eps_hi) A_i)

A_i may be given per token, A_it (process supervision, or advantages scaled by a mismatch correction).

The loss is -J. Departures and choices:
- Asymmetric clip bounds (DAPO's clip-higher); the GSPO paper's GRPO baseline uses 0.2 / 0.27.
- `aggregation` picks the token reduction: "seq_mean_token_mean" (the formula above, default),
  "token_mean" (DAPO: 1/sum|y_i| sum_i sum_t), "seq_mean_token_sum_norm" (Dr. GRPO:
  1/G sum_i 1/max_len sum_t, max_len a constant, default the padded width T) or "seq_mean_token_sum" (verl's
  loss_agg_mode=seq-mean-token-sum: 1/G sum_i sum_t, no length normaliser).
- The log-ratio is bounded above by MAX_LOG_RATIO (10) before exp(), as verl bounds it; beyond it
  the token has no gradient. Only pathological ratios (> 2.2e4) are affected.
- Optional k3 KL to a reference policy, beta * KL reduced with the same aggregation (beta = 0, off,
  by default as in the GSPO paper; DeepSeekMath used it).
- For gradient accumulation, `seq_denominator` / `token_denominator` replace the local counts of
  sequences / valid tokens with those of the whole minibatch, so micro-batch losses sum to it.
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
    clipped_objective,
    out_of_band,
    ratio_metrics,
    sign_aware_clip,
)
from .registry import register

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")  # runs at its first use: the registry reads names and cards without it (vocab/lazy.py)

GRPO_CARD = ("ratio      token: r_it = exp(logp_it - old_logp_it), the log-ratio bounded above by 10\n"
             "objective  J_it = min(r_it A_i, clip(r_it, {lo}, {hi}) A_i): a clipped token has no gradient")


@dataclass(frozen=True)
class GrpoOptions:
    aggregation: str = Aggregation.SEQ_MEAN_TOKEN_MEAN  # seq_mean_token_mean (GRPO paper), token_mean (DAPO), seq_mean_token_sum_norm (Dr. GRPO), seq_mean_token_sum (verl)

    def __post_init__(self) -> None:
        check_aggregation(self.aggregation)


@register("grpo", options=GrpoOptions, metrics=STANDARD_METRICS, token_advantages=True, card=GRPO_CARD)
def grpo_loss(x: LossInputs, *, aggregation: str) -> tuple[Tensor, dict[str, Tensor]]:
    """GRPO loss and metrics. logp, old_logp, mask, ref_logp: [N, T]; advantages: [N] or [N, T]."""
    reduce_tokens = x.reducer(aggregation)
    log_ratio = x.log_ratio()  # [N, T], 0 on padding
    # w_it = exp(logp_it - old_logp_it)
    ratio = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))
    adv = x.token_advantages()  # [N, T] or [N, 1]
    # J_it = min(w_it A_i, clip(w_it, 1 - eps_lo, 1 + eps_hi) A_i)
    objective = clipped_objective(ratio, adv, x.clip_low, x.clip_high)
    policy_loss = -reduce_tokens(objective)

    low, high = sign_aware_clip(ratio, adv, x.clip_low, x.clip_high)
    metrics = clip_metrics(low=low, high=high, band=out_of_band(ratio, x.clip_low, x.clip_high), mask=x.mask)
    metrics.update(ratio_metrics(log_ratio=log_ratio, mask=x.mask))
    return x.finish(policy_loss, metrics, reduce_tokens)
