"""Policy losses of the GRPO family (GRPO, DAPO, Dr. GRPO, GSPO, GSPO-token, GMPO, CISPO, SAPO; and of 2026:
DPPO Binary-TV / Binary-KL, OPSM, MaxRL, GDPO) and group-relative advantages: pure tensor math.

    from gspo.algos import policy_loss, group_advantages
    adv = group_advantages(rewards, group_size=G)                       # [N]
    loss, metrics = policy_loss("gspo", logp=logp, old_logp=old_logp, advantages=adv, mask=mask,
                                clip_low=3e-4, clip_high=4e-4)

Each algorithm registers its loss with its own options (a dataclass: GRPO's aggregation) and how each
of its metrics reduces over micro-batches (reductions.py); each loss takes the typed `LossInputs`
(the tensors, clip bounds and the trainer's context: ref_logp, kl_beta, seq_denominator, token_denominator,
max_len), checked once by `policy_loss`; an unknown option raises TypeError. Metrics are detached 0-dim
tensors, each declared once in the catalogue (metrics.py: name, meaning, reduction, plot label and scale). Advantage estimators: `estimate(name, ...)`,
"group" ([N]) or "step" (per-token credit from graded steps, [N, T]).
This package imports nothing else of gspo's.
"""

import importlib as _importlib
import pkgutil as _pkgutil

from .advantages import (
    ESTIMATORS,
    constant_components,
    constant_groups,
    estimate,
    frac_zero_std_groups,
    gdpo_advantages,
    get_estimator,
    group_advantages,
    step_advantages,
)
from .common import AGGREGATIONS, MAX_LOG_RATIO, STANDARD_METRICS
from .corrections import correction_weights
from .diagnostics import mismatch_metrics, ratio_diagnostics
from .registry import ALGOS, REDUCTIONS, Algorithm, available, get, option_names, policy_loss, register
from .shaping import overlong_penalty

# Every module of this package is imported, so a new algorithm is its loss module (which registers itself) and
# its preset in conf/algo/, and no list here to edit.
for _module in _pkgutil.iter_modules(__path__):
    _importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "AGGREGATIONS",
    "ALGOS",
    "ESTIMATORS",
    "MAX_LOG_RATIO",
    "REDUCTIONS",
    "STANDARD_METRICS",
    "Algorithm",
    "available",
    "constant_components",
    "constant_groups",
    "correction_weights",
    "estimate",
    "frac_zero_std_groups",
    "gdpo_advantages",
    "get",
    "get_estimator",
    "group_advantages",
    "mismatch_metrics",
    "option_names",
    "overlong_penalty",
    "policy_loss",
    "ratio_diagnostics",
    "register",
    "step_advantages",
]
