"""Corrections for the training-inference mismatch: the sampler's log-probs pi_s (engine log-probs, in the
sampler's own precision) against the trainer's recomputed old-policy log-probs pi_old.

    token level:     rho_it = pi_old(y_it) / pi_s(y_it) = exp(old_logp_it - engine_logp_it)
    sequence level:  rho_i  = exp(1/|y_i| sum_t (old_logp_it - engine_logp_it))   (the geometric mean, so a
                     sequence's weight keeps GSPO's length normalisation)
    TIS (truncated importance sampling; Yao et al. 2025, "Your efficient RL framework secretly brings you
         off-policy RL training"):      c = min(rho, cap)
    MIS (masked importance sampling; IcePop, Ling team 2025): c = 1 if low <= rho <= high else 0

Each token's (sequence's) policy-gradient term is multiplied by sg(c). The trainer applies c to the
advantages: c >= 0 is a constant of the update, and c * min(r A, clip(r) A) = min(r cA, clip(r) cA), which
holds as well for CISPO's and SAPO's token terms and for GSPO's and GMPO's sequence terms. So a
sequence-level correction fits every algorithm and a token-level one every token-level objective.
Departures and choices:
- The log-weight is bounded above by MAX_LOG_RATIO (10) before exp(), as every ratio here.
- Defaults (conf/schema.py): cap 2 (the TIS authors' example), band [0.5, 2] (symmetric in log space).
- Metrics, over valid tokens (a sequence's weight counts once per token): correction/weight_mean and
  correction/weight_max of rho, the weights before truncation or masking, and correction/truncated_frac
  (TIS: rho above the cap) or correction/masked_frac (MIS: rho outside the band).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .common import MAX_LOG_RATIO, masked_mean, seq_log_ratio, spread_to_tokens, token_log_ratio, valid_tokens
from .metrics import CORRECTION_MASKED, CORRECTION_MAX, CORRECTION_MEAN, CORRECTION_TRUNCATED

KINDS = ("none", "tis", "mis")
LEVELS = ("token", "sequence")


def correction_weights(*, old_logp: Tensor, engine_logp: Tensor, mask: Tensor, kind: str, level: str,
                       cap: float, low: float, high: float) -> tuple[Tensor, dict[str, Tensor]]:
    """(c, metrics): c [N, T] at token level, [N] at sequence level, detached; metrics 0-dim, detached.

    old_logp, engine_logp, mask: [N, T]. kind "none" gives c = 1 and no metrics.
    """
    if kind not in KINDS or level not in LEVELS:
        raise ValueError(f"unknown correction {kind!r} at level {level!r}; known: {', '.join(KINDS)} at "
                         f"{', '.join(LEVELS)}")
    if not (cap > 0 and 0 <= low <= 1 <= high):
        raise ValueError(f"need cap > 0 and low <= 1 <= high, got cap {cap}, band [{low}, {high}]")
    log_rho = token_log_ratio(old_logp, engine_logp, mask).detach()  # [N, T], 0 on padding
    if level == "sequence":
        # log rho_i = 1/|y_i| sum_t (old_logp_it - engine_logp_it)
        log_rho = seq_log_ratio(log_rho, mask)  # [N]
    rho = torch.exp(log_rho.clamp(max=MAX_LOG_RATIO))
    if kind == "none":
        return torch.ones_like(rho), {}
    per_token = rho if level == "token" else spread_to_tokens(rho, mask)  # [N, T]
    valid = valid_tokens(mask)
    metrics = {
        CORRECTION_MEAN: masked_mean(per_token, mask),
        CORRECTION_MAX: torch.where(valid, per_token, torch.zeros_like(per_token)).amax(),
    }
    if kind == "tis":
        # c = min(rho, cap)
        weights = rho.clamp(max=cap)
        metrics[CORRECTION_TRUNCATED] = masked_mean((per_token > cap).to(mask.dtype), mask)
    else:
        # c = 1 inside [low, high], 0 outside
        inside = (rho >= low) & (rho <= high)
        weights = inside.to(rho.dtype)
        outside = ~(inside if level == "token" else spread_to_tokens(inside, mask))
        metrics[CORRECTION_MASKED] = masked_mean(outside.to(mask.dtype), mask)
    return weights, metrics
