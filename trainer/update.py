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
from gspo.trainer import distributed
from gspo.trainer.distributed import RowShard
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
    a running min or max per extreme; `result()` divides once. Sums and counts are 0-dim device tensors
    or host numbers, ready to be added across processes before the division."""

    def __init__(self, kinds: dict[str, str]):
        self.kinds = kinds
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, float] = {}

    def add(self, metrics: dict[str, torch.Tensor], *, n_seq: float, n_tok: float) -> None:
        for key, value in metrics.items():
            kind = self.kinds.get(key)
            if kind is None:
                raise KeyError(f"metric {key!r} has no declared reduction (gspo.algos.register(..., metrics=))")
            value = value.detach().float()
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
        self.sums = distributed.reduce_parts(self.sums, ops, device, world)
        self.counts = {k: {TOKEN_MEAN: n_tok, SEQ_MEAN: n_seq}[self.kinds[k]] for k in self.sums
                       if self.kinds[k] in (TOKEN_MEAN, SEQ_MEAN)}

    def result(self) -> dict[str, torch.Tensor]:
        """Means divided once (sum / count); sums and extremes as they are."""
        return {k: v if self.kinds[k] in (MIN, MAX, SUM) else v / max(self.counts[k], 1.0)
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
    shard: RowShard | None = None  # several processes: which rows of the step's batch these are; None: all


def update(model, optimizer, scheduler, batch: Batch, *, precision: Precision, algo, train, rollout,
           seed: int, undoable: bool = False) -> dict[str, torch.Tensor]:
    """Run the updates for one rollout batch; returns 0-dim metrics on the model's device, reduced over all
    of them. `rollout` (the config group) says how the tokens were sampled: temperature, top_p, and
    max_new_tokens, the constant normaliser of Dr. GRPO's aggregation. With `undoable` (on_nonfinite=skip),
    a NonFinite raised by any update first restores the state the batch started from."""
    kinds = {**get_algorithm(algo.name).metrics, **UPDATE_METRICS}
    shard = batch.shard or RowShard(0, len(batch.lengths), batch.lengths)  # [distributed]
    per_update: list[dict[str, torch.Tensor]] = []
    used: list[tuple[torch.Tensor, torch.Tensor]] = []  # (log-ratio, mask) of every micro-batch, detached
    gen = torch.Generator().manual_seed(seed)  # a host draw: the order is bookkeeping, not data
    snapshot = _snapshot(precision, optimizer, scheduler) if undoable else None
    model.train()
    try:
        for _ in range(train.epochs):
            order = torch.randperm(len(shard.lengths), generator=gen).tolist()  # all ranks' rows
            size = len(order) // train.minibatches
            for s in range(0, len(order), size):
                metrics = _minibatch_step(model, batch, shard, order[s : s + size], used, kinds,
                                          precision=precision, algo=algo, train=train, rollout=rollout)
                distributed.sum_grads(precision.params, shard.world)  # [distributed] the global gradient
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
    routing = batch.routing.metrics() if batch.routing is not None else {}
    return reduce_metrics(per_update, kinds) | _diagnostics(used, shard.world) | routing


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


def _minibatch_step(model, batch: Batch, shard: RowShard, idx: list[int], used: list, kinds: dict[str, str], *,
                    precision: Precision, algo, train, rollout) -> dict:
    """`idx`: the minibatch's rows of the step's batch (all ranks'); this rank computes the part it holds,
    with the whole minibatch's counts as denominators, and its metric sums join the other ranks' before
    the one division."""
    n_tok = sum(shard.lengths[i] for i in idx)
    seq_den, tok_den = float(len(idx)), float(max(1, n_tok))
    micro = train.micro_batch_size or len(idx)
    sums = MetricSums(kinds)
    local = shard.local(idx)  # [distributed] this rank's rows of the minibatch (all of them with one process)
    for s in range(0, len(local), micro):
        part = local[s : s + micro]
        loss, metrics = _micro_loss(model, batch, part, used, precision=precision, algo=algo, rollout=rollout,
                                    seq_den=seq_den, tok_den=tok_den, chunk=train.logprob_chunk)
        precision.backward(loss)
        sums.add(metrics, n_seq=len(part), n_tok=sum(batch.lengths[i] for i in part))
    sums.all_reduce(shard.world, batch.advantages.device, n_seq=float(len(idx)), n_tok=float(n_tok))  # [distributed]
    return sums.result()


def _micro_loss(model, batch: Batch, part: list[int], used: list, *, precision, algo, rollout, seq_den, tok_den, chunk):
    r = batch.rollout
    rows = torch.tensor(part, device=batch.advantages.device)
    width = max(batch.lengths[i] for i in part) or 1  # drop all-padding columns at the right
    cols = slice(0, r.input_ids.shape[1] - r.n_completion + width)
    if batch.routing is not None:  # stays set through backward, which may recompute this forward
        batch.routing.updating(rows, cols)
    with precision.autocast():
        logp, _ = completion_logprobs(model, r.input_ids[rows, cols], r.attention_mask[rows, cols], width,
                                      temperature=rollout.temperature, top_p=rollout.top_p, chunk=chunk)
    ref = batch.ref_logp[rows, :width] if batch.ref_logp is not None else None
    old, mask = batch.old_logp[rows, :width], r.completion_mask[rows, :width]
    used.append(((logp.detach() - old) * mask, mask))
    adv = batch.advantages[rows] if batch.advantages.dim() == 1 else batch.advantages[rows, :width]  # [n] or [n, width]
    return policy_loss(
        algo.name, logp=logp, old_logp=old, advantages=adv,
        mask=mask, clip_low=algo.clip_low, clip_high=algo.clip_high,
        **algo.options, max_len=rollout.max_new_tokens, ref_logp=ref, kl_beta=algo.kl_beta,
        seq_denominator=seq_den, token_denominator=tok_den,
    )


def _diagnostics(used: list[tuple[torch.Tensor, torch.Tensor]], world) -> dict[str, torch.Tensor]:
    """diag/* over the log-ratios of every sequence as each update used it (gspo.algos.ratio_diagnostics),
    on every rank's sequences (each rank used each of its rows once per epoch: the same count everywhere)."""
    width = max(lr.shape[1] for lr, _ in used)
    pad = [torch.nn.functional.pad(x, (0, width - x.shape[1])) for pair in used for x in pair]
    log_ratio, mask = (distributed.gather_rows(torch.cat(pad[i::2]), world) for i in (0, 1))
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
                 routing: RoutingRecorder | None = None):
    """(old log-probs, entropy, reference log-probs or None) [N, T] of a rollout batch, before its updates:
    the sampler's own where they are the old policy's to fp tolerance (`sampler_scores`), else a scoring
    forward (which records the MoE routing for replay); the reference model's when there is one."""
    old_logp, entropy = (sampler_scores(algo, sampling, precision, rollout, routing)
                         or score(model, rollout, precision=precision, train=train, sampling=sampling,
                                  with_entropy=True, routing=routing))
    ref_logp = None
    if ref_model is not None:
        with adapters_disabled(ref_model):
            ref_logp = score(ref_model, rollout, precision=precision, train=train, sampling=sampling)[0]
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
          routing: RoutingRecorder | None = None):
    """Log-probs (and entropy) of the sampled tokens under `model`, in row chunks of a micro-batch (or a
    minibatch) to bound memory; with `routing`, the experts each token was sent to are recorded for the
    update (MoE models). `train`, `sampling`: the config's train and rollout nodes."""
    rows = train.micro_batch_size or max(1, rollout.input_ids.shape[0] // train.minibatches)
    if routing is not None:
        routing.start_batch(rollout.attention_mask)
    logps, ents = [], []
    for s in range(0, rollout.input_ids.shape[0], rows):
        with precision.autocast(), routing.recording(slice(s, s + rows)) if routing is not None else nullcontext():
            lp, ent = completion_logprobs(model, rollout.input_ids[s : s + rows], rollout.attention_mask[s : s + rows],
                                          rollout.n_completion, temperature=sampling.temperature,
                                          top_p=sampling.top_p, chunk=train.logprob_chunk, with_entropy=with_entropy)
        logps.append(lp * rollout.completion_mask[s : s + rows])
        ents.append(ent)
    return torch.cat(logps), (torch.cat(ents) if with_entropy else None)
