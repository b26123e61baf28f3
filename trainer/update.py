"""The policy update over one rollout batch: E epochs x M minibatches, each one optimizer step.

Nothing here knows which algorithm runs: the loss, its aggregation and its metrics come from
`gspo.algos.policy_loss`. Micro-batches inside a minibatch (gradient accumulation) pass the minibatch's
own sequence and token counts as denominators, so their losses add up to the minibatch loss exactly
(scaling means by the local micro-batch size is a bug peers shipped).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from gspo.algos import policy_loss
from gspo.trainer.guards import NonFinite
from gspo.trainer.logprobs import completion_logprobs
from gspo.trainer.rollout import Rollout

SEQUENCE_METRICS = ("clip/seq_frac", "ratio/seq_mean")  # means over sequences; the rest are over tokens


@dataclass
class Batch:
    """What the update needs of one rollout batch. N sequences, T completion tokens."""

    rollout: Rollout
    advantages: torch.Tensor  # [N]
    old_logp: torch.Tensor  # [N, T]
    ref_logp: torch.Tensor | None  # [N, T]


def update(model, optimizer, scheduler, batch: Batch, *, algo, train, temperature: float, seed: int) -> dict:
    """Run the updates for one rollout batch; returns metrics reduced over all of them."""
    n = batch.advantages.shape[0]
    per_update: list[dict[str, torch.Tensor]] = []
    gen = torch.Generator().manual_seed(seed)
    for _ in range(train.epochs):
        order = torch.randperm(n, generator=gen)
        for idx in order.chunk(train.minibatches):
            metrics = _minibatch_step(model, batch, idx, algo=algo, train=train, temperature=temperature)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), train.max_grad_norm)
            metrics["optim/grad_norm"] = grad_norm.detach()
            metrics["optim/lr"] = torch.tensor(scheduler.get_last_lr()[0])
            _stop_if_nonfinite(optimizer, metrics, per_update)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            per_update.append(metrics)
    return reduce_metrics(per_update)


def _stop_if_nonfinite(optimizer, metrics: dict, done: list[dict]) -> None:
    """Before an optimizer step: a non-finite loss or gradient norm discards the gradients and raises,
    so the bad update never reaches the weights. One host sync per optimizer step."""
    keys = ["optim/grad_norm", *(k for k in metrics if k.startswith("loss/"))]
    if bool(torch.stack([metrics[k].detach().float() for k in keys]).isfinite().all()):
        return
    optimizer.zero_grad(set_to_none=True)
    bad = [k for k in keys if not bool(metrics[k].isfinite())]
    stats = {k: v for k, v in reduce_metrics([*done, metrics]).items() if k.startswith(("ratio/", "clip/"))}
    raise NonFinite(f"{', '.join(bad)} in update {len(done) + 1}", {"ratio_stats": stats})


def _minibatch_step(model, batch: Batch, idx: torch.Tensor, *, algo, train, temperature: float) -> dict:
    mask = batch.rollout.completion_mask[idx]
    seq_den, tok_den = float(len(idx)), float(mask.sum().clamp(min=1))
    micro = train.micro_batch_size or len(idx)
    sums: dict[str, torch.Tensor] = {}
    for part in idx.split(micro):
        loss, metrics = _micro_loss(model, batch, part, algo=algo, temperature=temperature,
                                    seq_den=seq_den, tok_den=tok_den, chunk=train.logprob_chunk)
        loss.backward()
        # micro-batch metrics are means over its sequences or its tokens: weight by that share
        w_seq, w_tok = len(part) / seq_den, float(batch.rollout.completion_mask[part].sum()) / tok_den
        for k, v in metrics.items():
            sums[k] = _combine(k, sums.get(k), v, w_seq if k in SEQUENCE_METRICS else w_tok)
    return sums


def _micro_loss(model, batch: Batch, part, *, algo, temperature, seq_den, tok_den, chunk):
    r = batch.rollout
    mask = r.completion_mask[part]
    width = int(mask.sum(-1).max().item()) or 1  # drop all-padding columns at the right
    prompt_len = r.input_ids.shape[1] - r.n_completion
    cols = slice(0, prompt_len + width)
    logp, _ = completion_logprobs(model, r.input_ids[part, cols], r.attention_mask[part, cols], width,
                                  temperature=temperature, chunk=chunk)
    ref = batch.ref_logp[part, :width] if batch.ref_logp is not None else None
    return policy_loss(
        algo.name, logp=logp, old_logp=batch.old_logp[part, :width], advantages=batch.advantages[part],
        mask=mask[:, :width], clip_low=algo.clip_low, clip_high=algo.clip_high,
        aggregation=algo.aggregation, max_len=r.n_completion, ref_logp=ref, kl_beta=algo.kl_beta,
        seq_denominator=seq_den, token_denominator=tok_den,
    )


def _combine(key: str, acc, value: torch.Tensor, weight: float) -> torch.Tensor:
    value = value.detach().float()
    if key.startswith("loss/"):  # computed with the minibatch's denominators: parts add up
        return value if acc is None else acc + value
    if key.endswith("_min"):
        return value if acc is None else torch.minimum(acc, value)
    if key.endswith("_max"):
        return value if acc is None else torch.maximum(acc, value)
    return value * weight if acc is None else acc + value * weight


def reduce_metrics(rows: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Means over updates (min/max for extremes); one host sync for the whole step."""
    out: dict[str, torch.Tensor] = {}
    for key in rows[0]:
        vals = torch.stack([r[key] for r in rows])
        out[key] = vals.min() if key.endswith("_min") else vals.max() if key.endswith("_max") else vals.mean()
    return {k: float(v) for k, v in out.items()}
