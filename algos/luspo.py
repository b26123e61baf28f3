"""LUSPO: GSPO with each sequence's term weighted by its length (Length-Unbiased Sequence Policy Optimization,
arXiv 2602.05261; TRL's loss_type="luspo").

    s_i = exp(1/|y_i| sum_t log(pi_it / pi_old_it))                 (GSPO's geometric-mean ratio)
    J   = 1/G sum_i |y_i| min(s_i A_i, clip(s_i, 1 - eps_lo, 1 + eps_hi) A_i)

GSPO's 1/|y_i| inside s_i gives every token of a long sequence a smaller gradient (ds_i / dlogp_it = s_i / |y_i|),
so a sequence's total push does not grow with its length, while a token-level objective's does; LUSPO multiplies
the term back by |y_i|: each unclipped token gets s_i A_i / G, whatever its sequence's length. The loss is -J.
Departures and choices:
- The reduction is TRL's: (per-token loss * mask).sum(-1).mean(), the sequence's term on each of its tokens, summed
  over them and averaged over sequences (`seq_denominator` replaces the local count, so micro-batches sum to the
  minibatch), and the optional k3 KL to a reference is reduced the same way: 1/G sum_i sum_t k3_it.
- The ratio, its MAX_LOG_RATIO bound and the clip metrics are GSPO's (gspo.sequence_objective).
- Clip range: the paper builds on GSPO and the preset takes GSPO's 3e-4 / 4e-4 (conf/algo/luspo.yaml).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gspo.vocab.choices import Aggregation, Ratio

from .common import STANDARD_METRICS, LossInputs, seq_lengths, seq_mean
from .gspo import sequence_objective
from .registry import register

if TYPE_CHECKING:
    from torch import Tensor


@register("luspo", metrics=STANDARD_METRICS, ratio=Ratio.GEOMETRIC, aggregation=Aggregation.SEQ_MEAN_TOKEN_SUM, card=(
    "ratio      sequence, the geometric mean of the token ratios: s_i = exp(1/|y_i| sum_t (logp_it - old_logp_it)),\n"
    "           log s_i bounded above by 10\n"
    "objective  J_i = |y_i| min(s_i A_i, clip(s_i, {lo}, {hi}) A_i): GSPO's term weighted by the sequence's length"))
def luspo_loss(x: LossInputs) -> tuple[Tensor, dict[str, Tensor]]:
    """LUSPO loss and metrics. logp, old_logp, mask, ref_logp: [N, T]; advantages: [N]."""
    objective, metrics = sequence_objective(x)
    # J = 1/G sum_i |y_i| J_i
    policy_loss = -seq_mean(seq_lengths(x.mask) * objective, seq_denominator=x.seq_denominator)
    # 1/G sum_i sum_t v_it (verl's seq-mean-token-sum)
    return x.finish(policy_loss, metrics, x.reducer(Aggregation.SEQ_MEAN_TOKEN_SUM))
