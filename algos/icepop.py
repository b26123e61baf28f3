"""IcePop at the sampler: GRPO's clipped token objective with its ratio taken against the sampler's own log-probs and
a two-sided token mask on the same ratio (IcePop, Ling team 2025, arXiv 2510.18855, its mask M(k) = 1 for k in
[alpha, beta], 0 outside, with [0.5, 5]; taken at the sampler, with no recomputed pi_old between, as the
asynchronous trainers run it: SkyRL's rollout-anchored losses, GLM-5's report).

    r_it = pi(y_it | x, y_i<t) / pi_s(y_it | x, y_i<t)                 (pi_s: the sampler's log-probs)
    M_it = 1 if band_low <= sg(r_it) <= band_high, else 0
    J    = 1/G sum_i 1/|y_i| sum_t M_it min(r_it A_it, clip(r_it, 1 - eps_lo, 1 + eps_hi) A_it)

A token whose probability under the trainer has left the sampler's by more than the band (a mismatch or a stale
sampler) gives no gradient at all, in either direction and whatever its advantage's sign; inside the band the PPO
clip acts as GRPO's. The loss is -J. Departures and choices:
- IcePop's own form masks on pi_old / pi_s and clips pi / pi_old (gspo: algo=grpo algo.correction.kind=mis, level
  token, the card's "(IcePop)"); here one ratio does both, so the trainer refuses a correction on top (it would weigh
  the mismatch twice), as for CISPO and DPPO anchored at the sampler. pi_old stands for pi_s where the engine returns
  none (the fp32 lean sampler: the same numbers).
- The band is IcePop's [0.5, 5] by default (gspo.vocab.choices ICEPOP_BAND); the card says "(IcePop's band)" only
  for it. `aggregation` as GRPO's, default seq_mean_token_mean.
- The log-ratio is bounded above by MAX_LOG_RATIO (10) before exp(), as in GRPO. Optional k3 KL to a reference.
- Clip metrics are GRPO's (sign-aware); clip/ratio_out_of_band_frac counts the tokens the band masked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gspo.vocab.choices import ICEPOP_BAND, Aggregation
from gspo.vocab.lazy import lazy_module

from .common import (
    MAX_LOG_RATIO,
    STANDARD_METRICS,
    LossInputs,
    check_aggregation,
    clip_metrics,
    clipped_objective,
    ratio_metrics,
    sign_aware_clip,
    token_log_ratio,
)
from .registry import register

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")


@dataclass(frozen=True)
class IcepopOptions:
    band_low: float = ICEPOP_BAND[0]  # M = 0 below it: IcePop's alpha 0.5
    band_high: float = ICEPOP_BAND[1]  # and above it: IcePop's beta 5
    aggregation: str = Aggregation.SEQ_MEAN_TOKEN_MEAN  # GRPO's

    def __post_init__(self) -> None:
        if not 0.0 <= self.band_low <= 1.0 <= self.band_high:
            raise ValueError(f"need 0 <= band_low <= 1 <= band_high, got [{self.band_low}, {self.band_high}]")
        check_aggregation(self.aggregation)

    @property
    def anchored_at_sampler(self) -> bool:
        """The ratio is pi / pi_s: it already weighs the sampler-trainer mismatch (a correction would weigh it twice)."""
        return True

    def card_fields(self) -> dict[str, str]:
        """The band's name on the card: IcePop's only where it is IcePop's [0.5, 5]."""
        icepop = (self.band_low, self.band_high) == ICEPOP_BAND
        return {"band_name": "IcePop's band" if icepop else "a masked-IS band, not IcePop's [0.5, 5]"}


@register("icepop", options=IcepopOptions, metrics=STANDARD_METRICS, token_advantages=True, reads_sampler=True, card=(
    "ratio      token, at the sampler: r_it = exp(logp_it - sampler_logp_it), the sampler's own log-probs (pi_old\n"
    "           where the engine returns none), the log-ratio bounded above by 10\n"
    "mask       M_it = 1 if {band_low} <= r_it <= {band_high}, else 0 ({band_name}): whatever A_it's sign\n"
    "objective  J_it = M_it min(r_it A_it, clip(r_it, {lo}, {hi}) A_it)"))
def icepop_loss(x: LossInputs, *, band_low: float, band_high: float,
                aggregation: str) -> tuple[Tensor, dict[str, Tensor]]:
    """IcePop-at-the-sampler loss and metrics. logp, old_logp, mask, ref_logp, sampler_logp: [N, T]; advantages: [N]
    or [N, T]."""
    reduce_tokens = x.reducer(aggregation)
    log_ratio = token_log_ratio(x.logp, x.rollout_logp(), x.mask)  # [N, T] log(pi / pi_s), 0 on padding
    # r_it = exp(logp_it - sampler_logp_it)
    ratio = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))
    # M_it = 1[band_low <= sg(r_it) <= band_high]
    inside = (ratio.detach() >= band_low) & (ratio.detach() <= band_high)
    adv = x.token_advantages()  # [N, T] or [N, 1]
    # J_it = M_it min(r_it A_it, clip(r_it, 1 - eps_lo, 1 + eps_hi) A_it)
    objective = inside.to(ratio.dtype) * clipped_objective(ratio, adv, x.clip_low, x.clip_high)
    policy_loss = -reduce_tokens(objective)

    low, high = sign_aware_clip(ratio.detach(), adv, x.clip_low, x.clip_high)
    metrics = clip_metrics(low=low & inside, high=high & inside, band=~inside, mask=x.mask)
    metrics.update(ratio_metrics(log_ratio=log_ratio, mask=x.mask))
    return x.finish(policy_loss, metrics, reduce_tokens)
