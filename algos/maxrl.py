"""MaxRL's advantage on GRPO's clipped loss (Maximum-likelihood RL, arXiv 2602.02710; SkyRL, prime-rl).

    A_i = (r_i - mean({r_j})) / mean({r_j})           (algo.adv_scale=mean, in conf/algo/maxrl.yaml)
    J   = 1/G sum_i 1/|y_i| sum_t min(r_it A_i, clip(r_it, 1 - eps_lo, 1 + eps_hi) A_i)

With binary rewards the group mean p is the prompt's pass rate, and sum_i (r_i - p) / p grad log pi(y_i) / G
estimates grad log p: the gradient of the log-likelihood of success, which weights a hard prompt (small p) up
by 1/p where GRPO's std division weights it by 1/sqrt(p (1 - p)). The loss is gspo.algos.grpo's, registered
again under MaxRL's name so runs and reports carry it; the advantage is gspo.algos.advantages'
group_advantages(scale="mean"), whose group mean is bounded below by eps (no division by 0; a constant group
gives exactly 0). Rewards must lie in [0, 1]: the trainer refuses it with the overlong penalty (negative rewards).
"""

from __future__ import annotations

from dataclasses import dataclass

from .common import STANDARD_METRICS
from .grpo import GRPO_CARD, GrpoOptions, grpo_loss
from .registry import register


@dataclass(frozen=True)
class MaxrlOptions(GrpoOptions):
    """GRPO's aggregation options; default seq_mean_token_mean (the GRPO form MaxRL's experiments keep)."""


register("maxrl", options=MaxrlOptions, metrics=STANDARD_METRICS, token_advantages=True,
         card=GRPO_CARD)(grpo_loss)
