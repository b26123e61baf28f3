"""GSPO: sequence-level importance ratios (Zheng et al. 2025, Qwen, "Group Sequence Policy
Optimization", arXiv 2507.18071, eqs. 5 and 7).

    s_i = (pi(y_i | x) / pi_old(y_i | x))^(1/|y_i|) = exp(1/|y_i| sum_t log(pi_it / pi_old_it))
    J   = 1/G sum_i min(s_i A_i, clip(s_i, 1 - eps_lo, 1 + eps_hi) A_i)

The loss is -J. One weight per sequence, and a sequence is never weighted by its length, so GSPO has
no aggregation option (GRPO's `algo.options.aggregation`): its loss is always a plain mean over sequences.
Departures and choices:
- The ratio is computed in log space and log s_i is bounded above by MAX_LOG_RATIO (10) before
  exp(), as verl does; beyond it the sequence has no gradient. The paper's clip range is 3e-4 / 4e-4,
  so the bound only touches sequences already far outside it.
- Optional k3 KL to a reference policy: each sequence's mean per-token KL, averaged over sequences
  (beta * 1/G sum_i 1/|y_i| sum_t k3_it), so that term does not weight by length either.
- `seq_denominator` replaces the local number of sequences by the minibatch's, so micro-batch losses
  sum to the minibatch loss.
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
    clipped_objective,
    out_of_band,
    ratio_metrics,
    seq_log_ratio,
    seq_mean,
    sign_aware_clip,
    spread_to_tokens,
    valid_tokens,
)
from .registry import register

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")  # runs at its first use: the registry reads names and cards without it (vocab/lazy.py)


@register("gspo", metrics=STANDARD_METRICS, ratio=Ratio.GEOMETRIC, aggregation="seq_mean", on_policy_as="grpo", card=(
    "ratio      sequence, the geometric mean of the token ratios: s_i = exp(1/|y_i| sum_t (logp_it - old_logp_it)),\n"
    "           log s_i bounded above by 10\n"
    "objective  J_i = min(s_i A_i, clip(s_i, {lo}, {hi}) A_i): one weight per sequence, never weighted by its length"))
def gspo_loss(x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO loss and metrics. logp, old_logp, mask, ref_logp: [N, T]; advantages: [N]."""
    objective, metrics = sequence_objective(x)
    # J = 1/G sum_i J_i
    policy_loss = -seq_mean(objective, seq_denominator=x.seq_denominator)
    reduce_tokens = x.reducer(Aggregation.SEQ_MEAN_TOKEN_MEAN)
    return x.finish(policy_loss, metrics, reduce_tokens)


def sequence_objective(x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
    """(J_i [N], metrics): GSPO's clipped sequence term, 0 for a row with no completion token; the clip metrics
    count every token of a clipped sequence (GSPO's and LUSPO's)."""
    log_ratio = x.log_ratio()  # [N, T], 0 on padding
    # s_i = exp(1/|y_i| sum_t (logp_it - old_logp_it))
    seq_ratio = torch.exp(seq_log_ratio(log_ratio, x.mask).clamp(max=MAX_LOG_RATIO))  # [N]
    # J_i = min(s_i A_i, clip(s_i, 1 - eps_lo, 1 + eps_hi) A_i)
    objective = clipped_objective(seq_ratio, x.advantages, x.clip_low, x.clip_high)
    # A row with no completion token has nothing to weight: it adds 0, as it does in GRPO.
    objective = torch.where(valid_tokens(x.mask).any(dim=-1), objective, torch.zeros_like(objective))

    # A clipped sequence counts all of its tokens: spread the per-sequence flags over [N, T].
    low, high = sign_aware_clip(seq_ratio, x.advantages, x.clip_low, x.clip_high)
    band = out_of_band(seq_ratio, x.clip_low, x.clip_high)
    metrics = clip_metrics(low=spread_to_tokens(low, x.mask), high=spread_to_tokens(high, x.mask),
                           band=spread_to_tokens(band, x.mask), mask=x.mask)
    metrics.update(ratio_metrics(log_ratio=log_ratio, mask=x.mask))
    return objective, metrics
