"""DAPO's objective: GRPO's clipped token loss with clip-higher and token-level aggregation (Yu et al. 2025,
"DAPO", arXiv 2503.14476, eq. 8).

    J = 1/sum_i |y_i| sum_i sum_t min(r_it A_i, clip(r_it, 1 - eps_lo, 1 + eps_hi) A_i)

The loss is gspo.algos.grpo's, registered again under DAPO's name with token_mean as its default
aggregation, so runs and reports carry the name. DAPO's other two parts are not losses and live in the
rollout, usable by every algorithm: dynamic sampling (groups with all-equal rewards dropped, the batch
refilled) and overlong reward shaping (conf/algo/dapo.yaml turns both on). Clip bounds 0.2 / 0.28
(paper, sec. 3.1) come from the yaml.
"""

from __future__ import annotations

from dataclasses import dataclass

from gspo.vocab.choices import Aggregation

from .common import STANDARD_METRICS
from .grpo import GRPO_CARD, GrpoOptions, grpo_loss
from .registry import register


@dataclass(frozen=True)
class DapoOptions(GrpoOptions):
    aggregation: str = Aggregation.TOKEN_MEAN  # the paper's token-level 1/sum_i |y_i| (sec. 3.3); GRPO's others allowed


register("dapo", options=DapoOptions, metrics=STANDARD_METRICS, token_advantages=True,
         card=GRPO_CARD)(grpo_loss)
