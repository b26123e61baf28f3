"""Shared tensor helpers for the policy losses: masked reductions, aggregation, k3 KL, clip metrics.

Shapes: N sequences, T tokens. `mask` is [N, T] with 1.0 on completion tokens and 0.0 on padding.
Padding columns never reach a value or a gradient: every per-token quantity is selected with
`torch.where(valid, x, 0)` before it is exponentiated or summed, so arbitrary finite numbers in the
padding of `logp`, `old_logp`, `ref_logp` or per-token advantages change nothing.

Nothing here calls `.item()`: losses and metrics stay on the device, with no host sync.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from gspo.vocab.choices import Aggregation
from gspo.vocab.lazy import lazy_module
from gspo.vocab.metrics import (
    CLIP_HIGH_FRAC,
    CLIP_LOW_FRAC,
    CLIP_OUT_OF_BAND,
    CLIP_SEQ_FRAC,
    CLIP_TOKEN_FRAC,
    KL_OLD,
    KL_REF,
    LOSS_POLICY,
    RATIO_SEQ_MAX,
    RATIO_SEQ_MEAN,
    RATIO_SEQ_MIN,
    RATIO_TOKEN_MAX,
    RATIO_TOKEN_MEAN,
    RATIO_TOKEN_MIN,
    STANDARD,
    reductions,
)

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")  # runs at its first use: the registry reads names and cards without it (vocab/lazy.py)

# Upper bound on a log importance ratio before exp(). exp(10) ~ 2.2e4 is far outside any clip band,
# so the bound only changes a loss that is already pathological, and it keeps exp() finite in
# float16/bfloat16. verl uses the same bound for the GSPO sequence ratio. Above it the gradient is 0.
MAX_LOG_RATIO = 10.0

# The token-aggregation modes are gspo.vocab.choices.Aggregation (GRPO's option; conf checks the config against it).
AGGREGATIONS = Aggregation.values


# How each metric made here reduces over micro-batches (gspo.vocab.reductions.REDUCTIONS).
STANDARD_METRICS = reductions(STANDARD)  # as the catalogue (vocab/metrics.py) declares them


def valid_tokens(mask: Tensor) -> Tensor:
    """Boolean [N, T]: True on completion tokens."""
    return mask > 0


def seq_lengths(mask: Tensor) -> Tensor:
    """|y_i| as a float [N], clamped to at least 1 so an all-padding row divides safely."""
    return mask.sum(dim=-1).clamp(min=1.0)


def spread_to_tokens(per_seq: Tensor, mask: Tensor) -> Tensor:
    """A per-sequence value [N] repeated over its row, [N, T] (a view, no copy)."""
    return per_seq.unsqueeze(-1).expand(mask.shape)


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of `x` [N, T] over valid tokens (all of them, or along `dim`)."""
    selected = torch.where(valid_tokens(mask), x, torch.zeros_like(x))
    return selected.sum() if dim is None else selected.sum(dim=dim)


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of `x` [N, T] over all valid tokens of the batch (0-dim); 0 if there are none."""
    return masked_sum(x, mask) / mask.sum().clamp(min=1.0)


def token_log_ratio(logp: Tensor, other_logp: Tensor, mask: Tensor) -> Tensor:
    """log(pi / pi_other) per token [N, T], exactly 0 on padding (whatever the padding holds)."""
    diff = logp - other_logp
    return torch.where(valid_tokens(mask), diff, torch.zeros_like(diff))


def seq_log_ratio(log_ratio: Tensor, mask: Tensor) -> Tensor:
    """log s_i = 1/|y_i| sum_t log_ratio_it, shape [N] (GSPO eq. 7 in log space)."""
    return masked_sum(log_ratio, mask, dim=-1) / seq_lengths(mask)


def aggregate(
    values: Tensor,
    mask: Tensor,
    *,
    aggregation: str,
    max_len: float | None,
    seq_denominator: float | None,
    token_denominator: float | None,
) -> Tensor:
    """Reduce per-token values [N, T] to a scalar.

    Without denominators this is a mean over the local batch. With `seq_denominator` (number of
    sequences) or `token_denominator` (number of valid tokens) of the whole minibatch, the results
    of its micro-batches sum to the full-minibatch value.
    """
    if aggregation == Aggregation.TOKEN_MEAN:
        # 1/sum_i |y_i| * sum_i sum_t v_it
        n_tokens = mask.sum().clamp(min=1.0) if token_denominator is None else token_denominator
        return masked_sum(values, mask) / n_tokens
    if aggregation == Aggregation.SEQ_MEAN_TOKEN_MEAN:
        # 1/|y_i| * sum_t v_it
        per_seq = masked_sum(values, mask, dim=-1) / seq_lengths(mask)
    elif aggregation == Aggregation.SEQ_MEAN_TOKEN_SUM_NORM:
        if max_len is None and seq_denominator is not None:
            # The padded width T differs between micro-batches, so it cannot be the shared constant.
            raise ValueError(f"{Aggregation.SEQ_MEAN_TOKEN_SUM_NORM} with seq_denominator needs an explicit max_len")
        # 1/max_len * sum_t v_it, a constant normaliser (Dr. GRPO), default the padded width T
        per_seq = masked_sum(values, mask, dim=-1) / (values.shape[-1] if max_len is None else max_len)
    elif aggregation == Aggregation.SEQ_MEAN_TOKEN_SUM:
        # sum_t v_it, no normaliser (verl's loss_agg_mode=seq-mean-token-sum): a long sequence weighs more
        per_seq = masked_sum(values, mask, dim=-1)
    else:
        raise ValueError(f"unknown aggregation {aggregation!r}; known: {', '.join(AGGREGATIONS)}")
    return seq_mean(per_seq, seq_denominator=seq_denominator)


def check_aggregation(aggregation: str) -> None:
    """Reject an unknown aggregation (GRPO's option; GSPO weights each sequence once and has none)."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; known: {', '.join(AGGREGATIONS)}")


def seq_mean(per_seq: Tensor, *, seq_denominator: float | None) -> Tensor:
    """1/N sum_i v_i for per-sequence values [N]; N is `seq_denominator` when given."""
    return per_seq.sum() / (per_seq.shape[0] if seq_denominator is None else seq_denominator)


def k3(log_ratio: Tensor) -> Tensor:
    """k3 estimator of KL(p || q) from samples of p, with log_ratio = log(q / p), elementwise.

    k3 = (r - 1) - log r with r = q/p (Schulman, "Approximating KL divergence", 2020): unbiased,
    never negative, low variance. The log-ratio is bounded above by MAX_LOG_RATIO before exp().
    A padding token (log_ratio 0) gives exactly 0.
    """
    bounded = log_ratio.clamp(max=MAX_LOG_RATIO)
    # k3 = exp(log r) - log r - 1
    return torch.exp(bounded) - bounded - 1.0


def ref_kl_per_token(*, logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """k3 KL(pi || pi_ref) per token [N, T]: k3 = exp(ref - logp) - (ref - logp) - 1; 0 on padding."""
    return k3(token_log_ratio(ref_logp, logp, mask))


def sign_aware_clip(ratio: Tensor, adv: Tensor, clip_low: float, clip_high: float) -> tuple[Tensor, Tensor]:
    """Where the clipped branch of min(r A, clip(r, 1-lo, 1+hi) A) is active: (low, high) booleans.

    high: A > 0 and r > 1 + hi; low: A < 0 and r < 1 - lo. A = 0 is never clipped (both branches 0).
    `ratio` and `adv` broadcast against each other.
    """
    high = (adv > 0) & (ratio > 1.0 + clip_high)
    low = (adv < 0) & (ratio < 1.0 - clip_low)
    return low, high


def out_of_band(ratio: Tensor, clip_low: float, clip_high: float) -> Tensor:
    """Sign-agnostic: the ratio lies outside [1 - lo, 1 + hi]."""
    return (ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)


def clipped_objective(ratio: Tensor, adv: Tensor, clip_low: float, clip_high: float) -> Tensor:
    """PPO clipped surrogate min(r A, clip(r, 1 - lo, 1 + hi) A), elementwise (broadcasting)."""
    # min(r A, clip(r, 1-eps_lo, 1+eps_hi) A)
    return torch.minimum(ratio * adv, ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv)


def clip_metrics(*, low: Tensor, high: Tensor, band: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Clip shares from per-token booleans [N, T] (a sequence-level flag already spread to its tokens).

    Token shares are over valid tokens; clip/seq_frac is the share of sequences with a clipped token.
    """
    valid = valid_tokens(mask)
    low, high, band = low & valid, high & valid, band & valid
    clipped = low | high
    n_tokens = mask.sum().clamp(min=1.0)
    return {
        CLIP_TOKEN_FRAC: clipped.sum() / n_tokens,
        CLIP_LOW_FRAC: low.sum() / n_tokens,
        CLIP_HIGH_FRAC: high.sum() / n_tokens,
        CLIP_OUT_OF_BAND: band.sum() / n_tokens,
        CLIP_SEQ_FRAC: clipped.any(dim=-1).to(mask.dtype).mean(),
    }


def _masked_extremes(x: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """(min, max) of `x` over `valid`; 1.0 (a neutral ratio) for both when nothing is valid."""
    inf = torch.full_like(x, float("inf"))
    lowest = torch.where(valid, x, inf).amin()
    highest = torch.where(valid, x, -inf).amax()
    one = torch.ones_like(lowest)
    return torch.where(valid.any(), lowest, one), torch.where(valid.any(), highest, one)


def ratio_metrics(*, log_ratio: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Token ratios w_it, sequence ratios s_i and the k3 KL(pi_old || pi), whatever the algorithm.

    log_ratio: [N, T] = logp - old_logp, 0 on padding. Ratios are taken after the MAX_LOG_RATIO
    bound, as the losses use them. policy/kl_old is the k3 estimate from samples of pi_old:
    k3 = (r - 1) - log r with r = pi / pi_old, averaged over valid tokens.
    """
    valid = valid_tokens(mask)
    token_ratio = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))
    seq_ratio = torch.exp(seq_log_ratio(log_ratio, mask).clamp(max=MAX_LOG_RATIO))
    token_min, token_max = _masked_extremes(token_ratio, valid)
    return {
        RATIO_TOKEN_MEAN: masked_mean(token_ratio, mask),
        RATIO_TOKEN_MIN: token_min,
        RATIO_TOKEN_MAX: token_max,
        RATIO_SEQ_MEAN: seq_ratio.mean(),
        RATIO_SEQ_MIN: seq_ratio.amin(),
        RATIO_SEQ_MAX: seq_ratio.amax(),
        KL_OLD: masked_mean(k3(log_ratio), mask),
    }


ANCHOR_SAMPLER, ANCHOR_TRAINER = "sampler", "trainer"
ANCHORS = (ANCHOR_SAMPLER, ANCHOR_TRAINER)  # where a ratio pi / q takes its q: the sampler's pi_s or the trainer's pi_old


class Anchored:
    """Options of a loss whose ratio may be anchored at the sampler (DPPO's, CISPO's `anchor`): the check of the value
    and what the trainer asks of it (a correction on top of a sampler anchor would weigh the mismatch twice)."""

    anchor: str

    def check_anchor(self) -> None:
        if self.anchor not in ANCHORS:
            raise ValueError(f"anchor must be one of {', '.join(ANCHORS)}, got {self.anchor!r}")

    @property
    def anchored_at_sampler(self) -> bool:
        """The ratio already weighs the sampler-trainer mismatch (pi / pi_s): a correction would weigh it twice."""
        return self.anchor == ANCHOR_SAMPLER


@dataclass(frozen=True)
class LossInputs:
    """What every policy loss is given, checked once by registry.policy_loss. logp, old_logp, mask, ref_logp:
    [N, T]; advantages: [N] ([N, T] where the algorithm takes token advantages). The trainer's context:
    `ref_logp` (None: no reference model), `kl_beta`, the minibatch's `seq_denominator` / `token_denominator`
    (so micro-batch losses sum to the minibatch's), `max_len` (Dr. GRPO's constant normaliser), `sampler_logp`
    (the sampler's own log-probs pi_s [N, T] where the engine returned them, whichever pi_old the loss gets as
    `old_logp`; None: there are none, and pi_old stands for them)."""

    logp: Tensor
    old_logp: Tensor
    advantages: Tensor
    mask: Tensor
    clip_low: float
    clip_high: float
    ref_logp: Tensor | None = None
    kl_beta: float = 0.0
    seq_denominator: float | None = None
    token_denominator: float | None = None
    max_len: float | None = None
    sampler_logp: Tensor | None = None
    kl_unbiased: bool = False  # the KL term's k3 weighted by r_it = pi / pi_old (DeepSeek-V3.2's unbiased estimate)
    entropy: Tensor | None = None  # H_it [N, T], the policy's (sampling distribution's) entropy, differentiable
    entropy_coef: float = 0.0  # the entropy bonus's weight: the loss less entropy_coef x H reduced like J

    def log_ratio(self) -> Tensor:
        """l_it = logp_it - old_logp_it [N, T], 0 on padding."""
        return token_log_ratio(self.logp, self.old_logp, self.mask)

    def rollout_logp(self) -> Tensor:
        """log pi_s [N, T], the policy that sampled the batch: the sampler's log-probs, or old_logp without them."""
        return self.old_logp if self.sampler_logp is None else self.sampler_logp

    def anchor_logp(self, anchor: str) -> Tensor:
        """log q [N, T] of a ratio anchored at `anchor` (ANCHORS): the sampler's log-probs (pi_old where there are
        none) or the trainer's pi_old."""
        return self.rollout_logp() if anchor == ANCHOR_SAMPLER else self.old_logp

    def token_advantages(self) -> Tensor:
        """The advantages broadcastable over tokens: [N, T] as given, or [N, 1]."""
        return self.advantages if self.advantages.dim() == 2 else self.advantages.unsqueeze(-1)

    def reducer(self, aggregation: str) -> Callable[[Tensor], Tensor]:
        """Per-token values [N, T] -> the scalar of `aggregation`, with the minibatch's denominators."""
        return partial(aggregate, mask=self.mask, aggregation=aggregation, max_len=self.max_len,
                       seq_denominator=self.seq_denominator, token_denominator=self.token_denominator)

    def finish(self, policy_loss: Tensor, metrics: dict[str, Tensor],
               reduce_tokens: Callable[[Tensor], Tensor]) -> tuple[Tensor, dict[str, Tensor]]:
        """`finish` with these inputs: the optional KL term added, the metrics detached."""
        loss, metrics = finish(policy_loss, metrics, reduce_tokens, logp=self.logp, ref_logp=self.ref_logp,
                               mask=self.mask, kl_beta=self.kl_beta, old_logp=self.old_logp if self.kl_unbiased else None)
        if self.entropy_coef:
            # loss = -J + beta KL - c H: the bonus rewards a spread sampling distribution (verl's entropy_coeff);
            # padding's entropy, whatever it holds, never enters (the reduction selects valid tokens)
            loss = loss - self.entropy_coef * reduce_tokens(self.entropy)
        return loss, metrics


def finish(
    policy_loss: Tensor,
    metrics: dict[str, Tensor],
    reduce_tokens: Callable[[Tensor], Tensor],
    *,
    logp: Tensor,
    ref_logp: Tensor | None,
    mask: Tensor,
    kl_beta: float,
    old_logp: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Add the optional reference KL term and return (loss, detached metrics).

    The k3 KL per token is reduced by `reduce_tokens`, the algorithm's own aggregation, so it scales
    with micro-batching exactly like the policy term. kl_beta = 0 adds nothing: the loss tensor is
    the policy term itself, while policy/kl_ref is still logged when ref_logp is given. With `old_logp` (the
    unbiased KL, DeepSeek-V3.2 arXiv 2512.02556 eq. 7; TRL's use_bias_correction_kl) the term's k3 is weighted by
    the token ratio r_it = pi / pi_old, gradient included: samples come from pi_old, so r k3 is unbiased for
    KL(pi || pi_ref) and its gradient is the reverse KL's; policy/kl_ref stays the plain k3 mean.
    """
    metrics[LOSS_POLICY] = policy_loss
    loss = policy_loss
    if ref_logp is not None:
        kl = ref_kl_per_token(logp=logp, ref_logp=ref_logp, mask=mask)
        metrics[KL_REF] = masked_mean(kl, mask)
        if kl_beta != 0.0:
            if old_logp is not None:
                # r_it k3_it, r_it = pi_it / pi_old_it   (bounded as every ratio)
                kl = torch.exp(token_log_ratio(logp, old_logp, mask).clamp(max=MAX_LOG_RATIO)) * kl
            # loss = -J + beta * KL(pi || pi_ref)
            loss = policy_loss + kl_beta * reduce_tokens(kl)
    return loss, {name: value.detach() for name, value in metrics.items()}
