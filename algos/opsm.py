"""OPSM: off-policy sequence masking on GRPO's clipped loss (DeepSeek-AI 2025, "DeepSeek-V3.2", arXiv 2512.02556,
eq. 9; TRL's off_policy_mask_threshold, ms-swift's off_policy_sequence_mask_delta, slime).

    r_it = pi(y_it | x, y_i<t) / pi_old(y_it | x, y_i<t)
    M_i  = 0  if A_i < 0 and 1/|y_i| sum_t log(pi_s(y_it) / sg[pi(y_it)]) > delta,   else 1
    J    = 1/G sum_i 1/|y_i| sum_t M_i min(r_it A_i, clip(r_it, 1 - eps_lo, 1 + eps_hi) A_i)

A sequence the current policy has moved far from (the mean per-token KL estimate log(pi_s / pi) above delta) and
that would push probability down (A < 0) teaches mostly noise: it is dropped. Positive-advantage sequences are
always kept. The loss is -J. Departures and choices:
- pi_s is the sampler's own log-probs (LossInputs.sampler_logp: the engine's under vLLM or a bf16 sampler, the
  lean hf sampler's own in fp32) whenever they exist, whichever pi_old the loss's ratio gets: the paper's
  inference-framework probabilities, and TRL's `sampling_per_token_logps` ("OPSM should use inference-time
  logprobs to detect both sources of off-policyness": the sampler-trainer mismatch and the update's drift). Under
  a mismatch correction r_it's pi_old is the trainer's recomputed one (trainer/step/advantages.py `corrected`),
  the mask's pi_s still the sampler's. Without sampler log-probs (hf `generate` sampler in fp32) pi_old stands in.
- Per-token advantages (a token-level correction's A_i c_it, c >= 0, as TRL combines OPSM with its token-level
  TIS; or per-step credit): "A_i < 0" reads the sequence's mean token advantage.
- delta: the paper does not publish it; the default 0.5 is TRL's documented example (`off_policy_mask_threshold`).
- `aggregation` as GRPO's, default seq_mean_token_mean (the paper's 1/G sum_i 1/|y_i|). The log-ratio is bounded
  above by MAX_LOG_RATIO (10) before exp(), as GRPO's. Optional k3 KL to a reference.
- clip/opsm_masked_frac: the share of sequences dropped; the clip metrics are GRPO's, over every token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gspo.vocab.choices import Aggregation
from gspo.vocab.lazy import lazy_module
from gspo.vocab.metrics import OPSM_MASKED, reductions

from .common import (
    MAX_LOG_RATIO,
    STANDARD_METRICS,
    LossInputs,
    check_aggregation,
    clip_metrics,
    clipped_objective,
    masked_sum,
    out_of_band,
    ratio_metrics,
    seq_lengths,
    seq_log_ratio,
    sign_aware_clip,
    token_log_ratio,
)
from .registry import register

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")  # runs at its first use: the registry reads names and cards without it (vocab/lazy.py)


@dataclass(frozen=True)
class OpsmOptions:
    delta: float = 0.5  # drop A < 0 sequences whose mean log(pi_s / pi) exceeds it (TRL's documented example)
    aggregation: str = Aggregation.SEQ_MEAN_TOKEN_MEAN  # the paper's 1/G sum_i 1/|y_i|; token_mean, seq_mean_token_sum_norm

    def __post_init__(self) -> None:
        if not self.delta >= 0.0:
            raise ValueError(f"delta must be >= 0, got {self.delta}")
        check_aggregation(self.aggregation)


def opsm_mask(x: LossInputs, delta: float) -> Tensor:
    """M_i as booleans [N]: False for a sequence with A_i < 0 whose mean log(pi_s / sg[pi]) exceeds delta, pi_s the
    sampler's log-probs (x.rollout_logp(): pi_old where there are none)."""
    # 1/|y_i| sum_t log(pi_s_it / sg[pi_it])
    drift = seq_log_ratio(token_log_ratio(x.rollout_logp(), x.logp.detach(), x.mask), x.mask)  # [N]
    # A_i, or with per-token advantages [N, T] the sequence's mean token advantage (its sign is A_i's under c >= 0)
    adv = x.advantages if x.advantages.dim() == 1 else masked_sum(x.advantages, x.mask, dim=-1) / seq_lengths(x.mask)
    return ~((adv < 0) & (drift > delta))


@register("opsm", options=OpsmOptions, metrics={**STANDARD_METRICS, **reductions((OPSM_MASKED,))},
          token_advantages=True, reads_sampler=True, card=(
    "ratio      token: r_it = exp(logp_it - old_logp_it)\n"
    "mask       M_i = 0 if A_i < 0 and 1/|y_i| sum_t (sampler_logp_it - sg[logp_it]) > {delta}, else 1: sampler_logp\n"
    "           the sampler's own log-probs wherever they exist (engine, bf16 or fp32 lean sampler), whichever\n"
    "           old_logp the ratio gets (a correction's is the trainer's); old_logp only where there are none\n"
    "objective  J_it = M_i min(r_it A_i, clip(r_it, {lo}, {hi}) A_i)"))
def opsm_loss(x: LossInputs, *, delta: float, aggregation: str) -> tuple[Tensor, dict[str, Tensor]]:
    """OPSM loss and metrics. logp, old_logp, mask, ref_logp, sampler_logp: [N, T]; advantages: [N] or [N, T]."""
    reduce_tokens = x.reducer(aggregation)
    log_ratio = x.log_ratio()  # [N, T], 0 on padding
    # r_it = exp(logp_it - old_logp_it)
    ratio = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))
    adv = x.token_advantages()  # [N, 1] or [N, T]
    keep = opsm_mask(x, delta)  # [N] booleans
    # J_it = M_i min(r_it A_i, clip(r_it, 1 - eps_lo, 1 + eps_hi) A_i)
    objective = keep.unsqueeze(-1).to(ratio.dtype) * clipped_objective(ratio, adv, x.clip_low, x.clip_high)
    policy_loss = -reduce_tokens(objective)

    low, high = sign_aware_clip(ratio, adv, x.clip_low, x.clip_high)
    metrics = clip_metrics(low=low, high=high, band=out_of_band(ratio, x.clip_low, x.clip_high), mask=x.mask)
    metrics.update(ratio_metrics(log_ratio=log_ratio, mask=x.mask))
    metrics[OPSM_MASKED] = (~keep).to(ratio.dtype).mean()
    return x.finish(policy_loss, metrics, reduce_tokens)
