"""GDPO: group reward-decoupled normalisation on GRPO's clipped loss (Liu et al. 2026, "GDPO: Group
reward-Decoupled Normalization Policy Optimization for Multi-reward RL", arXiv 2601.05242; TRL's
multi_objective_aggregation="normalize_then_sum", verl, NeMo-RL, ms-swift).

    A_i^k = (r_i^k - mean_group(r^k)) / (std_group(r^k) + eps)      for each reward component k
    A_i   = (sum_k A_i^k - mean_batch) / (std_batch + eps)
    J     = 1/G sum_i 1/|y_i| sum_t min(r_it A_i, clip(r_it, 1 - eps_lo, 1 + eps_hi) A_i)

Summing the components first (GRPO) lets distinct reward combinations collapse onto one advantage value; GDPO
normalises each component in its group before the sum. The loss is gspo.algos.grpo's, registered again under
GDPO's name so runs and reports carry it; the advantage is the `gdpo` estimator (gspo.algos.advantages
gdpo_advantages, algo.advantage=gdpo in conf/algo/gdpo.yaml), fed by the task's reward components (the arith
task: correctness and format, a final `#<answer>` present; with the overlong penalty on, it is one more component).
"""

from __future__ import annotations

from dataclasses import dataclass

from .common import STANDARD_METRICS
from .grpo import GRPO_CARD, GrpoOptions, grpo_loss
from .registry import register


@dataclass(frozen=True)
class GdpoOptions(GrpoOptions):
    """GRPO's aggregation options; default seq_mean_token_mean (the paper builds on GRPO)."""


register("gdpo", options=GdpoOptions, metrics=STANDARD_METRICS, token_advantages=True,
         card=GRPO_CARD)(grpo_loss)
