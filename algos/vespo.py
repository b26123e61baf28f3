"""VESPO: a smooth, asymmetric Gamma weight on the sequence's importance ratio instead of a hard clip (Variational
Sequence-Level Soft Policy Optimization, arXiv 2602.10693; TRL's loss_type="vespo").

    w_i   = prod_t pi(y_it | x, y_i<t) / pi_old(y_it | x, y_i<t)      (the sequence's likelihood ratio, detached)
    phi_i = e^lambda w_i^k e^(-lambda w_i) = exp(lambda + k log w_i - lambda w_i),   phi(1) = 1
            (k, lambda) = (k_pos, lambda_pos) if A_i >= 0 else (k_neg, lambda_neg)
    J     = 1/sum_i |y_i| sum_i sum_t sg(phi_i) A_i log pi(y_it | x, y_i<t)

phi rises as w^k from 0 and decays as e^(-lambda w) past its peak at w = k / lambda, so a sequence whose ratio has
left 1 far in either direction loses its weight smoothly; on-policy (w = 1) every token gets the plain policy
gradient. The loss is -J. Departures and choices:
- The log-ratios are bounded as TRL's: each token's to [-20, 20], their sum to [log 1e-8, 20], before exp()
  (not MAX_LOG_RATIO: the weight is computed in log space and e^(-lambda w) drives a large w to 0 anyway).
- TRL folds its vLLM importance-sampling ratio into w; here a mismatch correction scales the advantage
  (c phi A), as for every member: the same value where c = 1.
- `aggregation` as GRPO's, default token_mean (TRL's: the batch's token count). The value of -J holds log pi: only
  its gradient is meaningful, as CISPO's. Optional k3 KL to a reference, reduced with the same aggregation.
- No token is hard-clipped: clip/token_frac, low_frac, high_frac and seq_frac are 0, and clip_low / clip_high only
  set the band of clip/ratio_out_of_band_frac (as SAPO's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gspo.vocab.choices import Aggregation
from gspo.vocab.lazy import lazy_module

from .common import (
    STANDARD_METRICS,
    LossInputs,
    check_aggregation,
    clip_metrics,
    masked_sum,
    out_of_band,
    ratio_metrics,
    valid_tokens,
)
from .registry import register

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")  # runs at its first use: the registry reads names and cards without it (vocab/lazy.py)

TOKEN_LOG_BOUND = 20.0  # TRL's bound on each token's log-ratio
SEQ_LOG_BOUNDS = (math.log(1e-8), 20.0)  # and on their sum


@dataclass(frozen=True)
class VespoOptions:
    k_pos: float = 2.0  # TRL's defaults (vespo_k_pos ... vespo_lambda_neg), after the paper
    lambda_pos: float = 3.0
    k_neg: float = 3.0
    lambda_neg: float = 2.0
    aggregation: str = Aggregation.TOKEN_MEAN  # TRL's; seq_mean_token_mean, seq_mean_token_sum_norm

    def __post_init__(self) -> None:
        if min(self.k_pos, self.lambda_pos, self.k_neg, self.lambda_neg) <= 0.0:
            raise ValueError(f"k_pos, lambda_pos, k_neg, lambda_neg must be > 0, got {self.k_pos}, "
                             f"{self.lambda_pos}, {self.k_neg}, {self.lambda_neg}")
        check_aggregation(self.aggregation)


def gamma_weight(log_w: Tensor, adv: Tensor, o: VespoOptions) -> Tensor:
    """phi = exp(lambda + k log w - lambda w), elementwise, (k, lambda) by the sign of `adv` (A >= 0: the _pos pair)."""
    nonneg = adv >= 0
    k = torch.where(nonneg, torch.full_like(log_w, o.k_pos), torch.full_like(log_w, o.k_neg))
    lam = torch.where(nonneg, torch.full_like(log_w, o.lambda_pos), torch.full_like(log_w, o.lambda_neg))
    # log phi = lambda + k log w - lambda w
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w))


@register("vespo", options=VespoOptions, metrics=STANDARD_METRICS, card=(
    "ratio      sequence, the product of the token ratios: w_i = exp(sum_t (logp_it - old_logp_it)), detached\n"
    "objective  J_it = sg(phi_i) A_i log pi_it, phi_i = exp(lam + k log w_i - lam w_i): k, lam = {k_pos}, {lambda_pos}\n"
    "           (A >= 0) or {k_neg}, {lambda_neg} (A < 0); a smooth Gamma weight, phi(1) = 1, no hard clip\n"
    "           ([{lo}, {hi}] is only the reported band)"))
def vespo_loss(x: LossInputs, *, k_pos: float, lambda_pos: float, k_neg: float, lambda_neg: float,
               aggregation: str) -> tuple[Tensor, dict[str, Tensor]]:
    """VESPO loss and metrics. logp, old_logp, mask, ref_logp: [N, T]; advantages: [N]."""
    options = VespoOptions(k_pos, lambda_pos, k_neg, lambda_neg, aggregation)
    reduce_tokens = x.reducer(aggregation)
    log_ratio = x.log_ratio()  # [N, T], 0 on padding
    # log w_i = sum_t l_it, each l bounded to [-20, 20] and the sum to [log 1e-8, 20]; detached: sg(.)
    bounded = log_ratio.detach().clamp(-TOKEN_LOG_BOUND, TOKEN_LOG_BOUND)
    log_w = masked_sum(bounded, x.mask, dim=-1).clamp(*SEQ_LOG_BOUNDS)  # [N]
    phi = gamma_weight(log_w, x.advantages, options)  # [N]
    # J_it = sg(phi_i) A_i log pi_it  (padding's log-probs, whatever they hold, replaced by 0 first)
    logp = torch.where(valid_tokens(x.mask), x.logp, torch.zeros_like(x.logp))
    objective = (phi * x.advantages).unsqueeze(-1) * logp
    policy_loss = -reduce_tokens(objective)

    ratio = torch.exp(log_ratio.clamp(max=TOKEN_LOG_BOUND))
    never = torch.zeros_like(x.mask, dtype=torch.bool)
    metrics = clip_metrics(low=never, high=never, band=out_of_band(ratio, x.clip_low, x.clip_high), mask=x.mask)
    metrics.update(ratio_metrics(log_ratio=log_ratio, mask=x.mask))
    return x.finish(policy_loss, metrics, reduce_tokens)
