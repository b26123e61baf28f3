"""The one decision of where the loss's old log-probs come from (`old_logp_origin`): the engine's own, the
hf lean sampler's own, or a scoring forward of the trainer. Read by the engines (must they return their
log-probs?) and by the step (trainer/step/scoring.py, advantages.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gspo.vocab.choices import OldLogp
from gspo.vocab.lazy import lazy_module

if TYPE_CHECKING:  # the registry and the loss card read this module without torch
    from gspo.trainer.engines.base import Capabilities
    from gspo.trainer.engines.rollout import Rollout
    from gspo.trainer.model.precision import Precision
    from gspo.trainer.parallel.moe import RoutingRecorder

torch = lazy_module("torch")  # runs at its first use (vocab/lazy.py)

# Where the loss's old log-probs come from (algo.old_logp_source picks; `old_logp_origin` decides):
ENGINE = "engine"  # the rollout engine's own, whatever its precision (paper sec. 5.3); a trainer forward is
#                    still run, for the sampler-trainer mismatch metrics and the TIS / MIS corrections
SAMPLER = "sampler"  # the hf lean sampler's own, where they equal a trainer forward to fp tolerance (auto)
FORWARD = "forward"  # a scoring forward of the trainer


def old_logp_origin(algo, *, engine: Capabilities | None = None, precision: Precision | None = None, rollout: Rollout | None = None,
                    routing: RoutingRecorder | None = None, lag: int = 0) -> str:
    """ENGINE, SAMPLER or FORWARD. Before a batch is sampled (no `rollout`), only ENGINE is knowable: it says
    whether the engine must return its log-probs. SAMPLER (algo.old_logp_source=auto) needs the batch: an
    engine whose log-probs are the trained model's own (`exact_logprobs`: the hf lean sampler), sampling and
    scoring both in fp32, no MoE routers to record, and no lag (rollout.lag: a lagged sampler's log-probs are the
    behaviour policy's, pi_s, not pi_old). `engine`: the engine's capabilities."""
    if algo.old_logp_source == OldLogp.ENGINE:
        return ENGINE
    exact = (algo.old_logp_source == OldLogp.AUTO and not lag and rollout is not None and rollout.engine_entropy is not None
             and engine.exact_logprobs
             and precision.dtype == torch.float32 and not (routing is not None and routing.routers))
    return SAMPLER if exact else FORWARD
