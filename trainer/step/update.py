"""The policy update over one rollout batch: E epochs x M minibatches, each one optimizer step.

Nothing here knows which algorithm runs: the loss, its options and its metrics come from
`gspo.algos.policy_loss`, and each metric reduces as the algorithm declares (token or sequence mean,
sum, min, max; trainer/step/reduction.py). The old and reference log-probs come from trainer/step/scoring.py. One
`StepContext` (trainer/step/context.py) carries the config's nodes and the model, precision and optimizer.
Micro-batches inside a minibatch (gradient accumulation) pass the minibatch's own sequence and token
counts as denominators, so their losses add up to the minibatch loss exactly (scaling means by the
local micro-batch size is a bug peers shipped).

Devices: every tensor lives on the model's device; the shuffle and the bookkeeping (completion lengths,
denominators, widths) are host values, so the update makes no host sync until its metrics are read
(`reduction.to_host`, once per step). The model is in training mode only here, which is what turns gradient
checkpointing on; dropout is off in every model (trainer/model/models.py), so old and new log-probs come from
the same function.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from gspo.algos import get as get_algorithm
from gspo.algos import policy_loss, ratio_diagnostics
from gspo.trainer.engines.rollout import Rollout
from gspo.trainer.model.logprobs import completion_logprobs
from gspo.trainer.parallel import distributed, fsdp
from gspo.trainer.parallel.distributed import World
from gspo.trainer.parallel.moe import RoutingRecorder
from gspo.trainer.run.guards import NonFinite
from gspo.trainer.step.context import StepContext
from gspo.trainer.step.reduction import MetricSums, reduce_metrics
from gspo.trainer.step.undo import nonfinite_guard, restore, snapshot
from gspo.vocab.metrics import GRAD_NORM, LR, reductions

# The update's own metrics, reduced like the algorithm's: means over the updates of a step.
UPDATE_METRICS = reductions((GRAD_NORM, LR))


@dataclass
class Batch:
    """What the update needs of one rollout batch. N sequences, T completion tokens."""

    rollout: Rollout
    advantages: torch.Tensor  # [N]
    old_logp: torch.Tensor  # [N, T]
    ref_logp: torch.Tensor | None  # [N, T]
    lengths: list[int]  # [N] completion lengths |y_i| on the host (read once from the completion mask)
    routing: RoutingRecorder | None = None  # the old policy's expert choices (MoE models)
    pad_left: list[int] | None = None  # [N] each row's left padding before its prompt (host); None: unknown

    def sizes(self) -> list[int]:
        """[N] each row's tokens (prompt and completion) on the host, what a micro-batch's width is made of."""
        prompt = self.rollout.input_ids.shape[1] - self.rollout.n_completion
        pads = self.pad_left or [0] * len(self.lengths)
        return [prompt - pad + n for pad, n in zip(pads, self.lengths, strict=True)]


@dataclass
class _Pass:
    """One batch's bookkeeping across its updates: each metric's reduction, the metrics of every update so
    far, and (epoch, rows, log-ratio, mask) of every micro-batch this rank ran, detached (for diag/*)."""

    kinds: dict[str, str]
    per_update: list[dict[str, torch.Tensor]] = field(default_factory=list)
    used: list[tuple] = field(default_factory=list)


def run_updates(ctx: StepContext, batch: Batch, *, seed: int, undoable: bool = False) -> dict[str, torch.Tensor]:
    """Run the updates for one rollout batch; returns 0-dim metrics on the model's device, reduced over all
    of them. `ctx.sampling` says how the tokens were sampled: temperature, top_p, and max_new_tokens, the
    constant normaliser of Dr. GRPO's aggregation. With `undoable` (on_nonfinite=skip), a NonFinite raised
    by any update first restores the state the batch started from. With several processes (`ctx.world`),
    every rank holds the whole batch and computes the micro-batches dealt to it (trainer/parallel/distributed.py)."""
    state = _Pass({**get_algorithm(ctx.algo.name).metrics, **UPDATE_METRICS})
    gen = torch.Generator().manual_seed(seed)  # a host draw: the order is bookkeeping, not data
    saved = snapshot(ctx) if undoable else None
    ctx.model.train()
    try:
        for epoch in range(ctx.train.epochs):
            order = torch.randperm(len(batch.lengths), generator=gen).tolist()  # the same on every rank
            size = len(order) // ctx.train.minibatches
            for s in range(0, len(order), size):
                state.per_update.append(_optimizer_step(ctx, batch, order[s : s + size], state, epoch))
    except NonFinite:
        if saved is not None:
            restore(saved, ctx)
        raise
    finally:
        ctx.model.eval()
        if batch.routing is not None:
            batch.routing.stop()
    routing = batch.routing.metrics(ctx.world) if batch.routing is not None else {}
    return (reduce_metrics(state.per_update, state.kinds) | _diagnostics(state.used, batch, ctx.train.epochs, ctx.world)
            | routing)


def _optimizer_step(ctx: StepContext, batch: Batch, idx: list[int], state: _Pass, epoch: int) -> dict:
    """One minibatch's gradients, summed over the processes, then one optimizer and schedule step."""
    metrics = _minibatch_grads(ctx, batch, idx, state, epoch)
    if not fsdp.is_sharded(ctx.model):  # FSDP reduce-scatters the gradients in each backward
        distributed.sum_grads(ctx.precision.params, ctx.world)  # [distributed] the global gradient
    guard = nonfinite_guard(ctx.optimizer, metrics, state.per_update, state.kinds)
    metrics[GRAD_NORM] = ctx.precision.step(ctx.optimizer, ctx.train.max_grad_norm, guard=guard).detach()
    metrics[LR] = torch.tensor(ctx.scheduler.get_last_lr()[0], device=batch.advantages.device)
    ctx.scheduler.step()
    return metrics


def micro_batches(idx: list[int], micro_batch_size: int | None, world: World,
                  sizes: list[int] | None = None) -> list[list[int]]:
    """A minibatch's rows `idx` in the micro-batches one process runs (`micro_batch_size` rows each; unset:
    the whole minibatch in one process, 1/W of it with W processes), before they are dealt to ranks. With
    `sizes` (each row's tokens) and more than one micro-batch, the rows are first sorted by size (stable), so
    rows of like length share a micro-batch and each pads to its own longest row: the same sum of the same
    per-row terms, in another order, over fewer padding tokens."""
    micro = micro_batch_size or -(-len(idx) // world.size)
    if sizes is not None and micro < len(idx):
        idx = sorted(idx, key=lambda i: sizes[i])
    return [idx[s : s + micro] for s in range(0, len(idx), micro)]


def _minibatch_grads(ctx: StepContext, batch: Batch, idx: list[int], state: _Pass, epoch: int) -> dict:
    """`idx`: the minibatch's rows of the step's batch; this rank computes the micro-batches dealt to it,
    with the whole minibatch's counts as denominators, and its metric sums join the other ranks' before
    the one division."""
    world = ctx.world
    n_tok = sum(batch.lengths[i] for i in idx)
    den = (float(len(idx)), float(max(1, n_tok)))  # the minibatch's sequences and tokens
    sums = MetricSums(state.kinds, batch.advantages.device)
    parts = micro_batches(idx, ctx.train.micro_batch_size, world, batch.sizes())
    sharded = fsdp.is_sharded(ctx.model)
    # [distributed] micro-batches in contiguous blocks per rank (round-robin under FSDP, whose every rank runs
    # as many forwards and backwards, its collectives, a rank past its share a dummy one of zero weight)
    for k in distributed.dealt(len(parts), world, blocks=True, lockstep=sharded):
        dummy = k is None
        part = parts[0] if dummy else parts[k]
        loss, metrics = _micro_loss(ctx, batch, part, None if dummy else state.used, epoch, den)
        # FSDP averages the ranks' gradients; the sum is wanted: W x the loss (a dummy turn's is zero)
        ctx.precision.backward(loss * (0.0 if dummy else world.size) if sharded else loss)
        if not dummy:
            sums.add(metrics, n_seq=len(part), n_tok=sum(batch.lengths[i] for i in part))
    sums.all_reduce(world, batch.advantages.device, n_seq=float(len(idx)), n_tok=float(n_tok))  # [distributed]
    return sums.result()


def _micro_loss(ctx: StepContext, batch: Batch, part: list[int], used: list | None, epoch: int,
                den: tuple[float, float]):
    """The loss and metrics of micro-batch `part`; `den`: the minibatch's (sequences, tokens), the loss's
    denominators; `used` None: an FSDP dummy turn, neither replayed nor counted."""
    r, algo = batch.rollout, ctx.algo
    rows = torch.tensor(part, device=batch.advantages.device)
    # drop all-padding columns: at the right (completions end) and at the left (prompts start), which changes
    # no token's position or attention (positions count attended tokens; padding is never attended)
    width = max(batch.lengths[i] for i in part) or 1
    left = min(batch.pad_left[i] for i in part) if batch.pad_left else 0
    cols = slice(left, r.input_ids.shape[1] - r.n_completion + width)
    if batch.routing is not None:  # stays set through backward, which may recompute this forward
        if used is None:
            batch.routing.stop()
        else:
            batch.routing.updating(rows, cols)
    bonus = bool(algo.entropy_coef)  # the entropy is computed, with its gradient, only for a bonus
    with ctx.precision.autocast():
        logp, entropy = completion_logprobs(ctx.model, r.input_ids[rows, cols], r.attention_mask[rows, cols], width,
                                            temperature=ctx.sampling.temperature, top_p=ctx.sampling.top_p,
                                            chunk=ctx.train.logprob_chunk, with_entropy=bonus, entropy_grad=bonus)
    ref = batch.ref_logp[rows, :width] if batch.ref_logp is not None else None
    old, mask = batch.old_logp[rows, :width], r.completion_mask[rows, :width]
    if used is not None:
        used.append((epoch, rows, (logp.detach() - old) * mask, mask))
    adv = batch.advantages[rows] if batch.advantages.dim() == 1 else batch.advantages[rows, :width]  # [n] or [n, width]
    # the sampler's own log-probs, whichever pi_old the loss gets (OPSM's mask, DPPO's anchor read them)
    sampler = r.engine_logp[rows, :width].to(old.dtype) if r.engine_logp is not None else None
    return policy_loss(
        algo.name, logp=logp, old_logp=old, advantages=adv,
        mask=mask, clip_low=algo.clip_low, clip_high=algo.clip_high,
        **algo.options, max_len=ctx.sampling.max_new_tokens, ref_logp=ref, kl_beta=algo.kl_beta,
        seq_denominator=den[0], token_denominator=den[1], sampler_logp=sampler, kl_unbiased=algo.kl_unbiased,
        entropy=entropy, entropy_coef=algo.entropy_coef,
    )


def _diagnostics(used: list[tuple], batch: Batch, epochs: int, world: World) -> dict[str, torch.Tensor]:
    """diag/* over the log-ratios of every sequence as each update used it (gspo.algos.ratio_diagnostics):
    each row once per epoch, placed at (epoch, row) so the order is the batch's, whichever rank or
    micro-batch computed it (the ranks' parts are summed into the zeros)."""
    n, width = len(batch.lengths), batch.old_logp.shape[1]
    log_ratio = batch.old_logp.new_zeros(epochs * n, width)
    mask = batch.rollout.completion_mask.new_zeros(epochs * n, width)
    for epoch, rows, lr, m in used:
        log_ratio[epoch * n + rows, : lr.shape[1]] = lr
        mask[epoch * n + rows, : m.shape[1]] = m
    distributed.sum_tensors([log_ratio, mask], world)
    return ratio_diagnostics(log_ratio=log_ratio, mask=mask)
