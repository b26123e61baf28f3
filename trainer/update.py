"""The policy update over one rollout batch: E epochs x M minibatches, each one optimizer step.

Nothing here knows which algorithm runs: the loss, its options and its metrics come from
`gspo.algos.policy_loss`, and each metric reduces as the algorithm declares (token or sequence mean,
sum, min, max): `MetricSums` keeps a (sum, count) per metric over the micro-batches and divides once.
Micro-batches inside a minibatch (gradient accumulation) pass the minibatch's own sequence and token
counts as denominators, so their losses add up to the minibatch loss exactly (scaling means by the
local micro-batch size is a bug peers shipped).

Devices: every tensor lives on the model's device; the shuffle and the bookkeeping (completion lengths,
denominators, widths) are host values, so the update makes no host sync until its metrics are read
(`to_host`, once per step). The model is in training mode only here, which is what turns gradient
checkpointing on; dropout is off in every model (trainer/models.py), so old and new log-probs come from
the same function.
"""

from __future__ import annotations

import copy
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from gspo.algos import get as get_algorithm
from gspo.algos import policy_loss, ratio_diagnostics
from gspo.algos.registry import MAX, MIN, SEQ_MEAN, SUM, TOKEN_MEAN
from gspo.trainer import distributed, fsdp
from gspo.trainer.distributed import World
from gspo.trainer.guards import NonFinite
from gspo.trainer.logprobs import completion_logprobs
from gspo.trainer.lora import adapters_disabled
from gspo.trainer.moe import RoutingRecorder
from gspo.trainer.precision import Precision
from gspo.trainer.rollout import Rollout

# The update's own metrics, reduced like the algorithm's: means over the updates of a step.
UPDATE_METRICS = {"optim/grad_norm": SEQ_MEAN, "optim/lr": SEQ_MEAN}


class MetricSums:
    """Metrics of micro-batches combined as their algorithm declares: a (sum, count) per mean or sum,
    a running min or max per extreme; `result()` divides once. Sums are 0-dim device tensors in float64
    (float32 where the device has no float64), so adding the same parts in another order (other ranks)
    changes the result by ~1e-16 relative; counts are host numbers."""

    def __init__(self, kinds: dict[str, str], device: torch.device | None = None):
        self.kinds = kinds
        self.dtype = torch.float32 if device is not None and device.type == "mps" else torch.float64
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, float] = {}

    def add(self, metrics: dict[str, torch.Tensor], *, n_seq: float, n_tok: float) -> None:
        for key, value in metrics.items():
            kind = self.kinds.get(key)
            if kind is None:
                raise KeyError(f"metric {key!r} has no declared reduction (gspo.algos.register(..., metrics=))")
            value = value.detach().to(self.dtype)
            acc = self.sums.get(key)
            if kind in (MIN, MAX):
                self.sums[key] = value if acc is None else (torch.minimum if kind == MIN else torch.maximum)(acc, value)
                continue
            weight = {TOKEN_MEAN: n_tok, SEQ_MEAN: n_seq, SUM: 1.0}[kind]  # a sum's parts add up as they are
            self.sums[key] = value * weight if acc is None else acc + value * weight
            self.counts[key] = self.counts.get(key, 0.0) + weight

    def all_reduce(self, world, device: torch.device, *, n_seq: float, n_tok: float) -> None:
        """[distributed] Each rank's sums of one global minibatch -> the global sums (SUM of sums, MIN / MAX
        of extremes) before `result()` divides; the counts become the global minibatch's (`n_seq`
        sequences, `n_tok` tokens), which every rank knows. A no-op with one process."""
        if world.size == 1:
            return
        ops = {k: "min" if kind == MIN else "max" if kind == MAX else "sum" for k, kind in self.kinds.items()}
        self.sums = distributed.reduce_parts(self.sums, ops, device, world, self.dtype)
        self.counts = {k: {TOKEN_MEAN: n_tok, SEQ_MEAN: n_seq}[self.kinds[k]] for k in self.sums
                       if self.kinds[k] in (TOKEN_MEAN, SEQ_MEAN)}

    def result(self) -> dict[str, torch.Tensor]:
        """Means divided once (sum / count); sums and extremes as they are."""
        return {k: (v if self.kinds[k] in (MIN, MAX, SUM) else v / max(self.counts[k], 1.0)).float()
                for k, v in self.sums.items()}


