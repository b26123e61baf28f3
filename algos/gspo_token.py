"""GSPO-token: sequence-level ratio values with per-token advantages (Zheng et al. 2025, Qwen,
"Group Sequence Policy Optimization", arXiv 2507.18071, eqs. 13-14).

    s_it = sg[s_i] * pi(y_it | x, y_i<t) / sg[pi(y_it | x, y_i<t)]
    J    = 1/G sum_i 1/|y_i| sum_t min(s_it A_it, clip(s_it, 1 - eps_lo, 1 + eps_hi) A_it)

s_it has the value of the sequence ratio s_i, and its gradient flows through token t's own
log-prob only, with weight s_i (not s_i / |y_i|: the 1/|y_i| comes once, from the aggregation).
With A_it = A_i for all t this equals GSPO in value and in gradient.
Departures and choices:
- `advantages` may be [N, T] (per token) or [N] (broadcast over each sequence's tokens).
- The token-level reduction is the paper's 1/G sum_i 1/|y_i| sum_t, always: each sequence's own
  length normalises its tokens, never the batch's token count; so, like GSPO, it has no aggregation
  option. Per-token advantages come from the `step` estimator (gspo.algos.advantages, algo=gspo_token_step).
- log s_it is bounded above by MAX_LOG_RATIO (10) before exp(), as in GSPO.
- Optional k3 KL to a reference policy, reduced the same way as the policy term.
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
    sign_aware_clip,
    spread_to_tokens,
    token_log_ratio,
)
from .registry import register

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")  # runs at its first use: the registry reads names and cards without it (vocab/lazy.py)


@register("gspo_token", metrics=STANDARD_METRICS, token_advantages=True, ratio=Ratio.GEOMETRIC,
          same_as="gspo", aggregation="seq_mean_token_mean", card=(
    "ratio      sequence geometric mean with token gradients: s_it = sg[s_i] pi_it / sg[pi_it],\n"
    "           s_i = exp(1/|y_i| sum_t (logp_it - old_logp_it))\n"
    "objective  J_it = min(s_it A_it, clip(s_it, {lo}, {hi}) A_it)"))
def gspo_token_loss(x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO-token loss and metrics. logp, old_logp, mask, ref_logp: [N, T]; advantages: [N, T] or [N]."""
    adv = x.advantages if x.advantages.dim() == 2 else spread_to_tokens(x.advantages, x.mask)  # [N, T]
    log_ratio = x.log_ratio()  # [N, T], 0 on padding
    # log s_i = 1/|y_i| sum_t (logp_it - old_logp_it), a constant here: sg[.]
    seq_log = spread_to_tokens(seq_log_ratio(log_ratio, x.mask).detach(), x.mask)
    # s_it = sg[s_i] * pi_it / sg[pi_it]  (in log space: value log s_i, gradient d logp_it)
    ratio = torch.exp((seq_log + token_log_ratio(x.logp, x.logp.detach(), x.mask)).clamp(max=MAX_LOG_RATIO))
    # J_it = min(s_it A_it, clip(s_it, 1 - eps_lo, 1 + eps_hi) A_it)
    objective = clipped_objective(ratio, adv, x.clip_low, x.clip_high)
    # J = 1/G sum_i 1/|y_i| sum_t J_it
    reduce_tokens = x.reducer(Aggregation.SEQ_MEAN_TOKEN_MEAN)
    policy_loss = -reduce_tokens(objective)

    # Token flags are sign-aware with each token's own advantage; the ratio is s_i on every token.
    low, high = sign_aware_clip(ratio, adv, x.clip_low, x.clip_high)
    metrics = clip_metrics(low=low, high=high, band=out_of_band(ratio, x.clip_low, x.clip_high), mask=x.mask)
    metrics.update(ratio_metrics(log_ratio=log_ratio, mask=x.mask))
    return x.finish(policy_loss, metrics, reduce_tokens)
