"""Dr. GRPO's objective: GRPO's clipped token loss with a constant length normaliser (Liu et al. 2025,
"Understanding R1-Zero-Like Training: A Critical Perspective", arXiv 2503.20783, sec. 3).

    A_i = r_i - mean({r_j})                    (no std division: algo.adv_scale=none, in the yaml)
    J   = 1/G sum_i 1/max_len sum_t min(r_it A_i, clip(r_it, 1 - eps_lo, 1 + eps_hi) A_i)

max_len is the generation budget (rollout.max_new_tokens), the same for every sequence, so a long
wrong answer is not penalised less per token than a short one. The loss is gspo.algos.grpo's,
registered again under Dr. GRPO's name with seq_mean_token_sum_norm as its default aggregation, so runs
and reports carry the name; the advantage's missing std division is conf/algo/dr_grpo.yaml's adv_scale.
"""

from __future__ import annotations

from dataclasses import dataclass

from gspo.vocab.choices import Aggregation

from .common import STANDARD_METRICS
from .grpo import GRPO_CARD, GrpoOptions, grpo_loss
from .registry import register


@dataclass(frozen=True)
class DrGrpoOptions(GrpoOptions):
    aggregation: str = Aggregation.SEQ_MEAN_TOKEN_SUM_NORM  # 1/max_len, the constant normaliser (paper, sec. 3)


register("dr_grpo", options=DrGrpoOptions, metrics=STANDARD_METRICS, token_advantages=True,
         card=GRPO_CARD)(grpo_loss)