@dataclass
class Batch:
    """What the update needs of one rollout batch. N sequences, T completion tokens."""

    rollout: Rollout
    advantages: torch.Tensor  # [N]
    old_logp: torch.Tensor  # [N, T]
    ref_logp: torch.Tensor | None  # [N, T]
    lengths: list[int]  # [N] completion lengths |y_i| on the host (read once from the completion mask)
    routing: RoutingRecorder | None = None  # the old policy's expert choices (MoE models)


def update(model, optimizer, scheduler, batch: Batch, *, precision: Precision, algo, train, rollout,
           seed: int, undoable: bool = False, world: World = World()) -> dict[str, torch.Tensor]:
    """Run the updates for one rollout batch; returns 0-dim metrics on the model's device, reduced over all
    of them. `rollout` (the config group) says how the tokens were sampled: temperature, top_p, and
    max_new_tokens, the constant normaliser of Dr. GRPO's aggregation. With `undoable` (on_nonfinite=skip),
    a NonFinite raised by any update first restores the state the batch started from. With several
    processes (`world`), every rank holds the whole batch and computes the micro-batches dealt to it
    (trainer/distributed.py)."""
    kinds = {**get_algorithm(algo.name).metrics, **UPDATE_METRICS}
    per_update: list[dict[str, torch.Tensor]] = []
    used: list[tuple] = []  # (epoch, rows, log-ratio, mask) of every micro-batch this rank ran, detached
    gen = torch.Generator().manual_seed(seed)  # a host draw: the order is bookkeeping, not data
    snapshot = _snapshot(precision, optimizer, scheduler) if undoable else None
    model.train()
    try:
        for epoch in range(train.epochs):
            order = torch.randperm(len(batch.lengths), generator=gen).tolist()  # the same on every rank
            size = len(order) // train.minibatches
            for s in range(0, len(order), size):
                metrics = _minibatch_step(model, batch, order[s : s + size], used, kinds, epoch, world,
                                          precision=precision, algo=algo, train=train, rollout=rollout)
                if not fsdp.is_sharded(model):  # FSDP reduce-scatters the gradients in each backward
                    distributed.sum_grads(precision.params, world)  # [distributed] the global gradient
                guard = _nonfinite_guard(optimizer, metrics, per_update, kinds)
                metrics["optim/grad_norm"] = precision.step(optimizer, train.max_grad_norm, guard=guard).detach()
                metrics["optim/lr"] = torch.tensor(scheduler.get_last_lr()[0], device=batch.advantages.device)
                scheduler.step()
                per_update.append(metrics)
    except NonFinite:
        if snapshot is not None:
            _restore(snapshot, precision, optimizer, scheduler)
        raise
    finally:
        model.eval()
        if batch.routing is not None:
            batch.routing.stop()
    routing = batch.routing.metrics(world) if batch.routing is not None else {}
    return reduce_metrics(per_update, kinds) | _diagnostics(used, batch, train.epochs, world) | routing


def _snapshot(precision: Precision, optimizer, scheduler) -> tuple:
    """Copies of what a batch's updates change (weights, optimizer and schedule state), so a batch that
    meets a non-finite value is undone whole; costs one copy of the trainable weights and the optimizer
    state per step."""
    return ([m.detach().clone() for m in precision.master], copy.deepcopy(optimizer.state_dict()),
            scheduler.state_dict())


def _restore(snapshot: tuple, precision: Precision, optimizer, scheduler) -> None:
    master, optimizer_state, scheduler_state = snapshot
    with torch.no_grad():
        torch._foreach_copy_(precision.master, master)
        if precision.separate_master:
            torch._foreach_copy_(precision.params, precision.master)
    optimizer.load_state_dict(optimizer_state)
    scheduler.load_state_dict(scheduler_state)


