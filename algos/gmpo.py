"""GMPO: the geometric mean of token-level clipped ratios (Zhao et al. 2025, "Geometric-Mean Policy
Optimization", arXiv 2507.20673, eq. 4).

    r_it = pi(y_it | x, y_i<t) / pi_old(y_it | x, y_i<t)
    J    = 1/G sum_i sgn(A_i) [prod_t |min(r_it A_i, clip(r_it, e^-eps_lo, e^eps_hi) A_i)|]^(1/|y_i|)
         = 1/G sum_i A_i exp(1/|y_i| sum_t l~_it)

with, in log space (l_it = log r_it), the sign-aware clip that min() amounts to:

    l~_it = min(l_it, clip(l_it, -eps_lo, eps_hi))   if A_i > 0   (only the upper bound acts)
    l~_it = max(l_it, clip(l_it, -eps_lo, eps_hi))   if A_i < 0   (only the lower bound acts)

So `clip_low` / `clip_high` are bounds on the LOG ratio (the paper: (-0.4, 0.4), a ratio band
(e^-0.4, e^0.4) = (0.67, 1.49)), not on 1 -/+ eps as in GRPO. A clipped token loses its gradient; the
others get s_i A_i / |y_i| (s_i the clipped geometric mean), the same sequence weight for all of them,
as in GSPO. The loss is -J. Departures and choices:
- One weight per sequence, never weighted by length: no aggregation option, as GSPO (verl's geo_mean).
- A_i = 0 contributes 0 and is never clipped. The mean log-ratio is bounded above by MAX_LOG_RATIO (10)
  before exp(), as GSPO's.
- Optional k3 KL to a reference: each sequence's mean per-token KL averaged over sequences, as GSPO's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gspo.vocab.choices import Aggregation, Ratio
from gspo.vocab.lazy import lazy_module

from .common import (
    MAX_LOG_RATIO,
    STANDARD_METRICS,
    LossInputs,
    clip_metrics,
    masked_sum,
    ratio_metrics,
    seq_lengths,
    seq_mean,
    valid_tokens,
)
from .registry import register

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")  # runs at its first use: the registry reads names and cards without it (vocab/lazy.py)


@register("gmpo", metrics=STANDARD_METRICS, ratio=Ratio.GEOMETRIC, aggregation="seq_mean", card=(
    "ratio      sequence, the geometric mean of token ratios each clipped in LOG space, sign-aware by A_i:\n"
    "           l~_it = min(l_it, clip(l_it, -{clip_low}, {clip_high})) if A_i > 0, max(...) if A_i < 0 (ratios {exp_lo} .. {exp_hi})\n"
    "objective  J_i = A_i exp(1/|y_i| sum_t l~_it): a clipped token has no gradient"))
def gmpo_loss(x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
    """GMPO loss and metrics. logp, old_logp, mask, ref_logp: [N, T]; advantages: [N]."""
    log_ratio = x.log_ratio()  # [N, T], 0 on padding
    sign = torch.sign(x.advantages).unsqueeze(-1)  # [N, 1]
    # l~_it = sgn(A_i) min(sgn(A_i) l_it, sgn(A_i) clip(l_it, -eps_lo, eps_hi))   (0 where A_i = 0)
    clipped = sign * torch.minimum(sign * log_ratio, sign * log_ratio.clamp(-x.clip_low, x.clip_high))
    # s_i = exp(1/|y_i| sum_t l~_it)
    seq_ratio = torch.exp((masked_sum(clipped, x.mask, dim=-1) / seq_lengths(x.mask)).clamp(max=MAX_LOG_RATIO))
    # J_i = A_i s_i; a row with no completion token adds 0
    objective = torch.where(valid_tokens(x.mask).any(dim=-1), x.advantages * seq_ratio, torch.zeros_like(seq_ratio))
    # J = 1/G sum_i J_i
    policy_loss = -seq_mean(objective, seq_denominator=x.seq_denominator)

    adv = x.advantages.unsqueeze(-1)
    low, high = (adv < 0) & (log_ratio < -x.clip_low), (adv > 0) & (log_ratio > x.clip_high)
    band = (log_ratio < -x.clip_low) | (log_ratio > x.clip_high)
    metrics = clip_metrics(low=low, high=high, band=band, mask=x.mask)
    metrics.update(ratio_metrics(log_ratio=log_ratio, mask=x.mask))
    reduce_tokens = x.reducer(Aggregation.SEQ_MEAN_TOKEN_MEAN)
    return x.finish(policy_loss, metrics, reduce_tokens)
