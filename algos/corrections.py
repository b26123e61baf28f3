"""Corrections for the training-inference mismatch: the sampler's log-probs pi_s (engine log-probs, in the
sampler's own precision) against the trainer's recomputed old-policy log-probs pi_old.

    token level:      rho_it = pi_old(y_it) / pi_s(y_it) = exp(d_it),   d_it = old_logp_it - engine_logp_it
    sequence level:   rho_i  = prod_t rho_it = exp(sum_t d_it)           (the product: TRL's sequence_* modes,
                      verl's rollout_is=sequence; the likelihood ratio of the whole response)
    geometric level:  rho_i  = exp(1/|y_i| sum_t d_it)                  (the geometric mean, length-normalised
                      like GSPO's s_i; verl's rollout_rs=geometric)

    tis    (truncated IS; Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL
            training"):                           c = min(rho, cap)
    mis    (masked IS; at token level IcePop, Ling team 2025, arXiv 2510.18855; TRL's *_mask modes):
                                                  c = rho if low <= rho <= high else 0
    mask   (a bare 0/1 mask, another estimator: the ratio dropped inside the band):
                                                  c = 1   if low <= rho <= high else 0
    geo_rs (geometric rejection sampling, Geo-RS; verl's decoupled_geo_rs): `mask` at the geometric level,
            a sequence kept (weight 1) only if its geometric-mean ratio lies in [low, high]
    k3_rs  (a trust-region sequence mask with a token veto; verl's rollout_rs=seq_mean_k3 with
            rollout_token_veto_threshold, SkyRL's outlier-token thresholds): a sequence kept (weight 1) only if
            1/|y_i| sum_t k3(rho_it) <= cap, k3(rho) = rho - 1 - log rho (the k3 estimate of KL(pi_s || pi_old)),
            and no token has rho_it < low (the veto; low = 0 vetoes nothing)
    geo_rs_tis (a mask and a weight at once; verl's Geo-RS-Seq-TIS): c_i = 1[low <= rho_geo_i <= high]
            min(rho_seq_i, cap), the band on the geometric mean, the cap on the product

Each token's (sequence's) policy-gradient term is multiplied by sg(c). The trainer applies c to the
advantages: c >= 0 is a constant of the update, and c * min(r A, clip(r) A) = min(r cA, clip(r) cA), which
holds as well for CISPO's and SAPO's token terms and for GSPO's and GMPO's sequence terms. So a
sequence-level correction fits every algorithm and a token-level one every token-level objective.
Departures and choices:
- The three levels have scales orders of magnitude apart (a geometric mean of ratios 1 +- 1e-3 is
  1 +- 1e-3 while their product over 64 tokens can be 0.9 or 1.1), so each level has its own default bounds
  (gspo.vocab.choices CORRECTION_BOUNDS; token and sequence: cap 2, band [0.5, 2], verl's rollout_is_threshold
  and its reciprocal; geometric: cap and band 1.001 / [0.999, 1.001], verl's decoupled_geo_rs), and mis at token
  level IcePop's band [0.5, 5] (the paper's and verl's decoupled_token_icepop; gspo.vocab.choices ICEPOP_BAND).
- The log-weight is bounded above by MAX_LOG_RATIO (10) before exp(), as every ratio here.
- Metrics, over valid tokens (a sequence's weight counts once per token): correction/weight_mean and
  correction/weight_max of rho, the ratios before truncation or masking; correction/applied_mean of c, the
  weights the terms got; correction/truncated_frac (tis: rho above the cap) or correction/masked_frac (mis,
  mask, geo_rs: rho outside the band; k3_rs, geo_rs_tis: the sequences masked, rho there the product).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gspo.vocab.choices import Correction, Level
from gspo.vocab.lazy import lazy_module
from gspo.vocab.metrics import (
    CORRECTION_APPLIED,
    CORRECTION_MASKED,
    CORRECTION_MAX,
    CORRECTION_MEAN,
    CORRECTION_TRUNCATED,
)

from .common import (
    MAX_LOG_RATIO,
    k3,
    masked_mean,
    masked_sum,
    spread_to_tokens,
    token_log_ratio,
    valid_tokens,
)

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")  # runs at its first use: the registry reads names and cards without it (vocab/lazy.py)

KINDS, LEVELS = Correction.values, Level.RESOLVED  # the vocabulary's (gspo.vocab.choices), computed here


def log_rho(*, old_logp: Tensor, engine_logp: Tensor, mask: Tensor, level: str) -> Tensor:
    """log rho, detached: [N, T] at token level (0 on padding), [N] at sequence or geometric level."""
    d = token_log_ratio(old_logp, engine_logp, mask).detach()  # [N, T], 0 on padding
    if level == Level.TOKEN:
        return d
    # log rho_i = sum_t d_it   (the product of the token ratios)
    total = masked_sum(d, mask, dim=-1)  # [N]
    if level == Level.SEQUENCE:
        return total
    # log rho_i = 1/|y_i| sum_t d_it   (their geometric mean)
    return total / mask.sum(dim=-1).clamp(min=1.0)


def correction_weights(*, old_logp: Tensor, engine_logp: Tensor, mask: Tensor, kind: str, level: str,
                       cap: float, low: float, high: float) -> tuple[Tensor, dict[str, Tensor]]:
    """(c, metrics): c [N, T] at token level, [N] at sequence or geometric level, detached; metrics 0-dim.

    old_logp, engine_logp, mask: [N, T]. kind "none" gives c = 1 and no metrics; geo_rs needs level geometric.
    """
    if kind not in KINDS or level not in LEVELS:
        raise ValueError(f"unknown correction {kind!r} at level {level!r}; known: {', '.join(KINDS)} at "
                         f"{', '.join(LEVELS)}")
    if kind == Correction.GEO_RS and level != Level.GEOMETRIC:
        raise ValueError(f"geo_rs masks by the geometric-mean ratio: level must be geometric, got {level!r}")
    if kind in Correction.SEQUENCE_ONLY and level != Level.SEQUENCE:
        raise ValueError(f"{kind} gives one weight per sequence: level must be sequence, got {level!r}")
    if not (cap > 0 and 0 <= low <= 1 <= high):
        raise ValueError(f"need cap > 0 and low <= 1 <= high, got cap {cap}, band [{low}, {high}]")
    rho = torch.exp(log_rho(old_logp=old_logp, engine_logp=engine_logp, mask=mask, level=level)
                    .clamp(max=MAX_LOG_RATIO))
    if kind == Correction.NONE:
        return torch.ones_like(rho), {}
    if kind in Correction.SEQUENCE_ONLY:
        return _sequence_only(old_logp=old_logp, engine_logp=engine_logp, mask=mask, kind=kind, rho=rho, cap=cap,
                              low=low, high=high)
    if kind == Correction.TIS:
        # c = min(rho, cap)
        weights = rho.clamp(max=cap)
        cut = rho > cap
    else:
        inside = (rho >= low) & (rho <= high)
        # mis: c = rho 1[low <= rho <= high];  mask, geo_rs: c = 1[low <= rho <= high]
        kept = rho if kind == Correction.MIS else torch.ones_like(rho)
        weights = torch.where(inside, kept, torch.zeros_like(rho))
        cut = ~inside
    return weights, _metrics(rho, weights, cut, mask, truncated=kind == Correction.TIS)


def _sequence_only(*, old_logp: Tensor, engine_logp: Tensor, mask: Tensor, kind: str, rho: Tensor, cap: float,
                   low: float, high: float) -> tuple[Tensor, dict[str, Tensor]]:
    """k3_rs and geo_rs_tis: (c [N], metrics); rho [N] is the product of the token ratios."""
    d = log_rho(old_logp=old_logp, engine_logp=engine_logp, mask=mask, level=Level.TOKEN)  # [N, T], 0 on padding
    if kind == Correction.K3_RS:
        # 1/|y_i| sum_t k3(rho_it), k3(rho) = rho - 1 - log rho   (0 on padding: d = 0 there)
        divergence = masked_sum(k3(d), mask, dim=-1) / mask.sum(dim=-1).clamp(min=1.0)
        # veto: some token with rho_it < low   (padding's rho is 1, never below a veto <= 1)
        vetoed = (valid_tokens(mask) & (torch.exp(d.clamp(max=MAX_LOG_RATIO)) < low)).any(dim=-1)
        kept = (divergence <= cap) & ~vetoed
        weights = kept.to(rho.dtype)
    else:
        # rho_geo_i = exp(1/|y_i| sum_t d_it); c_i = 1[low <= rho_geo_i <= high] min(rho_i, cap)
        geo = torch.exp(log_rho(old_logp=old_logp, engine_logp=engine_logp, mask=mask, level=Level.GEOMETRIC)
                        .clamp(max=MAX_LOG_RATIO))
        kept = (geo >= low) & (geo <= high)
        weights = torch.where(kept, rho.clamp(max=cap), torch.zeros_like(rho))
    return weights, _metrics(rho, weights, ~kept, mask, truncated=False)


def _metrics(rho: Tensor, weights: Tensor, cut: Tensor, mask: Tensor, *, truncated: bool) -> dict[str, Tensor]:
    """Per-token means of rho and c, the largest rho and the share truncated (tis) or masked (the others)."""
    per_token = (lambda x: x) if rho.dim() == 2 else (lambda x: spread_to_tokens(x, mask))  # [N, T]
    valid = valid_tokens(mask)
    return {
        CORRECTION_MEAN: masked_mean(per_token(rho), mask),
        CORRECTION_MAX: torch.where(valid, per_token(rho), torch.zeros_like(mask)).amax(),
        CORRECTION_APPLIED: masked_mean(per_token(weights), mask),
        (CORRECTION_TRUNCATED if truncated else CORRECTION_MASKED): masked_mean(per_token(cut).to(mask.dtype), mask),
    }
