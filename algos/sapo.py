"""SAPO: a soft, temperature-controlled gate instead of the hard clip (Gao et al. 2025, Qwen, "Soft Adaptive
Policy Optimization", arXiv 2511.20347, eqs. for f and J in sec. 3).

    r_it = pi(y_it | x, y_i<t) / pi_old(y_it | x, y_i<t)
    f(r) = 4/tau * sigmoid(tau (r - 1)),   tau = tau_pos if A_i > 0 else tau_neg
    J    = 1/G sum_i 1/|y_i| sum_t f(r_it) A_i

df/dr = 4 sigmoid(1 - sigmoid) is 1 at r = 1, so on-policy SAPO is the plain policy gradient; away from 1
the token's gradient weight r f'(r) decays smoothly (faster for larger tau) instead of dropping to 0 at a
band's edge. tau_neg > tau_pos damps negative-advantage tokens sooner (the paper: they are the less
stable ones). The loss is -J. Departures and choices:
- SAPO has no clip bounds. `clip_low` / `clip_high`, required of every algorithm, only set the band of
  the metric clip/ratio_out_of_band_frac; clip/token_frac, low_frac, high_frac and seq_frac are 0 (no
  token is hard-clipped).
- `aggregation` as GRPO's, default seq_mean_token_mean (the paper's 1/G sum_i 1/|y_i|).
- The log-ratio is bounded above by MAX_LOG_RATIO (10) before exp(), as in GRPO.
- A = 0 takes tau_neg; its term is 0 whatever tau is. Optional k3 KL to a reference, reduced likewise.
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
)
from .registry import register

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")  # runs at its first use: the registry reads names and cards without it (vocab/lazy.py)


@dataclass(frozen=True)
class SapoOptions:
    tau_pos: float = 1.0  # gate temperature where A > 0 (the paper's setting)
    tau_neg: float = 1.05  # gate temperature where A <= 0 (the paper's setting: > tau_pos)
    aggregation: str = Aggregation.SEQ_MEAN_TOKEN_MEAN  # the paper's 1/G sum_i 1/|y_i|; token_mean, seq_mean_token_sum_norm

    def __post_init__(self) -> None:
        if not (self.tau_pos > 0.0 and self.tau_neg > 0.0):
            raise ValueError(f"tau_pos and tau_neg must be > 0, got {self.tau_pos}, {self.tau_neg}")
        check_aggregation(self.aggregation)


@register("sapo", options=SapoOptions, metrics=STANDARD_METRICS, token_advantages=True, card=(
    "ratio      token: r_it = exp(logp_it - old_logp_it)\n"
    "objective  J_it = f(r_it) A_i, f(r) = 4/tau sigmoid(tau (r - 1)), tau = {tau_pos} (A > 0) or {tau_neg} (A <= 0):\n"
    "           a soft gate, no hard clip ([{lo}, {hi}] is only the reported band)"))
def sapo_loss(x: LossInputs, *, tau_pos: float, tau_neg: float, aggregation: str) -> tuple[Tensor, dict[str, Tensor]]:
    """SAPO loss and metrics. logp, old_logp, mask, ref_logp: [N, T]; advantages: [N] or [N, T]."""
    reduce_tokens = x.reducer(aggregation)
    log_ratio = x.log_ratio()  # [N, T], 0 on padding
    # r_it = exp(logp_it - old_logp_it)
    ratio = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))
    adv = x.token_advantages()  # [N, T] or [N, 1]
    # tau = tau_pos where A_i > 0, else tau_neg
    tau = torch.where(adv > 0, torch.full_like(adv, tau_pos), torch.full_like(adv, tau_neg))  # like adv, its dtype
    # J_it = 4/tau sigmoid(tau (r_it - 1)) A_i
    objective = 4.0 / tau * torch.sigmoid(tau * (ratio - 1.0)) * adv
    policy_loss = -reduce_tokens(objective)

    never = torch.zeros_like(x.mask, dtype=torch.bool)
    metrics = clip_metrics(low=never, high=never, band=out_of_band(ratio, x.clip_low, x.clip_high), mask=x.mask)
    metrics.update(ratio_metrics(log_ratio=log_ratio, mask=x.mask))
    return x.finish(policy_loss, metrics, reduce_tokens)
