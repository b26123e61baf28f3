"""DPPO: a trust region on the probability itself, not on the ratio (Divergence Proximal Policy Optimization,
"Rethinking the Trust Region in LLM Reinforcement Learning", arXiv 2602.04879; verl's dppo_tv / dppo_kl).

With p_it = pi(y_it | x, y_i<t) and q_it the anchor's token probability (not their ratio): the rollout (sampler)
policy pi_s by default, as the authors anchor it (paper sec. 5.2; their own code, github.com/sail-sg/Stable-RL; so
do SkyRL, prime-rl, TRL's experimental DPPO trainer and open-instruct), or pi_old, the trainer's recomputed old
policy, under `anchor=trainer`: verl's form, mask and weight both on pi_old (the authors' "recompute" variant moves
only the mask to pi_old and keeps the weight on pi_s; gspo does not ship it); r_it = p_it / q_it, a token
keeps its gradient unless it has moved too far in the direction its advantage pushes it:

    Binary-TV:  keep_it = (p_it - q_it <= d_hi)                  if A_it > 0
                        = (p_it - q_it >= -d_lo)                 if A_it <= 0
    Binary-KL:  D_it    = q log(q / p) + (1 - q) log((1 - q) / (1 - p))     (KL of the two Bernoullis)
                keep_it = (D_it <= d_hi) or (p_it <= q_it)      if A_it > 0
                        = (D_it <= d_lo) or (p_it >= q_it)      if A_it <= 0
    J = 1/sum_i |y_i| sum_i sum_t keep_it sg(min(r_it, c)) A_it log pi(y_it | x, y_i<t)

so a rare token going from 1e-5 to 1e-3 (ratio 100, clipped by PPO) keeps its gradient, and a likely one
falling from 0.99 to 0.8 (ratio 0.81, inside PPO's band) loses it. sg(min(r, c)) is a truncated importance
weight (TIS), c = 10000 by default: the authors' verl script set clip_ratio_c=10000 ("disable dual-clip PPO and
TIS"; verl's own ActorConfig default is 3.0). The loss is -J. Departures and choices:
- The anchor: `anchor=sampler` reads LossInputs.sampler_logp (the engine's log-probs under vLLM or a bf16 sampler,
  the lean hf sampler's own in fp32; pi_old where there are none), so the divergence and the weight both see the
  sampler-trainer mismatch, as in the authors' code, whichever pi_old a correction would hand the loss. A
  mismatch correction on top would weigh the same mismatch twice: the trainer refuses it unless anchor=trainer.
  On the CPU default (fp32 lean sampler) the two anchors are the same numbers.
- `clip_low` / `clip_high` are the divergence thresholds d_lo / d_hi, as verl reads clip_ratio_low / _high for
  these losses: a probability difference (TV) or a Bernoulli KL (KL), not a ratio band. The authors' script
  (verl examples/dppo_trainer/run_qwen30b_dppo.sh, deleted from verl on 2026-04-30, the numbers as it
  last stood): 0.15 / 0.15 for TV, 0.05 / 0.05 for KL. (That script's `bypass_mode=True` is not the anchor's
  source: in verl that mode replaces the configured loss with PPO-clip.)
- D takes verl's 1e-8 inside its second logarithm ((1 - q + 1e-8) / (1 - p + 1e-8)), so p = 1 stays finite.
- `aggregation` as GRPO's, default token_mean (verl's default for these losses); the authors' script uses
  Dr. GRPO's seq_mean_token_sum_norm with no std division (conf/algo/dppo_tv.yaml, dppo_kl.yaml).
- The value of -J holds log pi: only its gradient is meaningful, as CISPO's. The log-ratio is bounded above by
  MAX_LOG_RATIO (10) before exp(); the weight is capped at c anyway. Optional k3 KL to a reference.
- Clip metrics count the dropped tokens: low (A <= 0, the branch that dropped them, so clip/token_frac counts every
  dropped token, A = 0 included, as verl's clipfrac), high (A > 0), and clip/ratio_out_of_band_frac the tokens
  past a threshold in either direction, whatever their advantage.

prime-rl's default loss (src/prime_rl/trainer/rl/loss.py, default_loss_fn: "DPPO-Binary TV + Kimi-K2.5 KL", arXiv
2602.04879 and 2602.02276), two options, both off by default (every number above unchanged):
- `sides=ipo`: the sign-free mask of prime-rl's IPO loss (its ipo_mask_low / ipo_mask_high, 0.2 / 0.2, before it
  renamed them dppo_mask_* and gated them by the advantage's sign): a token is dropped when it moved past a threshold
  in either direction, whatever its advantage, keep_it = (-d_lo <= p - q <= d_hi) (Binary-KL: D within the threshold
  of the side it moved to). prime-rl's reason: in asynchronous RL one step is taken per batch, so the advantage's
  sign does not predict the update. Its clip metrics then count the drops by direction: low p < q, high p > q.
- `kl_tau`: tau sum_t (log pi_it - log q_it)^2 added to the loss, over every valid token (kept or dropped, as
  prime-rl's kl_mask_type "all" before it), reduced as the policy term, its gradient 2 tau log(pi / q) (prime-rl's
  kl_tau, default there 1e-3). q is the anchor: the sampler under anchor=sampler, as prime-rl's inference log-probs.
prime-rl's policy term is -keep r A (no log pi, no truncation): the same gradient as -keep sg(min(r, c)) A log pi
while r < c, another value (conf/algo/dppo_ipo.yaml sets the whole loss).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gspo.vocab.choices import Aggregation
from gspo.vocab.lazy import lazy_module

from .common import (
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

BINARY_KL_EPS = 1e-8  # verl's, inside log((1 - q + eps) / (1 - p + eps))
MASK_SIGN, MASK_IPO = "sign", "ipo"
MASKS = (MASK_SIGN, MASK_IPO)  # DPPO's mask by the advantage's sign; prime-rl's IPO mask, sign-free


@dataclass(frozen=True)
class DppoOptions(Anchored):
    tis_cap: float = 10000.0  # c of sg(min(r, c)): the authors' scripts (clip_ratio_c=10000, no truncation)
    aggregation: str = Aggregation.TOKEN_MEAN  # verl's default; the authors' script: seq_mean_token_sum_norm (Dr. GRPO)
    anchor: str = "sampler"  # q: the sampler's log-probs (the authors' Stable-RL code) or trainer (pi_old, verl's form)
    sides: str = MASK_SIGN  # sign: DPPO's (the advantage's sign picks the side); ipo: prime-rl's sign-free mask
    kl_tau: float = 0.0  # tau of tau sum_t (log pi - log q)^2 (prime-rl's kl_tau, 1e-3 there); 0: no such term

    def __post_init__(self) -> None:
        if not self.tis_cap > 0.0:
            raise ValueError(f"tis_cap must be > 0, got {self.tis_cap}")
        if self.sides not in MASKS:
            raise ValueError(f"sides must be one of {', '.join(MASKS)}, got {self.sides!r}")
        if not self.kl_tau >= 0.0:
            raise ValueError(f"kl_tau must be >= 0, got {self.kl_tau}")
        self.check_anchor()
        check_aggregation(self.aggregation)


def binary_kl(p: Tensor, q: Tensor) -> Tensor:
    """D = q log(q / p) + (1 - q) log((1 - q + eps) / (1 - p + eps)), elementwise; p, q in (0, 1]."""
    # D = q (log q - log p) + (1 - q) log((1 - q + eps) / (1 - p + eps))
    return q * (torch.log(q) - torch.log(p)) + (1.0 - q) * torch.log((1.0 - q + BINARY_KL_EPS) / (1.0 - p + BINARY_KL_EPS))


def _dppo(x: LossInputs, log_q: Tensor, keep: Tensor, beyond: Tensor, o: DppoOptions,
          rose: Tensor) -> tuple[Tensor, dict]:
    """J = 1/sum|y_i| sum keep sg(min(r, c)) A log pi, reduced by `aggregation`, r = pi / q, less the optional
    tau (log r)^2; log_q: the anchor's log-probs [N, T]; keep (DPPO's, by the advantage's sign), beyond (past a
    threshold on the side moved to), rose (p > q): [N, T] booleans. Under sides=ipo the kept tokens are ~beyond."""
    reduce_tokens = x.reducer(o.aggregation)
    log_ratio = token_log_ratio(x.logp, log_q, x.mask)  # [N, T] log(p / q), 0 on padding
    adv = x.token_advantages()  # [N, T] or [N, 1]
    ipo = o.sides == MASK_IPO
    if ipo:
        keep = ~beyond  # prime-rl's IPO mask: past a threshold in either direction, whatever the advantage
    # w_it = sg(min(r_it, c))
    weight = torch.exp(log_ratio.detach().clamp(max=MAX_LOG_RATIO)).clamp(max=o.tis_cap)
    # J_it = keep_it w_it A_it log pi_it  (padding's log-probs, whatever they hold, replaced by 0 first)
    logp = torch.where(valid_tokens(x.mask), x.logp, torch.zeros_like(x.logp))
    objective = keep.to(logp.dtype) * weight * adv * logp
    policy_loss = -reduce_tokens(objective)
    if o.kl_tau:
        # + tau (log pi_it - log q_it)^2 on every valid token (prime-rl's kl_tau term; 0 on padding)
        policy_loss = policy_loss + o.kl_tau * reduce_tokens(log_ratio.square())

    dropped = ~keep
    # low: the A <= 0 branch's drops, so every dropped token counts in clip/token_frac, A = 0 included (verl's
    # clipfrac); under ipo the direction moved (low p <= q, high p > q)
    up = rose if ipo else adv > 0
    metrics = clip_metrics(low=dropped & ~up, high=dropped & up, band=beyond, mask=x.mask)
    metrics.update(ratio_metrics(log_ratio=log_ratio, mask=x.mask))
    return x.finish(policy_loss, metrics, reduce_tokens)


def _probs(x: LossInputs, log_q: Tensor) -> tuple[Tensor, Tensor]:
    """(p, q) [N, T], detached: the token probabilities under pi and the anchor (log_q), 1 on padding."""
    valid = valid_tokens(x.mask)
    logp = torch.where(valid, x.logp.detach(), torch.zeros_like(x.logp))
    old = torch.where(valid, log_q, torch.zeros_like(log_q))
    return torch.exp(logp), torch.exp(old)


OPTIONS_CARD = ("sides      {sides}: sign = the mask above, its side picked by A_it's sign (DPPO's); ipo = prime-rl's\n"
                "           sign-free mask: a token past the threshold of the side it moved to is dropped, whatever A_it\n"
                "kl         the loss adds {kl_tau} sum_t (log pi_it - log q_it)^2 over every valid token, reduced like J\n"
                "           (prime-rl's kl_tau, a squared log-ratio to the anchor; 0: none)\n")

ANCHOR_CARD = ("anchor     q = {anchor}: sampler = the sampler's own log-probs pi_s (the authors' Stable-RL code; SkyRL,\n"
               "           prime-rl, TRL's experimental DPPO, open-instruct; pi_old where the engine returns none),\n"
               "           trainer = pi_old, the trainer's recomputed old policy, for the mask and the weight both (verl's\n"
               "           form; the authors' \"recompute\" variant moves only the mask to pi_old)\n")


@register("dppo_tv", options=DppoOptions, metrics=STANDARD_METRICS, token_advantages=True, reads_sampler=True, card=(
    "ratio      token probabilities p = pi, q = the anchor's (not their ratio) for the mask; r = p / q for the weight\n"
    + ANCHOR_CARD +
    "mask       keep_it = (p - q <= {clip_high}) if A_it > 0, (p - q >= -{clip_low}) if A_it <= 0:\n"
    "           clip_low / clip_high are total-variation thresholds, as verl reads them, not a ratio band\n"
    + OPTIONS_CARD +
    "objective  J_it = keep_it sg(min(r_it, {tis_cap})) A_it log pi_it"))
def dppo_tv_loss(x: LossInputs, *, tis_cap: float, aggregation: str, anchor: str, sides: str,
                 kl_tau: float) -> tuple[Tensor, dict[str, Tensor]]:
    """DPPO Binary-TV loss and metrics. logp, old_logp, mask, ref_logp, sampler_logp: [N, T]; advantages: [N] or [N, T]."""
    log_q = x.anchor_logp(anchor)
    p, q = _probs(x, log_q)
    adv = x.token_advantages()
    # keep_it = (p - q <= d_hi) if A_it > 0 else (p - q >= -d_lo)
    keep = torch.where(adv > 0, p - q <= x.clip_high, p - q >= -x.clip_low)
    beyond = (p - q > x.clip_high) | (p - q < -x.clip_low)
    return _dppo(x, log_q, keep, beyond, DppoOptions(tis_cap, aggregation, anchor, sides, kl_tau), p > q)


@register("dppo_kl", options=DppoOptions, metrics=STANDARD_METRICS, token_advantages=True, reads_sampler=True, card=(
    "ratio      token probabilities p = pi, q = the anchor's (not their ratio) for the mask; r = p / q for the weight\n"
    + ANCHOR_CARD +
    "mask       D = q log(q/p) + (1-q) log((1-q)/(1-p)); keep_it = D <= {clip_high} or p <= q if A_it > 0,\n"
    "           D <= {clip_low} or p >= q if A_it <= 0: Bernoulli-KL thresholds, as verl reads clip_low / clip_high\n"
    + OPTIONS_CARD +
    "objective  J_it = keep_it sg(min(r_it, {tis_cap})) A_it log pi_it"))
def dppo_kl_loss(x: LossInputs, *, tis_cap: float, aggregation: str, anchor: str, sides: str,
                 kl_tau: float) -> tuple[Tensor, dict[str, Tensor]]:
    """DPPO Binary-KL loss and metrics. logp, old_logp, mask, ref_logp, sampler_logp: [N, T]; advantages: [N] or [N, T]."""
    log_q = x.anchor_logp(anchor)
    p, q = _probs(x, log_q)
    adv = x.token_advantages()
    kl = binary_kl(p, q)  # [N, T], 0 on padding (p = q = 1)
    # keep_it = (D <= d_hi or p <= q) if A_it > 0 else (D <= d_lo or p >= q)
    keep = torch.where(adv > 0, (kl <= x.clip_high) | (p <= q), (kl <= x.clip_low) | (p >= q))
    beyond = ((kl > x.clip_high) & (p > q)) | ((kl > x.clip_low) & (p < q))
    return _dppo(x, log_q, keep, beyond, DppoOptions(tis_cap, aggregation, anchor, sides, kl_tau), p > q)
