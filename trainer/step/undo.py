"""A rollout batch whose update meets a non-finite value: the check before each optimizer step that keeps the bad
update from the weights (`nonfinite_guard`), and, with train.on_nonfinite=skip, the copy a skipped batch is
restored from whole (`snapshot`, `restore`)."""

from __future__ import annotations

import copy

import torch

from gspo.trainer.run.guards import NonFinite
from gspo.trainer.step.context import StepContext
from gspo.trainer.step.reduction import reduce_metrics, to_host
from gspo.vocab.metrics import CLIP, GRAD_NORM, RATIO, section
from gspo.vocab.reductions import SUM


def snapshot(ctx: StepContext) -> tuple:
    """Copies of what a batch's updates change (weights, optimizer and schedule state), so a batch that
    meets a non-finite value is undone whole; costs one copy of the trainable weights and the optimizer
    state per step."""
    return ([m.detach().clone() for m in ctx.precision.master], copy.deepcopy(ctx.optimizer.state_dict()),
            ctx.scheduler.state_dict())


def restore(saved: tuple, ctx: StepContext) -> None:
    master, optimizer_state, scheduler_state = saved
    with torch.no_grad():
        torch._foreach_copy_(ctx.precision.master, master)
        if ctx.precision.separate_master:
            torch._foreach_copy_(ctx.precision.params, ctx.precision.master)
    ctx.optimizer.load_state_dict(optimizer_state)
    ctx.scheduler.load_state_dict(scheduler_state)


def nonfinite_guard(optimizer, metrics: dict, done: list[dict], kinds: dict[str, str]):
    """The check Precision.step runs before the optimizer steps: a non-finite loss or gradient norm (None
    when fp16's loss scale handles an overflow itself) discards the gradients and raises NonFinite, so the
    bad update never reaches the weights. One host sync per optimizer step."""

    def guard(norm: torch.Tensor | None) -> None:
        values = {k: v for k, v in metrics.items() if kinds.get(k) == SUM}  # the loss terms
        if norm is not None:
            values[GRAD_NORM] = norm
        if norm is not None and norm.device.type == "meta":
            return  # meta tensors hold no values (the device-placement test runs the update there)
        if bool(torch.stack([v.detach().float() for v in values.values()]).isfinite().all()):
            return
        optimizer.zero_grad(set_to_none=True)
        bad = [k for k, v in values.items() if not bool(v.isfinite())]
        ratios = [{k: v for k, v in r.items() if section(k) in (RATIO, CLIP)} for r in [*done, metrics]]
        raise NonFinite(f"{', '.join(sorted(bad, reverse=True))} in update {len(done) + 1}",
                        {"ratio_stats": to_host(reduce_metrics(ratios, kinds))})

    return guard