def _nonfinite_guard(optimizer, metrics: dict, done: list[dict], kinds: dict[str, str]):
    """The check Precision.step runs before the optimizer steps: a non-finite loss or gradient norm (None
    when fp16's loss scale handles an overflow itself) discards the gradients and raises NonFinite, so the
    bad update never reaches the weights. One host sync per optimizer step."""

    def guard(norm: torch.Tensor | None) -> None:
        values = {k: v for k, v in metrics.items() if kinds.get(k) == SUM}  # the loss terms
        if norm is not None:
            values["optim/grad_norm"] = norm
        if norm is not None and norm.device.type == "meta":
            return  # meta tensors hold no values (the device-placement test runs the update there)
        if bool(torch.stack([v.detach().float() for v in values.values()]).isfinite().all()):
            return
        optimizer.zero_grad(set_to_none=True)
        bad = [k for k, v in values.items() if not bool(v.isfinite())]
        ratios = [{k: v for k, v in r.items() if k.startswith(("ratio/", "clip/"))} for r in [*done, metrics]]
        raise NonFinite(f"{', '.join(sorted(bad, reverse=True))} in update {len(done) + 1}",
                        {"ratio_stats": to_host(reduce_metrics(ratios, kinds))})

    return guard


def micro_batches(idx: list[int], micro_batch_size: int | None, world: World) -> list[list[int]]:
    """A minibatch's rows `idx` in the micro-batches one process runs (`micro_batch_size` rows each; unset:
    the whole minibatch in one process, 1/W of it with W processes), before they are dealt to ranks."""
    micro = micro_batch_size or -(-len(idx) // world.size)
    return [idx[s : s + micro] for s in range(0, len(idx), micro)]


def _minibatch_step(model, batch: Batch, idx: list[int], used: list, kinds: dict[str, str], epoch: int,
                    world: World, *, precision: Precision, algo, train, rollout) -> dict:
    """`idx`: the minibatch's rows of the step's batch; this rank computes the micro-batches dealt to it,
    with the whole minibatch's counts as denominators, and its metric sums join the other ranks' before
    the one division."""
    n_tok = sum(batch.lengths[i] for i in idx)
    seq_den, tok_den = float(len(idx)), float(max(1, n_tok))
    sums = MetricSums(kinds, batch.advantages.device)
    parts = micro_batches(idx, train.micro_batch_size, world)
    sharded = fsdp.is_sharded(model)
    # [distributed] micro-batches in contiguous blocks per rank (round-robin under FSDP, whose every rank runs
    # as many forwards and backwards, its collectives, a rank past its share a dummy one of zero weight)
    for k in distributed.dealt(len(parts), world, blocks=True, lockstep=sharded):
        dummy = k is None
        part = parts[0] if dummy else parts[k]
        loss, metrics = _micro_loss(model, batch, part, None if dummy else used, epoch, precision=precision,
                                    algo=algo, rollout=rollout, seq_den=seq_den, tok_den=tok_den,
                                    chunk=train.logprob_chunk)
        # FSDP averages the ranks' gradients; the sum is wanted: W x the loss (a dummy turn's is zero)
        precision.backward(loss * (0.0 if dummy else world.size) if sharded else loss)
        if not dummy:
            sums.add(metrics, n_seq=len(part), n_tok=sum(batch.lengths[i] for i in part))
    sums.all_reduce(world, batch.advantages.device, n_seq=float(len(idx)), n_tok=float(n_tok))  # [distributed]
    return sums.result()


def _micro_loss(model, batch: Batch, part: list[int], used: list, epoch: int, *, precision, algo, rollout, seq_den,
                tok_den, chunk):
    r = batch.rollout
    rows = torch.tensor(part, device=batch.advantages.device)
    width = max(batch.lengths[i] for i in part) or 1  # drop all-padding columns at the right
    cols = slice(0, r.input_ids.shape[1] - r.n_completion + width)
    if batch.routing is not None:  # stays set through backward, which may recompute this forward
        if used is None:  # a dummy turn (FSDP): neither replayed nor counted
            batch.routing.stop()
        else:
            batch.routing.updating(rows, cols)
    with precision.autocast():
        logp, _ = completion_logprobs(model, r.input_ids[rows, cols], r.attention_mask[rows, cols], width,
                                      temperature=rollout.temperature, top_p=rollout.top_p, chunk=chunk)
    ref = batch.ref_logp[rows, :width] if batch.ref_logp is not None else None
    old, mask = batch.old_logp[rows, :width], r.completion_mask[rows, :width]
    if used is not None:
        used.append((epoch, rows, (logp.detach() - old) * mask, mask))
    adv = batch.advantages[rows] if batch.advantages.dim() == 1 else batch.advantages[rows, :width]  # [n] or [n, width]
    return policy_loss(
        algo.name, logp=logp, old_logp=old, advantages=adv,
        mask=mask, clip_low=algo.clip_low, clip_high=algo.clip_high,
        **algo.options, max_len=rollout.max_new_tokens, ref_logp=ref, kl_beta=algo.kl_beta,
        seq_denominator=seq_den, token_denominator=tok_den,
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


def reduce_metrics(rows: list[dict[str, torch.Tensor]], kinds: dict[str, str]) -> dict[str, torch.Tensor]:
    """Over the updates of a step: means, and min / max for the extremes (by `kinds`), still on the device."""
    out: dict[str, torch.Tensor] = {}
    for key in rows[0]:
        vals = torch.stack([r[key] for r in rows])
        kind = kinds.get(key)
        out[key] = vals.min() if kind == MIN else vals.max() if kind == MAX else vals.mean()
    return out


def to_host(metrics: dict[str, torch.Tensor]) -> dict[str, float]:
    """0-dim device tensors -> floats, in one host sync. A NaN diag/ entry means nothing to measure this
    step (a length bucket with under 2 values) and is left out; any other NaN is kept, it is news."""
    values = torch.stack([v.float() for v in metrics.values()]).tolist() if metrics else []
    return {k: v for k, v in zip(metrics, values, strict=True) if not (k.startswith("diag/") and v != v)}


def old_logprobs(model, ref_model, rollout: Rollout, *, precision: Precision, algo, train, sampling,
                 routing: RoutingRecorder | None = None, world: World = World()):
    """(old log-probs, entropy, reference log-probs or None) [N, T] of a rollout batch, before its updates:
    the sampler's own where they are the old policy's to fp tolerance (`sampler_scores`), else a scoring
    forward (which records the MoE routing for replay); the reference model's when there is one."""
    old_logp, entropy = (sampler_scores(algo, sampling, precision, rollout, routing)
                         or score(model, rollout, precision=precision, train=train, sampling=sampling,
                                  with_entropy=True, routing=routing, world=world))
    ref_logp = None
    if ref_model is not None:
        with adapters_disabled(ref_model):
            ref_logp = score(ref_model, rollout, precision=precision, train=train, sampling=sampling, world=world)[0]
    return old_logp, entropy, ref_logp


def sampler_scores(algo, sampling, precision: Precision, rollout: Rollout, routing: RoutingRecorder | None):
    """(old log-probs, entropy) [N, T] as the sampler computed them while it drew the tokens, where that is
    the old policy's own to fp tolerance (algo.old_logp_source=auto): the lean hf sampler on the trained
    model, sampling and scoring both in fp32, and no MoE routers to record. None: score with a forward."""
    exact = (algo.old_logp_source == "auto" and rollout.engine_entropy is not None
             and sampling.engine == "hf" and sampling.sampler == "lean" and sampling.dtype == "auto"
             and precision.dtype == torch.float32 and not (routing is not None and routing.routers))
    return (rollout.engine_logp, rollout.engine_entropy) if exact else None


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
