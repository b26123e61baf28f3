"""CISPO: clipped, detached importance weights on a REINFORCE-style term (MiniMax-M1, arXiv 2506.13585, eq. 4).

    r_it  = pi(y_it | x, y_i<t) / pi_old(y_it | x, y_i<t)
    ^r_it = clip(r_it, 1 - eps_lo, 1 + eps_hi)
    J     = 1/sum_i |y_i| sum_i sum_t sg(^r_it) A_i log pi(y_it | x, y_i<t)

The bounds act on the weight, which carries no gradient: every token keeps its gradient ^r_it A_i
(PPO's min() gives a clipped token none). The loss is -J. Departures and choices:
- `clip_low` may be 1.0: no lower bound (the paper sets eps_lo "to a large value" and tunes only eps_hi). The
  preset caps at 5 (clip_high 4.0): ScaleRL's, SkyRL's since its PR #1928 (2026-07-18) and TRL's recommended
  epsilon_high (conf/algo/cispo.yaml).
- `anchor`: trainer (default, the paper's pi_old) or sampler: r_it = pi / pi_s, the sampler's own log-probs
  (LossInputs.sampler_logp; pi_old where there are none), SkyRL's rollout-anchored CISPO: the weight then carries
  the sampler-trainer mismatch and the update's drift at once, so the trainer refuses a correction on top.
- `aggregation` as GRPO's, default token_mean (the paper's 1/sum|y_i|).
- The log-ratio is bounded above by MAX_LOG_RATIO (10) before exp(), as in GRPO; the weight is clipped to
  1 + eps_hi anyway, so the bound changes nothing but keeps exp() finite.
- The value of -J is not the surrogate's (it holds log pi): only its gradient is meaningful, as in every
  REINFORCE-style loss. Optional k3 KL to a reference, reduced with the same aggregation.
- Clip metrics count the tokens whose weight was truncated, whatever the advantage's sign (the weight is
  clipped for both signs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gspo.vocab.choices import Aggregation
from gspo.vocab.lazy import lazy_module

from .common import (
    ANCHOR_TRAINER,
    MAX_LOG_RATIO,
    STANDARD_METRICS,
    Anchored,
    LossInputs,
    check_aggregation,
    clip_metrics,
    ratio_metrics,
    token_log_ratio,
    valid_tokens,
)
from .registry import register

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")  # runs at its first use: the registry reads names and cards without it (vocab/lazy.py)


@dataclass(frozen=True)
class CispoOptions(Anchored):
    aggregation: str = Aggregation.TOKEN_MEAN  # token_mean (the paper's), seq_mean_token_mean, seq_mean_token_sum_norm
    anchor: str = ANCHOR_TRAINER  # r = pi / pi_old (the paper's) or pi / pi_s (sampler: SkyRL's rollout-anchored CISPO)

    def __post_init__(self) -> None:
        self.check_anchor()
        check_aggregation(self.aggregation)


@register("cispo", options=CispoOptions, metrics=STANDARD_METRICS, token_advantages=True, no_lower_bound=True,
          reads_sampler=True, card=(
    "ratio      token, as a detached weight: w_it = sg(clip(r_it, {lo}, {hi})), r_it = exp(logp_it - log q_it)\n"
    "anchor     q = {anchor}: trainer = pi_old (the paper's), sampler = the sampler's own log-probs pi_s (SkyRL's\n"
    "           rollout-anchored CISPO; pi_old where the engine returns none)\n"
    "objective  J_it = w_it A_i log pi_it: every token keeps its gradient; the cap is 1 + clip_high = {hi}\n"
    "           (TRL's epsilon_high is the cap itself: TRL's epsilon_high={hi} equals this clip_high={clip_high};\n"
    "           the preset's cap 5 is ScaleRL's, SkyRL's since PR #1928 and TRL's recommended; verl's example 1.2)"))
def cispo_loss(x: LossInputs, *, aggregation: str, anchor: str) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO loss and metrics. logp, old_logp, mask, ref_logp: [N, T]; advantages: [N] or [N, T]."""
    reduce_tokens = x.reducer(aggregation)
    log_ratio = token_log_ratio(x.logp, x.anchor_logp(anchor), x.mask)  # [N, T] log(pi / q), 0 on padding
    # r_it = exp(logp_it - log q_it), detached: sg(.)
    ratio = torch.exp(log_ratio.detach().clamp(max=MAX_LOG_RATIO))
    # ^r_it = clip(r_it, 1 - eps_lo, 1 + eps_hi)
    weight = ratio.clamp(1.0 - x.clip_low, 1.0 + x.clip_high)
    # J_it = sg(^r_it) A_i log pi_it  (padding's log-probs, whatever they hold, replaced by 0 first)
    adv = x.token_advantages()  # [N, T] or [N, 1]
    objective = weight * adv * torch.where(valid_tokens(x.mask), x.logp, torch.zeros_like(x.logp))
    policy_loss = -reduce_tokens(objective)

    low, high = ratio < 1.0 - x.clip_low, ratio > 1.0 + x.clip_high
    metrics = clip_metrics(low=low, high=high, band=low | high, mask=x.mask)
    metrics.update(ratio_metrics(log_ratio=log_ratio, mask=x.mask))
    return x.finish(policy_loss, metrics, reduce_tokens)

