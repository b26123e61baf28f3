"""The old and reference log-probs of a rollout batch, before its updates, from where
`engines.logp_origin.old_logp_origin` says the loss's old log-probs come.

Dropout is off in every model (trainer/model/models.py), so a scoring forward here and the update's forward are
the same function of the weights.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from gspo.trainer.engines.logp_origin import SAMPLER, old_logp_origin
from gspo.trainer.engines.registry import capabilities_of
from gspo.trainer.engines.rollout import Rollout
from gspo.trainer.model.logprobs import completion_logprobs
from gspo.trainer.model.lora import adapters_disabled
from gspo.trainer.model.precision import Precision
from gspo.trainer.parallel import distributed, fsdp
from gspo.trainer.parallel.distributed import World
from gspo.trainer.parallel.moe import RoutingRecorder
from gspo.trainer.step.context import StepContext


def old_logprobs(ctx: StepContext, rollout: Rollout):
    """(old log-probs, entropy, reference log-probs or None) [N, T] of a rollout batch, before its updates:
    the sampler's own where they are the old policy's to fp tolerance (SAMPLER), else a scoring forward
    (which records the MoE routing for replay); the reference model's when there is one."""
    origin = old_logp_origin(ctx.algo, engine=capabilities_of(ctx.sampling), precision=ctx.precision, rollout=rollout,
                             routing=ctx.routing, lag=ctx.sampling.lag)
    if origin == SAMPLER:
        old_logp, entropy = rollout.engine_logp, rollout.engine_entropy
    else:
        old_logp, entropy = score(ctx.model, rollout, precision=ctx.precision, train=ctx.train, sampling=ctx.sampling,
                                  with_entropy=True, routing=ctx.routing, world=ctx.world)
    ref_logp = None
    if ctx.ref_model is not None:
        with adapters_disabled(ctx.ref_model):
            ref_logp = score(ctx.ref_model, rollout, precision=ctx.precision, train=ctx.train, sampling=ctx.sampling,
                             world=ctx.world)[0]
    return old_logp, entropy, ref_logp


@torch.no_grad()
def score(model, rollout: Rollout, *, precision: Precision, train, sampling, with_entropy: bool = False,
          routing: RoutingRecorder | None = None, world: World = World()):
    """Log-probs (and entropy) [N, T] of the sampled tokens under `model`, in row chunks of a micro-batch (or
    a minibatch) to bound memory; with `routing`, the experts each token was sent to are recorded for the
    update (MoE models). `train`, `sampling`: the config's train and rollout nodes. With several processes,
    chunk k is rank k mod W's and the ranks' rows are summed into every rank's result."""
    n, width = rollout.input_ids.shape[0], rollout.n_completion
    rows = train.micro_batch_size or max(1, n // train.minibatches)
    if routing is not None:
        routing.start_batch(rollout.attention_mask, rollout.routing)  # R3: the sampler's experts, from the rollout
    logp = rollout.completion_mask.new_zeros(n, width, dtype=torch.float32)
    ent = torch.zeros_like(logp) if with_entropy else None
    starts = list(range(0, n, rows))
    for k in distributed.dealt(len(starts), world, lockstep=fsdp.is_sharded(model)):  # chunk k is rank k mod W's
        if k is None:  # FSDP: a dummy forward, so every rank joins as many all-gathers
            completion_logprobs(model, rollout.input_ids[:1], rollout.attention_mask[:1], width, chunk=train.logprob_chunk)
            continue
        s = starts[k]
        with precision.autocast(), routing.recording(slice(s, s + rows)) if routing is not None else nullcontext():
            lp, e = completion_logprobs(model, rollout.input_ids[s : s + rows], rollout.attention_mask[s : s + rows],
                                        width, temperature=sampling.temperature,
                                        top_p=sampling.top_p, chunk=train.logprob_chunk, with_entropy=with_entropy)
        logp[s : s + rows] = lp * rollout.completion_mask[s : s + rows]
        if with_entropy:
            ent[s : s + rows] = e
    fsdp.reshard(model)
    distributed.sum_tensors([logp, *([ent] if with_entropy else [])], world)
    if routing is not None:
        routing.share(world)
    return logp, ent
