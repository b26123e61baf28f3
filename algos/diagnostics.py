"""Diagnostics of the GSPO paper's mechanism: how noisy importance weights are, and how that grows with length.

GSPO paper, sec. 3: GRPO's token-level weight w_it = pi(y_it)/pi_old(y_it) is a single-sample estimate,
so its noise "accumulates over the response length", while GSPO's sequence weight
s_i = exp(1/|y_i| sum_t l_it) averages the token log-ratios l_it and its noise shrinks with length.
These functions measure that on the log-ratios the update actually used:

    token noise   var_t(l_it) over all valid tokens                       diag/token_logratio_var
    sequence noise var_i(1/|y_i| sum_t l_it) over sequences                diag/seq_logratio_var
    the same two per response-length bucket [lo, hi)                      .../len_<lo>_<hi>
    accumulated token noise vs length: corr_i(|y_i|, |sum_t l_it|)        diag/len_corr_token_noise
    GSPO's noise vs length:           corr_i(|y_i|, |1/|y_i| sum_t l_it|)  diag/len_corr_seq_noise

and the training-inference mismatch between the sampler's log-probs and the trainer's (sec. 5.3):

    per token  l_it = logp_trainer - logp_engine; s_i = exp(1/|y_i| sum_t l_it)
    mismatch/logp_abs_diff, mismatch/seq_ratio_{mean,std}, and the share of tokens (sequences) whose
    mismatch ratio alone lies outside the algorithm's clip band: mismatch/{token,seq}_out_of_band_frac.

Variances are population variances (divide by the count); a bucket or batch with fewer than 2 values
gives NaN, not a made-up 0 (the trainer leaves such entries out of its metrics row). Pure tensor
functions with no data-dependent branch: no host sync, they run on any device (meta included).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gspo.vocab.lazy import lazy_module
from gspo.vocab.metrics import (
    DIAG_LEN_CORR_SEQ,
    DIAG_LEN_CORR_TOKEN,
    DIAG_SEQ_VAR,
    DIAG_SEQ_VAR_BUCKET,
    DIAG_TOKEN_VAR,
    DIAG_TOKEN_VAR_BUCKET,
    MISMATCH_LOGP,
    MISMATCH_SEQ_MEAN,
    MISMATCH_SEQ_OOB,
    MISMATCH_SEQ_STD,
    MISMATCH_TOKEN_OOB,
)

from .common import MAX_LOG_RATIO, out_of_band, seq_log_ratio, token_log_ratio, valid_tokens

if TYPE_CHECKING:
    from torch import Tensor

torch = lazy_module("torch")  # runs at its first use: the registry reads names and cards without it (vocab/lazy.py)

LENGTH_BUCKETS = (1, 17, 33, 65, 129, 257, 513, 1025, 2049, 4097)  # [lo, hi) edges in tokens


def _var(x: Tensor, weight: Tensor) -> Tensor:
    """Population variance of `x` over the entries where the boolean `weight` holds; NaN under 2 entries."""
    w = weight.to(x.dtype)
    n = w.sum()
    mean = (x * w).sum() / n.clamp(min=1)
    var = ((x - mean) ** 2 * w).sum() / n.clamp(min=1)
    return torch.where(n >= 2, var, torch.full_like(var, float("nan")))


def _corr(x: Tensor, y: Tensor, weight: Tensor) -> Tensor:
    """Pearson correlation of `x` and `y` over `weight`; 0 where either is constant, NaN under 2 entries."""
    w = weight.to(x.dtype)
    n = w.sum().clamp(min=1)
    dx, dy = (x - (x * w).sum() / n) * w, (y - (y * w).sum() / n) * w
    den = (dx.pow(2).sum() * dy.pow(2).sum()).sqrt()
    corr = torch.where(den > 0, (dx * dy).sum() / den.clamp(min=torch.finfo(x.dtype).tiny), torch.zeros_like(den))
    return torch.where(w.sum() >= 2, corr, torch.full_like(corr, float("nan")))


def ratio_diagnostics(*, log_ratio: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """log_ratio, mask: [N, T] (log_ratio = logp - old_logp on valid tokens). See the module doc.
    No host sync: every entry is computed, NaN where it has fewer than 2 values."""
    valid = valid_tokens(mask)
    lengths = mask.sum(dim=-1)  # [N]
    seq_lr = seq_log_ratio(log_ratio, mask)  # [N]
    rows = lengths > 0
    total = (log_ratio * mask).sum(dim=-1)  # [N] accumulated token log-ratio
    out = {
        DIAG_TOKEN_VAR: _var(log_ratio, valid),
        DIAG_SEQ_VAR: _var(seq_lr, rows),
        DIAG_LEN_CORR_TOKEN: _corr(lengths, total.abs(), rows),
        DIAG_LEN_CORR_SEQ: _corr(lengths, seq_lr.abs(), rows),
    }
    for lo, hi in zip(LENGTH_BUCKETS[:-1], LENGTH_BUCKETS[1:], strict=True):
        in_bucket = (lengths >= lo) & (lengths < hi)  # [N]
        out[DIAG_TOKEN_VAR_BUCKET.format(lo, hi)] = _var(log_ratio, valid & in_bucket.unsqueeze(-1))
        out[DIAG_SEQ_VAR_BUCKET.format(lo, hi)] = _var(seq_lr, in_bucket)
    return out


def mismatch_metrics(*, logp: Tensor, engine_logp: Tensor, mask: Tensor, clip_low: float,
                     clip_high: float) -> dict[str, Tensor]:
    """The trainer's log-probs `logp` against the sampler's `engine_logp`, all [N, T]. See the module doc."""
    log_ratio = token_log_ratio(logp, engine_logp, mask)  # [N, T], 0 on padding
    valid = valid_tokens(mask)
    n_tokens = mask.sum().clamp(min=1.0)
    token_ratio = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))
    seq_ratio = torch.exp(seq_log_ratio(log_ratio, mask).clamp(max=MAX_LOG_RATIO))  # [N]
    has_tokens = mask.sum(dim=-1) > 0
    return {
        MISMATCH_LOGP: log_ratio.abs().sum() / n_tokens,
        MISMATCH_SEQ_MEAN: seq_ratio.mean(),
        MISMATCH_SEQ_STD: seq_ratio.std(correction=0),
        MISMATCH_TOKEN_OOB: (out_of_band(token_ratio, clip_low, clip_high) & valid).sum() / n_tokens,
        MISMATCH_SEQ_OOB: (out_of_band(seq_ratio, clip_low, clip_high) & has_tokens).float().mean(),
    }
