"""Policy losses for GRPO, GSPO and GSPO-token, and group-relative advantages: pure tensor math.

    from gspo.algos import policy_loss, group_advantages
    adv = group_advantages(rewards, group_size=G)                       # [N]
    loss, metrics = policy_loss("gspo", logp=logp, old_logp=old_logp, advantages=adv, mask=mask,
                                clip_low=3e-4, clip_high=4e-4)

Options (keyword, all algorithms): aggregation, max_len, ref_logp, kl_beta, seq_denominator,
token_denominator; an unknown option raises TypeError. Metrics are detached 0-dim tensors named as
in DESIGN.md ("clip/token_frac", "ratio/seq_mean", "policy/kl_old", "loss/policy", ...).
This package imports nothing else of gspo's.
"""

from . import grpo, gspo, gspo_token  # noqa: F401  (each module registers its algorithm)
from .advantages import frac_zero_std_groups, group_advantages
from .common import AGGREGATIONS, MAX_LOG_RATIO
from .diagnostics import mismatch_metrics, ratio_diagnostics
from .registry import ALGOS, available, get, option_names, policy_loss, register

__all__ = [
    "AGGREGATIONS",
    "ALGOS",
    "MAX_LOG_RATIO",
    "available",
    "frac_zero_std_groups",
    "get",
    "group_advantages",
    "mismatch_metrics",
    "option_names",
    "policy_loss",
    "ratio_diagnostics",
    "register",
]
