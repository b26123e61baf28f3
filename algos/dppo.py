"""DPPO: a trust region on the probability itself, not on the ratio (Divergence Proximal Policy Optimization,
"Rethinking the Trust Region in LLM Reinforcement Learning", arXiv 2602.04879; verl's dppo_tv / dppo_kl).

With p_it = pi(y_it | x, y_i<t) and q_it = pi_old(y_it | x, y_i<t) the token probabilities (not their ratio),
r_it = p_it / q_it, a token keeps its gradient unless it has moved too far in the direction its advantage
pushes it:

    Binary-TV:  keep_it = (p_it - q_it <= d_hi)                  if A_it > 0
                        = (p_it - q_it >= -d_lo)                 if A_it <= 0
    Binary-KL:  D_it    = q log(q / p) + (1 - q) log((1 - q) / (1 - p))     (KL of the two Bernoullis)
                keep_it = (D_it <= d_hi) or (p_it <= q_it)      if A_it > 0
                        = (D_it <= d_lo) or (p_it >= q_it)      if A_it <= 0
    J = 1/sum_i |y_i| sum_i sum_t keep_it sg(min(r_it, c)) A_it log pi(y_it | x, y_i<t)

so a rare token going from 1e-5 to 1e-3 (ratio 100, clipped by PPO) keeps its gradient, and a likely one
falling from 0.99 to 0.8 (ratio 0.81, inside PPO's band) loses it. sg(min(r, c)) is a truncated importance
weight (TIS), c = 20 (verl's clip_ratio_c default for DPPO; the paper, sec. 5.4, asks for a large cap).
The loss is -J. Departures and choices:
- `clip_low` / `clip_high` are the divergence thresholds d_lo / d_hi, as verl reads clip_ratio_low / _high for
  these losses: a probability difference (TV) or a Bernoulli KL (KL), not a ratio band. The authors' script
  (verl examples/dppo_trainer): 0.15 / 0.15 for TV, 0.05 / 0.05 for KL.
- D takes verl's 1e-8 inside its second logarithm ((1 - q + 1e-8) / (1 - p + 1e-8)), so p = 1 stays finite.
- `aggregation` as GRPO's, default token_mean (verl's default for these losses); the authors' script uses
  Dr. GRPO's seq_mean_token_sum_norm with no std division (conf/algo/dppo_tv.yaml, dppo_kl.yaml).
- The value of -J holds log pi: only its gradient is meaningful, as CISPO's. The log-ratio is bounded above by
  MAX_LOG_RATIO (10) before exp(); the weight is capped at c anyway. Optional k3 KL to a reference.
- Clip metrics count the dropped tokens: low (A < 0), high (A > 0), and clip/ratio_out_of_band_frac the tokens
  past a threshold in either direction, whatever their advantage.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .common import (
    MAX_LOG_RATIO,
    STANDARD_METRICS,
    TOKEN_MEAN,
    LossInputs,
    check_aggregation,
    clip_metrics,
    ratio_metrics,
    valid_tokens,
)
from .registry import register

BINARY_KL_EPS = 1e-8  # verl's, inside log((1 - q + eps) / (1 - p + eps))


@dataclass(frozen=True)
class DppoOptions:
    tis_cap: float = 20.0  # c: the importance weight sg(min(r, c)) (verl's clip_ratio_c default for DPPO)
    aggregation: str = TOKEN_MEAN  # verl's default; the authors' script: seq_mean_token_sum_norm (Dr. GRPO)

    def __post_init__(self) -> None:
        if not self.tis_cap > 0.0:
            raise ValueError(f"tis_cap must be > 0, got {self.tis_cap}")
        check_aggregation(self.aggregation)


def binary_kl(p: Tensor, q: Tensor) -> Tensor:
    """D = q log(q / p) + (1 - q) log((1 - q + eps) / (1 - p + eps)), elementwise; p, q in (0, 1]."""
    # D = q (log q - log p) + (1 - q) log((1 - q + eps) / (1 - p + eps))
    return q * (torch.log(q) - torch.log(p)) + (1.0 - q) * torch.log((1.0 - q + BINARY_KL_EPS) / (1.0 - p + BINARY_KL_EPS))


def _dppo(x: LossInputs, keep: Tensor, beyond: Tensor, tis_cap: float, aggregation: str) -> tuple[Tensor, dict]:
    """J = 1/sum|y_i| sum keep sg(min(r, c)) A log pi, reduced by `aggregation`; keep, beyond: [N, T] booleans."""
    reduce_tokens = x.reducer(aggregation)
    log_ratio = x.log_ratio()  # [N, T], 0 on padding
    adv = x.token_advantages()  # [N, T] or [N, 1]
    # w_it = sg(min(r_it, c))
    weight = torch.exp(log_ratio.detach().clamp(max=MAX_LOG_RATIO)).clamp(max=tis_cap)
    # J_it = keep_it w_it A_it log pi_it  (padding's log-probs, whatever they hold, replaced by 0 first)
    logp = torch.where(valid_tokens(x.mask), x.logp, torch.zeros_like(x.logp))
    objective = keep.to(logp.dtype) * weight * adv * logp
    policy_loss = -reduce_tokens(objective)

    dropped = ~keep
    metrics = clip_metrics(low=dropped & (adv < 0), high=dropped & (adv > 0), band=beyond, mask=x.mask)
    metrics.update(ratio_metrics(log_ratio=log_ratio, mask=x.mask))
    return x.finish(policy_loss, metrics, reduce_tokens)


def _probs(x: LossInputs) -> tuple[Tensor, Tensor]:
    """(p, q) [N, T], detached: the token probabilities under pi and pi_old, 1 on padding."""
    valid = valid_tokens(x.mask)
    logp = torch.where(valid, x.logp.detach(), torch.zeros_like(x.logp))
    old = torch.where(valid, x.old_logp, torch.zeros_like(x.old_logp))
    return torch.exp(logp), torch.exp(old)


@register("dppo_tv", display="DPPO-TV", options=DppoOptions, metrics=STANDARD_METRICS, token_advantages=True, card=(
    "ratio      token probabilities p = pi, q = pi_old (not their ratio) for the mask; r = p / q for the weight\n"
    "mask       keep_it = (p - q <= {clip_high}) if A_it > 0, (p - q >= -{clip_low}) if A_it <= 0:\n"
    "           clip_low / clip_high are total-variation thresholds, as verl reads them, not a ratio band\n"
    "objective  J_it = keep_it sg(min(r_it, {tis_cap})) A_it log pi_it"))
def dppo_tv_loss(x: LossInputs, *, tis_cap: float, aggregation: str) -> tuple[Tensor, dict[str, Tensor]]:
    """DPPO Binary-TV loss and metrics. logp, old_logp, mask, ref_logp: [N, T]; advantages: [N] or [N, T]."""
    p, q = _probs(x)
    adv = x.token_advantages()
    # keep_it = (p - q <= d_hi) if A_it > 0 else (p - q >= -d_lo)
    keep = torch.where(adv > 0, p - q <= x.clip_high, p - q >= -x.clip_low)
    beyond = (p - q > x.clip_high) | (p - q < -x.clip_low)
    return _dppo(x, keep, beyond, tis_cap, aggregation)


@register("dppo_kl", display="DPPO-KL", options=DppoOptions, metrics=STANDARD_METRICS, token_advantages=True, card=(
    "ratio      token probabilities p = pi, q = pi_old (not their ratio) for the mask; r = p / q for the weight\n"
    "mask       D = q log(q/p) + (1-q) log((1-q)/(1-p)); keep_it = D <= {clip_high} or p <= q if A_it > 0,\n"
    "           D <= {clip_low} or p >= q if A_it <= 0: Bernoulli-KL thresholds, as verl reads clip_low / clip_high\n"
    "objective  J_it = keep_it sg(min(r_it, {tis_cap})) A_it log pi_it"))
def dppo_kl_loss(x: LossInputs, *, tis_cap: float, aggregation: str) -> tuple[Tensor, dict[str, Tensor]]:
    """DPPO Binary-KL loss and metrics. logp, old_logp, mask, ref_logp: [N, T]; advantages: [N] or [N, T]."""
    p, q = _probs(x)
    adv = x.token_advantages()
    kl = binary_kl(p, q)  # [N, T], 0 on padding (p = q = 1)
    # keep_it = (D <= d_hi or p <= q) if A_it > 0 else (D <= d_lo or p >= q)
    keep = torch.where(adv > 0, (kl <= x.clip_high) | (p <= q), (kl <= x.clip_low) | (p >= q))
    beyond = ((kl > x.clip_high) & (p > q)) | ((kl > x.clip_low) & (p < q))
    return _dppo(x, keep, beyond, tis_cap, aggregation)
